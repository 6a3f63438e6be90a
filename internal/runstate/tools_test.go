package runstate

import (
	"strings"
	"testing"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/builtin"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

const toolBlueprint = `[agent]
name = "t"
clearance = "public"
[agent.tool_permissions]
rm = "deny"
[mcp_servers.s]
url = "http://s/mcp"
[yolo_profiles.ci]
approve = ["upsert"]
[limits]
interaction_timeout_secs = 60
[stages.a]
allow_complete = true
`

// toolFacts folds a model answer that calls tool with args, plus extra
// entries, into the facts Decide sees for it.
func toolFacts(t *testing.T, tool, args string, effect string, extra ...journal.Entry) Facts {
	t.Helper()
	bp, err := blueprint.Parse(map[string]string{"agent.toml": toolBlueprint})
	if err != nil {
		t.Fatal(err)
	}
	es := append([]journal.Entry{
		{Seq: 0, Kind: journal.ModelCallRequested, At: now},
		{Seq: 1, Kind: journal.ModelCallCompleted, Call: 0, At: now, Response: &journal.Response{Calls: []journal.ToolCall{{Name: tool, Arguments: args}}}},
	}, extra...)
	f := Facts{Spawned: true, Blueprint: bp, State: journal.Fold(bp, es), Now: now.Add(time.Second)}
	if !strings.HasPrefix(tool, "ask_") && tool != builtin.WaitForSignal && tool != builtin.PresentForReview {
		f.Tool = &ToolFact{Known: tool != "nope", Effect: effect, Server: "s"}
	}
	return f
}

// asked marks point as shown to a person at now.
func asked(f Facts, point string) Facts {
	f.State.Apply(nil, journal.Entry{Kind: journal.QuestionAsked, Point: point, At: now})
	return f
}

func TestDecideToolCalls(t *testing.T) {
	taint := journal.Entry{Seq: 2, Kind: journal.ToolCallDecided, Index: 0, Gate: journal.GateApproval, Approved: true}
	cases := []struct {
		name  string
		facts Facts
		kind  ActionKind
		check func(Action) string
	}{
		{"a read is allowed and called", toolFacts(t, "get", `{}`, blueprint.EffectRead), ActToolCall, nil},
		{"an unknown tool fails closed", toolFacts(t, "nope", `{}`, blueprint.EffectRead), ActToolDecide, func(a Action) string {
			return want(!a.Decision.Approved && strings.Contains(a.Decision.By, "unknown tool"), "a denial naming the unknown tool")
		}},
		{"deny holds under bare yolo", with(toolFacts(t, "rm", `{}`, blueprint.EffectWrite), func(f *Facts) { f.Yolo = true }), ActToolDecide, func(a Action) string {
			return want(!a.Decision.Approved && a.Decision.By == "policy: permission deny", "the deny policy")
		}},
		{"a question is journaled as asked first", toolFacts(t, "put", `{"x":1}`, blueprint.EffectWrite), ActAsk, func(a Action) string {
			return want(a.Ask == "call-1-0-approval", "the approval's point")
		}},
		{"a write asks a person, showing the call", asked(toolFacts(t, "put", `{"x":1}`, blueprint.EffectWrite), "call-1-0-approval"), ActPark, func(a Action) string {
			q := a.Markers.Ask
			return want(a.Markers.HubRequest == arv1.WaitToolApproval && q != nil && q.Point == "call-1-0-approval" && q.Subject == "put" && strings.Contains(q.Prompt, `put (effect write, server s) with arguments {"x":1}`) && a.RetryAt != nil && a.RetryAt.Equal(now.Add(time.Minute)), "ToolApproval with the call and its expiry")
		}},
		{"bare yolo approves an ask", with(toolFacts(t, "put", `{}`, blueprint.EffectWrite), func(f *Facts) { f.Yolo = true }), ActToolDecide, func(a Action) string {
			return want(a.Decision.Approved && a.Decision.Auto && a.Decision.By == "policy: spec.yolo", "auto approval by yolo")
		}},
		{"a profile approves what it lists", with(toolFacts(t, "upsert", `{}`, blueprint.EffectIdempotent), func(f *Facts) { f.Yolo, f.YoloProfile = true, "ci" }), ActToolDecide, func(a Action) string {
			return want(a.Decision.Approved && a.Decision.By == "policy: yolo profile ci", "approval by the profile")
		}},
		{"a profile asks for what it does not list", with(toolFacts(t, "put", `{}`, blueprint.EffectWrite), func(f *Facts) { f.Yolo, f.YoloProfile = true, "ci" }), ActAsk, nil},
		{"an unknown profile is attended", with(toolFacts(t, "put", `{}`, blueprint.EffectWrite), func(f *Facts) { f.Yolo, f.YoloProfile = true, "gone" }), ActAsk, nil},
		{"a question not yet shown never expires", with(toolFacts(t, "put", `{}`, blueprint.EffectWrite), func(f *Facts) { f.Now = now.Add(time.Hour) }), ActAsk, nil},
		{"an expired approval is a denial", with(asked(toolFacts(t, "put", `{}`, blueprint.EffectWrite), "call-1-0-approval"), func(f *Facts) { f.Now = now.Add(time.Minute) }), ActToolDecide, func(a Action) string {
			return want(!a.Decision.Approved && a.Decision.Expired, "an expired denial")
		}},
		{"a person's approval is applied", with(toolFacts(t, "put", `{}`, blueprint.EffectWrite), func(f *Facts) { f.Answer = &Answer{Name: "a", By: "alice", Approved: true} }), ActToolDecide, func(a Action) string {
			return want(a.Decision.Approved && !a.Decision.Auto && a.Decision.By == "alice" && a.Decision.Answer == "a", "alice's approval")
		}},
		{"a setup problem comes before any gate", with(toolFacts(t, "put", `{}`, blueprint.EffectWrite), func(f *Facts) {
			f.Tool.Setup = &SetupBlock{Blocker: arv1.BlockerSecretMissing}
		}), ActPark, func(a Action) string { return want(a.Markers.Setup != nil, "NeedsSetup") }},
		{"a dangling write parks for a person", toolFacts(t, "put", `{}`, blueprint.EffectWrite, taint,
			journal.Entry{Seq: 3, Kind: journal.ToolCallRequested, Index: 0, Tool: "put", Effect: blueprint.EffectWrite}), ActPark, func(a Action) string {
			d := a.Markers.NeedsReconciliation
			return want(d != nil && d.Seq == 3 && d.Tool == "put", "NeedsReconciliation{3, put}")
		}},
		{"a dangling write is retried only on a person's word", with(toolFacts(t, "put", `{}`, blueprint.EffectWrite, taint,
			journal.Entry{Seq: 3, Kind: journal.ToolCallRequested, Index: 0, Tool: "put", Effect: blueprint.EffectWrite}), func(f *Facts) {
			f.Answer = &Answer{Name: "r", By: "bob", Decision: DecisionRetry}
		}), ActToolRetry, nil},
		{"a write this process journaled but never started is started", with(toolFacts(t, "put", `{}`, blueprint.EffectWrite, taint,
			journal.Entry{Seq: 3, Kind: journal.ToolCallRequested, Index: 0, Tool: "put", Effect: blueprint.EffectWrite}), func(f *Facts) { f.IntentUnstarted = true }), ActToolCall, func(a Action) string {
			return want(a.Reissue, "a start of the recorded intent")
		}},
		{"an interrupted read is re-executed", toolFacts(t, "get", `{}`, blueprint.EffectRead,
			journal.Entry{Seq: 2, Kind: journal.ToolCallRequested, Index: 0, Tool: "get", Effect: blueprint.EffectRead}), ActToolCall, func(a Action) string {
			return want(a.Reissue, "a re-issue of the recorded intent")
		}},
		{"an interrupted read of a tool no longer offered is not re-made", with(toolFacts(t, "get", `{}`, blueprint.EffectRead,
			journal.Entry{Seq: 2, Kind: journal.ToolCallRequested, Index: 0, Tool: "get", Effect: blueprint.EffectRead}), func(f *Facts) { f.Tool.Known = false }), ActToolComplete, func(a Action) string {
			return want(a.Completion.IsError && strings.Contains(a.Completion.Result, "any more"), "an error result")
		}},
		{"a call in flight is left alone", with(toolFacts(t, "get", `{}`, blueprint.EffectRead,
			journal.Entry{Seq: 2, Kind: journal.ToolCallRequested, Index: 0, Tool: "get", Effect: blueprint.EffectRead}), func(f *Facts) { f.InFlight = true }), ActNone, nil},
		{"ask_user parks on UserPrompt", asked(toolFacts(t, "ask_user", `{"question":"Which?","options":["a","b"]}`, ""), "call-1-0"), ActPark, func(a Action) string {
			return want(a.Markers.HubRequest == arv1.WaitUserPrompt && a.Markers.Ask.Prompt == `Which? (one of: ["a","b"])` &&
				a.Markers.Ask.InputSchema == `{"enum":["a","b"],"type":"string"}`, "the question with its choices and their schema")
		}},
		{"nobody answers ask_user under yolo", with(toolFacts(t, "ask_user", `{"question":"Which?"}`, ""), func(f *Facts) { f.Yolo = true }), ActToolComplete, func(a Action) string {
			return want(a.Completion.IsError, "an error result telling the model")
		}},
		{"an expired question says nobody answered", with(asked(toolFacts(t, "ask_user", `{"question":"Which?"}`, ""), "call-1-0"), func(f *Facts) { f.Now = now.Add(2 * time.Minute) }), ActToolComplete, func(a Action) string {
			return want(a.Completion.IsError && strings.Contains(a.Completion.Result, "Nobody answered"), "nobody answered")
		}},
		{"a signal never expires and needs no person", with(toolFacts(t, "wait_for_signal", `{"reason":"deploy done"}`, ""), func(f *Facts) { f.Now = now.Add(time.Hour) }), ActPark, func(a Action) string {
			return want(a.Markers.Signal == "deploy done", "Signal{deploy done}")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := Decide(c.facts)
			if a.Kind != c.kind {
				t.Fatalf("kind = %s, want %s (%s)", a.Kind, c.kind, showAction(a))
			}
			if c.check != nil {
				if msg := c.check(a); msg != "" {
					t.Errorf("%s: %s", msg, showAction(a))
				}
			}
		})
	}
}

func want(ok bool, what string) string {
	if ok {
		return ""
	}
	return "want " + what
}

// TestCheckAnswer: answers are checked against the question the run asks
// (AskedPoint), whose point names that one question.
func TestCheckAnswer(t *testing.T) {
	s := func(v string) *string { return &v }
	ask := func(args string) Facts { return toolFacts(t, "ask_user", args, "") }
	dangling := toolFacts(t, "put", `{}`, blueprint.EffectWrite,
		journal.Entry{Seq: 2, Kind: journal.ToolCallDecided, Index: 0, Gate: journal.GateApproval, Approved: true},
		journal.Entry{Seq: 3, Kind: journal.ToolCallRequested, Index: 0, Tool: "put", Effect: blueprint.EffectWrite})
	cases := []struct {
		name    string
		f       Facts
		a       AnswerSpec
		input   string
		wantErr string
	}{
		{"wrong point", ask(`{"question":"q"}`), AnswerSpec{Point: "x", Text: s("hi")}, "", `waits on point "call-1-0"`},
		{"free text", ask(`{"question":"q"}`), AnswerSpec{Point: "call-1-0", Text: s("hi")}, `"hi"`, ""},
		{"no value", ask(`{"question":"q"}`), AnswerSpec{Point: "call-1-0", Decision: "Approve"}, "", "text or input"},
		{"a choice offered", ask(`{"question":"q","style":"choice","options":["a","b"]}`), AnswerSpec{Point: "call-1-0", Text: s("b")}, `"b"`, ""},
		{"a choice not offered", ask(`{"question":"q","options":["a","b"]}`), AnswerSpec{Point: "call-1-0", Text: s("c")}, "", "must be one of"},
		{"confirm yes", ask(`{"question":"q","style":"confirm"}`), AnswerSpec{Point: "call-1-0", Text: s("Yes")}, "true", ""},
		{"confirm nonsense", ask(`{"question":"q","style":"confirm"}`), AnswerSpec{Point: "call-1-0", Text: s("perhaps")}, "", "yes or no"},
		{"null is an input", ask(`{"question":"q","input_schema":{"type":["null","object"]}}`), AnswerSpec{Point: "call-1-0", Input: s("null")}, "null", ""},
		{"null against a schema that refuses it", ask(`{"question":"q","input_schema":{"type":"object"}}`), AnswerSpec{Point: "call-1-0", Input: s("null")}, "", "schema"},
		{"input that is not JSON", ask(`{"question":"q"}`), AnswerSpec{Point: "call-1-0", Input: s("{")}, "", "not JSON"},
		{"a tool approval needs a decision", toolFacts(t, "put", `{}`, blueprint.EffectWrite), AnswerSpec{Point: "call-1-0-approval", Text: s("ok")}, "", "Approve, Deny"},
		{"a deny carries its reason", toolFacts(t, "put", `{}`, blueprint.EffectWrite), AnswerSpec{Point: "call-1-0-approval", Decision: "Deny", Text: s("not now")}, "not now", ""},
		{"an approval does not answer the dangling write of the same call", dangling, AnswerSpec{Point: "call-1-0-approval", Decision: "Approve"}, "", `waits on point "call-1-0-w3"`},
		{"Done needs the output", dangling, AnswerSpec{Point: "call-1-0-w3", Decision: DecisionDone}, "", "Done needs"},
		{"Retry names the intent", dangling, AnswerSpec{Point: "call-1-0-w3", Decision: DecisionRetry}, "", ""},
		{"a paused run still takes its answer", with(toolFacts(t, "put", `{}`, blueprint.EffectWrite), func(f *Facts) { f.Paused = true }),
			AnswerSpec{Point: "call-1-0-approval", Decision: "Approve"}, "", ""},
		{"a call in flight asks nothing", with(dangling, func(f *Facts) { f.InFlight = true }), AnswerSpec{Point: "call-1-0-w3", Decision: DecisionRetry}, "", "waits on no question"},
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
			case got.Input != c.input:
				t.Errorf("input = %q, want %q", got.Input, c.input)
			}
		})
	}
}

// TestRetryAnswerDoesNotCarryOver: a second Retry answer, given while the
// retried write runs, cannot retry the new intent when that one dangles too.
func TestRetryAnswerDoesNotCarryOver(t *testing.T) {
	twice := toolFacts(t, "put", `{}`, blueprint.EffectWrite,
		journal.Entry{Seq: 2, Kind: journal.ToolCallDecided, Index: 0, Gate: journal.GateApproval, Approved: true},
		journal.Entry{Seq: 3, Kind: journal.ToolCallRequested, Index: 0, Tool: "put", Effect: blueprint.EffectWrite},
		journal.Entry{Seq: 4, Kind: journal.ToolCallRetried, Call: 3, Index: 0, Message: "first"},
		journal.Entry{Seq: 5, Kind: journal.ToolCallRequested, Index: 0, Tool: "put", Effect: blueprint.EffectWrite})
	if _, err := CheckAnswer(&twice.State, AskedPoint(twice), twice.Tool, AnswerSpec{Name: "second", Point: "call-1-0-w3", Decision: DecisionRetry}); err == nil {
		t.Fatal("an answer about intent 3 was taken for intent 5")
	}
}

// TestExpiredCheckpoint: an unanswered checkpoint proceeds when its time is
// up, unless it may not be passed unattended, which ends the run in Error.
func TestExpiredCheckpoint(t *testing.T) {
	for _, c := range []struct {
		unattended string
		outcome    journal.Outcome
	}{{"auto_approve", journal.OutcomeComplete}, {"ask", journal.OutcomeError}} {
		bp, err := blueprint.Parse(map[string]string{"agent.toml": "[agent]\nname = \"g\"\n[limits]\ninteraction_timeout_secs = 60\n[stages.a]\n[[stages.a.interaction_points]]\nname = \"p1\"\nunattended = \"" + c.unattended + "\"\n"})
		if err != nil {
			t.Fatal(err)
		}
		es := []journal.Entry{
			{Seq: 0, Kind: journal.ModelCallRequested, At: now},
			{Seq: 1, Kind: journal.ModelCallCompleted, Call: 0, At: now, Response: &journal.Response{Text: "done"}},
		}
		f := Facts{Spawned: true, Blueprint: bp, State: journal.Fold(bp, es), Now: now.Add(59 * time.Second)}
		if a := Decide(f); a.Kind != ActAsk || a.Ask != "p1" {
			t.Fatalf("%s: %s, want the checkpoint journaled as asked first", c.unattended, showAction(a))
		}
		f = asked(f, "p1")
		if a := Decide(f); a.Kind != ActPark || a.RetryAt == nil || !a.RetryAt.Equal(now.Add(time.Minute)) {
			t.Fatalf("%s: before expiry %s, want a park until %v", c.unattended, showAction(a), now.Add(time.Minute))
		}
		f.Now = now.Add(time.Minute)
		a := Decide(f)
		if a.Kind != ActAnswerInteraction || a.Answer == nil || !a.Answer.Expired {
			t.Fatalf("%s: at expiry %s, want an expired answer", c.unattended, showAction(a))
		}
		st := journal.Fold(bp, append(es, journal.Entry{Seq: 2, Kind: journal.InteractionAnswered, At: f.Now, Point: "p1", Approved: true, Auto: true, Expired: true}))
		if st.Outcome != c.outcome {
			t.Errorf("%s: outcome %q (%s), want %q", c.unattended, st.Outcome, st.Message, c.outcome)
		}
	}
}

// TestPolicyHoldsAtCallTime: what a stage does not offer, a denied
// built-in, an unknown profile and a tainted idempotent call are all held
// when the call is made, not only when tools are offered.
func TestPolicyHoldsAtCallTime(t *testing.T) {
	bp, err := blueprint.Parse(map[string]string{"agent.toml": `[agent]
name = "p"
[agent.tool_permissions]
wait_for_signal = "deny"
[mcp_servers.s]
url = "http://s/mcp"
[stages.a]
available_tools = ["get", "wait_for_signal", "upsert"]
[[stages.a.interaction_points]]
name = "p1"
`})
	if err != nil {
		t.Fatal(err)
	}
	facts := func(tool, effect string, extra ...journal.Entry) Facts {
		es := append([]journal.Entry{
			{Seq: 0, Kind: journal.ModelCallRequested, At: now},
			{Seq: 1, Kind: journal.ModelCallCompleted, Call: 0, At: now, Response: &journal.Response{Calls: []journal.ToolCall{{Name: tool, Arguments: `{}`}}}},
		}, extra...)
		return Facts{Spawned: true, Blueprint: bp, State: journal.Fold(bp, es), Now: now, Tool: &ToolFact{Known: true, Effect: effect, Server: "s"}}
	}
	if a := Decide(facts("put", blueprint.EffectWrite)); a.Kind != ActToolDecide || a.Decision.Approved || !strings.Contains(a.Decision.By, "available_tools") {
		t.Errorf("a tool the stage does not offer: %s", showAction(a))
	}
	if a := Decide(facts("wait_for_signal", blueprint.EffectRead)); a.Kind != ActToolDecide || a.Decision.By != "policy: permission deny" {
		t.Errorf("a denied built-in: %s", showAction(a))
	}
	tainted := facts("upsert", blueprint.EffectIdempotent)
	tainted.State.Tainted, tainted.State.TaintSource = true, "get"
	if a := Decide(asked(tainted, "call-1-0-taint")); a.Kind != ActPark || !a.Markers.TaintGate || a.Markers.Ask.Point != "call-1-0-taint" {
		t.Errorf("an idempotent call after tainted input: %s", showAction(a))
	}
	ip := Facts{Spawned: true, Blueprint: bp, Now: now, Yolo: true, YoloProfile: "gone", State: journal.Fold(bp, []journal.Entry{
		{Seq: 0, Kind: journal.ModelCallRequested, At: now},
		{Seq: 1, Kind: journal.ModelCallCompleted, Call: 0, At: now, Response: &journal.Response{Text: "done"}},
	})}
	if a := Decide(ip); a.Kind != ActAsk {
		t.Errorf("a checkpoint under an unknown profile: %s, want a wait for a person", showAction(a))
	}
	if ip.YoloProfile = ""; Decide(ip).Kind != ActAnswerInteraction {
		t.Error("bare yolo no longer passes an auto_approve checkpoint")
	}
}
