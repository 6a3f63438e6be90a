// Package providertest runs fake model providers on loopback: real HTTP
// servers that speak enough of the OpenAI chat-completions and Anthropic
// Messages wire protocols for the official SDKs to talk to them. Each server
// answers from a per-test queue of scripted replies (text and any number of
// tool calls), counts requests and records the last one, so tests can assert
// what was sent (messages, tools offered). Each also enforces its API's
// documented request rules (rules.go): a request the real provider would
// refuse is answered with its HTTP 400, so no test passes on a
// conversation the provider would not take.
package providertest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// ToolCall is a tool the scripted model calls.
type ToolCall struct {
	// ID is the call's id; empty means a numbered default ("call_1",
	// "call_2", ... for OpenAI; "toolu_1", ... for Anthropic).
	ID   string
	Name string
	// Args is the call's arguments as a JSON object, e.g. `{"target":"b"}`.
	Args string
}

// Reply is one scripted answer. A zero Status (or 200) answers with a
// completion; any other status answers with an error body in the
// provider's real error shape.
type Reply struct {
	Text     string
	ToolCall *ToolCall
	// ToolCalls are further calls in the same answer, after ToolCall.
	ToolCalls []ToolCall

	PromptTokens     int64
	CompletionTokens int64
	// CachedTokens are prompt tokens read from cache. The OpenAI server
	// reports them inside prompt_tokens (prompt_tokens_details.cached_tokens),
	// the Anthropic server separately (cache_read_input_tokens).
	CachedTokens int64
	// CacheWriteTokens are prompt tokens written to cache (Anthropic
	// cache_creation_input_tokens; OpenAI-compatible
	// prompt_tokens_details.cache_write_tokens).
	CacheWriteTokens int64
	// CostUSD is emitted verbatim as the JSON number usage.cost, the way
	// OpenRouter reports a call's price (OpenAI server only).
	CostUSD string

	// Status, when neither 0 nor 200, makes the reply an error.
	Status int
	// ErrorType and ErrorCode override the error's type and code (OpenAI
	// "code", e.g. "insufficient_quota"; Anthropic has only a type, e.g.
	// "billing_error"). Defaults follow the status.
	ErrorType string
	ErrorCode string
	// ErrorMessage overrides the error's message.
	ErrorMessage string
	// EchoKey appends the API key the request carried to the error
	// message, the way a careless upstream might, so tests can prove the
	// adapter redacts it.
	EchoKey bool
	// RawBody, when set, is sent as the whole response body (with
	// ContentType, default text/plain), for non-JSON answers such as a
	// proxy's HTML error page.
	RawBody     string
	ContentType string

	// Header is set on the response, whatever its status (completion,
	// error or RawBody), for headers such as Retry-After or the rate-limit
	// ones. Keys are canonicalised; Content-Type is the fake's own.
	Header map[string]string

	// Delay holds the answer back, for timeout tests. The handler gives up
	// early when the client goes away.
	Delay time.Duration
}

// Request is a recorded request.
type Request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// Authorization is the request's Authorization header.
func (r Request) Authorization() string { return r.Header.Get("Authorization") }

// APIKey is the credential the request carried: the x-api-key header, or
// else the Bearer token of the Authorization header.
func (r Request) APIKey() string {
	if k := r.Header.Get("X-Api-Key"); k != "" {
		return k
	}
	if k, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return k
	}
	return ""
}

// JSON decodes the request body into a generic map (nil if it is not a
// JSON object).
func (r Request) JSON() map[string]any {
	var m map[string]any
	if json.Unmarshal(r.Body, &m) != nil {
		return nil
	}
	return m
}

// Messages is the request's messages array, decoded.
func (r Request) Messages() []map[string]any {
	var body struct {
		Messages []map[string]any `json:"messages"`
	}
	_ = json.Unmarshal(r.Body, &body)
	return body.Messages
}

// Tools maps each tool the request offered to its JSON schema, from either
// protocol's shape (OpenAI function.parameters, Anthropic input_schema),
// with its description under the key "$description" (absent when none).
func (r Request) Tools() map[string]map[string]any {
	var body struct {
		Tools []struct {
			Name        string         `json:"name"`
			Description *string        `json:"description"`
			InputSchema map[string]any `json:"input_schema"`
			Function    *struct {
				Name        string         `json:"name"`
				Description *string        `json:"description"`
				Parameters  map[string]any `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	if json.Unmarshal(r.Body, &body) != nil {
		return nil
	}
	tools := map[string]map[string]any{}
	for _, t := range body.Tools {
		name, desc, schema := t.Name, t.Description, t.InputSchema
		if f := t.Function; f != nil {
			name, desc, schema = f.Name, f.Description, f.Parameters
		}
		if schema == nil {
			schema = map[string]any{}
		}
		if desc != nil {
			schema["$description"] = *desc
		}
		tools[name] = schema
	}
	return tools
}

// Server is a scripted fake provider. URL is its base URL: pass it as the
// adapter's base URL (the OpenAI server answers with and without a /v1
// prefix).
type Server struct {
	*httptest.Server

	kind kind

	mu       sync.Mutex
	queue    []Reply
	last     Reply
	requests int
	lastReq  Request
	all      []Request
}

type kind int

const (
	kindOpenAI kind = iota
	kindAnthropic
)

// NewOpenAIServer starts a fake OpenAI-compatible server serving POST
// /chat/completions and /v1/chat/completions. It is closed when the test
// ends.
func NewOpenAIServer(t testing.TB) *Server { return start(t, kindOpenAI) }

// NewAnthropicServer starts a fake Anthropic server serving POST
// /v1/messages. It is closed when the test ends.
func NewAnthropicServer(t testing.TB) *Server { return start(t, kindAnthropic) }

// NewOpenAIServerOn is NewOpenAIServer listening on addr (such as
// "127.0.0.2:0"), for tests that need a server on another loopback address
// than the API server's.
func NewOpenAIServerOn(t testing.TB, addr string) *Server { return startOn(t, kindOpenAI, addr) }

func start(t testing.TB, k kind) *Server { return startOn(t, k, "") }

func startOn(t testing.TB, k kind, addr string) *Server {
	t.Helper()
	s := &Server{kind: k, last: Reply{Text: "ok", PromptTokens: 1, CompletionTokens: 1}}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	if addr != "" {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("providertest: listening on %s: %v", addr, err)
		}
		_ = s.Listener.Close()
		s.Listener = l
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// Push queues replies; each request takes the next one, and once the queue
// is empty the last reply repeats.
func (s *Server) Push(replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, replies...)
}

// Requests is how many requests the server has received, on any path.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Last is the most recent request.
func (s *Server) Last() Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastReq
}

// All is every request received, oldest first.
func (s *Server) All() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.all...)
}

func (s *Server) next() Reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) > 0 {
		s.last, s.queue = s.queue[0], s.queue[1:]
	}
	return s.last
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.requests++
	s.lastReq = Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
	s.all = append(s.all, s.lastReq)
	s.mu.Unlock()

	var ok bool
	switch s.kind {
	case kindOpenAI:
		ok = r.URL.Path == "/chat/completions" || r.URL.Path == "/v1/chat/completions"
	case kindAnthropic:
		ok = r.URL.Path == "/v1/messages"
	}
	if !ok {
		s.writeError(w, Reply{Status: http.StatusNotFound, ErrorMessage: "no route for " + r.Method + " " + r.URL.Path}, "")
		return
	}
	if r.Method != http.MethodPost {
		s.writeError(w, Reply{Status: http.StatusMethodNotAllowed, ErrorMessage: "method " + r.Method + " not allowed"}, "")
		return
	}
	var req struct {
		Model    string            `json:"model"`
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		s.writeError(w, Reply{Status: http.StatusBadRequest, ErrorMessage: "request body is not valid JSON: " + err.Error()}, "")
		return
	}
	if req.Model == "" || len(req.Messages) == 0 {
		s.writeError(w, Reply{Status: http.StatusBadRequest, ErrorMessage: "model and messages are required"}, "")
		return
	}
	if s.kind == kindAnthropic && r.Header.Get("Anthropic-Version") == "" {
		s.writeError(w, Reply{Status: http.StatusBadRequest, ErrorMessage: "anthropic-version: header is required"}, "")
		return
	}
	if why := s.violation(body); why != "" {
		s.writeError(w, Reply{Status: http.StatusBadRequest, ErrorMessage: why}, "")
		return
	}

	reply := s.next()
	if reply.Delay > 0 {
		t := time.NewTimer(reply.Delay)
		defer t.Stop()
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
	}
	key := s.lastKey()
	for k, v := range reply.Header {
		w.Header().Set(k, v)
	}
	switch {
	case reply.RawBody != "":
		ct := reply.ContentType
		if ct == "" {
			ct = "text/plain; charset=utf-8"
		}
		w.Header().Set("Content-Type", ct)
		status := reply.Status
		if status == 0 {
			status = http.StatusOK
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, reply.RawBody)
	case reply.Status != 0 && reply.Status != http.StatusOK:
		s.writeError(w, reply, key)
	case s.kind == kindOpenAI:
		writeJSON(w, http.StatusOK, openAICompletion(req.Model, reply))
	default:
		writeJSON(w, http.StatusOK, anthropicMessage(req.Model, reply))
	}
}

// violation is what the real API would refuse in a request body (see
// rules.go), "" when it would take it.
func (s *Server) violation(body []byte) string {
	if s.kind == kindAnthropic {
		return anthropicViolation(body)
	}
	return openAIViolation(body)
}

func (s *Server) lastKey() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastReq.APIKey()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// rawNumber is a JSON number written exactly as given.
type rawNumber string

func (n rawNumber) MarshalJSON() ([]byte, error) { return []byte(n), nil }

// calls is every tool call of a reply, in order.
func (r Reply) calls() []ToolCall {
	var calls []ToolCall
	if r.ToolCall != nil {
		calls = append(calls, *r.ToolCall)
	}
	return append(calls, r.ToolCalls...)
}

func openAICompletion(model string, r Reply) map[string]any {
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
	calls := r.calls()
	if r.Text != "" || len(calls) == 0 {
		msg["content"] = r.Text
	}
	finish := "stop"
	if len(calls) > 0 {
		finish = "tool_calls"
		var tcs []any
		for i, tc := range calls {
			id := tc.ID
			if id == "" {
				id = fmt.Sprintf("call_%d", i+1)
			}
			tcs = append(tcs, map[string]any{
				"id": id, "type": "function",
				"function": map[string]any{"name": tc.Name, "arguments": tc.Args},
			})
		}
		msg["tool_calls"] = tcs
	}
	details := map[string]any{"cached_tokens": r.CachedTokens, "audio_tokens": 0}
	if r.CacheWriteTokens != 0 {
		details["cache_write_tokens"] = r.CacheWriteTokens
	}
	usage := map[string]any{
		"prompt_tokens":             r.PromptTokens,
		"completion_tokens":         r.CompletionTokens,
		"total_tokens":              r.PromptTokens + r.CompletionTokens,
		"prompt_tokens_details":     details,
		"completion_tokens_details": map[string]any{"reasoning_tokens": 0},
	}
	if r.CostUSD != "" {
		usage["cost"] = rawNumber(r.CostUSD)
	}
	return map[string]any{
		"id":      "chatcmpl-providertest",
		"object":  "chat.completion",
		"created": time.Now().Unix(),
		"model":   model,
		"choices": []any{map[string]any{
			"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish,
		}},
		"usage": usage,
	}
}

func anthropicMessage(model string, r Reply) map[string]any {
	content := []any{}
	calls := r.calls()
	if r.Text != "" || len(calls) == 0 {
		content = append(content, map[string]any{"type": "text", "text": r.Text})
	}
	stop := "end_turn"
	for i, tc := range calls {
		stop = "tool_use"
		input := json.RawMessage(tc.Args)
		switch {
		case strings.TrimSpace(tc.Args) == "":
			input = json.RawMessage("{}")
		case !json.Valid(input):
			// The real API always sends an object; keep the body valid JSON.
			b, _ := json.Marshal(tc.Args)
			input = b
		}
		id := tc.ID
		if id == "" {
			id = fmt.Sprintf("toolu_%d", i+1)
		}
		content = append(content, map[string]any{"type": "tool_use", "id": id, "name": tc.Name, "input": input})
	}
	return map[string]any{
		"id":            "msg_providertest",
		"type":          "message",
		"role":          "assistant",
		"model":         model,
		"content":       content,
		"stop_reason":   stop,
		"stop_sequence": nil,
		"usage": map[string]any{
			"input_tokens":                r.PromptTokens,
			"output_tokens":               r.CompletionTokens,
			"cache_read_input_tokens":     r.CachedTokens,
			"cache_creation_input_tokens": r.CacheWriteTokens,
			"service_tier":                "standard",
		},
	}
}

func (s *Server) writeError(w http.ResponseWriter, r Reply, key string) {
	msg := r.ErrorMessage
	if msg == "" {
		msg = defaultMessage(s.kind, r.Status)
	}
	if r.EchoKey {
		msg += " (key: " + key + ")"
	}
	if s.kind == kindOpenAI {
		typ, code := openAIErrorKind(r.Status)
		if r.ErrorType != "" {
			typ = r.ErrorType
		}
		if r.ErrorCode != "" {
			code = r.ErrorCode
		}
		var c any
		if code != "" {
			c = code
		}
		writeJSON(w, r.Status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": c}})
		return
	}
	typ := anthropicErrorType(r.Status)
	if r.ErrorType != "" {
		typ = r.ErrorType
	}
	if w.Header().Get("Request-Id") == "" {
		w.Header().Set("Request-Id", "req_providertest")
	}
	writeJSON(w, r.Status, map[string]any{
		"type":       "error",
		"error":      map[string]any{"type": typ, "message": msg},
		"request_id": "req_providertest",
	})
}

func defaultMessage(k kind, status int) string {
	switch status {
	case http.StatusUnauthorized:
		if k == kindAnthropic {
			return "invalid x-api-key"
		}
		return "Incorrect API key provided."
	case http.StatusForbidden:
		return "You are not allowed to use this model."
	case http.StatusPaymentRequired:
		return "Insufficient credits."
	case http.StatusTooManyRequests:
		return "Rate limit reached. Please try again later."
	case 529:
		return "Overloaded"
	}
	if t := http.StatusText(status); t != "" {
		return t
	}
	return "error"
}

// openAIErrorKind is the error type and code OpenAI uses for a status.
func openAIErrorKind(status int) (typ, code string) {
	switch status {
	case http.StatusUnauthorized:
		return "invalid_request_error", "invalid_api_key"
	case http.StatusForbidden:
		return "invalid_request_error", "unsupported_country_region_territory"
	case http.StatusPaymentRequired:
		return "insufficient_quota", "insufficient_quota"
	case http.StatusNotFound:
		return "invalid_request_error", "model_not_found"
	case http.StatusTooManyRequests:
		return "requests", "rate_limit_exceeded"
	}
	if status >= 500 {
		return "server_error", ""
	}
	return "invalid_request_error", ""
}

// anthropicErrorType is the error type Anthropic uses for a status.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}
