package plugin

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
)

// TestKubectlAgentrunRegions: `regions` shows what the run's journal holds
// of its regions (the last write of each wins), or one region byte for
// byte; it says so when there is no such region.
func TestKubectlAgentrunRegions(t *testing.T) {
	controlPlane(t)
	ns := newNamespace(t)
	run := createRun(t, ns, "drafting", nil, arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput, WaitingOn: waitCheckpoint.DeepCopy()})
	for seq, data := range []string{
		`{"seq":0,"kind":"RegionWritten","at":"2026-03-01T11:00:00Z","region":"draft","content":"first","by":"spec","seeded":true}`,
		`{"seq":1,"kind":"RegionWritten","at":"2026-03-01T11:00:01Z","region":"notes","content":"keep it short","by":"spec","seeded":true}`,
		`{"seq":2,"kind":"RegionWritten","at":"2026-03-01T11:01:00Z","region":"draft","content":"# Draft\n\nSecond version.\n","by":"model"}`,
	} {
		if err := k8sClient.Create(ctxFor(t), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("drafting-j%06d", seq), Labels: map[string]string{
				configmaps.LabelRunUID: string(run.UID), arv1.LabelComponent: configmaps.Component}},
			Data: map[string]string{"entry": data},
		}); err != nil {
			t.Fatal(err)
		}
	}
	out := mustPlugin(t, "regions", "drafting", "-n", ns)
	table := regexp.MustCompile(`(?m)^REGION\s+BYTES\s+WRITTEN BY\s+SEQ\ndraft\s+25\s+model\s+#2\nnotes\s+13\s+spec\s+#1\n`)
	if !table.MatchString(out) || !strings.Contains(out, "\n--- draft ---\n# Draft\n\nSecond version.\n\n--- notes ---\nkeep it short\n") {
		t.Errorf("regions:\n%s", out)
	}
	if got := mustPlugin(t, "regions", "drafting", "draft", "-n", ns); got != "# Draft\n\nSecond version.\n" {
		t.Errorf("one region = %q", got)
	}
	if _, stderr, code := kubectlPlugin(t, "regions", "drafting", "nope", "-n", ns); code != 1 || !strings.Contains(stderr, `holds no region "nope"`) {
		t.Errorf("a missing region: exit %d, %q", code, stderr)
	}
	createRun(t, ns, "fresh", nil, arv1.AgentRunStatus{Phase: arv1.PhaseRunning})
	if got := mustPlugin(t, "regions", "fresh", "-n", ns); !strings.Contains(got, "holds no regions yet") {
		t.Errorf("a run with no regions: %q", got)
	}
	if _, _, code := kubectlPlugin(t, "regions", "-n", ns); code != 2 {
		t.Errorf("regions without a run: exit %d, want 2", code)
	}
}

// TestKubectlAgentrunCheckpointEditAndRevise: `answer --edit`,
// `--edit-file` and `--revise` answer a checkpoint with decision Edit or
// Revise and the text, `--choice` with Approve and the option or free
// text; they refuse any other wait and malformed use.
func TestKubectlAgentrunCheckpointEditAndRevise(t *testing.T) {
	controlPlane(t)
	ns := newNamespace(t)
	createRun(t, ns, "cp", nil, arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput, WaitingOn: waitCheckpoint.DeepCopy()})
	createRun(t, ns, "question", nil, arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput, WaitingOn: waitQuestion.DeepCopy()})
	file := filepath.Join(t.TempDir(), "draft.md")
	if err := os.WriteFile(file, []byte("# Edited\n\nfrom a file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		line string
		want arv1.AgentRunAnswerSpec
	}{
		{[]string{"answer", "cp", "--edit", "my draft"}, `edit "approve-deploy" of cp as test-admin`,
			arv1.AgentRunAnswerSpec{Decision: arv1.DecisionEdit, Text: ptr("my draft")}},
		{[]string{"answer", "cp", "--edit-file", file}, `edit "approve-deploy" of cp as test-admin`,
			arv1.AgentRunAnswerSpec{Decision: arv1.DecisionEdit, Text: ptr("# Edited\n\nfrom a file\n")}},
		{[]string{"answer", "cp", "--revise=shorter, please"}, `revise "approve-deploy" of cp as test-admin`,
			arv1.AgentRunAnswerSpec{Decision: arv1.DecisionRevise, Text: ptr("shorter, please")}},
		{[]string{"answer", "cp", "--choice", "green"}, `choose "approve-deploy" of cp as test-admin`,
			arv1.AgentRunAnswerSpec{Decision: arv1.DecisionApprove, Text: ptr("green")}},
		{[]string{"answer", "cp", "--choice=it matches the logo"}, `choose "approve-deploy" of cp as test-admin`,
			arv1.AgentRunAnswerSpec{Decision: arv1.DecisionApprove, Text: ptr("it matches the logo")}},
	} {
		out := mustPlugin(t, append(tc.args, "-n", ns)...)
		m := answerCreated.FindStringSubmatch(out)
		if m == nil || out != m[0]+tc.line+"\n" {
			t.Errorf("%q printed %q, want ... created: %s", tc.args, out, tc.line)
			continue
		}
		var ans arv1.AgentRunAnswer
		if err := k8sClient.Get(ctxFor(t), client.ObjectKey{Namespace: ns, Name: m[1]}, &ans); err != nil {
			t.Fatal(err)
		}
		want := tc.want
		want.Run, want.Point, want.By = "cp", waitCheckpoint.Point, "test-admin"
		if !reflect.DeepEqual(ans.Spec, want) {
			t.Errorf("%q created spec %s, want %s", tc.args, mustIndent(t, ans.Spec), mustIndent(t, want))
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"answer", "question", "--revise", "x"}, 1, "--choice, --edit, --edit-file and --revise answer a checkpoint (InteractionPoint) only"},
		{[]string{"answer", "question", "--choice", "staging"}, 1, "--choice, --edit, --edit-file and --revise answer a checkpoint (InteractionPoint) only"},
		{[]string{"answer", "cp", "--edit", "a", "--revise", "b"}, 2, "give one of --choice TEXT, --edit TEXT, --edit-file PATH or --revise TEXT"},
		{[]string{"answer", "cp", "--choice", "a", "--edit", "b"}, 2, "give one of --choice TEXT"},
		{[]string{"answer", "cp", "--choice", " "}, 2, "--choice needs the option"},
		{[]string{"answer", "cp", "--revise", " "}, 2, "--revise needs the instructions"},
		{[]string{"answer", "cp", "--edit-file", filepath.Join(t.TempDir(), "missing.md")}, 2, "--edit-file: open"},
		{[]string{"answer", "cp", "extra", "--edit", "a"}, 2, "takes exactly one run NAME"},
	} {
		stdout, stderr, code := kubectlPlugin(t, append(tc.args, "-n", ns)...)
		if code != tc.code || stdout != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.args, code, stdout, stderr, tc.code, tc.want)
		}
	}
}
