package policyadmission

// The webhook is served here as the manager would serve it, installed in a
// real API server from config/webhook (envtest points it at this process),
// and driven through the real kubectl, as an admin applying a policy would.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

var kubeconfig string

func TestMain(m *testing.M) { os.Exit(runSuite(m)) }

func runSuite(m *testing.M) int {
	logf.SetLogger(logr.Discard())
	env, err := testenv.StartWith(testenv.Options{WebhookPaths: []string{filepath.Join(testenv.RepoRoot(), "config", "webhook")}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the test control plane:", err)
		}
	}()

	o := env.WebhookInstallOptions
	srv := webhook.NewServer(webhook.Options{Host: o.LocalServingHost, Port: o.LocalServingPort, CertDir: o.LocalServingCertDir})
	Register(srv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if err := srv.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "webhook server:", err)
		}
	}()
	// Wait until the server accepts TLS connections.
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return srv.StartedChecker()(nil) == nil, nil
	}); err != nil {
		fmt.Fprintln(os.Stderr, "the webhook server did not start:", err)
		return 1
	}

	dir, err := os.MkdirTemp("", "policyadmission-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if kubeconfig, err = env.Kubeconfig(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := testenv.Kubectl(kubeconfig, "create", "namespace", "team-a"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// apply runs `kubectl apply` of yaml and returns its output and error.
func apply(t *testing.T, yaml string, extra ...string) (string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return testenv.Kubectl(kubeconfig, append([]string{"apply", "-f", path}, extra...)...)
}

func manifest(kind, name, match string) string {
	ns := ""
	if kind == "AgentToolPolicy" {
		ns = "\n  namespace: team-a"
	}
	return fmt.Sprintf(`apiVersion: agentrun.dev/v1alpha1
kind: %s
metadata:
  name: %s%s
spec:
  rules:
  - name: fine
    match: tool.name == "list_tickets"
    action: Audit
  - name: checked
    match: %q
    action: Deny
    message: not this call
`, kind, name, ns, match)
}

func TestApplyRefusesRulesThatDoNotCompile(t *testing.T) {
	for _, kind := range []string{"ClusterAgentToolPolicy", "AgentToolPolicy"} {
		t.Run(kind, func(t *testing.T) {
			name := strings.ToLower(kind)
			for _, c := range []struct{ match, want string }{
				{`tool.nmae == "create_ticket"`, "undefined field 'nmae'"},
				{`tool.name == `, "Syntax error"},
				{`args.priority`, ""}, // dyn: admitted, checked at run time
				{`tool.name`, "must be a bool expression"},
				{`args.a.all(x, args.b.all(y, args.c.all(z, x == y && y == z)))`, "exceeds the budget of 1000000"},
			} {
				out, err := apply(t, manifest(kind, name+"-refused", c.match))
				if c.want == "" {
					if err != nil {
						t.Errorf("%s refused: %v", c.match, err)
					}
					continue
				}
				if err == nil {
					t.Errorf("%s admitted: %s", c.match, out)
					continue
				}
				// The API server passes the webhook's Invalid status on
				// as is: the field, the rule and the CEL error.
				for _, want := range []string{`The ` + kind + ` "` + name + `-refused" is invalid`, "spec.rules[1].match", `rule "checked"`, c.want} {
					if !strings.Contains(out, want) {
						t.Errorf("%s: kubectl said %q, lacking %q", c.match, out, want)
					}
				}
			}

			// A good policy is admitted; editing a rule into a bad one is
			// refused and leaves the stored policy as it was.
			good := manifest(kind, name+"-good", `tool.name == "create_ticket" && args.?priority.orValue("") == "p0" && run.namespace != "ops"`)
			out, err := apply(t, good)
			if err != nil || !strings.Contains(out, name+"-good created") {
				t.Fatalf("good policy: %v %s", err, out)
			}
			bad := strings.Replace(good, `run.namespace`, `run.namespce`, 1)
			out, err = apply(t, bad)
			if err == nil || !strings.Contains(out, "undefined field 'namespce'") {
				t.Fatalf("edit into a bad rule: %v %s", err, out)
			}
			got, err := testenv.Kubectl(kubeconfig, "get", name, name+"-good", "-n", "team-a", "-o", "jsonpath={.spec.rules[1].match}")
			if err != nil || !strings.Contains(got, `run.namespace != "ops"`) || strings.Contains(got, "namespce") {
				t.Errorf("stored match after the refused edit: %q %v", got, err)
			}
		})
	}
}

// TestRolesForWhoWritesPolicies: config/rbac's roles, bound as the docs
// say, let a namespace admin write AgentToolPolicies in their namespace
// only and never a ClusterAgentToolPolicy, and the cluster admin's role
// write both (checked by the API server's authorizer, through kubectl).
func TestRolesForWhoWritesPolicies(t *testing.T) {
	kc := func(args ...string) (string, error) { return testenv.Kubectl(kubeconfig, args...) }
	for _, args := range [][]string{
		{"apply", "-f", filepath.Join(testenv.RepoRoot(), "config", "rbac", "toolpolicy_roles.yaml")},
		{"create", "rolebinding", "policy-admins", "-n", "team-a", "--clusterrole=toolpolicy-namespace-admin", "--user=alice"},
		{"create", "clusterrolebinding", "cluster-policy-admins", "--clusterrole=toolpolicy-admin", "--user=bob"},
		{"create", "rolebinding", "policy-readers", "-n", "team-a", "--clusterrole=toolpolicy-reader", "--user=carol"},
	} {
		if out, err := kc(args...); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	for _, c := range []struct {
		user, verb, resource, ns string
		want                     string
	}{
		{"alice", "create", "agenttoolpolicies", "team-a", "yes"},
		{"alice", "delete", "agenttoolpolicies", "team-a", "yes"},
		{"alice", "create", "agenttoolpolicies", "default", "no"},
		{"alice", "create", "clusteragenttoolpolicies", "", "no"},
		{"alice", "update", "agenttoolpolicies --subresource=status", "team-a", "no"},
		{"bob", "create", "clusteragenttoolpolicies", "", "yes"},
		{"bob", "create", "agenttoolpolicies", "default", "yes"},
		{"carol", "list", "agenttoolpolicies", "team-a", "yes"},
		{"carol", "create", "agenttoolpolicies", "team-a", "no"},
	} {
		args := append([]string{"auth", "can-i", c.verb}, strings.Fields(c.resource)...)
		args = append(args, "--as", c.user)
		if c.ns != "" {
			args = append(args, "-n", c.ns)
		}
		out, _ := kc(args...) // can-i exits 1 on "no"
		// The answer is the last line (a warning may come before it).
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if got := lines[len(lines)-1]; got != c.want {
			t.Errorf("%s %s %s in %q: %q, want %s", c.user, c.verb, c.resource, c.ns, got, c.want)
		}
	}
	// And for real: alice's policy in team-a is admitted, her cluster one
	// is forbidden.
	if out, err := apply(t, manifest("AgentToolPolicy", "alices", `tool.name == "x"`), "--as", "alice"); err != nil {
		t.Errorf("alice applying an AgentToolPolicy in team-a: %v %s", err, out)
	}
	if out, err := apply(t, manifest("ClusterAgentToolPolicy", "alices", `tool.name == "x"`), "--as", "alice"); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("alice applying a ClusterAgentToolPolicy: %v %s", err, out)
	}
}
