package controllers

import (
	"github.com/agentrun-dev/agentrun-operator/internal/tracing"
)

// The reconciler's hooks into internal/tracing. Each returns at once when
// tracing is off, before building anything.

// traceParent is where a step's span goes: under the stage visit the run
// is in (the run's own span before its first stage).
func (r *AgentRunReconciler) traceParent(s *scope) tracing.Parent {
	if !r.tracer.On() {
		return tracing.Parent{}
	}
	t := tracing.RunOfObject(s.run)
	return tracing.Parent{Run: t, Span: t.VisitOrRun(len(s.facts.State.Visits) - 1)}
}

// traceStatus emits the spans of what the status just written ended.
func (r *AgentRunReconciler) traceStatus(s *scope) {
	if !r.tracer.On() {
		return
	}
	w := tracing.Written{Run: s.run, Before: &s.before.Status, Now: s.now}
	if f := s.facts; f != nil {
		w.Visits = f.State.Visits
		if fl := f.State.Failure; fl != nil {
			w.FailureClass = string(fl.Class)
		}
	}
	r.tracer.StatusWritten(w)
}
