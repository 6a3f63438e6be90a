package policystatus

// The reconciler runs here in a controller-runtime manager against a real
// API server (internal/testenv, which installs no admission webhook, so a
// rule that does not compile is stored as it would be with the webhook
// off), and what it writes is read with the real kubectl, as a person
// looking for a broken policy would.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

var (
	env        *testenv.Env
	scheme     = runtime.NewScheme()
	k8s        client.Client
	kubeconfig string
)

func TestMain(m *testing.M) { os.Exit(runSuite(m)) }

func runSuite(m *testing.M) int {
	logf.SetLogger(logr.Discard())
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, arv1.AddToScheme} {
		if err := add(scheme); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	var err error
	if env, err = testenv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the test control plane:", err)
		}
	}()
	if k8s, err = client.New(env.Config, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "policystatus-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if kubeconfig, err = env.Kubeconfig(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// startManager runs a manager with only the status reconcilers until the
// test ends.
func startManager(t *testing.T) {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	skip := true
	if err := Add(mgr, true, controller.Options{SkipNameValidation: &skip}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// apply runs `kubectl apply` of yaml.
func apply(t *testing.T, yaml string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := testenv.Kubectl(kubeconfig, "apply", "-f", path); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}

// wideRow runs `kubectl get RESOURCE -o wide` (args add -n and the like)
// and returns the row of name, cut at the header's column offsets (the
// message holds spaces).
func wideRow(t *testing.T, resource, name string, args ...string) (map[string]string, error) {
	t.Helper()
	out, err := testenv.Kubectl(kubeconfig, append([]string{"get", resource, "-o", "wide"}, args...)...)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	head := lines[0]
	cols := strings.Fields(head)
	starts := make([]int, len(cols))
	at := 0
	for i, c := range cols { // each after the one before: AGE is in MESSAGE
		starts[i] = at + strings.Index(head[at:], c)
		at = starts[i] + len(c)
	}
	for _, l := range lines[1:] {
		row := map[string]string{}
		for i, c := range cols {
			from, to := min(starts[i], len(l)), len(l)
			if i+1 < len(cols) {
				to = min(starts[i+1], len(l))
			}
			row[c] = strings.TrimSpace(l[from:to])
		}
		if row["NAME"] == name {
			return row, nil
		}
	}
	return nil, fmt.Errorf("no row %q in:\n%s", name, out)
}

// waitForRow waits until kubectl shows name's READY, REASON and MESSAGE as
// want says (a MESSAGE that contains want's), and returns the row.
func waitForRow(t *testing.T, resource, name string, want map[string]string, args ...string) map[string]string {
	t.Helper()
	var row map[string]string
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		row, last = wideRow(t, resource, name, args...)
		if last != nil {
			return false, nil
		}
		return row["READY"] == want["READY"] && row["REASON"] == want["REASON"] && strings.Contains(row["MESSAGE"], want["MESSAGE"]), nil
	})
	if err != nil {
		t.Fatalf("kubectl get %s %s: want %v, got %v (%v)", resource, name, want, row, last)
	}
	return row
}

const ticketsPolicy = `apiVersion: agentrun.dev/v1alpha1
kind: ClusterAgentToolPolicy
metadata:
  name: tickets
spec:
  rules:
  - name: no-p0-outside-ops
    match: >-
      tool.name == "create_ticket" && args.?priority.orValue("") == "p0"
      && run.namespace != "ops"
    action: Deny
    message: p0 tickets page the on-call engineer.
  - name: audit-ticket-writes
    match: tool.server == "tickets" && tool.effect == "write"
    action: Audit
`

// namespacedPolicy is an AgentToolPolicy in team-a whose second rule's
// match is match.
func namespacedPolicy(match string) string {
	return fmt.Sprintf(`apiVersion: agentrun.dev/v1alpha1
kind: AgentToolPolicy
metadata:
  name: reviews
  namespace: team-a
spec:
  rules:
  - name: ask-mail
    match: tool.name == "send_email"
    action: RequireApproval
  - name: no-writes-in-review
    match: %q
    action: Deny
`, match)
}

// TestReadyShownByKubectl: the manager writes each policy's Ready
// condition, which `kubectl get -o wide` shows in READY, REASON and
// MESSAGE: True RulesCompiled with the rules counted by action, or, for a
// rule stored without admission, False InvalidRule with the CEL error and
// its field; the rule fixed, True again, each stamped with the generation
// it was computed for.
func TestReadyShownByKubectl(t *testing.T) {
	if out, err := testenv.Kubectl(kubeconfig, "create", "namespace", "team-a"); err != nil {
		t.Fatal(err, out)
	}
	apply(t, ticketsPolicy)
	apply(t, namespacedPolicy(`run.stage == "review" && tool.efect == "write"`))
	startManager(t)

	waitForRow(t, "clusteragenttoolpolicies", "tickets",
		map[string]string{"READY": "True", "REASON": "RulesCompiled", "MESSAGE": "2 rules compiled: 1 Deny, 1 Audit"})
	row := waitForRow(t, "agenttoolpolicies", "reviews",
		map[string]string{"READY": "False", "REASON": "InvalidRule", "MESSAGE": "undefined field 'efect'"}, "-n", "team-a")
	if !strings.Contains(row["MESSAGE"], `spec.rules[1].match`) || !strings.Contains(row["MESSAGE"], `rule "no-writes-in-review"`) {
		t.Errorf("MESSAGE %q does not name the rule and its field", row["MESSAGE"])
	}
	checkObservedGeneration(t, &arv1.AgentToolPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "reviews"}}, 1)

	apply(t, namespacedPolicy(`run.stage == "review" && tool.effect == "write"`))
	waitForRow(t, "agenttoolpolicies", "reviews",
		map[string]string{"READY": "True", "REASON": "RulesCompiled", "MESSAGE": "2 rules compiled: 1 Deny, 1 RequireApproval"}, "-n", "team-a")
	checkObservedGeneration(t, &arv1.AgentToolPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "reviews"}}, 2)
	checkObservedGeneration(t, &arv1.ClusterAgentToolPolicy{ObjectMeta: metav1.ObjectMeta{Name: "tickets"}}, 1)
}

// checkObservedGeneration: p's generation is gen and its Ready condition
// was computed for it.
func checkObservedGeneration(t *testing.T, p client.Object, gen int64) {
	t.Helper()
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	_, conds := parts(p)
	c := meta.FindStatusCondition(*conds, arv1.ConditionReady)
	if p.GetGeneration() != gen || c == nil || c.ObservedGeneration != gen {
		t.Errorf("%s: generation %d, Ready %+v; want both %d", p.GetName(), p.GetGeneration(), c, gen)
	}
}

// TestOneStatusWritePerChange: reconciling a policy writes its status once
// per change of what the condition says, not once per reconcile: again
// with nothing changed, or after a label edit, it writes nothing; a new
// rule (a new generation) is one write. The reconciler reads through an
// uncached client, so each reconcile sees the previous one's write.
func TestOneStatusWritePerChange(t *testing.T) {
	ctx := context.Background()
	var writes atomic.Int64
	direct, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	counting := interceptor.NewClient(direct, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, o ...client.SubResourcePatchOption) error {
			writes.Add(1)
			return c.SubResource(sub).Patch(ctx, obj, p, o...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, o ...client.SubResourceUpdateOption) error {
			writes.Add(1)
			return c.SubResource(sub).Update(ctx, obj, o...)
		},
	})
	r := &Reconciler{Client: counting, Cluster: true}
	p := &arv1.ClusterAgentToolPolicy{ObjectMeta: metav1.ObjectMeta{Name: "writes"}, Spec: arv1.AgentToolPolicySpec{Rules: []arv1.ToolPolicyRule{
		{Name: "audit-all", Match: "true", Action: arv1.ToolPolicyAudit},
	}}}
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, p) })
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(p)}
	step := func(what string, want int64) {
		t.Helper()
		writes.Store(0)
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n := writes.Load(); n != want {
			t.Errorf("%s: %d status writes, want %d", what, n, want)
		}
	}
	step("first reconcile", 1)
	step("reconciled again", 0)
	if err := k8s.Get(ctx, req.NamespacedName, p); err != nil {
		t.Fatal(err)
	}
	first := meta.FindStatusCondition(p.Status.Conditions, arv1.ConditionReady)
	p.Labels = map[string]string{"team": "platform"}
	if err := k8s.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	step("after a label edit", 0)
	p.Spec.Rules = append(p.Spec.Rules, arv1.ToolPolicyRule{Name: "deny-deploys", Match: `tool.name == "deploy"`, Action: arv1.ToolPolicyDeny})
	if err := k8s.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	step("after a new rule", 1)
	step("reconciled again after it", 0)
	if err := k8s.Get(ctx, req.NamespacedName, p); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(p.Status.Conditions, arv1.ConditionReady)
	if c == nil || c.Message != "2 rules compiled: 1 Deny, 1 Audit" || c.ObservedGeneration != p.Generation || !c.LastTransitionTime.Equal(&first.LastTransitionTime) {
		t.Errorf("Ready after the new rule = %+v, want the new count at generation %d, still True since %v", c, p.Generation, first.LastTransitionTime)
	}
}
