package runstate

import (
	"strings"
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

const ticketSchema = `{"type":"object","properties":{"title":{"type":"string"},"priority":{"enum":["p1","p2","p3"]}},"required":["title"],"additionalProperties":false}`

// TestApprovalAnswers: an answer to a tool call's approval may carry a
// reason and, approving, edited arguments; these are checked against the
// tool's input schema and the point, and a rule requiring a reason refuses
// an answer without one.
func TestApprovalAnswers(t *testing.T) {
	s := func(v string) *string { return &v }
	ticket := func() Facts {
		f := toolFacts(t, "create_ticket", `{"title":"drop prod"}`, blueprint.EffectWrite)
		f.Tool.InputSchema = ticketSchema
		return f
	}
	needsReason := func() Facts {
		f := ticket()
		f.State.HeadCall().ReasonRequired = `ClusterAgentToolPolicy "tickets" rule "p0"`
		return f
	}
	taint := toolFacts(t, "create_ticket", `{}`, blueprint.EffectWrite)
	taint.State.Tainted = true
	cases := []struct {
		name    string
		f       Facts
		a       AnswerSpec
		check   func(*Answer) bool
		wantErr string
	}{
		{"edited args are kept compact", ticket(), AnswerSpec{Point: "call-1-0-approval", Decision: "Approve", Args: s(`{ "title": "ask the DBA", "priority": "p3" }`)},
			func(a *Answer) bool { return a.Approved && a.Args == `{"priority":"p3","title":"ask the DBA"}` }, ""},
		{"args failing the schema", ticket(), AnswerSpec{Point: "call-1-0-approval", Decision: "Approve", Args: s(`{"title":"x","priority":"p0"}`)},
			nil, "args does not match the schema: jsonschema validation failed with 'https://agentrun.dev/schemas/tools/create_ticket/input.json#'"},
		{"args missing a required key", ticket(), AnswerSpec{Point: "call-1-0-approval", Decision: "Approve", Args: s(`{}`)},
			nil, "title"},
		{"args that are not an object", ticket(), AnswerSpec{Point: "call-1-0-approval", Decision: "Approve", Args: s(`["x"]`)},
			nil, "args must be a JSON object"},
		{"args that are too big", ticket(), AnswerSpec{Point: "call-1-0-approval", Decision: "Approve", Args: s(`{"title":"` + strings.Repeat("x", 17000) + `"}`)},
			nil, "at most 16384"},
		{"args on a denial", ticket(), AnswerSpec{Point: "call-1-0-approval", Decision: "Deny", Args: s(`{"title":"x"}`)},
			nil, "a denied call is not made"},
		{"args for an earlier call", ticket(), AnswerSpec{Point: "call-0-0-approval", Decision: "Approve", Args: s(`{"title":"x"}`)},
			nil, `the run waits on point "call-1-0-approval", not on point "call-0-0-approval"`},
		{"args at a taint gate", asked(taint, "call-1-0-taint"), AnswerSpec{Point: "call-1-0-taint", Decision: "Approve", Args: s(`{"title":"x"}`)},
			nil, "answer a tool call's approval (ToolApproval) only"},
		{"a denial's reason is what the model is told", ticket(), AnswerSpec{Point: "call-1-0-approval", Decision: "Deny", Reason: "use the change process"},
			func(a *Answer) bool {
				return !a.Approved && a.Input == "use the change process" && a.Reason == "use the change process"
			}, ""},
		{"an approval keeps its reason", ticket(), AnswerSpec{Point: "call-1-0-approval", Decision: "Approve", Reason: "checked with ops"},
			func(a *Answer) bool { return a.Approved && a.Reason == "checked with ops" && a.Args == "" }, ""},
		{"a required reason missing", needsReason(), AnswerSpec{Point: "call-1-0-approval", Decision: "Approve"},
			nil, `a reason is required to approve or deny this call (ClusterAgentToolPolicy "tickets" rule "p0")`},
		{"a required reason that is blank", needsReason(), AnswerSpec{Point: "call-1-0-approval", Decision: "Deny", Text: s("no"), Reason: " "},
			nil, "a reason is required"},
		{"a required reason given", needsReason(), AnswerSpec{Point: "call-1-0-approval", Decision: "Approve", Reason: "INC-42"},
			func(a *Answer) bool { return a.Approved && a.Reason == "INC-42" }, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := CheckAnswer(&c.f.State, AskedPoint(c.f), c.f.Tool, c.a)
			switch {
			case c.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Errorf("err = %v, want one containing %q", err, c.wantErr)
				}
			case err != nil:
				t.Errorf("err = %v", err)
			case !c.check(got):
				t.Errorf("answer = %+v", got)
			}
		})
	}
}

// TestEditedArgsAreTheCallMade: Decide journals an approval with edited
// arguments; folded, they replace the call's arguments before it is made
// (the intent and anything gating it see them), and the model's history
// shows the call with them.
func TestEditedArgsAreTheCallMade(t *testing.T) {
	f := toolFacts(t, "create_ticket", `{"title":"drop prod"}`, blueprint.EffectWrite)
	f.Answer = &Answer{Name: "edit", By: "alice", Approved: true, Reason: "safer", Args: `{"title":"ask the DBA"}`}
	a := Decide(f)
	if a.Kind != ActToolDecide || a.Decision.Args != `{"title":"ask the DBA"}` || a.Decision.Reason != "safer" || a.Decision.By != "alice" {
		t.Fatalf("action = %+v (decision %+v), want alice's approval with the edited args", a, a.Decision)
	}
	f.State.Apply(f.Blueprint, journal.Entry{Seq: 2, Kind: journal.ToolCallDecided, Index: 0, Gate: journal.GateApproval, Approved: true,
		By: "alice", Message: "edit", Input: a.Decision.Args, Result: a.Decision.Reason})
	h := f.State.HeadCall()
	if h == nil || h.Arguments != `{"title":"ask the DBA"}` || h.EditedBy != "alice" || !h.Approved {
		t.Fatalf("head call = %+v, want the edited arguments, approved", h)
	}
	f.Answer = nil
	if next := Decide(f); next.Kind != ActToolCall {
		t.Fatalf("after the approval: %+v, want the call made", next)
	}
	f.State.Apply(f.Blueprint, journal.Entry{Seq: 3, Kind: journal.ToolCallRequested, Index: 0, Tool: "create_ticket", Input: h.Arguments, Effect: blueprint.EffectWrite})
	f.State.Apply(f.Blueprint, journal.Entry{Seq: 4, Kind: journal.ToolCallCompleted, Index: 0, Call: 3, Result: "ticket 1"})
	turns := f.State.Turns
	if len(turns) == 0 || len(turns[len(turns)-1].Tools) != 1 || turns[len(turns)-1].Tools[0].Arguments != `{"title":"ask the DBA"}` {
		t.Fatalf("turns = %+v, want the call shown to the model with the edited arguments", turns)
	}
}

// TestTaintGateIgnoresArgs: a taint gate's approval never edits the call,
// even if a decision carried arguments.
func TestTaintGateIgnoresArgs(t *testing.T) {
	f := toolFacts(t, "create_ticket", `{"title":"a"}`, blueprint.EffectWrite)
	f.State.Tainted = true
	f.Answer = &Answer{Name: "t", By: "alice", Approved: true, Args: `{"title":"b"}`}
	if a := Decide(f); a.Kind != ActToolDecide || a.Decision.Gate != journal.GateTaint || a.Decision.Args != "" {
		t.Fatalf("action = %+v (decision %+v), want a taint clearance without args", a, a.Decision)
	}
}
