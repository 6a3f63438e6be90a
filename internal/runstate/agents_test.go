package runstate

import (
	"slices"
	"strings"
	"testing"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/builtin"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

const agentBlueprint = `[agent]
name = "p"
[stages.a]
allow_complete = true
accepts_messages = true
[stages.quiet]
allow_complete = true
allow_blocking_tools = false
[stages.needs]
allow_complete = true
required_tools = ["ask_user"]
`

// agentFacts is a run "run" in stage whose model called tool with args,
// with children and extra entries folded in.
func agentFacts(t *testing.T, stage, tool, args string, children []ChildFact, extra ...journal.Entry) Facts {
	t.Helper()
	bp, err := blueprint.Parse(map[string]string{"agent.toml": agentBlueprint})
	if err != nil {
		t.Fatal(err)
	}
	bp, _ = withEntry(bp, stage)
	es := append([]journal.Entry{
		{Seq: 0, Kind: journal.ModelCallRequested, At: now},
		{Seq: 1, Kind: journal.ModelCallCompleted, Call: 0, At: now, Response: &journal.Response{Calls: []journal.ToolCall{
			{Name: tool, Arguments: args}, {Name: tool, Arguments: args},
		}}},
	}, extra...)
	return Facts{Spawned: true, Blueprint: bp, State: journal.Fold(bp, es), Now: now.Add(time.Second), RunName: "run", Children: children,
		Tool: &ToolFact{Known: true, Effect: blueprint.EffectRead}}
}

func withEntry(bp *blueprint.Blueprint, stage string) (*blueprint.Blueprint, bool) {
	c := *bp
	c.Agent.EntryStage = stage
	return &c, true
}

func TestDecideAgentTools(t *testing.T) {
	running := []ChildFact{{Name: "run-c0", Kind: ChildSubagent, Phase: arv1.PhaseRunning}, {Name: "other-c0", Kind: ChildSubagent, Phase: arv1.PhaseRunning}}
	done := []ChildFact{{Name: "run-c0", Kind: ChildSubagent, Phase: arv1.PhaseComplete}}
	delivered := journal.Entry{Seq: 2, Kind: journal.ToolCallCompleted, Index: 0, Tool: builtin.WaitForAgent, Result: "{}", Child: "run-c0"}
	cases := []struct {
		name  string
		facts Facts
		kind  ActionKind
		check func(Action) string
	}{
		{"a wait on a running child parks on Children(1) naming it", agentFacts(t, "a", builtin.WaitForAgent, `{"name":"run-c0"}`, running), ActPark, func(a Action) string {
			m := a.Markers
			return want(m.ChildrenOutstanding != nil && *m.ChildrenOutstanding == 1 && m.AwaitedChild == "run-c0", "Children(1) on run-c0")
		}},
		{"a short name resolves among the run's children", agentFacts(t, "a", builtin.WaitForAgent, `{"name":"c0"}`, done), ActToolCall, nil},
		{"a wait on a final child delivers", agentFacts(t, "a", builtin.WaitForAgent, `{"name":"run-c0"}`, done), ActToolCall, nil},
		{"a second wait says it was delivered", agentFacts(t, "a", builtin.WaitForAgent, `{"name":"run-c0"}`, done, delivered), ActToolComplete, func(a Action) string {
			return want(a.Completion.IsError && strings.Contains(a.Completion.Result, "already delivered"), "already delivered")
		}},
		{"a name that is not a child is refused, listing the children", agentFacts(t, "a", builtin.KillAgent, `{"name":"stranger"}`, running), ActToolComplete, func(a Action) string {
			c := a.Completion
			return want(c.IsError && strings.Contains(c.Result, `"stranger" is not a sub-agent of this run`) && strings.Contains(c.Result, "other-c0, run-c0"), "a scoped refusal")
		}},
		{"no name is refused", agentFacts(t, "a", builtin.SendToAgent, `{}`, nil), ActToolComplete, func(a Action) string {
			return want(a.Completion.IsError && strings.Contains(a.Completion.Result, "no sub-agents"), "needs a name")
		}},
		{"an oversized message is refused", agentFacts(t, "a", builtin.SendToAgent, `{"name":"c0","message":"`+strings.Repeat("x", MaxMessageBytes+1)+`"}`, running), ActToolComplete, func(a Action) string {
			return want(a.Completion.IsError && strings.Contains(a.Completion.Result, "at most"), "a size refusal")
		}},
		{"send and kill to a child are carried out", agentFacts(t, "a", builtin.SendToAgent, `{"name":"c0","message":"hi"}`, running), ActToolCall, nil},
		{"check_agent is scoped too", agentFacts(t, "a", builtin.CheckAgent, `{"name":"x-c0"}`, running), ActToolComplete, nil},
		{"allow_blocking_tools = false refuses ask_user", agentFacts(t, "quiet", builtin.AskUser, `{"question":"q"}`, nil), ActToolDecide, func(a Action) string {
			return want(!a.Decision.Approved && strings.Contains(a.Decision.By, "allow_blocking_tools = false"), "a policy denial")
		}},
		{"a required question waits for a person under yolo", with(agentFacts(t, "needs", builtin.AskUser, `{"question":"q"}`, nil), func(f *Facts) { f.Yolo = true }), ActAsk, nil},
		{"an unrequired question under yolo is answered by policy", with(agentFacts(t, "a", builtin.AskUser, `{"question":"q"}`, nil), func(f *Facts) { f.Yolo = true }), ActToolComplete, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := Decide(c.facts)
			if a.Kind != c.kind {
				t.Fatalf("kind %s, want %s (%+v)", a.Kind, c.kind, a)
			}
			if c.check != nil {
				if msg := c.check(a); msg != "" {
					t.Error(msg)
				}
			}
		})
	}
}

// TestDecideMessages: a message is taken in only where the run would call
// its model, in a stage that accepts messages, once per id, oldest first.
func TestDecideMessages(t *testing.T) {
	bp, err := blueprint.Parse(map[string]string{"agent.toml": agentBlueprint})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{ID: "call-3-0", Text: "one"}, {ID: "call-5-0", Text: "two"}}
	f := Facts{Spawned: true, Blueprint: bp, State: journal.Fold(bp, nil), Now: now, Messages: msgs}
	a := Decide(f)
	if a.Kind != ActReceiveMessage || a.Received.ID != "call-3-0" {
		t.Fatalf("first: %+v", a)
	}
	f.State.Apply(bp, journal.Entry{Seq: 0, Kind: journal.MessageReceived, MessageID: "call-3-0", Text: "one"})
	if a = Decide(f); a.Kind != ActReceiveMessage || a.Received.ID != "call-5-0" {
		t.Fatalf("second: %+v", a)
	}
	f.State.Apply(bp, journal.Entry{Seq: 1, Kind: journal.MessageReceived, MessageID: "call-5-0", Text: "two"})
	if a = Decide(f); a.Kind != ActDispatch {
		t.Fatalf("after both: %+v", a)
	}
	quiet, _ := withEntry(bp, "quiet")
	g := Facts{Spawned: true, Blueprint: quiet, State: journal.Fold(quiet, nil), Now: now, Messages: msgs}
	if a = Decide(g); a.Kind != ActDispatch {
		t.Errorf("a stage without accepts_messages took a message in: %+v", a)
	}
	inFlight := f
	inFlight.Messages = append(slices.Clone(msgs), Message{ID: "call-9-0", Text: "three"})
	inFlight.State.Apply(bp, journal.Entry{Seq: 2, Kind: journal.ModelCallRequested, Stage: "a"})
	if a = Decide(inFlight); a.Kind == ActReceiveMessage {
		t.Errorf("a message was taken in with a call pending: %+v", a)
	}
}

// TestWaitingOnAwaitedChild: a wait_for_agent reads as a healthy
// Children(1) wait whose summary names the sub-agent.
func TestWaitingOnAwaitedChild(t *testing.T) {
	one := int32(1)
	w := DeriveWaitingOn(Markers{ChildrenOutstanding: &one, AwaitedChild: "run-c0"}, nil, now)
	if w.Reason != arv1.WaitChildren || w.NeedsAPerson || *w.Outstanding != 1 || w.Summary != "Children(1): wait_for_agent run-c0" {
		t.Errorf("got %+v", w)
	}
}

// TestDecideDrain: before a model call, the sub-agents that finished and
// were not delivered are drained, in spawn order, whatever their outcome;
// running ones, fan-out workers and delivered ones are not, and nothing
// is drained while a tool call is unsettled or a call is pending.
func TestDecideDrain(t *testing.T) {
	bp, err := blueprint.Parse(map[string]string{"agent.toml": agentBlueprint})
	if err != nil {
		t.Fatal(err)
	}
	children := []ChildFact{
		{Name: "run-c2", Kind: ChildSubagent, Index: 2, Phase: arv1.PhaseCancelled},
		{Name: "run-c0", Kind: ChildSubagent, Index: 0, Phase: arv1.PhaseComplete},
		{Name: "run-c1", Kind: ChildSubagent, Index: 1, Phase: arv1.PhaseRunning},
		{Name: "run-c3", Kind: ChildSubagent, Index: 3, Phase: arv1.PhaseError},
		{Name: "run-w0", Kind: ChildWorker, Index: 0, Phase: arv1.PhaseComplete},
	}
	f := Facts{Spawned: true, Blueprint: bp, State: journal.Fold(bp, nil), Now: now, Children: children}
	a := Decide(f)
	if a.Kind != ActDeliverResults || !slices.Equal(a.Deliver, []string{"run-c0", "run-c2", "run-c3"}) {
		t.Fatalf("first: %+v, want run-c0, run-c2, run-c3 drained", a)
	}
	for i, name := range a.Deliver {
		f.State.Apply(bp, journal.Entry{Seq: int64(i), Kind: journal.SubagentResultDelivered, Child: name, Text: name})
	}
	if a = Decide(f); a.Kind != ActDispatch {
		t.Fatalf("after the drain: %+v, want the call", a)
	}

	busy := agentFacts(t, "a", builtin.CheckAgent, `{"name":"run-c0"}`, children)
	if a = Decide(busy); a.Kind == ActDeliverResults {
		t.Errorf("drained with a tool call unsettled: %+v", a)
	}
	pending := Facts{Spawned: true, Blueprint: bp, State: journal.Fold(bp, []journal.Entry{{Seq: 0, Kind: journal.ModelCallRequested, Stage: "a"}}), Now: now, Children: children}
	if a = Decide(pending); a.Kind != ActDispatch || !a.Reissue {
		t.Errorf("with a call pending: %+v, want it issued again, nothing drained", a)
	}
}
