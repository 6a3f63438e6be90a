// Package mcptool is the operator's MCP client: it lists a server's tools and
// calls them over the streamable HTTP transport. Failures are classified so a
// caller can tell whether a tools/call may have reached the server, and so
// whether retrying could run a side effect twice.
package mcptool

import (
	"encoding/json"
	"fmt"
)

// IdempotencyMetaKey is the tools/call _meta key carrying the caller's
// idempotency key, so a server can recognise a retried call.
const IdempotencyMetaKey = "dev.agentrun/idempotency-key"

// Server is an MCP endpoint to talk to.
type Server struct {
	Name string
	URL  string
	// Token is a bearer token sent with every request to URL's host; may be
	// empty. String and GoString leave it out so it never reaches logs.
	Token string
	// Protocol is how the endpoint is spoken to: "" for MCP, ProtocolA2A
	// for a remote A2A agent offered as one tool (internal/a2atool).
	Protocol string
}

// ProtocolA2A marks a Server that is a remote A2A agent.
const ProtocolA2A = "a2a"

// String names the server without its token.
func (s Server) String() string { return fmt.Sprintf("%s (%s)", s.Name, s.URL) }

// GoString keeps %#v from printing the token.
func (s Server) GoString() string {
	tok := `""`
	if s.Token != "" {
		tok = `"[redacted]"`
	}
	return fmt.Sprintf("mcptool.Server{Name:%q, URL:%q, Token:%s}", s.Name, s.URL, tok)
}

// Effect is what calling a tool may do to the world, which decides whether a
// call can be retried blindly.
type Effect string

const (
	// EffectRead tools change nothing (readOnlyHint).
	EffectRead Effect = "read"
	// EffectIdempotent tools may change things, but repeating a call with the
	// same arguments changes nothing more (idempotentHint).
	EffectIdempotent Effect = "idempotent"
	// EffectWrite is everything else, including tools without annotations:
	// repeating a call may repeat its side effect.
	EffectWrite Effect = "write"
)

// Tool is one tool a server offers.
type Tool struct {
	Server      string // Server.Name
	Name        string
	Description string
	InputSchema json.RawMessage
	Effect      Effect
}

// Result is a completed tools/call. A tool that reports failure (isError) is
// a Result with IsError set, not a Go error: the call did run.
type Result struct {
	// Text is the text content blocks joined by newlines or, when there are
	// none, the structured content as JSON.
	Text    string
	IsError bool
}

// CallError is every error List and Call return.
type CallError struct {
	// NotSent is true when the failure happened before the tools/call (or
	// tools/list) request left this process: the tool certainly did not run.
	NotSent bool
	// Status is the HTTP status of the failed request when it had one
	// (401/403: the token was refused), else 0.
	Status int
	// Message describes the failure; it never contains the token.
	Message string

	cause error
}

// NewCallError is a CallError for another protocol's client (a2atool).
func NewCallError(notSent bool, status int, message string, cause error) *CallError {
	return &CallError{NotSent: notSent, Status: status, Message: message, cause: cause}
}

func (e *CallError) Error() string { return e.Message }

// Unwrap exposes the cause, e.g. for errors.Is(err, context.DeadlineExceeded).
func (e *CallError) Unwrap() error { return e.cause }
