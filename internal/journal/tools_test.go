package journal

import (
	"slices"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
)

// toolStage: one stage whose answer makes two tool calls and moves on to
// done; a read of a private server taints a public-clearance run.
const toolStage = `[agent]
name = "tools"
clearance = "public"

[mcp_servers.vault]
url = "http://vault/mcp"
level = "private"

[stages.work]
[stages.work.transitions.done]
condition = "llm_choice"

[stages.done]
allow_complete = true
`

func toolEntries(t0 time.Time) []Entry {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	return []Entry{
		{Seq: 0, Kind: ModelCallRequested, At: at(0), Stage: "work"},
		{Seq: 1, Kind: ModelCallCompleted, At: at(1), Call: 0, Stage: "work", Response: &Response{
			Text: "calling", Next: "done",
			Calls: []ToolCall{{Name: "read_secret", Arguments: `{"k":"a"}`}, {Name: "write_note", Arguments: `{}`}},
		}},
		{Seq: 2, Kind: ToolCallRequested, At: at(2), Index: 0, Tool: "read_secret", Effect: "read", IdempotencyKey: "k2"},
		{Seq: 3, Kind: ToolCallCompleted, At: at(3), Call: 2, Index: 0, Tool: "read_secret", Result: "s3cret-ish"},
		{Seq: 4, Kind: ToolCallDecided, At: at(4), Index: 1, Gate: GateTaint, Approved: true, By: "alice", Message: "a1"},
		{Seq: 5, Kind: ToolCallRequested, At: at(5), Index: 1, Tool: "write_note", Effect: "write", IdempotencyKey: "k5"},
		{Seq: 6, Kind: ToolCallRetried, At: at(6), Call: 5, Index: 1, By: "bob", Message: "a2"},
		{Seq: 7, Kind: ToolCallRequested, At: at(7), Index: 1, Tool: "write_note", Effect: "write", IdempotencyKey: "k7"},
		{Seq: 8, Kind: ToolCallCompleted, At: at(8), Call: 7, Index: 1, Tool: "write_note", Result: "ok"},
	}
}

// TestFoldToolCallsEveryPrefix walks the tool-call lifecycle one entry at a
// time: the answer's move waits for its calls, a private read taints, a
// retried write needs a new intent, and the calls' results join the turn.
func TestFoldToolCallsEveryPrefix(t *testing.T) {
	bp, err := blueprint.Parse(map[string]string{"agent.toml": toolStage})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	es := toolEntries(t0)
	type want struct {
		stage      string
		head       int // -1: no call due
		intent     int64
		tainted    bool
		approved   bool
		taintClear bool
		point      string
	}
	wants := []want{
		0: {stage: "work", head: -1},
		1: {stage: "work", head: -1},
		2: {stage: "work", head: 0, point: "call-1-0"},
		3: {stage: "work", head: 0, intent: 2, point: "call-1-0"},
		4: {stage: "work", head: 1, tainted: true, point: "call-1-1"},
		5: {stage: "work", head: 1, tainted: true, taintClear: true, point: "call-1-1"},
		6: {stage: "work", head: 1, tainted: true, taintClear: true, intent: 5, point: "call-1-1"},
		7: {stage: "work", head: 1, tainted: true, taintClear: true, point: "call-1-1"},
		8: {stage: "work", head: 1, tainted: true, taintClear: true, intent: 7, point: "call-1-1"},
		9: {stage: "done", head: -1, tainted: true},
	}
	for n, w := range wants {
		st := Fold(bp, es[:n])
		if st.Stage != w.stage || st.Tainted != w.tainted || st.CallPoint() != w.point {
			t.Errorf("prefix %d: stage %q tainted %v point %q, want %q %v %q", n, st.Stage, st.Tainted, st.CallPoint(), w.stage, w.tainted, w.point)
		}
		h := st.HeadCall()
		switch {
		case w.head < 0 && h != nil:
			t.Errorf("prefix %d: head call %+v, want none", n, *h)
			continue
		case w.head < 0:
			continue
		case h == nil || h.Index != w.head:
			t.Errorf("prefix %d: head %+v, want index %d", n, h, w.head)
			continue
		}
		var intent int64
		if h.Intent != nil {
			intent = h.Intent.Seq
		}
		if intent != w.intent || h.TaintCleared != w.taintClear || h.Approved != w.approved {
			t.Errorf("prefix %d: intent %d cleared %v approved %v, want %d %v %v", n, intent, h.TaintCleared, h.Approved, w.intent, w.taintClear, w.approved)
		}
		if p := st.PendingTool(); (p != nil) != (w.intent != 0) {
			t.Errorf("prefix %d: pending tool %+v", n, p)
		}
	}
	st := Fold(bp, es)
	if !st.Answers["a1"] || !st.Answers["a2"] {
		t.Errorf("answers %v, want a1 and a2 applied", st.Answers)
	}
	if len(st.Turns) != 0 {
		t.Errorf("turns carried into the next stage: %+v", st.Turns)
	}
	// One entry short of the end, the first call's result is not yet in a
	// turn (the answer is still settling); after it, the stage moved on.
	mid := Fold(bp, es[:4])
	if len(mid.Turns) != 1 || len(mid.Turns[0].Tools) != 0 {
		t.Errorf("turns mid-call = %+v", mid.Turns)
	}
}

// TestFoldDeniedCallAndAbandon: a denied call completes as an error the
// model is told of; abandoning keeps the dangling write on record.
func TestFoldDeniedCallAndAbandon(t *testing.T) {
	bp, err := blueprint.Parse(map[string]string{"agent.toml": toolStage})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	es := toolEntries(t0)[:2]
	denied := append(append([]Entry{}, es...),
		Entry{Seq: 2, Kind: ToolCallDecided, At: t0, Index: 0, Gate: GateApproval, By: "policy: permission deny", Auto: true})
	st := Fold(bp, denied)
	if h := st.HeadCall(); h == nil || h.Index != 1 || !st.Calls[0].IsError || st.Calls[0].Result != "The call was not made: denied by policy: permission deny." {
		t.Errorf("after a denial: calls %+v", st.Calls)
	}
	abandoned := append(append([]Entry{}, denied...),
		Entry{Seq: 3, Kind: ToolCallRequested, At: t0, Index: 1, Tool: "write_note", Effect: "write"},
		Entry{Seq: 4, Kind: RunAbandoned, At: t0, By: "carol", Message: "give-up"})
	st = Fold(bp, abandoned)
	if st.Outcome != OutcomeCancelled || st.PendingTool() == nil || st.PendingTool().Seq != 3 || !st.Answers["give-up"] {
		t.Errorf("abandoned: outcome %s pending %+v answers %v", st.Outcome, st.PendingTool(), st.Answers)
	}
	if want := "abandoned by carol with the outcome of write write_note (seq 3) unknown"; st.Message != want {
		t.Errorf("message %q, want %q", st.Message, want)
	}
}

// TestFoldQuestionAsked: a question is asked from its QuestionAsked entry
// until anything else happens; asking it again restarts its clock.
func TestFoldQuestionAsked(t *testing.T) {
	bp, err := blueprint.Parse(map[string]string{"agent.toml": toolStage})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	es := append(slices.Clone(toolEntries(t0)[:2]), Entry{Seq: 2, Kind: QuestionAsked, At: t0.Add(time.Hour), Point: "call-1-0-approval"})
	st := Fold(bp, es)
	if at, ok := st.AskedAt("call-1-0-approval"); !ok || !at.Equal(t0.Add(time.Hour)) {
		t.Errorf("AskedAt = %v %v, want the QuestionAsked time", at, ok)
	}
	if _, ok := st.AskedAt("call-1-0-taint"); ok {
		t.Error("another question of the same call counts as asked")
	}
	st = Fold(bp, append(es, Entry{Seq: 3, Kind: ToolCallDecided, At: t0.Add(2 * time.Hour), Index: 0, Gate: GateApproval, Approved: true}))
	if _, ok := st.AskedAt("call-1-0-approval"); ok {
		t.Error("an answered question still counts as asked")
	}
}

// TestAppliedAnswers: the answers a journal applied are the names its
// answer-applying entries carry, and nothing else's message.
func TestAppliedAnswers(t *testing.T) {
	got := AppliedAnswers([]Entry{
		{Kind: InteractionAnswered, Message: "a1"},
		{Kind: ToolCallDecided, Message: "a2"},
		{Kind: ToolCallRetried, Message: "a3"},
		{Kind: RunAbandoned, Message: "a4"},
		{Kind: ToolCallCompleted},
		{Kind: SpawnRefused, Message: "depth cap reached"},
	})
	if len(got) != 4 || !got["a1"] || !got["a2"] || !got["a3"] || !got["a4"] {
		t.Errorf("AppliedAnswers = %v, want a1..a4 only", got)
	}
}
