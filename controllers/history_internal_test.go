package controllers

import (
	"reflect"
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// TestHistoryShowsTheMovesWithWhatCameOfThem: each of the model's calls to
// the operator's moves comes back with its result, after the run's own
// tools' calls; a refusal is the result of the call that asked for the
// move (feedback only when no call did), and an ignored call says why.
func TestHistoryShowsTheMovesWithWhatCameOfThem(t *testing.T) {
	mv := func(id, name, args, ignored string) journal.Move {
		return journal.Move{ToolCall: journal.ToolCall{ID: id, Name: name, Arguments: args}, Ignored: ignored}
	}
	res := func(id, name, args, result string, isErr bool) journal.ToolResult {
		return journal.ToolResult{ToolCall: journal.ToolCall{ID: id, Name: name, Arguments: args}, Result: result, IsError: isErr}
	}
	search := res("s1", "search", `{}`, "found", false)
	got := history([]journal.Turn{
		{Text: "moving", Tools: []journal.ToolResult{search}, Moves: []journal.Move{
			mv("m1", "transition", `{"target":"b"}`, ""),
			mv("m2", "transition", `{"target":"c"}`, "an earlier transition or complete call in the same answer decides"),
			mv("m3", "sleep", `{"seconds":30}`, ""),
		}},
		{Refused: `stage "b" requires output`, Moves: []journal.Move{mv("m4", "transition", `{"target":"b"}`, "")}},
		{Rejected: "not JSON", Moves: []journal.Move{mv("m5", "complete", `{"output":"x"}`, "")}},
		{Text: "done", Refused: "out of revisits"},
	})
	want := [][]journal.ToolResult{
		{search, res("m1", "transition", `{"target":"b"}`, `Transition to stage "b" accepted.`, false),
			res("m2", "transition", `{"target":"c"}`, "Not acted on: an earlier transition or complete call in the same answer decides.", true),
			res("m3", "sleep", `{"seconds":30}`, "Sleep of 30 seconds requested.", false)},
		{res("m4", "transition", `{"target":"b"}`, `That was refused: stage "b" requires output.`, true)},
		{res("m5", "complete", `{"output":"x"}`, "Your output was refused: not JSON. Submit corrected output with the complete tool.", true)},
		nil,
	}
	for i, w := range want {
		if !reflect.DeepEqual(got[i].Tools, w) {
			t.Errorf("turn %d: tools %+v, want %+v", i, got[i].Tools, w)
		}
	}
	for i := range 3 {
		if got[i].Feedback != "" {
			t.Errorf("turn %d: feedback %q beside its calls' results", i, got[i].Feedback)
		}
	}
	if got[3].Feedback != "That was refused: out of revisits." {
		t.Errorf("a refusal no call asked for is feedback, got %q", got[3].Feedback)
	}
}
