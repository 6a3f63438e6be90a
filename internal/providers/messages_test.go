package providers

import (
	"strings"
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// TestParentMessagesReachTheModel: messages taken in before the stage's
// first answer follow the task in the user message; later ones are the
// feedback after the answer they followed, also after a tool turn; the
// scripted provider's {messages} sees them all, oldest first.
func TestParentMessagesReachTheModel(t *testing.T) {
	req := Request{
		Task: "do it", Messages: []string{"use blue"},
		History: []Turn{
			{Assistant: "thinking", Messages: []string{"hurry"}},
			{Assistant: "", Tools: []journal.ToolResult{{ToolCall: journal.ToolCall{ID: "c1", Name: "x"}, Result: "r"}}, Messages: []string{"stop"}},
			{Assistant: "plain"},
		},
	}
	if got := userContent(req); got != "do it\n\nMessage from the parent run: use blue" {
		t.Errorf("user content %q", got)
	}
	ts := turns(req)
	if ts[0].feedback != "Message from the parent run: hurry" || ts[1].feedback != "Message from the parent run: stop" || ts[2].feedback != NoMessage {
		t.Errorf("feedback %q / %q / %q", ts[0].feedback, ts[1].feedback, ts[2].feedback)
	}
	if got := scriptFiller(req)("heard: {messages} for {task}"); got != "heard: use blue | hurry | stop for do it" {
		t.Errorf("scripted output %q", got)
	}
	if strings.Contains(userContent(Request{Task: "t"}), "parent") {
		t.Error("a request without messages mentions them")
	}
}

// TestHistoryCallIDsAreUnique: calls whose provider numbered each answer's
// calls from 1, and calls without an ID, are each sent with an ID no other
// call of the history has, the same on every request.
func TestHistoryCallIDsAreUnique(t *testing.T) {
	call := func(id string) journal.ToolResult {
		return journal.ToolResult{ToolCall: journal.ToolCall{ID: id, Name: "transition"}, Result: "ok"}
	}
	req := Request{History: []Turn{
		{Tools: []journal.ToolResult{call("call_1"), call("")}},
		{Tools: []journal.ToolResult{call("call_1"), call("call_1_2")}},
	}}
	var ids []string
	for _, tt := range turns(req) {
		for _, r := range tt.tools {
			ids = append(ids, r.ID)
		}
	}
	if got := strings.Join(ids, " "); got != "call_1 call_1_2 call_1_3 call_1_2_2" {
		t.Errorf("ids %s", got)
	}
}
