package tracing

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// AnnotationTraceparent is set on a child run when it is created: the W3C
// traceparent of the span it runs under (its parent's stage visit), so a
// child driven by another replica or shard joins its tree's trace.
const AnnotationTraceparent = "agentrun.dev/traceparent"

// Run is a run's place in its tree's trace. Every ID is derived from the
// run's UID and the journal's positions, so whoever drives the run, before
// or after a restart, names the same spans the same way.
type Run struct {
	UID string
	// Trace is the tree's trace: derived from the root run's UID, and
	// carried to its descendants in AnnotationTraceparent.
	Trace trace.TraceID
	// Parent is the span the run's own span is a child of (a stage visit
	// of its parent run); zero for a root run.
	Parent trace.SpanID
}

// RunOf places a run from its UID and its traceparent annotation (empty
// for a root run, or a child made before tracing was on: its own trace).
func RunOf(uid, traceparent string) Run {
	r := Run{UID: uid}
	if tid, sid, ok := ParseTraceparent(traceparent); ok {
		r.Trace, r.Parent = tid, sid
		return r
	}
	copy(r.Trace[:], digest("trace", uid))
	return r
}

// Span is the run's own span.
func (r Run) Span() trace.SpanID { return spanID("run", r.UID) }

// Visit is the span of the run's n-th stage visit (0-based, in the order
// of the journal's visits).
func (r Run) Visit(n int) trace.SpanID { return spanID("visit", r.UID, fmt.Sprint(n)) }

// VisitOrRun is the span of visit n, or the run's when there is none yet
// (a run waiting before it started).
func (r Run) VisitOrRun(n int) trace.SpanID {
	if n < 0 {
		return r.Span()
	}
	return r.Visit(n)
}

// Call is the span of the call whose intent has journal seq seq.
func (r Run) Call(seq int64) trace.SpanID { return spanID("call", r.UID, fmt.Sprint(seq)) }

// Wait is the span of a wait that began at sinceNanos for reason.
func (r Run) Wait(reason string, sinceNanos int64) trace.SpanID {
	return spanID("wait", r.UID, reason, fmt.Sprint(sinceNanos))
}

// Traceparent is the W3C traceparent of span parent in the run's trace,
// for a child created under it.
func (r Run) Traceparent(parent trace.SpanID) string {
	return "00-" + r.Trace.String() + "-" + parent.String() + "-01"
}

// ParseTraceparent reads a W3C traceparent (version 00).
func ParseTraceparent(s string) (trace.TraceID, trace.SpanID, bool) {
	parts := strings.Split(strings.TrimSpace(s), "-")
	if len(parts) < 4 || parts[0] != "00" {
		return trace.TraceID{}, trace.SpanID{}, false
	}
	tid, err := trace.TraceIDFromHex(parts[1])
	if err != nil {
		return trace.TraceID{}, trace.SpanID{}, false
	}
	sid, err := trace.SpanIDFromHex(parts[2])
	if err != nil {
		return trace.TraceID{}, trace.SpanID{}, false
	}
	return tid, sid, true
}

func digest(parts ...string) []byte {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return h[:]
}

func spanID(parts ...string) trace.SpanID {
	var s trace.SpanID
	copy(s[:], digest(parts...))
	if !s.IsValid() {
		s[7] = 1
	}
	return s
}

// givenIDs is the SDK's IDGenerator: it hands out the IDs Emit put in the
// context, and random ones to anything else.
type givenIDs struct{}

type idsKey struct{}

type ids struct {
	trace trace.TraceID
	span  trace.SpanID
}

func withIDs(ctx context.Context, t trace.TraceID, s trace.SpanID) context.Context {
	return context.WithValue(ctx, idsKey{}, ids{trace: t, span: s})
}

func (givenIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if v, ok := ctx.Value(idsKey{}).(ids); ok && v.trace.IsValid() && v.span.IsValid() {
		return v.trace, v.span
	}
	var t trace.TraceID
	_, _ = rand.Read(t[:])
	return t, randomSpan()
}

func (givenIDs) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if v, ok := ctx.Value(idsKey{}).(ids); ok && v.span.IsValid() {
		return v.span
	}
	return randomSpan()
}

func randomSpan() trace.SpanID {
	var b [8]byte
	_, _ = rand.Read(b[:])
	if binary.BigEndian.Uint64(b[:]) == 0 {
		b[7] = 1
	}
	return trace.SpanID(b)
}
