package mcptool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentrun-dev/agentrun-operator/internal/egress"
)

// clientInfo is how the operator introduces itself to MCP servers.
var clientInfo = &mcp.Implementation{Name: "agentrun-operator", Version: "v1"}

// List connects to s, lists all its tools (following pagination) and closes
// the session. hc may be nil (http.DefaultClient's settings).
func List(ctx context.Context, hc *http.Client, s Server) ([]Tool, error) {
	rt := newRoundTripper(hc, s)
	cs, err := connect(ctx, hc, s, rt)
	if err != nil {
		return nil, rt.fail(s, "connect", err, true)
	}
	defer closeSession(ctx, cs, rt)

	var tools []Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, rt.fail(s, "tools/list", err, false)
		}
		schema, err := json.Marshal(t.InputSchema)
		if err != nil {
			return nil, rt.fail(s, "tool "+t.Name+": input schema", err, false)
		}
		tools = append(tools, Tool{
			Server:      s.Name,
			Name:        t.Name,
			Description: t.Description,
			InputSchema: schema,
			Effect:      effectOf(t.Annotations),
		})
	}
	return tools, nil
}

// Call connects to s, calls tool with args (a JSON object; empty means none)
// and closes the session. A non-empty idempotencyKey travels in the request's
// _meta under IdempotencyMetaKey. Errors are *CallError.
func Call(ctx context.Context, hc *http.Client, s Server, tool string, args json.RawMessage, idempotencyKey string) (Result, error) {
	rt := newRoundTripper(hc, s)
	cs, err := connect(ctx, hc, s, rt)
	if err != nil {
		return Result{}, rt.fail(s, "connect", err, true)
	}
	defer closeSession(ctx, cs, rt)

	params := &mcp.CallToolParams{Name: tool}
	if len(args) > 0 {
		params.Arguments = args
	}
	if idempotencyKey != "" {
		params.Meta = mcp.Meta{IdempotencyMetaKey: idempotencyKey}
	}
	// The SDK does not say whether a failed call was sent. A request that
	// never got a connection cannot have reached the server; once it has
	// one, assume it may have.
	var gotConn atomic.Bool
	callCtx := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { gotConn.Store(true) },
	})
	res, err := cs.CallTool(callCtx, params)
	if err != nil {
		return Result{}, rt.fail(s, "tools/call "+tool, err, !gotConn.Load())
	}
	return resultOf(res), nil
}

// connect opens a session (the SDK's discover/initialize handshake). The
// standalone SSE stream is off: a one-shot list or call needs no
// server-initiated messages, and it would hold a connection open.
func connect(ctx context.Context, hc *http.Client, s Server, rt *roundTripper) (*mcp.ClientSession, error) {
	t := &mcp.StreamableClientTransport{
		Endpoint:             s.URL,
		HTTPClient:           rt.client(hc),
		DisableStandaloneSSE: true,
	}
	return mcp.NewClient(clientInfo, nil).Connect(ctx, t, nil)
}

// cancelGrace bounds how long a session closing after cancellation waits
// for the SDK's notifications/cancelled to go out first.
const cancelGrace = 2 * time.Second

// closeSession ends the session. After ctx is done it does so in the
// background, because of two SDK behaviours: Close right after a cancelled
// request wins the connection over the SDK's asynchronous
// notifications/cancelled, which is then dropped, and a stateful server
// answers the DELETE only once the (never cancelled) handler returns, so
// Close would hold the caller for its 5s DELETE timeout. Waiting for the
// notice lets the server stop the handler.
func closeSession(ctx context.Context, cs *mcp.ClientSession, rt *roundTripper) {
	if ctx.Err() == nil {
		cs.Close()
		return
	}
	go func() {
		t := time.NewTimer(cancelGrace)
		defer t.Stop()
		select {
		case <-rt.cancelSent:
		case <-t.C:
		}
		cs.Close()
	}()
}

// fail builds the CallError for a failed step, scrubbing the token from the
// message in case some layer ever echoes it. An egress refusal seen by the
// transport stays reachable with errors.As even if the SDK flattened the
// chain. Whether the request was sent is the caller's finding (notSent): a
// refused dial is one of the ways a request never gets a connection.
func (rt *roundTripper) fail(s Server, step string, err error, notSent bool) *CallError {
	var r *egress.Refusal
	if !errors.As(err, &r) {
		if r = rt.refused(); r != nil {
			err = errors.Join(err, r)
		}
	}
	msg := fmt.Sprintf("mcp server %q: %s: %v", s.Name, step, err)
	if s.Token != "" {
		msg = strings.ReplaceAll(msg, s.Token, "[redacted]")
	}
	return &CallError{NotSent: notSent, Status: rt.failedStatus(), Message: msg, cause: err}
}

// effectOf reads the server's hints. They are only hints, but an unannotated
// or unknown tool is treated as a write, the safe assumption for retries.
func effectOf(a *mcp.ToolAnnotations) Effect {
	switch {
	case a == nil:
		return EffectWrite
	case a.ReadOnlyHint:
		return EffectRead
	case a.IdempotentHint:
		return EffectIdempotent
	default:
		return EffectWrite
	}
}

func resultOf(r *mcp.CallToolResult) Result {
	var texts []string
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			texts = append(texts, t.Text)
		}
	}
	text := strings.Join(texts, "\n")
	if len(texts) == 0 && r.StructuredContent != nil {
		if b, err := json.Marshal(r.StructuredContent); err == nil {
			text = string(b)
		}
	}
	return Result{Text: text, IsError: r.IsError}
}
