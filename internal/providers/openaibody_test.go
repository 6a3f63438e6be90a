package providers

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// sdkParams is the request as the OpenAI SDK's own types build it: the
// oracle openAIRequestBody's encoding is checked against.
func sdkParams(req Request) openai.ChatCompletionNewParams {
	var msgs []openai.ChatCompletionMessageParamUnion
	if req.SystemPrompt != "" {
		msgs = append(msgs, openai.SystemMessage(req.SystemPrompt))
	}
	msgs = append(msgs, openai.UserMessage(userContent(req)))
	for _, t := range turns(req) {
		if len(t.tools) == 0 {
			msgs = append(msgs, openai.AssistantMessage(t.assistant), openai.UserMessage(t.feedback))
			continue
		}
		var a openai.ChatCompletionAssistantMessageParam
		if strings.TrimSpace(t.assistant) != "" {
			a.Content.OfString = openai.String(t.assistant)
		}
		for _, r := range t.tools {
			a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
				ID:       r.ID,
				Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: r.Name, Arguments: r.Arguments},
			}})
		}
		msgs = append(msgs, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		for _, r := range t.tools {
			content := r.Result
			if r.IsError {
				content = "ERROR: " + content
			}
			msgs = append(msgs, openai.ToolMessage(content, r.ID))
		}
		if t.feedback != "" {
			msgs = append(msgs, openai.UserMessage(t.feedback))
		}
	}
	params := openai.ChatCompletionNewParams{Model: openai.ChatModel(req.Model), Messages: msgs}
	tools, _ := offeredTools(req)
	for _, t := range tools {
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
			Name: t.Name, Description: openai.String(t.Description), Parameters: openai.FunctionParameters(toolSchema(t)),
		}))
	}
	return params
}

// TestOpenAIBodyIsTheSDKs: the body encoded here is, as JSON, the one the
// SDK's own types encode, for requests with and without a system prompt,
// with text and tool-call history (an empty answer text, an error result,
// feedback after tools, calls without IDs), parent messages, and MCP
// tools whose schemas are objects, lack a type, are not objects, or are
// empty; twice each, so the cached tool encodings are checked too.
func TestOpenAIBodyIsTheSDKs(t *testing.T) {
	base := Request{Model: "gpt-x", SystemPrompt: "You plan. <b>&</b>", Task: "Plan the work.", OutputInstructions: "Return JSON."}
	noSystem := base
	noSystem.SystemPrompt = ""
	history := base
	history.History = []Turn{
		{Assistant: "A first plan.", Feedback: "Shorter, please."},
		{Assistant: "", Tools: []journal.ToolResult{
			{ToolCall: journal.ToolCall{ID: "c1", Name: "lookup", Arguments: `{"q":"pods"}`}, Result: "3 pods"},
			{ToolCall: journal.ToolCall{Name: "fetch", Arguments: `{}`}, Result: "timed out", IsError: true},
		}},
		{Assistant: "Checking once more.", Feedback: "Use the cache.", Messages: []string{"from the parent"}, Tools: []journal.ToolResult{
			{ToolCall: journal.ToolCall{ID: "c3", Name: "lookup", Arguments: `{"q":"nodes"}`}, Result: "2 nodes"},
		}},
		{Assistant: "   "},
	}
	history.Messages = []string{"the parent says hello"}
	tools := base
	tools.Tools = []ToolSpec{
		{Name: "lookup", Description: "Looks things up.", InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string","description":"<query>"}},"required":["q"]}`)},
		{Name: "untyped", Description: "No type.", InputSchema: json.RawMessage(`{"properties":{"n":{"type":"integer"}}}`)},
		{Name: "array", Description: "Not an object.", InputSchema: json.RawMessage(`[1,2]`)},
		{Name: "empty", Description: ""},
		{Name: "complete", Description: "A duplicate of a move: skipped."},
		{Name: ""},
	}
	for name, req := range map[string]Request{"plain": base, "no system prompt": noSystem, "history": history, "tools": tools} {
		for round := range 2 {
			got, external, err := openAIRequestBody(req)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			want, err := json.Marshal(sdkParams(req))
			if err != nil {
				t.Fatalf("%s: the SDK's encoding: %v", name, err)
			}
			var g, w any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatalf("%s: the body is not JSON: %v\n%s", name, err, got)
			}
			if err := json.Unmarshal(want, &w); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(g, w) {
				t.Errorf("%s (round %d): body\n%s\nthe SDK's\n%s", name, round, got, want)
			}
			if _, wantExternal := offeredTools(req); !reflect.DeepEqual(external, wantExternal) {
				t.Errorf("%s: external tools %v, want %v", name, external, wantExternal)
			}
		}
	}
}

// BenchmarkOpenAIRequestBody: encoding a request that offers the
// operator's moves, here and by the SDK's types (the oracle above).
func BenchmarkOpenAIRequestBody(b *testing.B) {
	req := Request{Model: "m1", SystemPrompt: "You review the work, then call complete.", Task: "load test task r-00001"}
	b.Run("here", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := openAIRequestBody(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sdk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(sdkParams(req)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
