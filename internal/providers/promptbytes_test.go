package providers_test

import (
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
)

func TestPromptBytesCountsWhatARequestSends(t *testing.T) {
	cases := []struct {
		name string
		req  providers.Request
		want int64
	}{
		{name: "empty", want: 0},
		{name: "prompts", req: providers.Request{SystemPrompt: "abc", Task: "de", OutputInstructions: "f", TransitionPrompt: "gh", StageNote: "i", Directive: "jk"}, want: 11},
		{name: "history", req: providers.Request{History: []providers.Turn{{Assistant: "ab", Feedback: "c", Messages: []string{"de"}, Tools: []journal.ToolResult{{ToolCall: journal.ToolCall{Name: "t", Arguments: "{}"}, Result: "ok"}}}}}, want: 10},
		{name: "tools, outputs, messages and notices", req: providers.Request{Tools: []providers.ToolSpec{{Name: "ab", Description: "cd", InputSchema: []byte("{}")}}, ChildOutputs: []string{"xyz"}, Messages: []string{"m"}, Notices: []string{"nn"}}, want: 12},
		{name: "choices and document", req: providers.Request{Choices: []journal.PointChoice{{Point: "p", Text: "tt"}}, Document: &providers.Document{Name: "n", Content: "cc"}}, want: 6},
		{name: "not sent: key, model, script", req: providers.Request{Model: "gpt", Purpose: "title", RunUID: "uid"}, want: 0},
	}
	for _, c := range cases {
		if got := c.req.PromptBytes(); got != c.want {
			t.Errorf("%s: PromptBytes = %d, want %d", c.name, got, c.want)
		}
	}
}
