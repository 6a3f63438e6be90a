package helmchart_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/shards"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// The control plane is started by the first test that needs it and shared.
var (
	envOnce sync.Once
	env     *testenv.Env
	envErr  error
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard()) // the test's own clients log nothing worth reading
	code := m.Run()
	if env != nil {
		_ = env.Stop()
	}
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func controlPlane(t *testing.T) *testenv.Env {
	t.Helper()
	envOnce.Do(func() { env, envErr = testenv.Start() })
	if envErr != nil {
		t.Fatal(envErr)
	}
	return env
}

// TestChartInstallsAndDrivesTheDemoAsItsServiceAccount installs the rendered
// chart on a real API server with the real kubectl (server-side dry run,
// then server-side apply; the chart's admission policy replaces the one
// testenv installs), checks with kubectl auth can-i what the chart's
// ServiceAccount may and may not do, and that the API server's PodSecurity
// admission admits the manager's pod in a "restricted" namespace. Then it
// runs the manager binary with the Deployment's own arguments and
// environment, authenticated by a token of the chart's ServiceAccount, and
// drives config/demo: a run completes, a run parked on a missing Secret
// completes once it exists, a fan-out creates and finishes its workers, and
// a checkpoint is answered by a user bound to the chart's answerer role
// (whose answer under another name the chart's policy refuses). The manager
// holds the shard Leases, keeps its webhook certificate in the chart's
// Secret with its CA in the chart's webhook configuration, serves its
// probes on the chart's port and its metrics over HTTPS to an authorized
// scraper only, and logs no refused request.
func TestChartInstallsAndDrivesTheDemoAsItsServiceAccount(t *testing.T) {
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
	// The chart's policies must be the ones in force, not testenv's copies
	// of config/admission.
	kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", "answer-identity", "priority-cap", "priority-class", "quota-store")
	// testenv ships the manager's namespace and its empty priority classes
	// ConfigMap, as config/default does; the chart brings its own.
	kubectl("delete", "configmap", "-n", releaseNS, "agentrun-priority-classes")
	kubectl("label", "namespace", releaseNS, "pod-security.kubernetes.io/enforce=restricted")

	r := renderChart(t, nil)
	manifest := filepath.Join(t.TempDir(), "chart.yaml")
	writeYAML(t, manifest, append(r.crds, r.objs...))
	if out := kubectl("apply", "--server-side", "--dry-run=server", "-f", manifest); strings.Count(out, "(server dry run)") != len(r.crds)+len(r.objs) {
		t.Fatalf("server dry run of %d objects:\n%s", len(r.crds)+len(r.objs), out)
	}
	kubectl("apply", "--server-side", "-f", manifest)

	d := one[appsv1.Deployment](t, r.objs, "Deployment", "")
	sa := "system:serviceaccount:" + releaseNS + ":" + d.Spec.Template.Spec.ServiceAccountName
	checkGrants(t, admin, sa)
	checkQuotaRoles(t, admin)
	checkPodAdmission(t, admin, d)

	saKubeconfig := serviceAccountKubeconfig(t, e, kubectl("create", "token", d.Spec.Template.Spec.ServiceAccountName, "-n", releaseNS, "--duration=1h"))
	start := time.Now()
	mgr := startManager(t, d, saKubeconfig)
	t.Logf("manager built and ready in %s", time.Since(start).Round(time.Millisecond))

	kubectl("apply", "-f", filepath.Join(testenv.RepoRoot(), "config", "demo"))
	c, err := client.New(e.Config, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "agentrun-demo"
	waitRun(t, c, ns, "review-pr", 60*time.Second, "Complete", func(r *arv1.AgentRun) bool { return r.Status.Phase == arv1.PhaseComplete })
	waitRun(t, c, ns, "summarise-notes", 30*time.Second, "parked on SecretMissing", func(r *arv1.AgentRun) bool {
		return r.Status.WaitingOn != nil && r.Status.WaitingOn.Blocker == arv1.BlockerSecretMissing
	})
	kubectl("create", "secret", "generic", "demo-model-key", "-n", ns, "--from-literal=api-key=anything")
	waitRun(t, c, ns, "summarise-notes", 20*time.Second, "Complete after the Secret", func(r *arv1.AgentRun) bool { return r.Status.Phase == arv1.PhaseComplete })
	tri := waitRun(t, c, ns, "triage-backlog", 90*time.Second, "Complete", func(r *arv1.AgentRun) bool { return r.Status.Phase == arv1.PhaseComplete })
	if cs := tri.Status.Children; cs == nil || cs.Succeeded != 6 {
		t.Errorf("triage-backlog children = %+v, want 6 succeeded", cs)
	}
	answerCheckpoint(t, admin, c, ns, "deploy-release")
	t.Logf("demo driven in %s", time.Since(start).Round(time.Millisecond))

	checkShardLeases(t, c, d)
	checkWebhookCertificate(t, c, releaseName)
	mgr.checkMetrics(t, admin, releaseNS, one[rbacv1.ClusterRole](t, r.objs, "ClusterRole", "-metrics-reader").Name)
	mgr.stop(t)
	for _, line := range strings.Split(mgr.log.String(), "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			t.Errorf("the manager was refused something as %s: %s", sa, line)
		}
	}
}

func writeYAML(t *testing.T, path string, objs []*unstructured.Unstructured) {
	t.Helper()
	var buf bytes.Buffer
	for _, u := range objs {
		data, err := yaml.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		buf.WriteString("---\n")
		buf.Write(data)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkGrants asks the API server, with kubectl auth can-i, what the
// chart's ServiceAccount may do: what the manager needs, and not more.
func checkGrants(t *testing.T, kubeconfig, sa string) {
	t.Helper()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "secrets", "-n", "team-a"}, "yes"},
		{[]string{"create", "secrets", "-n", "team-a"}, "no"},
		{[]string{"patch", "agentruns.agentrun.dev/status", "-n", "team-a"}, "yes"},
		{[]string{"create", "agentrunanswers.agentrun.dev", "-n", "team-a"}, "no"},
		{[]string{"update", "leases.coordination.k8s.io", "-n", releaseNS}, "yes"},
		{[]string{"update", "leases.coordination.k8s.io", "-n", "team-a"}, "no"},
		{[]string{"delete", "pods", "-n", releaseNS}, "no"},
		// The HTTPS metrics endpoint's checks of a scraper.
		{[]string{"create", "tokenreviews.authentication.k8s.io"}, "yes"},
		{[]string{"create", "subjectaccessreviews.authorization.k8s.io"}, "yes"},
		// The webhook certificate: its one Secret and webhook
		// configuration, by name.
		{[]string{"create", "secrets", "-n", releaseNS}, "yes"},
		{[]string{"update", "secrets/" + releaseName + "-webhook-cert", "-n", releaseNS}, "yes"},
		{[]string{"update", "secrets/another", "-n", releaseNS}, "no"},
		{[]string{"update", "validatingwebhookconfigurations.admissionregistration.k8s.io/" + releaseName + "-webhook"}, "yes"},
		{[]string{"update", "validatingwebhookconfigurations.admissionregistration.k8s.io/another"}, "no"},
		{[]string{"list", "validatingwebhookconfigurations.admissionregistration.k8s.io"}, "no"},
		// The priority classes at apply: its one admission policy, by name.
		{[]string{"update", "validatingadmissionpolicies.admissionregistration.k8s.io/" + releaseName + "-priority-class"}, "yes"},
		{[]string{"update", "validatingadmissionpolicies.admissionregistration.k8s.io/" + releaseName + "-priority-cap"}, "no"},
		{[]string{"create", "validatingadmissionpolicies.admissionregistration.k8s.io"}, "no"},
		// Quotas: read, their status written, and whether it has a
		// database store written into its one quota policy.
		{[]string{"watch", "clusteragentrunquotas.agentrun.dev"}, "yes"},
		{[]string{"patch", "agentrunquotas.agentrun.dev", "--subresource=status", "-n", "team-a"}, "yes"},
		{[]string{"update", "agentrunquotas.agentrun.dev", "-n", "team-a"}, "no"},
		{[]string{"update", "validatingadmissionpolicies.admissionregistration.k8s.io/" + releaseName + "-quota-store"}, "yes"},
	} {
		if got := canI(kubeconfig, sa, c.args...); got != c.want {
			t.Errorf("kubectl auth can-i %s as %s: %q, want %s", strings.Join(c.args, " "), sa, got, c.want)
		}
	}
}

// checkPodAdmission creates the Deployment's pod, server-side dry run, in
// the release namespace labelled enforce=restricted: the API server's
// PodSecurity admission admits it, and refuses the same pod allowed to
// escalate privileges (so the namespace's enforcement is in force).
func checkPodAdmission(t *testing.T, kubeconfig string, d *appsv1.Deployment) {
	t.Helper()
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: d.Name + "-pod-security", Namespace: releaseNS, Labels: d.Spec.Template.Labels},
		Spec:       *d.Spec.Template.Spec.DeepCopy()}
	escalating := pod.DeepCopy()
	escalating.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptrTo(true)
	for _, tc := range []struct {
		pod   *corev1.Pod
		admit bool
	}{{pod, true}, {escalating, false}} {
		path := filepath.Join(t.TempDir(), "pod.yaml")
		data, err := yaml.Marshal(tc.pod)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := testenv.Kubectl(kubeconfig, "create", "--dry-run=server", "-f", path)
		switch {
		case tc.admit && err != nil:
			t.Errorf("the API server refuses the chart's pod in a restricted namespace: %v", err)
		case !tc.admit && (err == nil || !strings.Contains(out, "violates PodSecurity")):
			t.Errorf("the API server admits a pod allowed to escalate privileges (%v): %s; the restricted check proves nothing", err, out)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

// canI asks the API server, with the real kubectl auth can-i (a
// SubjectAccessReview), whether user may do what args say: "yes" or "no",
// the last line of kubectl's answer (a cluster-scoped resource comes after
// a warning).
// checkQuotaRoles binds the chart's quota reader role to bob in quota-team and
// its quota-admin role to carol cluster-wide, as an admin would, and asks
// the API server what each may do: bob reads his namespace's quotas and
// changes none; carol writes quotas of both kinds, not their status.
func checkQuotaRoles(t *testing.T, kubeconfig string) {
	t.Helper()
	for _, args := range [][]string{
		{"create", "namespace", "quota-team"},
		{"create", "rolebinding", "quota-readers", "-n", "quota-team", "--clusterrole=" + releaseName + "-quota-reader", "--user=bob"},
		{"create", "clusterrolebinding", "quota-admins", "--clusterrole=" + releaseName + "-quota-admin", "--user=carol"},
	} {
		if out, err := testenv.Kubectl(kubeconfig, args...); err != nil {
			t.Fatalf("kubectl %v: %v %s", args, err, out)
		}
	}
	for _, c := range []struct {
		user string
		args []string
		want string
	}{
		{"bob", []string{"list", "agentrunquotas.agentrun.dev", "-n", "quota-team"}, "yes"},
		{"bob", []string{"get", "agentrunquotas.agentrun.dev", "--subresource=status", "-n", "quota-team"}, "yes"},
		{"bob", []string{"update", "agentrunquotas.agentrun.dev", "-n", "quota-team"}, "no"},
		{"bob", []string{"list", "agentrunquotas.agentrun.dev", "-n", "team-b"}, "no"},
		{"bob", []string{"list", "clusteragentrunquotas.agentrun.dev"}, "no"},
		{"carol", []string{"create", "clusteragentrunquotas.agentrun.dev"}, "yes"},
		{"carol", []string{"update", "agentrunquotas.agentrun.dev", "-n", "quota-team"}, "yes"},
		{"carol", []string{"patch", "agentrunquotas.agentrun.dev", "--subresource=status", "-n", "quota-team"}, "no"},
	} {
		if got := canI(kubeconfig, c.user, c.args...); got != c.want {
			t.Errorf("kubectl auth can-i %s as %s: %q, want %s", strings.Join(c.args, " "), c.user, got, c.want)
		}
	}
}

func canI(kubeconfig, user string, args ...string) string {
	out, _ := testenv.Kubectl(kubeconfig, append([]string{"auth", "can-i", "--as=" + user}, args...)...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates with the
// token the TokenRequest API issued for the chart's ServiceAccount: what
// the manager's pod would have.
func serviceAccountKubeconfig(t *testing.T, e *testenv.Env, token string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: e.Config.Host, CertificateAuthorityData: e.Config.CAData}
	cfg.AuthInfos["manager"] = &clientcmdapi.AuthInfo{Token: strings.TrimSpace(token)}
	cfg.Contexts["manager"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "manager"}
	cfg.CurrentContext = "manager"
	path := filepath.Join(t.TempDir(), "manager-kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func waitRun(t *testing.T, c client.Client, ns, name string, timeout time.Duration, what string, ok func(*arv1.AgentRun) bool) *arv1.AgentRun {
	t.Helper()
	deadline := time.Now().Add(timeout)
	r := &arv1.AgentRun{}
	for {
		err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, r)
		if err == nil && ok(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s not %s after %s: %v, phase %q, waitingOn %+v", ns, name, what, timeout, err, r.Status.Phase, r.Status.WaitingOn)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// answerCheckpoint binds the chart's answerer ClusterRole to alice in ns;
// alice's answer in bob's name is refused by the chart's admission policy,
// her own is admitted, and the manager takes it: the run moves on from the
// checkpoint.
func answerCheckpoint(t *testing.T, kubeconfig string, c client.Client, ns, run string) {
	t.Helper()
	gate := waitRun(t, c, ns, run, 30*time.Second, "at its checkpoint", func(r *arv1.AgentRun) bool {
		return r.Status.WaitingOn != nil && r.Status.WaitingOn.Reason == arv1.WaitInteractionPoint
	})
	if _, err := testenv.Kubectl(kubeconfig, "create", "rolebinding", "answerers", "-n", ns, "--clusterrole="+releaseName+"-answerer", "--user=alice"); err != nil {
		t.Fatal(err)
	}
	answer := func(name, by string) (string, error) {
		path := filepath.Join(t.TempDir(), name+".yaml")
		doc := fmt.Sprintf("apiVersion: agentrun.dev/v1alpha1\nkind: AgentRunAnswer\nmetadata: {name: %s, namespace: %s}\nspec: {run: %s, point: %q, decision: Approve, by: %s}\n",
			name, ns, run, gate.Status.WaitingOn.Point, by)
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return testenv.Kubectl(kubeconfig, "create", "--as=alice", "-f", path)
	}
	if out, err := answer("in-bobs-name", "bob"); err == nil || !strings.Contains(out, "spec.by must be the user creating the answer (alice)") {
		t.Errorf("alice answering as bob: %v %s; want the chart's admission policy to refuse it", err, out)
	}
	if out, err := answer("alices", "alice"); err != nil {
		t.Fatalf("alice answering with the chart's answerer role: %v %s", err, out)
	}
	if out, _ := testenv.Kubectl(kubeconfig, "auth", "can-i", "--as=alice", "patch", "agentruns.agentrun.dev", "-n", ns); strings.TrimSpace(out) != "no" {
		t.Errorf("the answerer role lets alice patch runs: %s", out)
	}
	waitRun(t, c, ns, run, 20*time.Second, "past the approved checkpoint", func(r *arv1.AgentRun) bool {
		return r.Status.WaitingOn == nil || r.Status.WaitingOn.Point != gate.Status.WaitingOn.Point
	})
}

// checkShardLeases: every shard's Lease in the release namespace is held
// by the one replica running.
func checkShardLeases(t *testing.T, c client.Client, d *appsv1.Deployment) {
	t.Helper()
	n := 0
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if _, err := fmt.Sscanf(a, "--shards=%d", &n); err == nil {
			break
		}
	}
	if n < 2 {
		t.Fatalf("the default Deployment runs %d shards; the test wants several", n)
	}
	for i := range n {
		l := &coordinationv1.Lease{}
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: releaseNS, Name: shards.LeaseName(i)}, l); err != nil {
			t.Errorf("shard Lease %d: %v", i, err)
			continue
		}
		if l.Spec.HolderIdentity == nil || !strings.Contains(*l.Spec.HolderIdentity, podName) {
			t.Errorf("shard Lease %s held by %v, want the replica %s", l.Name, l.Spec.HolderIdentity, podName)
		}
	}
}

// checkWebhookCertificate: the manager, as the chart's ServiceAccount, made
// the webhook certificate Secret in the release namespace and wrote its CA
// into every webhook of the chart's configuration.
func checkWebhookCertificate(t *testing.T, c client.Client, release string) {
	t.Helper()
	secret := &corev1.Secret{}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.Get(context.Background(), types.NamespacedName{Namespace: releaseNS, Name: release + "-webhook-cert"}, secret)
		if err == nil {
			err = c.Get(context.Background(), types.NamespacedName{Name: release + "-webhook"}, vwc)
		}
		ok := err == nil && len(vwc.Webhooks) > 0 && len(secret.Data["ca.crt"]) > 0
		for _, w := range vwc.Webhooks {
			ok = ok && bytes.Equal(w.ClientConfig.CABundle, secret.Data["ca.crt"])
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no webhook certificate Secret %s/%s-webhook-cert whose CA is the caBundle of %s-webhook after 30s: %v", releaseNS, release, release, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
