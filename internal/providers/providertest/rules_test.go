package providertest

import (
	"strings"
	"testing"
)

// TestAnthropicRules: the fake Anthropic server refuses each kind of
// request the Messages API documents as invalid, and takes a valid one
// with tool calls answered.
func TestAnthropicRules(t *testing.T) {
	const tools = `"tools":[{"name":"transition","input_schema":{"type":"object"}}]`
	valid := `{"max_tokens":8,` + tools + `,"messages":[
		{"role":"user","content":"task"},
		{"role":"assistant","content":[{"type":"text","text":"moving"},{"type":"tool_use","id":"t1","name":"transition","input":{"target":"b"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"moved"}]},{"type":"text","text":"go on"}]}]}`
	if why := anthropicViolation([]byte(valid)); why != "" {
		t.Fatalf("a valid request is refused: %s", why)
	}
	cases := map[string]struct{ body, want string }{
		"no max_tokens":       {`{"messages":[{"role":"user","content":"x"}]}`, "max_tokens"},
		"assistant first":     {`{"max_tokens":8,"messages":[{"role":"assistant","content":"x"},{"role":"user","content":"y"}]}`, "first message"},
		"two users in a row":  {`{"max_tokens":8,"messages":[{"role":"user","content":"x"},{"role":"user","content":"y"}]}`, "alternate"},
		"empty text":          {`{"max_tokens":8,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"text","text":""}]},{"role":"user","content":"y"}]}`, "non-whitespace"},
		"whitespace string":   {`{"max_tokens":8,"messages":[{"role":"user","content":"  "}]}`, "non-whitespace"},
		"empty content":       {`{"max_tokens":8,"messages":[{"role":"user","content":[]}]}`, "non-empty content"},
		"tool_use unanswered": {`{"max_tokens":8,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"a","input":{}}]},{"role":"user","content":"y"}]}`, "without `tool_result`"},
		"tool_use at the end": {`{"max_tokens":8,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"a","input":{}}]}]}`, "without `tool_result`"},
		"result for nothing":  {`{"max_tokens":8,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"a"},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t9"}]}]}`, "unexpected `tool_use_id`"},
		"text before result":  {`{"max_tokens":8,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"a","input":{}}]},{"role":"user","content":[{"type":"text","text":"y"},{"type":"tool_result","tool_use_id":"t1"}]}]}`, "must come first"},
		"duplicate tool_use":  {`{"max_tokens":8,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"a","input":{}},{"type":"tool_use","id":"t1","name":"a","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1"}]}]}`, "unique"},
		"input not an object": {`{"max_tokens":8,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"a","input":"s"}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1"}]}]}`, "dictionary"},
		"bad tool name":       {`{"max_tokens":8,"tools":[{"name":"a.b","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"x"}]}`, "pattern"},
		"trailing whitespace": {`{"max_tokens":8,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y "}]}`, "trailing whitespace"},
		"tool_use in user":    {`{"max_tokens":8,"messages":[{"role":"user","content":[{"type":"tool_use","id":"t1","name":"a","input":{}}]}]}`, "only allowed in assistant"},
		"system role":         {`{"max_tokens":8,"messages":[{"role":"system","content":"x"}]}`, "'user' or 'assistant'"},
	}
	for name, c := range cases {
		if why := anthropicViolation([]byte(c.body)); !strings.Contains(why, c.want) {
			t.Errorf("%s: violation %q, want one saying %q", name, why, c.want)
		}
	}
}

// TestOpenAIRules: the fake OpenAI server refuses each kind of request the
// chat-completions API documents as invalid, and takes a valid one.
func TestOpenAIRules(t *testing.T) {
	valid := `{"tools":[{"type":"function","function":{"name":"transition"}}],"messages":[
		{"role":"system","content":"s"},{"role":"user","content":"task"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"transition","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"moved"},
		{"role":"assistant","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"u"}]}`
	if why := openAIViolation([]byte(valid)); why != "" {
		t.Fatalf("a valid request is refused: %s", why)
	}
	call := `{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"a","arguments":"{}"}}]}`
	cases := map[string]struct{ body, want string }{
		"call unanswered":       {`{"messages":[{"role":"user","content":"x"},` + call + `,{"role":"user","content":"y"}]}`, "did not have response messages"},
		"call at the end":       {`{"messages":[{"role":"user","content":"x"},` + call + `]}`, "did not have response messages"},
		"tool answers nothing":  {`{"messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"c1","content":"r"}]}`, "must be a response"},
		"tool answers twice":    {`{"messages":[{"role":"user","content":"x"},` + call + `,{"role":"tool","tool_call_id":"c1","content":"r"},{"role":"tool","tool_call_id":"c1","content":"r"}]}`, "must be a response"},
		"assistant without all": {`{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null}]}`, "expected a string"},
		"user without content":  {`{"messages":[{"role":"user"}]}`, "content"},
		"tool without id":       {`{"messages":[{"role":"user","content":"x"},` + call + `,{"role":"tool","content":"r"}]}`, "tool_call_id"},
		"arguments not string":  {`{"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"a","arguments":{}}}]},{"role":"tool","tool_call_id":"c1","content":"r"}]}`, "expected a string"},
		"duplicate call id":     {`{"messages":[{"role":"user","content":"x"},` + call + `,{"role":"tool","tool_call_id":"c1","content":"r"},` + call + `,{"role":"tool","tool_call_id":"c1","content":"r"}]}`, "duplicate tool call id"},
		"unknown role":          {`{"messages":[{"role":"bot","content":"x"}]}`, "Supported values"},
		"bad tool name":         {`{"tools":[{"type":"function","function":{"name":"a b"}}],"messages":[{"role":"user","content":"x"}]}`, "pattern"},
	}
	for name, c := range cases {
		if why := openAIViolation([]byte(c.body)); !strings.Contains(why, c.want) {
			t.Errorf("%s: violation %q, want one saying %q", name, why, c.want)
		}
	}
}
