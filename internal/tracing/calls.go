package tracing

import (
	"encoding/json"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
)

// Parent is where a step's span goes: the run, and the span it is a child
// of (the stage visit the call was made in).
type Parent struct {
	Run  Run
	Span trace.SpanID
}

// ModelCall is a finished model call, as its step saw it.
type ModelCall struct {
	Parent Parent
	// Intent is the call's intent (seq, stage, provider entry, model,
	// purpose).
	Intent journal.Entry
	// ProviderType is the provider entry's type (openai, anthropic,
	// scripted): gen_ai.provider.name.
	ProviderType string
	Start, End   time.Time
	// Answer and Usage are what the journal recorded of a completed call;
	// ResponseModel and FinishReason what the provider said, if it did.
	Answer        *journal.Response
	Usage         *journal.Usage
	ResponseModel string
	FinishReason  string
	// Failure is the classified failure of a failed call.
	Failure *journal.Failure
	// Request is read for its prompts only when content capture is on.
	Request *providers.Request
}

// ModelCall emits a model call's span: "chat <model>", kind CLIENT, with
// the GenAI attributes. Content goes in only when the Tracer allows it.
func (t *Tracer) ModelCall(c ModelCall) {
	if t == nil {
		return
	}
	in := c.Intent
	attrs := make([]attribute.KeyValue, 0, 16)
	attrs = append(attrs,
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.provider.name", c.ProviderType),
		attribute.String("gen_ai.system", c.ProviderType),
		attribute.String("gen_ai.request.model", in.Model),
		attribute.String("gen_ai.conversation.id", c.Parent.Run.UID),
		attribute.String("agentrun.provider", in.Provider),
		attribute.String("agentrun.stage", in.Stage),
		attribute.Int("agentrun.iteration", in.Iteration),
		attribute.Int64("agentrun.journal.seq", in.Seq),
	)
	if in.Purpose != "" {
		attrs = append(attrs, attribute.String("agentrun.call.purpose", in.Purpose))
	}
	if in.Lost > 0 {
		attrs = append(attrs, attribute.Int("agentrun.call.lost", in.Lost))
	}
	if c.ResponseModel != "" {
		attrs = append(attrs, attribute.String("gen_ai.response.model", c.ResponseModel))
	}
	if u := c.Usage; u != nil {
		attrs = append(attrs,
			// input_tokens counts every input token, cached ones included.
			attribute.Int64("gen_ai.usage.input_tokens", u.Prompt+u.Cached+u.CacheWrite),
			attribute.Int64("gen_ai.usage.output_tokens", u.Completion),
		)
		if u.Cached > 0 {
			attrs = append(attrs, attribute.Int64("gen_ai.usage.cache_read.input_tokens", u.Cached))
		}
		if u.CacheWrite > 0 {
			attrs = append(attrs, attribute.Int64("gen_ai.usage.cache_creation.input_tokens", u.CacheWrite))
		}
	}
	if c.FinishReason != "" {
		attrs = append(attrs, attribute.StringSlice("gen_ai.response.finish_reasons", []string{c.FinishReason}))
	}
	s := Span{
		Trace: c.Parent.Run.Trace, ID: c.Parent.Run.Call(in.Seq), Parent: c.Parent.Span,
		Name: "chat " + in.Model, Kind: trace.SpanKindClient, Start: c.Start, End: c.End,
	}
	if f := c.Failure; f != nil {
		s.Error = string(f.Class)
		if f.Status != 0 {
			attrs = append(attrs, attribute.Int("http.response.status_code", f.Status))
		}
	}
	if t.content {
		attrs = append(attrs, contentAttrs(c)...)
	}
	s.Attrs = attrs
	t.Emit(s)
}

// message is one message of gen_ai.input.messages / gen_ai.output.messages.
type message struct {
	Role         string `json:"role"`
	Parts        []part `json:"parts"`
	FinishReason string `json:"finish_reason,omitempty"`
}

type part struct {
	Type    string `json:"type"`
	Content string `json:"content"`
}

func text(role, s string) message {
	return message{Role: role, Parts: []part{{Type: "text", Content: s}}}
}

// contentAttrs are the prompts the call sent and the answer it got, in the
// GenAI conventions' message form: only with content capture on.
func contentAttrs(c ModelCall) []attribute.KeyValue {
	var out []attribute.KeyValue
	if r := c.Request; r != nil {
		var msgs []message
		if r.SystemPrompt != "" {
			msgs = append(msgs, text("system", r.SystemPrompt))
		}
		if r.Task != "" {
			msgs = append(msgs, text("user", r.Task))
		}
		for _, turn := range r.History {
			if turn.Assistant != "" {
				msgs = append(msgs, text("assistant", turn.Assistant))
			}
			if turn.Feedback != "" {
				msgs = append(msgs, text("user", turn.Feedback))
			}
		}
		for _, m := range r.Messages {
			msgs = append(msgs, text("user", m))
		}
		for _, n := range r.Notices {
			msgs = append(msgs, text("user", n))
		}
		if b, err := json.Marshal(msgs); err == nil {
			out = append(out, attribute.String("gen_ai.input.messages", string(b)))
		}
	}
	if a := c.Answer; a != nil {
		m := text("assistant", a.Text)
		m.FinishReason = c.FinishReason
		if b, err := json.Marshal([]message{m}); err == nil {
			out = append(out, attribute.String("gen_ai.output.messages", string(b)))
		}
	}
	return out
}

// ToolCall is a finished MCP tool call, as its step saw it.
type ToolCall struct {
	Parent Parent
	// Intent is the call's intent (seq, tool, effect, server).
	Intent     journal.Entry
	Start, End time.Time
	// Outcome is "ok", or how it failed: "failed", "tool_error",
	// "not_sent", "unsettled" (a write that may have happened).
	Outcome string
}

// ToolCall emits a tool call's span: "execute_tool <tool>", with the tool,
// its effect and its server, never its arguments or result.
func (t *Tracer) ToolCall(c ToolCall) {
	if t == nil {
		return
	}
	in := c.Intent
	s := Span{
		Trace: c.Parent.Run.Trace, ID: c.Parent.Run.Call(in.Seq), Parent: c.Parent.Span,
		Name: "execute_tool " + in.Tool, Kind: trace.SpanKindInternal, Start: c.Start, End: c.End,
		Attrs: []attribute.KeyValue{
			attribute.String("gen_ai.operation.name", "execute_tool"),
			attribute.String("gen_ai.tool.name", in.Tool),
			attribute.String("gen_ai.tool.type", "extension"),
			attribute.String("agentrun.tool.effect", in.Effect),
			attribute.String("agentrun.tool.server", in.Server),
			attribute.String("agentrun.tool.outcome", c.Outcome),
			attribute.Int64("agentrun.journal.seq", in.Seq),
		},
	}
	if c.Outcome != "ok" {
		s.Error = c.Outcome
	}
	t.Emit(s)
}
