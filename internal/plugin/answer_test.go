package plugin

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// TestParseReplies: each answer command's arguments become the answer's
// decision, text and input, with the flags parsed as the command line gives
// them.
func TestParseReplies(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		decision arv1.AnswerDecision
		text     *string
		input    *string
		verb     string
		reason   string
	}{
		{args: []string{"approve", "r"}, decision: arv1.DecisionApprove, verb: "approve"},
		{args: []string{"approve", "r", "--wait"}, decision: arv1.DecisionApprove, verb: "approve"},
		{args: []string{"deny", "r"}, decision: arv1.DecisionDeny, verb: "deny"},
		{args: []string{"deny", "r", "--reason", "too risky"}, decision: arv1.DecisionDeny, reason: "too risky", verb: "deny"},
		{args: []string{"deny", "--reason=not now", "r"}, decision: arv1.DecisionDeny, reason: "not now", verb: "deny"},
		{args: []string{"approve", "r", "--reason", "checked with ops"}, decision: arv1.DecisionApprove, reason: "checked with ops", verb: "approve"},
		{args: []string{"answer", "r", "use the staging cluster"}, text: ptr("use the staging cluster"), verb: "answer"},
		{args: []string{"answer", "r", ""}, text: ptr(""), verb: "answer"},
		{args: []string{"answer", "r", "--", "-1"}, text: ptr("-1"), verb: "answer"},
		{args: []string{"answer", "r", "--json", `{"env":"prod"}`}, input: ptr(`{"env":"prod"}`), verb: "answer"},
		{args: []string{"answer", "r", "--json=42", "-n", "x"}, input: ptr("42"), verb: "answer"},
		{args: []string{"answer", "r", "--null"}, input: ptr("null"), verb: "answer"},
		{args: []string{"resolve", "r", "--done", "--output", "issue #12 created"}, decision: arv1.DecisionDone, text: ptr("issue #12 created"), verb: "done"},
		{args: []string{"resolve", "r", "--done", "--output", ""}, decision: arv1.DecisionDone, text: ptr(""), verb: "done"},
		{args: []string{"resolve", "r", "--done", "--output-json", `{"id":12}`}, decision: arv1.DecisionDone, input: ptr(`{"id":12}`), verb: "done"},
		{args: []string{"resolve", "r", "--retry"}, decision: arv1.DecisionRetry, verb: "retry"},
		{args: []string{"resolve", "--abandon", "r"}, decision: arv1.DecisionAbandon, verb: "abandon"},
	} {
		a, code, errOut := parse(t, tc.args...)
		if code != ExitError || a.parsed == nil {
			t.Errorf("%q: exit %d, %s", tc.args, code, errOut)
			continue
		}
		r, err := replyParsers[tc.args[0]](*a.parsed)
		if err != nil || r.decision != tc.decision || r.verb != tc.verb || !sameText(r.text, tc.text) || !sameText(r.input, tc.input) || r.reason != tc.reason {
			t.Errorf("%q: reply %+v (text %v, input %v), %v", tc.args, r, deref(r.text), deref(r.input), err)
		}
	}
}

func sameText(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func deref(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

// TestAnswerUsageErrors: mistakes in an answer command's arguments exit 2
// with a message saying what is wrong, before any request (no kubeconfig is
// read: one that does not exist would fail with exit 1).
func TestAnswerUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"approve"}, "approve takes exactly one run NAME"},
		{[]string{"approve", "a", "b"}, "approve takes exactly one run NAME"},
		{[]string{"approve", "r", "--reason", " "}, "--reason needs the reason's text"},
		{[]string{"approve", "r", "--args", "[1]"}, "not a JSON object"},
		{[]string{"approve", "r", "--args", "{nope"}, "the arguments are not valid JSON"},
		{[]string{"approve", "r", "--args", "/nonexistent/args.json"}, "--args: open /nonexistent/args.json"},
		{[]string{"deny", "r", "--args", "{}"}, "unknown flag: --args"},
		{[]string{"deny", "r", "--reason"}, "flag needs an argument: --reason"},
		{[]string{"answer"}, "answer takes a run NAME and one answer"},
		{[]string{"answer", "r", "a", "b"}, "answer takes a run NAME and one answer (quote a TEXT with spaces)"},
		{[]string{"answer", "r"}, "answer needs exactly one of TEXT, --json JSON or --null (got 0)"},
		{[]string{"answer", "r", "yes", "--null"}, "(got 2)"},
		{[]string{"answer", "r", "--json", "{}", "--null"}, "(got 2)"},
		{[]string{"answer", "r", "--json", "{env: prod}"}, `--json "{env: prod}" is not valid JSON`},
		{[]string{"answer", "r", "--json", ""}, `--json "" is not valid JSON`},
		{[]string{"answer", "r", "--json", "yes"}, "give plain text without the flag"},
		{[]string{"answer", "r", "--null=maybe"}, `invalid argument "maybe" for "--null" flag`},
		{[]string{"answer", "r", "--done"}, "unknown flag: --done"},
		{[]string{"resolve", "r"}, "resolve needs exactly one of --done, --retry or --abandon"},
		{[]string{"resolve", "r", "--done", "--retry"}, "resolve needs exactly one of --done, --retry or --abandon"},
		{[]string{"resolve", "r", "--retry", "--output", "x"}, "they go with --done only"},
		{[]string{"resolve", "r", "--done", "--output", "x", "--output-json", "1"}, "give the output once"},
		{[]string{"resolve", "r", "--done", "--output-json", "{"}, `--output-json "{" is not valid JSON`},
		{[]string{"resolve", "r", "-o", "json", "--retry"}, "unknown shorthand flag: 'o' in -o"},
		{[]string{"resolve", "r", "--done", "--output"}, "flag needs an argument: --output"},
		{[]string{"resolve", "r", "--done"}, `--done needs the write's output: --output TEXT or --output-json JSON (--output "" if it had none)`},
		{[]string{"ps", "--wait"}, "unknown flag: --wait"},
		{[]string{"status", "r", "--output", "wide"}, "unsupported output format"},
	} {
		var out, errOut bytes.Buffer
		code := Main(slices.Concat([]string{"kubectl-agentrun", tc.args[0], "--kubeconfig", "/nonexistent/kubeconfig"}, tc.args[1:]), &out, &errOut)
		if code != ExitUsage || out.Len() != 0 || !strings.HasPrefix(errOut.String(), "error: ") || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, out.String(), errOut.String(), tc.want)
		}
	}
}

// waitRun is a run parked on w.
func waitRun(w *arv1.WaitingOn) *arv1.AgentRun {
	return &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "r"},
		Status: arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput, WaitingOn: w}}
}

// The waits of each kind, as the run state writes them.
var (
	waitCheckpoint = &arv1.WaitingOn{Reason: arv1.WaitInteractionPoint, Point: "approve-deploy", Question: "Deploy?"}
	waitTool       = &arv1.WaitingOn{Reason: arv1.WaitToolApproval, Point: "call-3", Question: "Approve tool call shell?"}
	waitTaint      = &arv1.WaitingOn{Reason: arv1.WaitTaintGate, Point: "call-4", Question: "Allow the write?"}
	waitReview     = &arv1.WaitingOn{Reason: arv1.WaitUserPrompt, Point: "call-5", Question: "Review: the plan\n\nStep 1."}
	waitQuestion   = &arv1.WaitingOn{Reason: arv1.WaitUserPrompt, Point: "call-6", Question: "Which cluster? (one of: [\"staging\",\"prod\"])"}
	waitSignal     = &arv1.WaitingOn{Reason: arv1.WaitSignal, Point: "call-7", Signal: "CI webhook"}
	waitWrite      = &arv1.WaitingOn{Reason: arv1.WaitNeedsReconciliation, Point: "call-8", Seq: ptr(int64(8)), Tool: "create_issue",
		Question: "Did the write create_issue (seq 8) happen?"}
)

// TestFit: a command answers only the waits it fits, and a refusal names
// the run, what it waits on, and the command that does fit.
func TestFit(t *testing.T) {
	approve := reply{family: familyDecide}
	answer := reply{family: familyAnswer}
	resolve := reply{family: familyResolve}
	for _, w := range []*arv1.WaitingOn{waitCheckpoint, waitTool, waitTaint, waitReview} {
		if got, err := fit("approve", approve, waitRun(w)); err != nil || got != w {
			t.Errorf("approve on %s: %v", w.Reason, err)
		}
	}
	for _, w := range []*arv1.WaitingOn{waitQuestion, waitSignal} {
		if _, err := fit("answer", answer, waitRun(w)); err != nil {
			t.Errorf("answer on %s: %v", w.Reason, err)
		}
	}
	if _, err := fit("resolve", resolve, waitRun(waitWrite)); err != nil {
		t.Errorf("resolve: %v", err)
	}

	refused := []struct {
		cmd  string
		r    reply
		run  *arv1.AgentRun
		want string
	}{
		{"approve", approve, waitRun(nil), `agentrun "r" is not waiting on anything to answer (phase WaitingInput)`},
		{"approve", approve, &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "r"}}, "(phase not started)"},
		{"approve", approve, waitRun(waitQuestion), `agentrun "r" waits on a question (UserPrompt), which approve does not answer; use kubectl agentrun answer r "..." -n team-a`},
		{"deny", approve, waitRun(waitSignal), `waits on a signal (Signal: CI webhook), which deny does not answer; use kubectl agentrun answer r`},
		{"approve", approve, waitRun(waitWrite), `waits on a dangling write (NeedsReconciliation: create_issue #8), which approve does not answer; use kubectl agentrun resolve r --done --output "..." -n team-a or kubectl agentrun resolve r --retry -n team-a or kubectl agentrun resolve r --abandon -n team-a`},
		{"answer", answer, waitRun(waitCheckpoint), `agentrun "r" waits on checkpoint "approve-deploy" (InteractionPoint), which answer does not answer; use kubectl agentrun approve r -n team-a or kubectl agentrun deny r -n team-a`},
		{"answer", answer, waitRun(waitReview), `waits on a review (UserPrompt), which answer does not answer; use kubectl agentrun approve r -n team-a or kubectl agentrun deny r --reason "..." -n team-a`},
		{"answer", answer, waitRun(waitTool), "waits on a tool call to approve (ToolApproval), which answer does not answer"},
		{"resolve", resolve, waitRun(waitTaint), "waits on a write after tainted input (TaintGate), which resolve does not answer; use kubectl agentrun approve r"},
		{"answer", answer, waitRun(&arv1.WaitingOn{Reason: arv1.WaitNeedsSetup, Summary: "NeedsSetup: SecretMissing", Blocker: arv1.BlockerSecretMissing,
			Remedy: `create Secret "anthropic"`}), `agentrun "r" waits on NeedsSetup: SecretMissing, which no answer clears: create Secret "anthropic"`},
		{"approve", approve, waitRun(&arv1.WaitingOn{Reason: arv1.WaitBudgetExceeded}), "waits on BudgetExceeded, which no answer clears: raise spec.budgets"},
		{"approve", approve, waitRun(&arv1.WaitingOn{Reason: arv1.WaitChildren, Summary: "Children(2)"}), "waits on Children(2), which no answer clears: it clears by itself"},
		{"approve", approve, waitRun(&arv1.WaitingOn{Reason: arv1.WaitToolApproval}), "waits on a tool call to approve (ToolApproval) but names no point to answer"},
	}
	for _, tc := range refused {
		if _, err := fit(tc.cmd, tc.r, tc.run); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s on %+v: %v\nwant %q", tc.cmd, tc.run.Status.WaitingOn, err, tc.want)
		}
	}
}

// TestDescribeAnswerGolden: describe prints the exact commands that answer
// each kind of wait.
func TestDescribeAnswerGolden(t *testing.T) {
	var buf bytes.Buffer
	for _, w := range []*arv1.WaitingOn{waitCheckpoint, waitTool, waitTaint, waitReview, waitQuestion, waitSignal, waitWrite} {
		run := waitRun(w)
		run.CreationTimestamp = *ago(time.Hour)
		run.Spec = arv1.AgentRunSpec{Agent: "researcher", Task: "t"}
		buf.WriteString("=== " + string(w.Reason) + "\n")
		if err := RenderDescribe(&buf, run, fixedNow, nil); err != nil {
			t.Fatal(err)
		}
	}
	golden(t, "describe-answers.golden", buf.Bytes())
}

// answerStates is a client whose Get returns an answer with each of states
// in turn (the last one repeating): the controller deciding over time.
type answerStates struct {
	client.Client
	states []arv1.AgentRunAnswerStatus
	gets   int
}

func (c *answerStates) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	st := c.states[min(c.gets, len(c.states)-1)]
	c.gets++
	obj.(*arv1.AgentRunAnswer).Status = st
	return nil
}

func TestAwait(t *testing.T) {
	pending, applied := arv1.AgentRunAnswerStatus{}, arv1.AgentRunAnswerStatus{State: arv1.AnswerApplied}
	rejected := arv1.AgentRunAnswerStatus{State: arv1.AnswerRejected, Message: `The run waits on point "b", not on point "a"`}
	for _, tc := range []struct {
		states  []arv1.AgentRunAnswerStatus
		out     string
		wantErr string
	}{
		{[]arv1.AgentRunAnswerStatus{pending, pending, applied}, "Applied\n", ""},
		{[]arv1.AgentRunAnswerStatus{rejected}, "Rejected: The run waits on point \"b\", not on point \"a\"\n", errRejected.Error()},
		{[]arv1.AgentRunAnswerStatus{pending}, "", "agentrunanswer r-x has no verdict after 20ms: is the agentrun controller running?"},
	} {
		var out bytes.Buffer
		a := &app{stdout: &out, pollEvery: time.Millisecond, waitFor: 20 * time.Millisecond}
		ans := &arv1.AgentRunAnswer{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "r-x"}}
		err := a.await(context.Background(), &answerStates{states: tc.states}, ans)
		if out.String() != tc.out || (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("states %v: printed %q, err %v", tc.states, out.String(), err)
		}
		if tc.wantErr == errRejected.Error() && !errors.Is(err, errRejected) {
			t.Errorf("a rejection is not errRejected: %v", err)
		}
	}
}

// TestChoiceCheckpointCommands: a checkpoint whose question says it is
// multiple_choice or free_text is answered with --choice (a bare approve
// would be rejected); a confirmation with approve.
func TestChoiceCheckpointCommands(t *testing.T) {
	for _, tc := range []struct {
		question string
		want     string
	}{
		{`Which colour? [multiple_choice: answer Approve with one of ["blue","green"]]`, `kubectl agentrun answer r --choice "..." -n team-a`},
		{`Why? [the draft is region "d"; free_text: answer Approve with your answer as text]`, `kubectl agentrun answer r --choice "..." -n team-a`},
		{`Deploy? [["stop"] cancels the run]`, "kubectl agentrun approve r -n team-a"},
		{"Pick a free_text: thing", "kubectl agentrun approve r -n team-a"},
	} {
		cmds := answerCommands(waitRun(&arv1.WaitingOn{Reason: arv1.WaitInteractionPoint, Point: "p", Question: tc.question}))
		if len(cmds) == 0 || cmds[0] != tc.want {
			t.Errorf("%q: commands %q, want first %q", tc.question, cmds, tc.want)
		}
	}
}
