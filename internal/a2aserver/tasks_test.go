package a2aserver

import (
	"errors"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

func runIn(phase arv1.Phase, w *arv1.WaitingOn) *arv1.AgentRun {
	return &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "r-1", UID: "u"},
		Spec: arv1.AgentRunSpec{Agent: "a"}, Status: arv1.AgentRunStatus{Phase: phase, WaitingOn: w, Error: "boom"}}
}

func TestStateOf(t *testing.T) {
	q := &arv1.WaitingOn{Reason: arv1.WaitUserPrompt, NeedsAPerson: true, Question: "Which?", Point: "p1"}
	setup := &arv1.WaitingOn{Reason: arv1.WaitNeedsSetup, NeedsAPerson: true, Blocker: arv1.BlockerSecretMissing, Remedy: "create it"}
	for _, tc := range []struct {
		phase arv1.Phase
		w     *arv1.WaitingOn
		state a2a.TaskState
		text  string
	}{
		{"", nil, a2a.TaskStateSubmitted, ""},
		{arv1.PhaseQueued, nil, a2a.TaskStateSubmitted, ""},
		{arv1.PhaseStarting, nil, a2a.TaskStateSubmitted, ""},
		{arv1.PhaseRunning, nil, a2a.TaskStateWorking, ""},
		{arv1.PhasePaused, nil, a2a.TaskStateWorking, ""},
		{arv1.PhaseWaitingInput, &arv1.WaitingOn{Reason: arv1.WaitChildren, NeedsAPerson: false}, a2a.TaskStateWorking, ""},
		{arv1.PhaseWaitingInput, q, a2a.TaskStateInputRequired, "Which?"},
		{arv1.PhaseWaitingInput, setup, a2a.TaskStateInputRequired, "SecretMissing: create it"},
		{arv1.PhaseComplete, nil, a2a.TaskStateCompleted, ""},
		{arv1.PhaseCompleteInteractive, nil, a2a.TaskStateCompleted, ""},
		{arv1.PhaseError, nil, a2a.TaskStateFailed, "boom"},
		{arv1.PhaseCancelled, nil, a2a.TaskStateCanceled, ""},
	} {
		st, text := StateOf(runIn(tc.phase, tc.w))
		if st != tc.state || text != tc.text {
			t.Errorf("%s %+v: got %s %q, want %s %q", tc.phase, tc.w, st, text, tc.state, tc.text)
		}
	}
}

func TestTaskOf(t *testing.T) {
	run := runIn(arv1.PhaseComplete, nil)
	run.Annotations = map[string]string{AnnotationContextID: "ctx-9"}
	run.Status.FinalOutput = &arv1.FinalOutputDescriptor{ObjectName: "r-1-output"}
	task := TaskOf(run, "the answer")
	if task.ID != "team/r-1" || task.ContextID != "ctx-9" || task.Status.State != a2a.TaskStateCompleted ||
		len(task.Artifacts) != 1 || task.Artifacts[0].Parts[0].(a2a.TextPart).Text != "the answer" {
		t.Errorf("task = %+v", task)
	}
	q := TaskOf(runIn(arv1.PhaseWaitingInput, &arv1.WaitingOn{Reason: arv1.WaitToolApproval, NeedsAPerson: true, Question: "Run rm?", Point: "p"}), "")
	if q.ContextID != "team/r-1" || q.Status.Message == nil || q.Status.Message.Role != a2a.MessageRoleAgent || len(q.Artifacts) != 0 || q.Metadata["point"] != "p" {
		t.Errorf("input-required task = %+v", q)
	}
}

func TestParseTaskID(t *testing.T) {
	if n, err := parseTaskID("team/r-1", "team"); n != "r-1" || err != nil {
		t.Errorf("got %q %v", n, err)
	}
	for _, id := range []a2a.TaskID{"r-1", "other/r-1", "team/", "/r"} {
		if _, err := parseTaskID(id, "team"); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Errorf("%q: %v, want task not found", id, err)
		}
	}
}

func TestAnswerSpec(t *testing.T) {
	msg := func(parts ...a2a.Part) *a2a.Message { return a2a.NewMessage(a2a.MessageRoleUser, parts...) }
	question := &arv1.WaitingOn{Reason: arv1.WaitUserPrompt, Question: "Which?"}
	approval := &arv1.WaitingOn{Reason: arv1.WaitToolApproval, Question: "Run rm?"}
	choice := &arv1.WaitingOn{Reason: arv1.WaitInteractionPoint, Question: "Pick [multiple_choice: a, b]"}
	review := &arv1.WaitingOn{Reason: arv1.WaitUserPrompt, Summary: "UserPrompt: review"}

	if s, err := answerSpec(question, msg(a2a.TextPart{Text: "staging"})); err != nil || *s.Text != "staging" || s.Decision != "" {
		t.Errorf("question: %+v %v", s, err)
	}
	if s, err := answerSpec(approval, msg(a2a.TextPart{Text: "Approve."})); err != nil || s.Decision != arv1.DecisionApprove {
		t.Errorf("approve: %+v %v", s, err)
	}
	if s, err := answerSpec(review, msg(a2a.TextPart{Text: "deny too risky"})); err != nil || s.Decision != arv1.DecisionDeny || *s.Text != "too risky" {
		t.Errorf("deny: %+v %v", s, err)
	}
	if s, err := answerSpec(choice, msg(a2a.TextPart{Text: "b"})); err != nil || s.Decision != arv1.DecisionApprove || *s.Text != "b" {
		t.Errorf("choice: %+v %v", s, err)
	}
	if _, err := answerSpec(approval, msg(a2a.TextPart{Text: "maybe"})); !errors.Is(err, a2a.ErrInvalidParams) {
		t.Errorf("unclear approval: %v", err)
	}
	if _, err := answerSpec(&arv1.WaitingOn{Reason: arv1.WaitNeedsReconciliation}, msg(a2a.TextPart{Text: "done"})); !errors.Is(err, a2a.ErrInvalidParams) {
		t.Errorf("a dangling write by text: %v", err)
	}
	s, err := answerSpec(&arv1.WaitingOn{Reason: arv1.WaitNeedsReconciliation},
		msg(a2a.DataPart{Data: map[string]any{"decision": "Done", "text": "ok", "input": map[string]any{"id": 7}}}))
	if err != nil || s.Decision != arv1.DecisionDone || *s.Text != "ok" || *s.Input != `{"id":7}` {
		t.Errorf("data answer: %+v %v", s, err)
	}
	if _, err := answerSpec(question, msg()); !errors.Is(err, a2a.ErrInvalidParams) {
		t.Errorf("empty answer: %v", err)
	}
}
