package runstate

import (
	"strings"
	"testing"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

func policyDecision(action string) *journal.PolicyDecision {
	return &journal.PolicyDecision{Action: action, PolicyKind: "ClusterAgentToolPolicy", Policy: "p", Rule: "r", Message: "because"}
}

func policyEntry(action string) journal.Entry {
	return journal.Entry{Seq: 2, Kind: journal.ToolPolicyDecided, Index: 0, Tool: "upsert", Policy: policyDecision(action)}
}

// TestPolicyDecisions: a fresh decision is journaled before any gate; a
// journaled RequireApproval holds the call under bare yolo and a profile
// that lists the tool, until a person approves it on the policy's point;
// a journaled Deny settles the call with the policy's message; Audit
// leaves the call to the blueprint.
func TestPolicyDecisions(t *testing.T) {
	yolo := func(f *Facts) { f.Yolo = true }
	profile := func(f *Facts) { f.Yolo, f.YoloProfile = true, "ci" }
	point := "call-1-0" + PolicyPointSuffix
	approved := journal.Entry{Seq: 3, Kind: journal.ToolCallDecided, Index: 0, Gate: journal.GatePolicy, Approved: true, By: "alice"}
	cases := []struct {
		name  string
		facts Facts
		kind  ActionKind
		check func(Action) string
	}{
		{"a fresh decision is journaled first", with(toolFacts(t, "upsert", `{}`, blueprint.EffectIdempotent), func(f *Facts) {
			f.Yolo, f.Policy = true, policyDecision(journal.PolicyRequireApproval)
		}), ActToolPolicy, func(a Action) string {
			return want(a.Policy != nil && a.Policy.Action == journal.PolicyRequireApproval, "the decision to journal")
		}},
		{"RequireApproval is asked first under yolo", with(toolFacts(t, "upsert", `{}`, blueprint.EffectIdempotent, policyEntry(journal.PolicyRequireApproval)), yolo), ActAsk, func(a Action) string {
			return want(a.Ask == point, "the policy's point")
		}},
		{"RequireApproval holds under a profile listing the tool", with(asked(toolFacts(t, "upsert", `{"id":"1"}`, blueprint.EffectIdempotent, policyEntry(journal.PolicyRequireApproval)), point), profile), ActPark, func(a Action) string {
			q := a.Markers.Ask
			return want(a.Markers.HubRequest == arv1.WaitToolApproval && q != nil && q.Point == point && strings.Contains(q.Prompt, "ClusterAgentToolPolicy p, rule r") && strings.Contains(q.Prompt, `{"id":"1"}`), "ToolApproval on the policy's point naming the rule")
		}},
		{"a person's approval lets the call through", with(toolFacts(t, "upsert", `{}`, blueprint.EffectIdempotent, policyEntry(journal.PolicyRequireApproval), approved), yolo), ActToolCall, nil},
		{"a denial settles the call", toolFacts(t, "upsert", `{}`, blueprint.EffectIdempotent, policyEntry(journal.PolicyDeny)), ActDispatch, nil},
		{"Audit leaves the call to the blueprint", with(toolFacts(t, "upsert", `{}`, blueprint.EffectIdempotent, policyEntry(journal.PolicyAudit)), profile), ActToolDecide, func(a Action) string {
			return want(a.Decision.Approved && a.Decision.By == "policy: yolo profile ci", "the profile's approval")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := Decide(c.facts)
			if a.Kind != c.kind {
				t.Fatalf("kind = %s, want %s (%+v)", a.Kind, c.kind, a)
			}
			if c.check != nil {
				if msg := c.check(a); msg != "" {
					t.Error(msg)
				}
			}
		})
	}
}

// TestPolicyDenialIsTheModelsResult: the folded denial tells the model the
// policy, the rule and its message.
func TestPolicyDenialIsTheModelsResult(t *testing.T) {
	f := toolFacts(t, "upsert", `{}`, blueprint.EffectIdempotent, policyEntry(journal.PolicyDeny))
	turns := f.State.Turns
	if len(turns) == 0 || len(turns[len(turns)-1].Tools) != 1 {
		t.Fatalf("turns = %+v, want the denied call's result on the last turn", turns)
	}
	r := turns[len(turns)-1].Tools[0]
	if !r.IsError || r.Result != "The call was not made: denied by ClusterAgentToolPolicy p, rule r. because" {
		t.Errorf("result = %+v", r)
	}
}

// failedClosed is a decision whose rule applied because its match could
// not be evaluated, with a message of its own.
func failedClosed(action string) journal.Entry {
	e := policyEntry(action)
	e.Policy.Matches = []journal.PolicyMatch{{PolicyKind: "ClusterAgentToolPolicy", Policy: "p", Rule: "r", Action: action, Error: "no such key: severity"}}
	return e
}

// TestFailedClosedShowsTheCause: a rule with a message that applied
// because its match could not be evaluated shows both: the model's result
// of a denial, and the question an approver reads, name the rule, its
// match's error and the message.
func TestFailedClosedShowsTheCause(t *testing.T) {
	const cause = "ClusterAgentToolPolicy p, rule r (its match could not be evaluated: no such key: severity; policies fail closed)"
	f := toolFacts(t, "upsert", `{}`, blueprint.EffectIdempotent, failedClosed(journal.PolicyDeny))
	turns := f.State.Turns
	if len(turns) == 0 || len(turns[len(turns)-1].Tools) != 1 || turns[len(turns)-1].Tools[0].Result != "The call was not made: denied by "+cause+". because" {
		t.Errorf("turns = %+v, want the model told the rule, the cause and the message", turns)
	}
	point := "call-1-0" + PolicyPointSuffix
	f = with(asked(toolFacts(t, "upsert", `{}`, blueprint.EffectIdempotent, failedClosed(journal.PolicyRequireApproval)), point), func(f *Facts) { f.Yolo = true })
	if a := Decide(f); a.Markers.Ask == nil || !strings.HasPrefix(a.Markers.Ask.Prompt, cause+" requires approval") || !strings.HasSuffix(a.Markers.Ask.Prompt, ": because") {
		t.Errorf("the approver is asked %+v, want the rule, the cause and the message", a.Markers.Ask)
	}
}

// TestEditAtThePolicyPoint: a person answering a policy's RequireApproval
// with edited arguments has the policies decide again on those arguments.
// A RequireApproval again is answered by that same approval (the person saw
// the edited call); a Deny on the edited arguments still denies it, so an
// edit never escapes a Deny.
func TestEditAtThePolicyPoint(t *testing.T) {
	point := "call-1-0" + PolicyPointSuffix
	for _, c := range []struct {
		name   string
		again  string
		kind   ActionKind
		result string
	}{
		{"a RequireApproval again is the approval given", journal.PolicyRequireApproval, ActToolCall, ""},
		{"a Deny on the edited arguments denies", journal.PolicyDeny, ActDispatch, "The call was not made: denied by ClusterAgentToolPolicy p, rule r. because"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := asked(toolFacts(t, "upsert", `{"id":"1"}`, blueprint.EffectIdempotent, policyEntry(journal.PolicyRequireApproval)), point)
			f.Yolo = true
			f.Answer = &Answer{Name: "edit", By: "alice", Approved: true, Decision: "Approve", Reason: "not that one", Args: `{"id":"2"}`}
			a := Decide(f)
			if a.Kind != ActToolDecide || a.Decision.Gate != journal.GatePolicy || a.Decision.Args != `{"id":"2"}` || a.Decision.By != "alice" {
				t.Fatalf("answer at %s: %+v (decision %+v), want alice's policy approval with the edited args", point, a, a.Decision)
			}
			f.State.Apply(f.Blueprint, journal.Entry{Seq: 3, Kind: journal.ToolCallDecided, Index: 0, Gate: journal.GatePolicy, Approved: true,
				By: "alice", Message: "edit", Input: a.Decision.Args, Result: a.Decision.Reason})
			f.Answer = nil
			h := f.State.HeadCall()
			if h == nil || h.Arguments != `{"id":"2"}` || h.EditedBy != "alice" || h.Policy != nil || !h.PolicyApproved {
				t.Fatalf("head call = %+v, want the edited arguments, approved at the policy's point, the policies' decision to make again", h)
			}
			f.Policy = policyDecision(c.again)
			if a := Decide(f); a.Kind != ActToolPolicy || a.Policy == nil || a.Policy.Action != c.again {
				t.Fatalf("after the edit: %+v, want the policies' decision on the edited arguments journaled", a)
			}
			again := policyEntry(c.again)
			again.Seq = 4
			f.State.Apply(f.Blueprint, again)
			a = Decide(f)
			if a.Kind != c.kind {
				t.Fatalf("after the policies decided %s on the edited arguments: %s (%+v), want %s", c.again, a.Kind, a, c.kind)
			}
			if c.result == "" {
				return
			}
			turns := f.State.Turns
			if len(turns) == 0 || len(turns[len(turns)-1].Tools) != 1 || turns[len(turns)-1].Tools[0].Result != c.result {
				t.Fatalf("turns = %+v, want the model told %q", turns, c.result)
			}
		})
	}
}
