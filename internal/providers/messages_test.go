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
	if ts[0].feedback != "Message from the parent run: hurry" || ts[1].feedback != "Message from the parent run: stop" || ts[2].feedback != "Continue." {
		t.Errorf("feedback %q / %q / %q", ts[0].feedback, ts[1].feedback, ts[2].feedback)
	}
	if got := scriptFiller(req)("heard: {messages} for {task}"); got != "heard: use blue | hurry | stop for do it" {
		t.Errorf("scripted output %q", got)
	}
	if strings.Contains(userContent(Request{Task: "t"}), "parent") {
		t.Error("a request without messages mentions them")
	}
}
