package controllers

// Events: every Kubernetes Event the reconciler emits is made here, from
// what a reconcile changed, after its status write persisted it (a run
// never reports what its status does not show).

import (
	"fmt"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
)

// emitEvents reports, after status persisted, where a run ended up and why
// it parks, with the remedy in the message so `kubectl describe` shows
// what to do. Moving between Starting and Running is not an event: every
// event is a write to the API server, and those two say nothing a person
// acts on.
func (r *AgentRunReconciler) emitEvents(run *arv1.AgentRun, before *arv1.AgentRunStatus) {
	st := &run.Status
	if w := st.WaitingOn; w != nil && (before.WaitingOn == nil || before.WaitingOn.Reason != w.Reason || before.WaitingOn.Blocker != w.Blocker) {
		typ := corev1.EventTypeNormal
		if w.NeedsAPerson {
			typ = corev1.EventTypeWarning
		}
		r.recorder.Eventf(run, nil, typ, string(w.Reason), "Park", "Waiting on %s: %s", w.Summary, waitMessage(w))
	}
	r.emitSignalEvents(run, before)
	switch st.Phase {
	case before.Phase, arv1.PhaseQueued, arv1.PhaseStarting, arv1.PhaseRunning, arv1.PhaseWaitingInput:
		return
	}
	typ, msg := corev1.EventTypeNormal, fmt.Sprintf("Phase changed from %s to %s", orNone(string(before.Phase)), st.Phase)
	if st.Phase == arv1.PhaseError {
		typ, msg = corev1.EventTypeWarning, msg+": "+st.Error
	}
	r.recorder.Eventf(run, nil, typ, string(st.Phase), "PhaseChange", "%s", msg)
}

// emitSignalEvents warns when the runtime, not the model, moved the run
// (an error, stuck or dead_end edge: something went wrong and was
// recovered from), and when output stands unvalidated because its
// validator cannot run here.
func (r *AgentRunReconciler) emitSignalEvents(run *arv1.AgentRun, before *arv1.AgentRunStatus) {
	st := &run.Status
	if l := newSignalEdge(before, st); l != nil {
		r.recorder.Eventf(run, nil, corev1.EventTypeWarning, arv1.ReasonSignalTransition, "Transition",
			"Took the %s edge from stage %s to %s: %s", l.Condition, l.From, l.To, l.Reason)
	}
	if st.Flags.BrokenScripts && !before.Flags.BrokenScripts {
		r.recorder.Eventf(run, nil, corev1.EventTypeWarning, arv1.ReasonValidatorNotRun, "CheckOutput",
			"The output validator is a Leviath script this operator cannot run; the output was checked against its format and schema only")
	}
}

// newSignalEdge is the stage change after took that before did not show,
// when the runtime took it (an error, stuck or dead_end edge), else nil.
func newSignalEdge(before, after *arv1.AgentRunStatus) *arv1.StageTransition {
	l := after.LastTransition
	if l == nil || reflect.DeepEqual(l, before.LastTransition) {
		return nil
	}
	switch l.Condition {
	case blueprint.CondError, blueprint.CondStuck, blueprint.CondDeadEnd:
		return l
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// reportFailover says, where people look, which of the stage's models
// were passed over to call this one.
func (r *AgentRunReconciler) reportFailover(run *arv1.AgentRun, res *resolved) {
	var parts []string
	for _, sk := range res.skipped {
		parts = append(parts, sk.Ref+" ("+sk.Why+")")
	}
	r.recorder.Eventf(run, nil, corev1.EventTypeNormal, arv1.ReasonModelFailover, "Dispatch",
		"Calling %s/%s: skipped %s", res.provider.Name, res.model, strings.Join(parts, ", "))
}

// warnUnmeasured says, once per stage visit, that a same-file-edits
// threshold is a no-op here, rather than letting it silently never fire.
func (r *AgentRunReconciler) warnUnmeasured(run *arv1.AgentRun, stage *blueprint.Stage) {
	r.recorder.Eventf(run, nil, corev1.EventTypeWarning, arv1.ReasonStuckThresholdUnmeasured, "Stuck",
		"Stage %s: stuck_after_same_file_edits counts write_file and edit_file calls, and the stage offers neither tool, so that threshold cannot fire", stage.Name)
}

// warnUnoffered says where people look that the model was not offered a
// server's tools this turn, with the remedy.
func (r *AgentRunReconciler) warnUnoffered(run *arv1.AgentRun, o *offer) {
	for _, sk := range o.skipped {
		reason := arv1.BlockerToolServerUnavailable
		if sk.blocker != "" {
			reason = sk.blocker
		}
		r.recorder.Eventf(run, nil, corev1.EventTypeWarning, string(reason), "OfferTools",
			"The tools of MCP server %q are not offered to the model this turn: %s", sk.server, clipTo(sk.why, 600))
	}
}

// reportStalled says, once the status shows it, that the run stalled on
// an error retrying cannot fix.
func (r *AgentRunReconciler) reportStalled(run *arv1.AgentRun, stalled error) {
	r.recorder.Eventf(run, nil, corev1.EventTypeWarning, arv1.ReasonReconcileFailed, "Reconcile", "%s",
		clipTo(capitalize(stalled.Error()), 1024))
}
