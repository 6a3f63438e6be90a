package journal

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
)

// agentStage: a parent stage whose second answer waits for a sub-agent
// twice; a second stage it moves to.
const agentStage = `[agent]
name = "parent"

[stages.work]
accepts_messages = true
[stages.work.transitions.done]
condition = "llm_choice"

[stages.done]
allow_complete = true
`

// TestFoldWaitDelivered: a wait_for_agent completion that names its child
// delivers it; a refusal (an error) delivers nothing; replaying the same
// entries gives the same set.
func TestFoldWaitDelivered(t *testing.T) {
	bp, err := blueprint.Parse(map[string]string{"agent.toml": agentStage})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	wait := ToolCall{Name: "wait_for_agent", Arguments: `{"name":"run-c0"}`}
	entries := []Entry{
		{Seq: 0, Kind: ModelCallRequested, At: t0, Stage: "work"},
		{Seq: 1, Kind: ModelCallCompleted, At: t0, Call: 0, Response: &Response{Calls: []ToolCall{wait, wait}}},
		{Seq: 2, Kind: ToolCallCompleted, At: t0, Index: 0, Tool: "wait_for_agent", Result: `{"phase":"Complete"}`, Child: "run-c0"},
		{Seq: 3, Kind: ToolCallCompleted, At: t0, Index: 1, Tool: "wait_for_agent", Result: "already delivered", IsError: true, Child: "run-c1"},
	}
	for n := range entries {
		st := Fold(bp, entries[:n+1])
		want := map[string]bool(nil)
		if n >= 2 {
			want = map[string]bool{"run-c0": true}
		}
		if !reflect.DeepEqual(st.Delivered, want) {
			t.Errorf("after %d entries: delivered %v, want %v", n+1, st.Delivered, want)
		}
	}
	st := Fold(bp, entries)
	if st.HeadCall() != nil || len(st.Turns) != 1 || len(st.Turns[0].Tools) != 2 {
		t.Errorf("calls not settled into the turn: %+v", st.Turns)
	}
}

// TestFoldMessages: a message taken in before the stage's first answer is
// in the inbox, one after it rides on that answer's turn, a repeated id is
// taken in once, and moving to another stage empties the inbox.
func TestFoldMessages(t *testing.T) {
	bp, err := blueprint.Parse(map[string]string{"agent.toml": agentStage})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	entries := []Entry{
		{Seq: 0, Kind: MessageReceived, At: t0, MessageID: "call-3-0", Text: "first"},
		{Seq: 1, Kind: MessageReceived, At: t0, MessageID: "call-3-0", Text: "first"},
		{Seq: 2, Kind: ModelCallRequested, At: t0, Stage: "work"},
		{Seq: 3, Kind: ModelCallCompleted, At: t0, Call: 2, Response: &Response{Text: "thinking"}},
		{Seq: 4, Kind: MessageReceived, At: t0, MessageID: "call-5-0", Text: "second"},
	}
	st := Fold(bp, entries)
	if !reflect.DeepEqual(st.Inbox, []string{"first"}) {
		t.Errorf("inbox %v", st.Inbox)
	}
	if len(st.Turns) != 1 || !reflect.DeepEqual(st.Turns[0].Messages, []string{"second"}) {
		t.Errorf("turns %+v", st.Turns)
	}
	if !st.Received["call-3-0"] || !st.Received["call-5-0"] || len(st.Received) != 2 {
		t.Errorf("received %v", st.Received)
	}
	moved := append(slices.Clone(entries[:5]),
		Entry{Seq: 5, Kind: ModelCallRequested, At: t0, Stage: "work"},
		Entry{Seq: 6, Kind: ModelCallCompleted, At: t0, Call: 5, Response: &Response{Next: "done"}},
	)
	st = Fold(bp, moved)
	if st.Stage != "done" || st.Inbox != nil || st.Turns != nil || !st.Received["call-3-0"] {
		t.Errorf("after the move: stage %s inbox %v turns %v received %v", st.Stage, st.Inbox, st.Turns, st.Received)
	}
}

// TestFoldSpawnAlongside: an answer that spawns and stays in its stage
// (iterating, or sleeping) registers its sub-agents, so a later turn can
// wait for them.
func TestFoldSpawnAlongside(t *testing.T) {
	bp, err := blueprint.Parse(map[string]string{"agent.toml": agentStage})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	sp := []Spawn{{Agent: "helper", Task: "a"}}
	st := Fold(bp, []Entry{
		{Seq: 0, Kind: ModelCallRequested, At: t0, Stage: "work"},
		{Seq: 1, Kind: ModelCallCompleted, At: t0, Call: 0, Response: &Response{Spawns: sp}},
		{Seq: 2, Kind: ModelCallRequested, At: t0, Stage: "work"},
		{Seq: 3, Kind: ModelCallCompleted, At: t0, Call: 2, Response: &Response{Spawns: sp, SleepSeconds: 5}},
	})
	if st.Stage != "work" || len(st.Subagents) != 2 || st.SleepUntil == nil {
		t.Errorf("stage %s subagents %v sleep %v", st.Stage, st.Subagents, st.SleepUntil)
	}
}

// TestFoldDrainedResults: a sub-agent result the drain delivered before
// the stage's first answer is shown with the task, one after it rides on
// that answer's turn; each marks its sub-agent delivered; a second entry
// for the same sub-agent, or one for a sub-agent wait_for_agent already
// delivered, shows nothing more; a move to another stage empties them.
func TestFoldDrainedResults(t *testing.T) {
	bp, err := blueprint.Parse(map[string]string{"agent.toml": agentStage})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	wait := ToolCall{Name: "wait_for_agent", Arguments: `{"name":"run-c2"}`}
	entries := []Entry{
		{Seq: 0, Kind: SubagentResultDelivered, At: t0, Child: "run-c0", Text: "c0 result"},
		{Seq: 1, Kind: ModelCallRequested, At: t0, Stage: "work"},
		{Seq: 2, Kind: ModelCallCompleted, At: t0, Call: 1, Response: &Response{Calls: []ToolCall{wait}}},
		{Seq: 3, Kind: ToolCallCompleted, At: t0, Index: 0, Tool: "wait_for_agent", Result: `{"phase":"Complete"}`, Child: "run-c2"},
		{Seq: 4, Kind: SubagentResultDelivered, At: t0, Child: "run-c1", Text: "c1 result"},
		{Seq: 5, Kind: SubagentResultDelivered, At: t0, Child: "run-c1", Text: "c1 result"},
		{Seq: 6, Kind: SubagentResultDelivered, At: t0, Child: "run-c0", Text: "c0 result"},
		{Seq: 7, Kind: SubagentResultDelivered, At: t0, Child: "run-c2", Text: "c2 result"},
	}
	st := Fold(bp, entries)
	if !reflect.DeepEqual(st.Notices, []string{"c0 result"}) {
		t.Errorf("notices %v, want c0's result", st.Notices)
	}
	if len(st.Turns) != 1 || !reflect.DeepEqual(st.Turns[0].Notices, []string{"c1 result"}) {
		t.Errorf("turns %+v, want c1's result once after the answer", st.Turns)
	}
	if want := map[string]bool{"run-c0": true, "run-c1": true, "run-c2": true}; !reflect.DeepEqual(st.Delivered, want) {
		t.Errorf("delivered %v, want %v", st.Delivered, want)
	}
	moved := append(slices.Clone(entries),
		Entry{Seq: 8, Kind: ModelCallRequested, At: t0, Stage: "work"},
		Entry{Seq: 9, Kind: ModelCallCompleted, At: t0, Call: 8, Response: &Response{Next: "done"}},
	)
	st = Fold(bp, moved)
	if st.Stage != "done" || st.Notices != nil || st.Turns != nil || !st.Delivered["run-c0"] {
		t.Errorf("after the move: stage %s notices %v turns %v delivered %v", st.Stage, st.Notices, st.Turns, st.Delivered)
	}
}
