package providers

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
)

// The chat-completions request body is encoded here, not by the SDK: the
// SDK encodes every offered tool's schema by reflection on every call, and
// with a thousand calls in flight that was a tenth of the manager's CPU.
// Here each tool's JSON is encoded once and reused; the SDK still sends
// the body, reads the answer and reports errors.

// openAIBody is a chat-completions request (non-streaming), but its tools.
type openAIBody struct {
	Model    string          `json:"model"`
	Messages []openAIMessage `json:"messages"`
}

// openAIMessage is one message of the request. Content is omitted only on
// an assistant message that carries tool calls and no text.
type openAIMessage struct {
	Role       string           `json:"role"`
	Content    *string          `json:"content,omitempty"`
	ToolCalls  []openAIToolCall `json:"tool_calls,omitempty"`
	ToolCallID string           `json:"tool_call_id,omitempty"`
}

type openAIToolCall struct {
	ID       string             `json:"id"`
	Type     string             `json:"type"`
	Function openAIFunctionCall `json:"function"`
}

type openAIFunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// openAITool is an offered tool as the API takes it.
type openAITool struct {
	Type     string            `json:"type"`
	Function openAIFunctionDef `json:"function"`
}

type openAIFunctionDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// openAIRequestBody encodes req as a chat-completions request, and says
// which offered tools are the request's own (not the operator's moves).
func openAIRequestBody(req Request) (body []byte, external map[string]bool, err error) {
	var msgs []openAIMessage
	if req.SystemPrompt != "" {
		msgs = append(msgs, textMessage("system", req.SystemPrompt))
	}
	msgs = append(msgs, textMessage("user", userContent(req)))
	msgs = append(msgs, openAIHistoryMessages(req)...)
	tools, external := offeredTools(req)
	encoded := make([]json.RawMessage, len(tools))
	size := 0
	for i, t := range tools {
		if encoded[i], err = toolJSON.get(t); err != nil {
			return nil, nil, err
		}
		size += len(encoded[i]) + 1
	}
	var buf bytes.Buffer
	buf.Grow(size + 512)
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	if err := e.Encode(openAIBody{Model: req.Model, Messages: msgs}); err != nil {
		return nil, nil, err
	}
	body = buf.Bytes()
	if len(encoded) == 0 {
		return body, external, nil
	}
	// The tools' JSON is spliced in as encoded once (an encoder would scan
	// each again), in place of the object's closing "}\n".
	body = body[:len(body)-2]
	body = append(body, `,"tools":[`...)
	for i, enc := range encoded {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, enc...)
	}
	return append(body, "]}"...), external, nil
}

func textMessage(role, text string) openAIMessage {
	return openAIMessage{Role: role, Content: &text}
}

// openAIHistoryMessages is each earlier answer and what followed it: the
// feedback as a user message, or, when the answer called tools, the calls
// on the assistant message and one tool message per result (then any
// feedback).
func openAIHistoryMessages(req Request) []openAIMessage {
	var msgs []openAIMessage
	for _, t := range turns(req) {
		if len(t.tools) == 0 {
			msgs = append(msgs, textMessage("assistant", t.assistant), textMessage("user", t.feedback))
			continue
		}
		a := openAIMessage{Role: "assistant"}
		if text := t.assistant; strings.TrimSpace(text) != "" {
			a.Content = &text
		}
		for _, r := range t.tools {
			a.ToolCalls = append(a.ToolCalls, openAIToolCall{ID: r.ID, Type: "function", Function: openAIFunctionCall{Name: r.Name, Arguments: r.Arguments}})
		}
		msgs = append(msgs, a)
		for _, r := range t.tools {
			content := r.Result
			if r.IsError {
				// The chat API has no error flag on tool messages.
				content = "ERROR: " + content
			}
			msg := textMessage("tool", content)
			msg.ToolCallID = r.ID
			msgs = append(msgs, msg)
		}
		if t.feedback != "" {
			msgs = append(msgs, textMessage("user", t.feedback))
		}
	}
	return msgs
}

// toolCache holds each offered tool's encoded JSON, keyed by its name,
// description and schema. The operator's moves and an MCP server's tools
// change rarely; past toolCacheSize distinct tools it starts afresh.
type toolCache struct {
	mu sync.Mutex
	m  map[string]json.RawMessage
}

const toolCacheSize = 4096

var toolJSON = &toolCache{m: map[string]json.RawMessage{}}

func (c *toolCache) get(t ToolSpec) (json.RawMessage, error) {
	key := t.Name + "\x00" + t.Description + "\x00" + string(t.InputSchema)
	c.mu.Lock()
	enc, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return enc, nil
	}
	params, err := json.Marshal(toolSchema(t))
	if err != nil {
		return nil, err
	}
	enc, err = json.Marshal(openAITool{Type: "function", Function: openAIFunctionDef{Name: t.Name, Description: t.Description, Parameters: params}})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.m) >= toolCacheSize {
		c.m = map[string]json.RawMessage{}
	}
	c.m[key] = enc
	c.mu.Unlock()
	return enc, nil
}
