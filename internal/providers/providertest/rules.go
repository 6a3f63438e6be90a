package providertest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// The fakes refuse, with HTTP 400 and the provider's invalid_request_error,
// every request the real API documents as invalid and that an adapter could
// get wrong: the shape of the conversation (roles, empty text, tool calls
// and their results) and of the offered tools. A test that gets an answer
// has sent a request the real provider would take.

// toolName is the tool-name rule both APIs document.
var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// anthropicRequest is the part of a Messages request the rules read.
type anthropicRequest struct {
	MaxTokens *int64                 `json:"max_tokens"`
	System    json.RawMessage        `json:"system"`
	Messages  []anthropicWireMessage `json:"messages"`
	Tools     []struct {
		Name        string          `json:"name"`
		InputSchema json.RawMessage `json:"input_schema"`
	} `json:"tools"`
}

type anthropicWireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

// anthropicViolation is what the Messages API would refuse in body, or "".
// Its rules: max_tokens is set; messages start with a user message and
// alternate user and assistant; no content is empty and no text block is
// empty or only whitespace; tool_use blocks (assistant only) have unique
// ids and object inputs, and each is answered by a tool_result in the
// very next message, a user message whose tool_result blocks come before
// anything else and answer only the tool_use blocks just before them; the
// tools have unique names of the documented form and object schemas.
func anthropicViolation(body []byte) string {
	var req anthropicRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return "request body is not a Messages request: " + err.Error()
	}
	if req.MaxTokens == nil || *req.MaxTokens < 1 {
		return "max_tokens: Field required"
	}
	if why := anthropicSystem(req.System); why != "" {
		return why
	}
	if why := anthropicTools(req.Tools); why != "" {
		return why
	}
	seen := map[string]bool{}
	var open []string // the tool_use ids the previous message left unanswered
	for i, m := range req.Messages {
		at := fmt.Sprintf("messages.%d", i)
		switch {
		case m.Role != "user" && m.Role != "assistant":
			return fmt.Sprintf("%s.role: Input should be 'user' or 'assistant'", at)
		case i == 0 && m.Role != "user":
			return "messages: first message must use the \"user\" role"
		case i > 0 && m.Role == req.Messages[i-1].Role:
			return fmt.Sprintf("messages: roles must alternate between \"user\" and \"assistant\", but found multiple %q roles in a row", m.Role)
		}
		blocks, why := anthropicContent(at, m.Content)
		if why != "" {
			return why
		}
		if why := anthropicAnswers(at, m.Role, blocks, open); why != "" {
			return why
		}
		open = open[:0]
		for j, b := range blocks {
			if why := anthropicBlockViolation(fmt.Sprintf("%s.content.%d", at, j), m.Role, b, seen); why != "" {
				return why
			}
			if b.Type == "tool_use" {
				open = append(open, b.ID)
			}
		}
		if i == len(req.Messages)-1 && m.Role == "assistant" {
			if n := len(blocks); n > 0 && blocks[n-1].Text != nil && strings.TrimRight(*blocks[n-1].Text, " \t\n\r") != *blocks[n-1].Text {
				return "messages: final assistant content cannot end with trailing whitespace"
			}
		}
	}
	if len(open) > 0 {
		return fmt.Sprintf("messages: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", strings.Join(open, ", "))
	}
	return ""
}

// anthropicSystem checks the system prompt: a string or text blocks.
func anthropicSystem(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return ""
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "system: Input should be a valid string or list of text blocks"
	}
	for i, b := range blocks {
		if b.Type != "text" || b.Text == nil || strings.TrimSpace(*b.Text) == "" {
			return fmt.Sprintf("system.%d: text content blocks must contain non-whitespace text", i)
		}
	}
	return ""
}

func anthropicTools(tools []struct {
	Name        string          `json:"name"`
	InputSchema json.RawMessage `json:"input_schema"`
}) string {
	names := map[string]bool{}
	for i, t := range tools {
		if !toolName.MatchString(t.Name) {
			return fmt.Sprintf("tools.%d.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'", i)
		}
		if names[t.Name] {
			return "tools: Tool names must be unique."
		}
		names[t.Name] = true
		var schema struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(t.InputSchema, &schema) != nil || schema.Type != "object" {
			return fmt.Sprintf("tools.%d.input_schema.type: Input should be 'object'", i)
		}
	}
	return ""
}

// anthropicContent decodes a message's content: a non-empty string (one
// text block) or a non-empty list of blocks.
func anthropicContent(at string, raw json.RawMessage) ([]anthropicBlock, string) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if strings.TrimSpace(s) == "" {
			return nil, at + ": text content blocks must contain non-whitespace text"
		}
		return []anthropicBlock{{Type: "text", Text: &s}}, ""
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, at + ".content: Input should be a valid string or list of content blocks"
	}
	if len(blocks) == 0 {
		return nil, at + ": all messages must have non-empty content except for the optional final assistant message"
	}
	return blocks, ""
}

// anthropicAnswers checks that a message answers the tool_use blocks of
// the one before it (open) with tool_result blocks first, and holds no
// tool_result for anything else.
func anthropicAnswers(at, role string, blocks []anthropicBlock, open []string) string {
	want := map[string]bool{}
	for _, id := range open {
		want[id] = true
	}
	results := true
	for j, b := range blocks {
		if b.Type != "tool_result" {
			results = false
			continue
		}
		switch {
		case role != "user":
			return fmt.Sprintf("%s.content.%d: tool_result blocks are only allowed in user messages", at, j)
		case !results:
			return fmt.Sprintf("%s: tool_result blocks must come first in the content, before any other block", at)
		case !want[b.ToolUseID]:
			return fmt.Sprintf("%s.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", at, j, b.ToolUseID)
		}
		delete(want, b.ToolUseID)
	}
	var missing []string
	for _, id := range open {
		if want[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("messages: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", strings.Join(missing, ", "))
	}
	return ""
}

// anthropicBlockViolation checks one content block of a message.
func anthropicBlockViolation(at, role string, b anthropicBlock, seen map[string]bool) string {
	switch b.Type {
	case "text":
		if b.Text == nil || strings.TrimSpace(*b.Text) == "" {
			return at + ": text content blocks must contain non-whitespace text"
		}
	case "tool_use":
		if role != "assistant" {
			return at + ": tool_use blocks are only allowed in assistant messages"
		}
		if b.ID == "" || b.Name == "" {
			return at + ": tool_use blocks need an id and a name"
		}
		if seen[b.ID] {
			return at + ": `tool_use` ids must be unique"
		}
		seen[b.ID] = true
		var input map[string]any
		if json.Unmarshal(b.Input, &input) != nil || input == nil {
			return at + ".input: Input should be a valid dictionary"
		}
	case "tool_result":
		if len(b.Content) == 0 {
			return ""
		}
		var s string
		if json.Unmarshal(b.Content, &s) == nil {
			return ""
		}
		var inner []anthropicBlock
		if json.Unmarshal(b.Content, &inner) != nil {
			return at + ".content: Input should be a valid string or list of content blocks"
		}
		for k, c := range inner {
			if c.Type == "text" && (c.Text == nil || strings.TrimSpace(*c.Text) == "") {
				return fmt.Sprintf("%s.content.%d: text content blocks must contain non-whitespace text", at, k)
			}
		}
	}
	return ""
}

// openAIRequest is the part of a chat-completions request the rules read.
type openAIRequest struct {
	Messages []struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCallID string          `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function struct {
				Name      string           `json:"name"`
				Arguments *json.RawMessage `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

// openAIViolation is what the chat-completions API would refuse in body,
// or "". Its rules: every message has a known role and the content its
// role requires (an assistant message may leave it out only when it calls
// tools); tool calls have unique ids, type function, a name and string
// arguments; every assistant message with tool_calls is followed by one
// tool message per call, with its tool_call_id, before any other message
// or the end; a tool message answers only such a call; offered tools have
// unique names of the documented form.
func openAIViolation(body []byte) string {
	var req openAIRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return "request body is not a chat-completions request: " + err.Error()
	}
	names := map[string]bool{}
	for i, t := range req.Tools {
		if t.Type != "function" || !toolName.MatchString(t.Function.Name) {
			return fmt.Sprintf("Invalid 'tools[%d].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.", i)
		}
		if names[t.Function.Name] {
			return fmt.Sprintf("Invalid 'tools': duplicate function name %q", t.Function.Name)
		}
		names[t.Function.Name] = true
	}
	seen := map[string]bool{}
	open := map[string]bool{}
	var order []string
	for i, m := range req.Messages {
		at := fmt.Sprintf("messages[%d]", i)
		hasContent := len(m.Content) > 0 && string(m.Content) != "null"
		if m.Role != "tool" && len(open) > 0 {
			return unanswered(at, order, open)
		}
		switch m.Role {
		case "system", "developer", "user":
			if !hasContent {
				return fmt.Sprintf("Missing required parameter: '%s.content'.", at)
			}
		case "assistant":
			if !hasContent && len(m.ToolCalls) == 0 {
				return fmt.Sprintf("Invalid value for '%s.content': expected a string, got null.", at)
			}
			order = order[:0]
			for j, tc := range m.ToolCalls {
				if tc.ID == "" || tc.Type != "function" || tc.Function.Name == "" || tc.Function.Arguments == nil {
					return fmt.Sprintf("Missing required parameter: '%s.tool_calls[%d]' needs id, type function, function.name and function.arguments.", at, j)
				}
				var args string
				if json.Unmarshal(*tc.Function.Arguments, &args) != nil {
					return fmt.Sprintf("Invalid type for '%s.tool_calls[%d].function.arguments': expected a string.", at, j)
				}
				if seen[tc.ID] {
					return fmt.Sprintf("Invalid '%s.tool_calls[%d].id': duplicate tool call id %q.", at, j, tc.ID)
				}
				seen[tc.ID], open[tc.ID] = true, true
				order = append(order, tc.ID)
			}
		case "tool":
			switch {
			case !hasContent:
				return fmt.Sprintf("Missing required parameter: '%s.content'.", at)
			case m.ToolCallID == "":
				return fmt.Sprintf("Missing required parameter: '%s.tool_call_id'.", at)
			case !open[m.ToolCallID]:
				return fmt.Sprintf("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls' (%s answers %q).", at, m.ToolCallID)
			}
			delete(open, m.ToolCallID)
		default:
			return fmt.Sprintf("Invalid value: '%s'. Supported values are: 'system', 'developer', 'user', 'assistant' and 'tool'.", m.Role)
		}
	}
	if len(open) > 0 {
		return unanswered("the end of messages", order, open)
	}
	return ""
}

// unanswered is OpenAI's refusal of tool calls left without a tool message.
func unanswered(at string, order []string, open map[string]bool) string {
	var ids []string
	for _, id := range order {
		if open[id] {
			ids = append(ids, id)
		}
	}
	return fmt.Sprintf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages (before %s): %s", at, strings.Join(ids, ", "))
}
