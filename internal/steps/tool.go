package steps

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/a2atool"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool"
	"github.com/agentrun-dev/agentrun-operator/internal/metrics"
	"github.com/agentrun-dev/agentrun-operator/internal/retry"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/toolcatalog"
	"github.com/agentrun-dev/agentrun-operator/internal/tracing"
)

// MaxToolResult caps a tool result kept in the journal.
const MaxToolResult = 64 << 10

// ToolCall is one MCP tool call to make, or a call of a remote A2A agent
// (Server.Protocol).
type ToolCall struct {
	Run *arv1.AgentRun
	// Intent is the call's intent (for a write or idempotent tool recorded
	// in status before the call); it is journaled with the outcome.
	Intent journal.Entry
	Server mcptool.Server
	// Trace is where the call's span goes, when tracing is on.
	Trace tracing.Parent
	// Next, when set, is asked after the tool answered what the run does
	// next (see ModelCall.Next).
	Next func(ctx context.Context, done []journal.Entry) *Continuation
}

// Lane is the executor lane of calls to a server: a hung server holds at
// most the lane's slots.
func Lane(s mcptool.Server) string { return "mcp:" + s.URL }

// RunToolCall calls the tool. Reads and idempotent calls are retried on
// transport failures; a write whose request may have reached the server is
// never retried here: nothing is journaled, its intent stays pending in
// status, and the run parks on NeedsReconciliation for a person to settle.
func (rt *Runtime) RunToolCall(ctx context.Context, c ToolCall) {
	c.Next = nil // the reconcile's tool calls hand the run back
	rt.toolCallOnce(ctx, c)
}

// toolCallOnce makes one tool call and journals its outcome, with the next
// call's intent when there is one to make (returned).
func (rt *Runtime) toolCallOnce(ctx context.Context, c ToolCall) *Continuation {
	log := rt.logFor(ctx, "tool", c.Run, "seq", c.Intent.Seq, "tool", c.Intent.Tool)
	started, start := time.Now(), rt.Clock.Now()
	res, err := rt.callTool(ctx, c)
	stopped := ctx.Err() != nil
	if stopped {
		if err != nil {
			log.V(1).Info("Tool call cancelled before completion; its intent stays pending")
			return nil
		}
		// The call finished before the cancel: its result is known, so it
		// is journaled rather than left for a person to reconcile.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
	}
	in := c.Intent
	done := journal.Entry{Seq: in.Seq + 1, Kind: journal.ToolCallCompleted, Call: in.Seq, At: rt.Clock.Now(), Index: in.Index, Tool: in.Tool}
	outcome := "ok"
	var ce *mcptool.CallError
	switch {
	case err != nil && errors.As(err, &ce) && ce.NotSent:
		// Never reached the server: safe to issue again once it is back.
		rt.Catalog.Forget(toolcatalog.KeyIn(c.Run.Namespace, c.Server))
		outcome = "not_sent"
		done.Kind = journal.ToolCallRetried
		done.By = "operator: the call never reached the server (" + clip(err.Error(), 200) + ")"
	case err != nil && in.Effect == blueprint.EffectWrite:
		metrics.RecordToolCall(c.Server.Name, in.Effect, "unsettled", time.Since(started))
		rt.traceToolCall(c, start, "unsettled")
		log.Info("Write tool call failed after it may have reached the server; a person must settle it", "error", err.Error())
		return nil
	case err != nil:
		outcome = "failed"
		done.Result, done.IsError = "The tool server failed: "+clip(err.Error(), 1000), true
	default:
		done.Result, done.IsError = clip(res.Text, MaxToolResult), res.IsError
		if res.IsError {
			outcome = "tool_error"
		}
	}
	metrics.RecordToolCall(c.Server.Name, in.Effect, outcome, time.Since(started))
	entries := []journal.Entry{in, done}
	var next *Continuation
	if c.Next != nil && done.Kind == journal.ToolCallCompleted && !stopped {
		if next = c.Next(ctx, entries); next != nil {
			entries = append(entries, next.Intent())
		}
	}
	err = rt.record(ctx, c.Run, nil, entries...)
	switch {
	case rt.keep(c.Run, err, nil, in, done):
		log.Error(err, "The store is unavailable; the tool's result is kept until it is back, and the run waits on it")
	case errors.Is(err, store.ErrRefused):
		log.Error(err, "The API server refuses to journal the tool call's completion; the result is not kept and the run stalls until the cause is fixed")
	case err != nil:
		log.Error(err, "Journaling the tool call's completion failed; a read or idempotent call is issued again, a write waits for a person")
	}
	rt.traceToolCall(c, start, outcome)
	return followed(ctx, next, err) // never after a stop: next is nil then
}

// traceToolCall emits the call's span, when tracing is on.
func (rt *Runtime) traceToolCall(c ToolCall, start time.Time, outcome string) {
	if rt.Tracer.On() {
		rt.Tracer.ToolCall(tracing.ToolCall{Parent: c.Trace, Intent: c.Intent, Start: start, End: rt.Clock.Now(), Outcome: outcome})
	}
}

func (rt *Runtime) callTool(ctx context.Context, c ToolCall) (mcptool.Result, error) {
	var res mcptool.Result
	b := retry.Backoff{Attempts: 3, Base: 500 * time.Millisecond, Cap: 10 * time.Second, Jitter: 0.5}
	_, err := retry.Do(ctx, b, func(int) (bool, error) {
		callCtx, cancel := context.WithTimeout(ctx, rt.StepTimeout)
		defer cancel()
		var err error
		if c.Server.Protocol == mcptool.ProtocolA2A {
			res, err = a2atool.Call(callCtx, rt.HTTP(c.Run.Namespace), c.Server, json.RawMessage(c.Intent.Input))
		} else {
			res, err = mcptool.Call(callCtx, rt.HTTP(c.Run.Namespace), c.Server, c.Intent.Tool, json.RawMessage(c.Intent.Input), c.Intent.IdempotencyKey)
		}
		if err == nil {
			return false, nil
		}
		var ce *mcptool.CallError
		notSent := errors.As(err, &ce) && ce.NotSent
		return notSent || c.Intent.Effect != blueprint.EffectWrite, err
	})
	return res, err
}

// Listing is one tool-catalog listing to make.
type Listing struct {
	// Namespace is where the runs needing it are (whose egress rules apply).
	Namespace string
	Server    mcptool.Server
}

// RunListing lists the server's tools into the catalog, failure included
// (with its retry time), and wakes the runs waiting for it.
func (rt *Runtime) RunListing(ctx context.Context, l Listing) {
	key := toolcatalog.KeyIn(l.Namespace, l.Server)
	lctx, cancel := context.WithTimeout(ctx, rt.ListTimeout)
	defer cancel()
	var tools []mcptool.Tool
	var err error
	if l.Server.Protocol == mcptool.ProtocolA2A {
		tools, err = a2atool.List(lctx, rt.HTTP(l.Namespace), l.Server)
	} else {
		tools, err = mcptool.List(lctx, rt.HTTP(l.Namespace), l.Server)
	}
	if ctx.Err() != nil {
		rt.Catalog.Abort(key) // manager stopping: nothing learnt
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = "failed"
	}
	metrics.RecordToolListing(l.Server.Name, outcome)
	rt.Wake(rt.Catalog.Finish(key, tools, err, rt.Clock.Now())...)
}
