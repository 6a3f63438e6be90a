package helmchart_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// TestChartNamespaceScopedInstallReadsSecretsOnlyWhereItWatches installs
// the chart with watchNamespaces on a real API server with the real
// kubectl (release agentrun-scoped, watching scoped-a), and asks the API
// server (kubectl auth can-i --as, a SubjectAccessReview) what the
// manager's ServiceAccount may do: read Secrets in scoped-a, not in
// scoped-b nor cluster-wide, nor list Namespaces; create the reviews its
// metrics endpoint needs. Then it runs the manager binary with the
// Deployment's arguments as that ServiceAccount: a run in scoped-a
// completes, the same run in scoped-b is left untouched, the metrics are
// served to a scraper bound to the release's metrics-reader, and the
// manager logs no refused request.
func TestChartNamespaceScopedInstallReadsSecretsOnlyWhereItWatches(t *testing.T) {
	const rel, ns, watched, other = "agentrun-scoped", "agentrun-scoped", "scoped-a", "scoped-b"
	e := controlPlane(t)
	admin, err := e.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := testenv.Kubectl(admin, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	kubectl("create", "namespace", ns)
	kubectl("create", "namespace", watched)
	kubectl("create", "namespace", other)

	r := renderRelease(t, rel, ns, mustYAML(t, `{watchNamespaces: [scoped-a], admissionPolicy: {enabled: false}}`))
	manifest := filepath.Join(t.TempDir(), "chart.yaml")
	writeYAML(t, manifest, append(r.crds, r.objs...))
	kubectl("apply", "--server-side", "-f", manifest)

	d := one[appsv1.Deployment](t, r.objs, "Deployment", "")
	sa := "system:serviceaccount:" + ns + ":" + d.Spec.Template.Spec.ServiceAccountName
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "secrets", "-n", watched}, "yes"},
		{[]string{"list", "secrets", "-n", watched}, "yes"},
		{[]string{"get", "secrets", "-n", other}, "no"},
		{[]string{"list", "secrets", "--all-namespaces"}, "no"},
		{[]string{"get", "secrets", "-n", ns}, "no"},
		{[]string{"list", "namespaces"}, "no"},
		{[]string{"patch", "agentruns.agentrun.dev/status", "-n", watched}, "yes"},
		{[]string{"patch", "agentruns.agentrun.dev/status", "-n", other}, "no"},
		{[]string{"get", "configmaps/agentrun-egress", "-n", ns}, "yes"},
		{[]string{"get", "configmaps/another", "-n", ns}, "no"},
		{[]string{"update", "leases.coordination.k8s.io", "-n", ns}, "yes"},
		{[]string{"create", "tokenreviews.authentication.k8s.io"}, "yes"},
		{[]string{"create", "subjectaccessreviews.authorization.k8s.io"}, "yes"},
	} {
		if got := canI(admin, sa, c.args...); got != c.want {
			t.Errorf("kubectl auth can-i %s as %s: %q, want %s", strings.Join(c.args, " "), sa, got, c.want)
		}
	}

	saKubeconfig := serviceAccountKubeconfig(t, e, kubectl("create", "token", d.Spec.Template.Spec.ServiceAccountName, "-n", ns, "--duration=1h"))
	mgr := startManager(t, d, saKubeconfig)
	for _, target := range []string{watched, other} {
		applyDemoRun(t, admin, target)
	}
	c, err := client.New(e.Config, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	waitRun(t, c, watched, "review-pr", 2*time.Minute, "Complete", func(r *arv1.AgentRun) bool { return r.Status.Phase == arv1.PhaseComplete })
	left := waitRun(t, c, other, "review-pr", time.Second, "present", func(*arv1.AgentRun) bool { return true })
	// Queued is the phase the API server defaults; a reconcile would have
	// added a finalizer and written conditions.
	if (left.Status.Phase != "" && left.Status.Phase != arv1.PhaseQueued) || len(left.Status.Conditions) > 0 || len(left.Finalizers) > 0 || left.Status.Driver != "" {
		t.Errorf("the run in %s, which the manager does not watch, was driven: phase %q conditions %v finalizers %v driver %q",
			other, left.Status.Phase, left.Status.Conditions, left.Finalizers, left.Status.Driver)
	}
	mgr.checkMetrics(t, admin, ns, one[rbacv1.ClusterRole](t, r.objs, "ClusterRole", "-metrics-reader").Name)
	mgr.stop(t)
	for _, line := range strings.Split(mgr.log.String(), "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			t.Errorf("the manager was refused something as %s: %s", sa, line)
		}
	}
}

// applyDemoRun creates config/demo's providers, blueprints and its
// review-pr run in ns instead of agentrun-demo.
func applyDemoRun(t *testing.T, kubeconfig, ns string) {
	t.Helper()
	var docs []string
	for _, f := range []string{"10-providers.yaml", "20-blueprints.yaml"} {
		data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "demo", f))
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(data))
	}
	docs = append(docs, "apiVersion: agentrun.dev/v1alpha1\nkind: AgentRun\nmetadata: {name: review-pr, namespace: agentrun-demo}\nspec: {agent: reviewer, task: Review pull request 42.}\n")
	path := filepath.Join(t.TempDir(), ns+".yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(strings.Join(docs, "\n---\n"), "namespace: agentrun-demo", "namespace: "+ns)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := testenv.Kubectl(kubeconfig, "apply", "-f", path); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}
