package plugin

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// created is the line rerun and fork print; its first group is the new
// run's name.
var createdRun = regexp.MustCompile(`^agentrun\.agentrun\.dev/(\S+) created \((rerun|fork) of src`)

func newRunNamed(t *testing.T, out string) string {
	t.Helper()
	m := createdRun.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no created line in %q", out)
	}
	return m[1]
}

func getPluginRun(t *testing.T, ns, name string) *arv1.AgentRun {
	t.Helper()
	var run arv1.AgentRun
	if err := k8sClient.Get(ctxFor(t), client.ObjectKey{Namespace: ns, Name: name}, &run); err != nil {
		t.Fatal(err)
	}
	return &run
}

// TestKubectlAgentrunRerunAndFork: through the real kubectl, rerun makes
// a run with the source's spec (not its cancel), its user labels and a
// link to it; fork makes one with spec.forkOf, the model and blueprint it
// was given, the blueprint ConfigMap owned by the fork; cuts the source
// cannot give are refused before anything is created.
func TestKubectlAgentrunRerunAndFork(t *testing.T) {
	controlPlane(t)
	ns := newNamespace(t)
	steps := int64(40)
	src := createRun(t, ns, "src", func(r *arv1.AgentRun) {
		r.Labels = map[string]string{"team": "a", arv1.LabelRoot: "src"}
		r.Spec.Budgets = &arv1.Budgets{Steps: &steps}
		r.Spec.Cancel = true
	}, arv1.AgentRunStatus{Phase: arv1.PhaseError, Stages: []arv1.StageStatus{
		{Name: "plan", State: arv1.StageComplete, Visits: 1},
		{Name: "ship", State: arv1.StageError, Visits: 1},
		{Name: "review", State: arv1.StagePending},
	}})

	rerun := getPluginRun(t, ns, newRunNamed(t, mustPlugin(t, "rerun", "src", "-n", ns)))
	want := src.Spec.DeepCopy()
	want.Cancel = false
	if !reflect.DeepEqual(rerun.Spec, *want) {
		t.Errorf("rerun spec %+v, want %+v", rerun.Spec, *want)
	}
	if rerun.Labels["team"] != "a" || rerun.Labels[arv1.LabelRerunOf] != "src" || rerun.Labels[arv1.LabelRoot] != "" ||
		rerun.Annotations[arv1.AnnotationRerunOfUID] != string(src.UID) {
		t.Errorf("rerun labels %v annotations %v", rerun.Labels, rerun.Annotations)
	}
	if out := mustPlugin(t, "rerun", "src", "-n", ns, "--name", "again"); !strings.HasPrefix(out, "agentrun.agentrun.dev/again created (rerun of src)") {
		t.Errorf("rerun --name said %q", out)
	}

	dir := t.TempDir()
	toml := filepath.Join(dir, "agent.toml")
	if err := os.WriteFile(toml, []byte("[agent]\nname = \"fixed\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := mustPlugin(t, "fork", "src", "-n", ns, "--from-stage", "ship", "--model", "oa/gpt-y", "--blueprint", toml)
	if !strings.Contains(out, "(fork of src from stage ship)") {
		t.Errorf("fork said %q", out)
	}
	fork := getPluginRun(t, ns, newRunNamed(t, out))
	if f := fork.Spec.ForkOf; f == nil || f.Run != "src" || f.Stage != "ship" || f.Entry != nil || fork.Spec.Model != "oa/gpt-y" ||
		fork.Spec.Agent != fork.Name+"-blueprint" || fork.Labels[arv1.LabelForkOf] != "src" || fork.Spec.Task != src.Spec.Task {
		t.Errorf("fork spec %+v labels %v", fork.Spec, fork.Labels)
	}
	var cm corev1.ConfigMap
	if err := k8sClient.Get(ctxFor(t), client.ObjectKey{Namespace: ns, Name: fork.Spec.Agent}, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["agent.toml"] != "[agent]\nname = \"fixed\"\n" || len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != fork.UID {
		t.Errorf("blueprint ConfigMap data %v owners %+v", cm.Data, cm.OwnerReferences)
	}

	for _, c := range []struct {
		args []string
		code int
		say  string
	}{
		{[]string{"--from-stage", "deploy"}, 1, `stage "deploy" is not a stage of src's blueprint (stages: plan, ship, review)`},
		{[]string{"--from-stage", "review"}, 1, `src has not entered stage "review"`},
		{[]string{"--from-entry", "3"}, 1, "entry 3 is out of range: the journal of src holds 0 entries"},
		{[]string{"--from-entry", "-1"}, 2, "--from-entry must be 0 or more"},
		{[]string{"--from-stage", "ship", "--from-entry", "0"}, 2, "exactly one of --from-stage and --from-entry"},
		{nil, 2, "exactly one of --from-stage and --from-entry"},
		{[]string{"--from-stage", "ship", "--agent", "x", "--blueprint", toml}, 2, "--agent and --blueprint cannot be used together"},
	} {
		args := append([]string{"fork", "src", "-n", ns}, c.args...)
		if stdout, stderr, code := kubectlPlugin(t, args...); code != c.code || stdout != "" || !strings.Contains(stderr, c.say) {
			t.Errorf("fork %v: exit %d, stdout %q, stderr %q; want exit %d saying %q", c.args, code, stdout, stderr, c.code, c.say)
		}
	}
	var runs arv1.AgentRunList
	if err := k8sClient.List(ctxFor(t), &runs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(runs.Items) != 4 {
		t.Errorf("%d runs, want src, two reruns and one fork: refused forks create nothing", len(runs.Items))
	}
}
