package controllers_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// TestDemoEndsWhereTheREADMESays applies config/demo with the real kubectl,
// runs the manager, follows the README's steps with kubectl, and checks
// every demo run ends where the README promises.
func TestDemoEndsWhereTheREADMESays(t *testing.T) {
	startManager(t, managerOpts{})
	kubeconfig, err := env.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if out, err := testenv.Kubectl(kubeconfig, "apply", "-f", filepath.Join(testenv.RepoRoot(), "config", "demo")); err != nil {
		t.Fatal(err, out)
	}
	const ns = "agentrun-demo"
	waitFor(t, ns, "review-pr", 60*time.Second, "review-pr Complete", phaseIs(arv1.PhaseComplete))
	waitFor(t, ns, "summarise-notes", 30*time.Second, "summarise-notes on SecretMissing", blockedOn(arv1.BlockerSecretMissing))
	gate := waitFor(t, ns, "deploy-release", 30*time.Second, "deploy-release at its checkpoint", func(r *arv1.AgentRun) bool {
		return r.Status.WaitingOn != nil && r.Status.WaitingOn.Reason == arv1.WaitInteractionPoint
	})
	if gate.Status.WaitingOn.Question != "Deploy to production?" {
		t.Errorf("checkpoint question = %q", gate.Status.WaitingOn.Question)
	}

	out, err := testenv.Kubectl(kubeconfig, "get", "agentruns", "-A")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NeedsSetup: SecretMissing", "InteractionPoint", "review-pr"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl get agentruns -A lacks %q:\n%s", want, out)
		}
	}
	if out, err := testenv.Kubectl(kubeconfig, "create", "secret", "generic", "demo-model-key", "-n", ns, "--from-literal=api-key=anything"); err != nil {
		t.Fatal(err, out)
	}
	waitFor(t, ns, "summarise-notes", 10*time.Second, "summarise-notes Complete after the Secret", phaseIs(arv1.PhaseComplete))

	tri := waitFor(t, ns, "triage-backlog", 90*time.Second, "triage-backlog Complete", phaseIs(arv1.PhaseComplete))
	if cs := tri.Status.Children; cs == nil || cs.Succeeded != 6 {
		t.Errorf("triage-backlog children = %+v, want 6 succeeded", cs)
	}
	kids, err := testenv.Kubectl(kubeconfig, "get", "agentruns", "-n", ns, "-l", arv1.LabelParent+"=triage-backlog", "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(kids)); n != 6 {
		t.Errorf("label selector lists %d children, want 6:\n%s", n, kids)
	}
	wide, err := testenv.Kubectl(kubeconfig, "get", "ar", "-n", ns, "-o", "wide", "triage-backlog-w0")
	if err != nil {
		t.Fatal(err)
	}
	// PARENT is the last wide column: read the cell under its header.
	lines := strings.Split(strings.TrimRight(wide, "\n"), "\n")
	col := strings.LastIndex(lines[0], "PARENT")
	if len(lines) != 2 || col < 0 || len(lines[1]) <= col || strings.TrimSpace(lines[1][col:]) != "triage-backlog" {
		t.Errorf("the wide PARENT cell is not triage-backlog:\n%s", wide)
	}
	if r := getRun(t, ns, "deploy-release"); r.Status.Phase != arv1.PhaseWaitingInput {
		t.Errorf("deploy-release moved without an answer: %s", r.Status.Phase)
	}

	// Answer the checkpoint the way the README says: the kubectl plugin.
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "kubectl-agentrun"), "./cmd/kubectl-agentrun")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the plugin: %v\n%s", err, out)
	}
	approve := exec.Command(testenv.KubectlPath(), "agentrun", "approve", "deploy-release", "-n", ns)
	approve.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if out, err := approve.CombinedOutput(); err != nil || !strings.Contains(string(out), "approve") {
		t.Fatalf("kubectl agentrun approve: %v\n%s", err, out)
	}
	q := waitFor(t, ns, "deploy-release", 20*time.Second, "deploy-release asking where to deploy", func(r *arv1.AgentRun) bool {
		return r.Status.WaitingOn != nil && r.Status.WaitingOn.Reason == arv1.WaitUserPrompt
	}).Status.WaitingOn
	if !strings.Contains(q.Question, "which environment") || !strings.Contains(q.Question, `"production"`) {
		t.Errorf("question = %q", q.Question)
	}
	ans := exec.Command(testenv.KubectlPath(), "agentrun", "answer", "deploy-release", "production", "-n", ns)
	ans.Env = approve.Env
	if out, err := ans.CombinedOutput(); err != nil || !strings.Contains(string(out), "created") {
		t.Fatalf("kubectl agentrun answer: %v\n%s", err, out)
	}
	waitFor(t, ns, "deploy-release", 20*time.Second, "deploy-release Complete after the answer", phaseIs(arv1.PhaseComplete))
}
