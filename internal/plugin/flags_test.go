package plugin

// kubectl's connection flags, through the real kubectl against the real API
// server: impersonation against RBAC, a bearer token with --server and an
// empty kubeconfig, a kubeconfig with two contexts, and --request-timeout
// against an API server that stops answering.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/priority"
)

// psHeader is the header of ps without -A.
var psHeader = []string{"RUN", "PHASE", "WAITING", "STAGE", "TOKENS", "COST", "WORKING", "LAST MOVED", "DRIVER"}

// grantRuns lets subject read the runs of ns and answer them.
func grantRuns(t *testing.T, ns string, subject rbacv1.Subject) {
	t.Helper()
	ctx := ctxFor(t)
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "run-reader-"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{arv1.GroupVersion.Group}, Resources: []string{"agentruns"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{arv1.GroupVersion.Group}, Resources: []string{"agentrunanswers"}, Verbs: []string{"create"}},
		}}
	if err := k8sClient.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "run-reader-"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{subject}}
	if err := k8sClient.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
}

// TestKubectlAgentrunImpersonation: --as and --as-group reach the API
// server: a user without rights is refused, the same user in a group that
// has them lists the runs, and an answer is created in the impersonated
// user's name.
func TestKubectlAgentrunImpersonation(t *testing.T) {
	controlPlane(t)
	ns := newNamespace(t)
	createRun(t, ns, "gate", nil, arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput, WaitingOn: waitCheckpoint.DeepCopy()})
	grantRuns(t, ns, rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "run-readers"})

	stdout, stderr, code := kubectlPlugin(t, "ps", "-n", ns, "--as", "alice")
	if code != 1 || stdout != "" || !strings.Contains(stderr, `agentruns.agentrun.dev is forbidden: User "alice" cannot list resource "agentruns"`) {
		t.Errorf("--as alice: exit %d, stdout %q, stderr %q; want forbidden", code, stdout, stderr)
	}
	rows, _, _ := psRows(t, mustPlugin(t, "ps", "-n", ns, "--as", "alice", "--as-group", "run-readers"), psHeader)
	if rows["gate"]["PHASE"] != "WaitingInput" || rows["gate"]["WAITING"] != "InteractionPoint" {
		t.Errorf("--as alice --as-group run-readers: %v", rows)
	}
	out := mustPlugin(t, "approve", "gate", "-n", ns, "--as=alice", "--as-group=run-readers")
	if !strings.HasSuffix(out, `approve "approve-deploy" of gate as alice`+"\n") {
		t.Errorf("approve as alice printed %q", out)
	}
	if _, stderr, code := kubectlPlugin(t, "approve", "gate", "-n", ns, "--as", "bob"); code != 1 || !strings.Contains(stderr, `User "bob" cannot get resource "agentruns"`) {
		t.Errorf("approve as bob: exit %d, %q", code, stderr)
	}
}

// TestKubectlAgentrunTokenAndServer: --server, --certificate-authority (or
// --insecure-skip-tls-verify) and --token reach the cluster with a
// kubeconfig that holds nothing; the token's ServiceAccount is who the API
// server sees, and the token is never printed.
func TestKubectlAgentrunTokenAndServer(t *testing.T) {
	controlPlane(t)
	ns := newNamespace(t)
	other := newNamespace(t)
	createRun(t, ns, "r", nil, arv1.AgentRunStatus{Phase: arv1.PhaseRunning})
	ctx := ctxFor(t)
	if err := k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "viewer"}}); err != nil {
		t.Fatal(err)
	}
	grantRuns(t, ns, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "viewer"})
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "viewer",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tr.Status.Token
	dir := t.TempDir()
	empty, ca := filepath.Join(dir, "empty-kubeconfig"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, env.Config.CAData, 0o600); err != nil {
		t.Fatal(err)
	}
	server := env.Config.Host

	for _, tls := range [][]string{{"--certificate-authority", ca}, {"--insecure-skip-tls-verify"}} {
		args := append([]string{"ps", "-n", ns, "--kubeconfig", empty, "--server", server, "--token", token}, tls...)
		out, stderr, code := kubectlPlugin(t, args...) // not mustPlugin: its failure would print the token
		if code != 0 {
			t.Fatalf("ps with --token and %q: exit %d, %q", tls, code, strings.ReplaceAll(stderr, token, "<token>"))
		}
		if rows, _, _ := psRows(t, out, psHeader); rows["r"]["PHASE"] != "Running" {
			t.Errorf("%q: rows %v", tls, rows)
		}
	}
	stdout, stderr, code := kubectlPlugin(t, "ps", "-n", other, "--kubeconfig", empty, "-s", server, "--certificate-authority", ca, "--token", token)
	want := `User "system:serviceaccount:` + ns + `:viewer" cannot list resource "agentruns"`
	if code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("the token's account in a namespace it may not read: exit %d, %q; want %q", code, stderr, want)
	}
	if strings.Contains(stdout+stderr, token) {
		t.Error("the token was printed")
	}
	// Without the token, the empty kubeconfig authenticates nobody.
	if _, stderr, code := kubectlPlugin(t, "ps", "-n", ns, "--kubeconfig", empty, "--server", server, "--certificate-authority", ca); code != 1 ||
		!strings.Contains(stderr, "the API server did not accept the credentials") {
		t.Errorf("no token: exit %d, %q", code, stderr)
	}
}

// TestKubectlAgentrunContexts: with a kubeconfig holding two contexts, the
// current one pointing at a dead server, --context picks the live one (and
// its namespace), and --cluster points the current context at the live
// cluster.
func TestKubectlAgentrunContexts(t *testing.T) {
	controlPlane(t)
	ns := newNamespace(t)
	createRun(t, ns, "r", nil, arv1.AgentRunStatus{Phase: arv1.PhaseRunning})
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cur := cfg.Contexts[cfg.CurrentContext]
	live := cur.Cluster
	cfg.Clusters["dead"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1", CertificateAuthorityData: cfg.Clusters[live].CertificateAuthorityData}
	cfg.Contexts["dead"] = &clientcmdapi.Context{Cluster: "dead", AuthInfo: cur.AuthInfo}
	cfg.Contexts["live"] = &clientcmdapi.Context{Cluster: live, AuthInfo: cur.AuthInfo, Namespace: ns}
	cfg.CurrentContext = "dead"
	two := filepath.Join(t.TempDir(), "two-contexts")
	if err := clientcmd.WriteToFile(*cfg, two); err != nil {
		t.Fatal(err)
	}

	if _, stderr, code := kubectlPlugin(t, "ps", "--kubeconfig", two); code != 1 || !strings.Contains(stderr, "127.0.0.1:1") {
		t.Errorf("the dead current context: exit %d, %q", code, stderr)
	}
	// No -n: the live context's namespace.
	rows, _, _ := psRows(t, mustPlugin(t, "ps", "--kubeconfig", two, "--context", "live"), psHeader)
	if rows["r"]["PHASE"] != "Running" {
		t.Errorf("--context live: %v", rows)
	}
	out := mustPlugin(t, "describe", "r", "--kubeconfig", two, "--cluster", live, "--user", cur.AuthInfo, "-n", ns)
	if !strings.Contains(out, "Namespace:") || !strings.Contains(out, ns) {
		t.Errorf("--cluster %s: %s", live, out)
	}
}

// TestKubectlAgentrunRequestTimeout: against an API server that stops
// answering, --request-timeout is how long the plugin waits.
func TestKubectlAgentrunRequestTimeout(t *testing.T) {
	controlPlane(t)
	proxy, err := env.StartProxy()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	via, err := proxy.Kubeconfig(kubeconfig, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mustPlugin(t, "ps", "-A", "--kubeconfig", via) // it answers through the proxy
	proxy.Cut()
	took := map[string]time.Duration{}
	for _, timeout := range []string{"1s", "4s"} {
		start := time.Now()
		_, stderr, code := kubectlPlugin(t, "ps", "-A", "--kubeconfig", via, "--request-timeout", timeout)
		took[timeout] = time.Since(start)
		if code != 1 || !strings.Contains(stderr, "Timeout") && !strings.Contains(stderr, "deadline exceeded") {
			t.Errorf("--request-timeout %s: exit %d, %q", timeout, code, stderr)
		}
	}
	if took["1s"] > 3*time.Second || took["4s"] < 4*time.Second || took["4s"] > 8*time.Second {
		t.Errorf("with the server silent, --request-timeout 1s took %s and 4s took %s", took["1s"], took["4s"])
	}
}

// TestKubectlAgentrunPsLinesUpByClass: ps reads the cluster admin's
// priority classes from the operator's namespace (--lease-namespace) and
// counts places in line by them, as the manager admits: a run of class
// urgent goes first though created last, a run naming no class takes the
// default class's value, above a spec.priority of 5. A person who cannot
// read the classes is told the count ignores them.
func TestKubectlAgentrunPsLinesUpByClass(t *testing.T) {
	controlPlane(t)
	ns, op := newNamespace(t), newNamespace(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: op, Name: priority.DefaultConfigMapName},
		Data: map[string]string{"urgent": "1000", "raised": "10", "low": "-100", priority.DefaultKey: "raised"}}
	if err := k8sClient.Create(ctxFor(t), cm); err != nil {
		t.Fatal(err)
	}
	queued := arv1.AgentRunStatus{Phase: arv1.PhaseQueued}
	createRun(t, ns, "low", func(r *arv1.AgentRun) { r.Spec.PriorityClassName = "low" }, queued)
	createRun(t, ns, "numbered", func(r *arv1.AgentRun) { r.Spec.Priority = ptr(int32(5)) }, queued)
	createRun(t, ns, "plain", nil, queued)
	createRun(t, ns, "urgent", func(r *arv1.AgentRun) { r.Spec.PriorityClassName = "urgent" }, queued)

	out, stderr, code := kubectlPlugin(t, "ps", "-n", ns, "--lease-namespace", op)
	if code != 0 || stderr != "" {
		t.Fatalf("ps: exit %d, stderr %q", code, stderr)
	}
	rows, _, _ := psRows(t, out, psHeader)
	want := map[string]string{"urgent": "next in line", "plain": "1 ahead in line", "numbered": "2 ahead in line", "low": "3 ahead in line"}
	for name, w := range want {
		if got := rows[name]["WAITING"]; got != w {
			t.Errorf("%s: WAITING %q, want %q (classes urgent 1000, default raised 10, low -100)", name, got, w)
		}
	}

	grantRuns(t, ns, rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "run-readers"})
	_, stderr, code = kubectlPlugin(t, "ps", "-n", ns, "--lease-namespace", op, "--as", "carol", "--as-group", "run-readers")
	if code != 0 || !strings.Contains(stderr, "Note: the priority classes (ConfigMap "+op+"/"+priority.DefaultConfigMapName+") could not be read") ||
		!strings.Contains(stderr, "forbidden") {
		t.Errorf("ps by someone who cannot read the classes: exit %d, stderr %q; want a note that the count ignores them", code, stderr)
	}
}
