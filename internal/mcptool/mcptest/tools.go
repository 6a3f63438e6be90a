package mcptest

import (
	"github.com/agentrun-dev/agentrun-operator/internal/shards"

	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentrun-dev/agentrun-operator/internal/mcptool"
)

type docArgs struct {
	ID string `json:"id" jsonschema:"the document id"`
}

type recordArgs struct {
	ID    string `json:"id" jsonschema:"the record id"`
	Value string `json:"value" jsonschema:"the value to store"`
}

type ticketArgs struct {
	Title    string `json:"title" jsonschema:"the ticket title"`
	Priority string `json:"priority,omitempty" jsonschema:"the ticket priority (p0 pages the on-call engineer)"`
}

// register adds one tool per effect class the client distinguishes (read,
// idempotent, write) plus one that always fails, so tests cover each branch.
func (s *Server) register(srv *mcp.Server) {
	addTool(s, srv, &mcp.Tool{
		Name:        "read_doc",
		Description: "Reads a document.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(a docArgs) *mcp.CallToolResult {
		return text("doc " + a.ID)
	})
	addTool(s, srv, &mcp.Tool{
		Name:        "upsert_record",
		Description: "Creates or replaces a record.",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true},
	}, func(a recordArgs) *mcp.CallToolResult {
		return text("upserted " + a.ID)
	})
	// No annotations on purpose: a client must treat an unannotated tool as
	// a write.
	addTool(s, srv, &mcp.Tool{
		Name:        "create_ticket",
		Description: "Opens a ticket.",
	}, func(a ticketArgs) *mcp.CallToolResult {
		s.mu.Lock()
		s.tickets++
		n := s.tickets
		s.mu.Unlock()
		return text(fmt.Sprintf("ticket %d created: %s", n, a.Title))
	})
	addTool(s, srv, &mcp.Tool{
		Name:        "fail_tool",
		Description: "Always fails.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(struct{}) *mcp.CallToolResult {
		r := text("boom")
		r.IsError = true
		return r
	})
}

// addTool wraps body with the bookkeeping every tool shares: count the call
// and its idempotency key, honour holds and delays, then count the execution.
func addTool[In any](s *Server, srv *mcp.Server, t *mcp.Tool, body func(In) *mcp.CallToolResult) {
	mcp.AddTool(srv, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
		// The SDK hands _meta to the handler as a decoded map, so a string
		// key arrives as a Go string.
		key, _ := req.Params.Meta[mcptool.IdempotencyMetaKey].(string)
		var replica string
		if req.Extra != nil {
			replica = req.Extra.Header.Get(shards.ReplicaHeader)
		}
		defer s.leave(t.Name)
		at, err := s.enter(ctx, t.Name, key, replica)
		s.mu.Lock()
		s.log[at].Args = string(req.Params.Arguments)
		s.mu.Unlock()
		if err != nil {
			return nil, nil, err
		}
		res := body(in)
		s.mu.Lock()
		s.executed[t.Name]++
		s.log[at].Executed = true
		s.mu.Unlock()
		return res, nil, nil
	})
}

// leave undoes enter's in-flight count, however the handler ends.
func (s *Server) leave(tool string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight[tool]--
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}
