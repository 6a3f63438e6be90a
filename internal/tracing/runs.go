package tracing

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// RunOfObject places an AgentRun in its tree's trace.
func RunOfObject(run *arv1.AgentRun) Run {
	return RunOf(string(run.UID), run.Annotations[AnnotationTraceparent])
}

// Written is one status write of a run, after it succeeded: what the run
// was before (as stored) and what it is now, with the journal's visits.
type Written struct {
	Run    *arv1.AgentRun
	Before *arv1.AgentRunStatus
	// Visits are the journal's stage visits as this reconcile folded them.
	Visits []journal.Visit
	// FailureClass is the class of the journal's last failure, for a run
	// that ended in Error.
	FailureClass string
	Now          time.Time
}

// StatusWritten emits the spans of what this write ended: stage visits
// the run left, the wait it stopped waiting on, and the run itself when
// it reached a terminal phase. The stored status is the record of what
// was emitted: a write that fails emits nothing, and the next reconcile,
// reading the same status, emits it then; nothing ends twice, because
// what ended is in the status read next.
func (t *Tracer) StatusWritten(w Written) {
	if t == nil {
		return
	}
	r := RunOfObject(w.Run)
	before := visitsIn(w.Before)
	// The visits that were open before this write: the last one recorded
	// (none is open on a finished run, which is never reconciled here).
	for i := max(before-1, 0); i < len(w.Visits); i++ {
		if v := w.Visits[i]; v.Ended {
			t.visit(r, i, v)
		}
	}
	if wo := w.Before.WaitingOn; wo != nil && wo.Since != nil && !sameWait(wo, w.Run.Status.WaitingOn) {
		t.wait(r, r.VisitOrRun(before-1), wo, w.Now)
	}
	if !w.Before.Phase.IsTerminal() && w.Run.Status.Phase.IsTerminal() {
		t.run(r, w)
	}
}

// visitsIn counts the visits a status records.
func visitsIn(st *arv1.AgentRunStatus) int {
	n := 0
	for _, s := range st.Stages {
		n += int(s.Visits)
	}
	return n
}

func sameWait(a, b *arv1.WaitingOn) bool {
	return b != nil && a.Reason == b.Reason && b.Since != nil && a.Since.Equal(b.Since)
}

func (t *Tracer) visit(r Run, i int, v journal.Visit) {
	s := Span{
		Trace: r.Trace, ID: r.Visit(i), Parent: r.Span(), Name: "stage " + v.Stage, Kind: trace.SpanKindInternal,
		Start: v.Entered, End: v.Left,
		Attrs: []attribute.KeyValue{
			attribute.String("agentrun.stage", v.Stage),
			attribute.Int("agentrun.stage.visit", i),
		},
	}
	if v.Failed {
		s.Error = "StageFailed"
	}
	t.Emit(s)
}

// wait emits a wait's span: how long the run waited, on what, and whether
// on a person (a gate, a checkpoint, a question) or on setup.
func (t *Tracer) wait(r Run, parent trace.SpanID, w *arv1.WaitingOn, now time.Time) {
	attrs := []attribute.KeyValue{
		attribute.String("agentrun.wait.reason", string(w.Reason)),
		attribute.Bool("agentrun.wait.needs_person", w.NeedsAPerson),
	}
	if w.Blocker != "" {
		attrs = append(attrs, attribute.String("agentrun.wait.blocker", string(w.Blocker)))
	}
	if w.Point != "" {
		attrs = append(attrs, attribute.String("agentrun.wait.point", w.Point))
	}
	t.Emit(Span{
		Trace: r.Trace, ID: r.Wait(string(w.Reason), w.Since.UnixNano()), Parent: parent,
		Name: "wait " + string(w.Reason), Kind: trace.SpanKindInternal, Start: w.Since.Time, End: now, Attrs: attrs,
	})
}

// run emits the run's span, "invoke_agent <agent>", from its creation to
// the write that finished it.
func (t *Tracer) run(r Run, w Written) {
	run, st := w.Run, &w.Run.Status
	agent := st.AgentName
	if agent == "" {
		agent = run.Spec.Agent
	}
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "invoke_agent"),
		attribute.String("gen_ai.agent.name", agent),
		attribute.String("gen_ai.agent.id", string(run.UID)),
		attribute.String("gen_ai.conversation.id", string(run.UID)),
		attribute.String("k8s.namespace.name", run.Namespace),
		attribute.String("agentrun.run", run.Name),
		attribute.String("agentrun.phase", string(st.Phase)),
		attribute.Int("agentrun.depth", int(run.Spec.Depth)),
		attribute.Int64("gen_ai.usage.input_tokens", st.Usage.PromptTokens+st.Usage.CachedTokens+st.Usage.CacheWriteTokens),
		attribute.Int64("gen_ai.usage.output_tokens", st.Usage.CompletionTokens),
		attribute.Int64("agentrun.model_calls", st.Usage.ModelCalls),
		attribute.Int64("agentrun.tool_calls", st.Usage.ToolCalls),
	}
	if st.ParentRun != "" {
		attrs = append(attrs, attribute.String("agentrun.parent_run", st.ParentRun))
	}
	if k := run.Labels[arv1.LabelChildKind]; k != "" {
		attrs = append(attrs, attribute.String("agentrun.child.kind", k))
	}
	s := Span{
		Trace: r.Trace, ID: r.Span(), Parent: r.Parent, Name: "invoke_agent " + agent, Kind: trace.SpanKindInternal,
		Start: run.CreationTimestamp.Time, End: w.Now, Attrs: attrs,
	}
	if st.Phase == arv1.PhaseError {
		s.Error = w.FailureClass
		if s.Error == "" {
			s.Error = "RunFailed"
		}
	}
	t.Emit(s)
}
