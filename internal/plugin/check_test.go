package plugin

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/shards"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// TestExpectedCRDsAreTheGenerated: the CRDs check expects are exactly the
// ones controller-gen writes (config/crd/bases), each serving and storing
// the version the plugin's types are.
func TestExpectedCRDsAreTheGenerated(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("config/crd/bases: %v %v", files, err)
	}
	var got, want []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, v := range crd.Spec.Versions {
			if v.Served && v.Storage {
				got = append(got, crd.Name+" "+crd.Spec.Names.Kind+" "+v.Name)
			}
		}
	}
	for _, c := range expectedCRDs {
		want = append(want, c.plural+"."+arv1.GroupVersion.Group+" "+c.kind+" "+arv1.GroupVersion.Version)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("config/crd/bases serves and stores %v; check expects %v", got, want)
	}
}

// checkLine matches one line of check's report.
var checkLine = regexp.MustCompile(`^(OK|FIX|SKIP)  +\S`)

// runCheck runs `kubectl agentrun check args...` and splits its report:
// the lines by their first word, and the summary.
func runCheck(t *testing.T, args ...string) (lines map[string][]string, summary, stderr string, code int) {
	t.Helper()
	stdout, stderr, code := kubectlPlugin(t, append([]string{"check"}, args...)...)
	t.Logf("kubectl agentrun check %s: exit %d\n%s", strings.Join(args, " "), code, stdout)
	out := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	if len(out) < 3 || out[len(out)-2] != "" {
		t.Fatalf("check %v: no summary after a blank line:\n%s\nstderr %q", args, stdout, stderr)
	}
	lines = map[string][]string{}
	for _, l := range out[:len(out)-2] {
		m := checkLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("check %v: line %q is not OK, FIX or SKIP:\n%s", args, l, stdout)
		}
		lines[m[1]] = append(lines[m[1]], l)
	}
	return lines, out[len(out)-1], stderr, code
}

// has reports whether one of lines contains every part.
func has(lines []string, parts ...string) bool {
	return slices.ContainsFunc(lines, func(l string) bool {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				return false
			}
		}
		return true
	})
}

// fakeInstall creates what a running install leaves in opNS: the
// manager's Deployment (2 replicas, 2 shards, an egress flag) with every
// replica ready, its shard Leases freshly renewed, and an egress ConfigMap.
// No manager runs: the objects are what check reads.
func fakeInstall(t *testing.T, opNS string) {
	t.Helper()
	ctx := ctxFor(t)
	labels := map[string]string{managerLabel: managerLabelValue}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: opNS, Name: "agentrun-controller-manager"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "manager", Image: "controller:latest",
				Args: []string{"--leader-elect", "--shards=2", "--metrics-bind-address=:8080", "--egress-deny-cidr", "10.0.0.0/24"},
			}}}}},
	}
	if err := k8sClient.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	d.Status = appsv1.DeploymentStatus{Replicas: 2, ReadyReplicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2}
	if err := k8sClient.Status().Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := k8sClient.Create(ctx, shardLease(opNS, i, "agentrun-controller-manager-abc-"+strconv.Itoa(i), time.Now(), 3600)); err != nil {
			t.Fatal(err)
		}
	}
	if err := k8sClient.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: opNS, Name: "agentrun-egress"},
		Data: map[string]string{"egress.toml": "allow_cidrs = [\"169.254.20.10/32\"]\n"}}); err != nil {
		t.Fatal(err)
	}
}

func shardLease(ns string, shard int, holder string, renewed time.Time, seconds int32) *coordinationv1.Lease {
	at := metav1.NewMicroTime(renewed)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: shards.LeaseName(shard), Labels: map[string]string{
			shards.LabelLease: "shard", shards.LabelShard: strconv.Itoa(shard)}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, AcquireTime: &at, RenewTime: &at},
	}
}

// teamProviders gives ns a provider config whose provider keeps its key in
// Secret model-key, and that Secret.
func teamProviders(t *testing.T, ns string) {
	t.Helper()
	for _, obj := range []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agentrun-providers"}, Data: map[string]string{"providers.toml": `
[providers.keyed]
type = "scripted"
models = ["scripted-1"]
api_key_secret = { name = "model-key", key = "api-key" }
`}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "model-key"}, StringData: map[string]string{"api-key": "sk-check-never-shown"}},
	} {
		if err := k8sClient.Create(ctxFor(t), obj); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKubectlAgentrunCheck: on a sound install `check` prints only OK
// lines, one for each thing it checks, and exits 0; a missing Secret (and
// a Secret without its key), an expired shard Lease, a run parked on
// setup and a missing CRD each turn into the FIX line that names it and
// exit 1. No Secret value is ever printed.
func TestKubectlAgentrunCheck(t *testing.T) {
	controlPlane(t)
	ctx := ctxFor(t)
	opNS, team := newNamespace(t), newNamespace(t)
	fakeInstall(t, opNS)
	teamProviders(t, team)
	createRun(t, team, "working", nil, arv1.AgentRunStatus{Phase: arv1.PhaseRunning})
	args := []string{"-n", team, "--operator-namespace", opNS}

	lines, summary, stderr, code := runCheck(t, args...)
	if code != 0 || len(lines["FIX"])+len(lines["SKIP"]) != 0 {
		t.Fatalf("a sound install: exit %d, lines %q, stderr %q", code, lines, stderr)
	}
	for _, want := range [][]string{
		{"CRD agentruns.agentrun.dev: v1alpha1 served and stored"},
		{"CRD agentrunanswers.agentrun.dev: v1alpha1 served and stored"},
		{"CRD agentrunschedules.agentrun.dev: v1alpha1 served and stored"},
		{"CRD agenttoolpolicies.agentrun.dev: v1alpha1 served and stored"},
		{"CRD clusteragenttoolpolicies.agentrun.dev: v1alpha1 served and stored"},
		{"CRD agentrunquotas.agentrun.dev: v1alpha1 served and stored"},
		{"CRD clusteragentrunquotas.agentrun.dev: v1alpha1 served and stored"},
		{"admission policy answer-identity, bound by answer-identity (Deny)"},
		{"Deployment " + opNS + "/agentrun-controller-manager: 2 of 2 replicas ready"},
		{"shard 0: Lease " + opNS + "/agentrun-shard-0 held by agentrun-controller-manager-abc-0"},
		{"shard 1: Lease " + opNS + "/agentrun-shard-1 held by agentrun-controller-manager-abc-1"},
		{"egress policy", "ConfigMap " + opNS + "/agentrun-egress", "allow_cidrs 169.254.20.10/32", "deny_cidrs 10.0.0.0/24"},
		{"provider ConfigMap " + team + "/agentrun-providers: providers keyed (used by 1 unfinished run: working)"},
		{"Secret " + team + `/model-key has key "api-key" (provider "keyed"'s API key)`},
	} {
		if !has(lines["OK"], want...) {
			t.Errorf("no OK line with %q in\n%s", want, strings.Join(lines["OK"], "\n"))
		}
	}
	if len(lines["OK"]) != 14 || summary != "14 OK" {
		t.Errorf("%d OK lines, summary %q; want the 14 above", len(lines["OK"]), summary)
	}

	// What breaks, each on its own line.
	var secret corev1.Secret
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: team, Name: "model-key"}, &secret); err != nil {
		t.Fatal(err)
	}
	secret.Data = map[string][]byte{"other": []byte("sk-check-never-shown")}
	if err := k8sClient.Update(ctx, &secret); err != nil {
		t.Fatal(err)
	}
	lines, _, _, code = runCheck(t, args...)
	if code != 1 || !has(lines["FIX"], "Secret "+team+`/model-key has no non-empty key "api-key" (provider "keyed"'s API key): kubectl create secret generic model-key -n `+team) {
		t.Errorf("a Secret without its key: exit %d, %q", code, lines["FIX"])
	}
	if err := k8sClient.Delete(ctx, &secret); err != nil {
		t.Fatal(err)
	}
	var lease coordinationv1.Lease
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: opNS, Name: shards.LeaseName(1)}, &lease); err != nil {
		t.Fatal(err)
	}
	stale := shardLease(opNS, 1, "agentrun-controller-manager-gone", time.Now().Add(-time.Hour), 15)
	lease.Spec = stale.Spec
	if err := k8sClient.Update(ctx, &lease); err != nil {
		t.Fatal(err)
	}
	createRun(t, team, "parked", nil, arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput, WaitingOn: &arv1.WaitingOn{
		Reason: arv1.WaitNeedsSetup, NeedsAPerson: true, Blocker: arv1.BlockerSecretMissing,
		Remedy: "Create the Secret " + team + "/model-key holding provider \"keyed\"'s API key under key \"api-key\"."}})

	lines, summary, stderr, code = runCheck(t, args...)
	if code != 1 {
		t.Errorf("a broken install: exit %d, want 1; stderr %q", code, stderr)
	}
	for _, want := range [][]string{
		{"Secret " + team + `/model-key (provider "keyed"'s API key, key "api-key") is missing: kubectl create secret generic model-key -n ` + team + " --from-literal=api-key=<value>"},
		{"shard 1: Lease " + opNS + "/agentrun-shard-1 held by agentrun-controller-manager-gone expired ", "that replica is gone"},
		{"run " + team + "/parked waits on setup (SecretMissing): Create the Secret"},
	} {
		if !has(lines["FIX"], want...) {
			t.Errorf("no FIX line with %q in\n%s", want, strings.Join(lines["FIX"], "\n"))
		}
	}
	if len(lines["FIX"]) != 3 || !strings.HasPrefix(summary, "3 to fix, ") {
		t.Errorf("FIX lines %q, summary %q; want the 3 above", lines["FIX"], summary)
	}
	if !has(lines["OK"], "provider ConfigMap "+team+"/agentrun-providers", "used by 2 unfinished runs: parked, working") ||
		!has(lines["OK"], "shard 0: Lease") {
		t.Errorf("the sound parts are no longer OK:\n%s", strings.Join(lines["OK"], "\n"))
	}

	// The same, through -A: the namespaces with unfinished runs.
	lines, _, _, code = runCheck(t, "-A", "--operator-namespace", opNS)
	if code != 1 || !has(lines["FIX"], "Secret "+team+"/model-key") {
		t.Errorf("check -A: exit %d, FIX %q", code, lines["FIX"])
	}

	// A missing CRD (put back afterwards, for the other tests).
	removeCRD(t, "agentrunanswers.agentrun.dev", "agentrun.dev_agentrunanswers.yaml")
	lines, _, _, code = runCheck(t, "--operator-namespace", opNS)
	if code != 1 || !has(lines["FIX"], "CRD agentrunanswers.agentrun.dev is not installed: kubectl apply -k config/crd") ||
		!has(lines["OK"], "CRD agentruns.agentrun.dev") {
		t.Errorf("a missing CRD: exit %d, FIX %q, OK %q", code, lines["FIX"], lines["OK"])
	}
}

// removeCRD deletes a CRD and waits until it is gone; cleanup installs
// it again from config/crd/bases and waits until it is served.
func removeCRD(t *testing.T, name, file string) {
	t.Helper()
	ctx := ctxFor(t)
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name}}
	t.Cleanup(func() {
		if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{
			Paths: []string{filepath.Join(testenv.RepoRoot(), "config", "crd", "bases", file)}, ErrorIfPathMissing: true,
		}); err != nil {
			t.Fatalf("installing %s again: %v", name, err)
		}
	})
	if err := k8sClient.Delete(ctx, crd); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(crd), crd)), nil
	}); err != nil {
		t.Fatalf("CRD %s still there: %v", name, err)
	}
}
