package plugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// TestKubectlAgentrunApproveWithArgs: `kubectl agentrun approve --args`
// takes a tool call's edited arguments inline, from a file or from stdin,
// and creates an Approve carrying them (compact) and the reason; --args
// on anything but a tool approval creates nothing.
func TestKubectlAgentrunApproveWithArgs(t *testing.T) {
	controlPlane(t)
	ns := newNamespace(t)
	createRun(t, ns, "tool", nil, arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput, WaitingOn: waitTool.DeepCopy()})
	createRun(t, ns, "checkpoint", nil, arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput, WaitingOn: waitCheckpoint.DeepCopy()})
	file := filepath.Join(t.TempDir(), "args.json")
	if err := os.WriteFile(file, []byte("{\n  \"command\": \"ls\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		want  string // the arguments the answer carries
	}{
		{"inline", "", []string{"--args", `{"command": "ls -l", "cwd": "/tmp"}`, "--reason", "read only"}, `{"command":"ls -l","cwd":"/tmp"}`},
		{"file", "", []string{"--args", file}, `{"command":"ls"}`},
		{"stdin", `{"command":"pwd"}`, []string{"--args", "-"}, `{"command":"pwd"}`},
	} {
		var stdin *strings.Reader
		if tc.stdin != "" {
			stdin = strings.NewReader(tc.stdin)
		}
		var out, errOut string
		var code int
		if stdin != nil {
			out, errOut, code = startPluginWith(t, stdin, append([]string{"approve", "-n", ns, "tool"}, tc.args...)...)()
		} else {
			out, errOut, code = kubectlPlugin(t, append([]string{"approve", "-n", ns, "tool"}, tc.args...)...)
		}
		m := answerCreated.FindStringSubmatch(out)
		if code != 0 || m == nil || out != m[0]+`approve with edited args "call-3" of tool as test-admin`+"\n" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", tc.name, code, out, errOut)
			continue
		}
		var ans arv1.AgentRunAnswer
		if err := k8sClient.Get(ctxFor(t), client.ObjectKey{Namespace: ns, Name: m[1]}, &ans); err != nil {
			t.Fatal(err)
		}
		reason := ""
		if tc.name == "inline" {
			reason = "read only"
		}
		if s := ans.Spec; s.Decision != arv1.DecisionApprove || s.Args == nil || string(s.Args.Raw) != tc.want || s.Reason != reason || s.Point != "call-3" || s.By != "test-admin" {
			t.Errorf("%s: created %s", tc.name, mustIndent(t, ans.Spec))
		}
	}
	_, errOut, code := kubectlPlugin(t, "approve", "-n", ns, "checkpoint", "--args", `{"x":1}`)
	if code != 1 || !strings.Contains(errOut, `agentrun "checkpoint" waits on checkpoint "approve-deploy" (InteractionPoint); --args edit a tool call's arguments`) {
		t.Errorf("--args at a checkpoint: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = startPluginWith(t, strings.NewReader("[1]"), "approve", "-n", ns, "tool", "--args", "-")()
	if code != 1 || !strings.Contains(errOut, "--args -: the arguments are not a JSON object") {
		t.Errorf("stdin that is not an object: exit %d, stderr %q", code, errOut)
	}
	var list arv1.AgentRunAnswerList
	if err := k8sClient.List(ctxFor(t), &list, client.InNamespace(ns)); err != nil || len(list.Items) != 3 {
		t.Errorf("answers = %d (%v), want the three approvals only", len(list.Items), err)
	}
}
