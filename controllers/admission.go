package controllers

import (
	"context"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/admission"
)

func admissionRun(run *arv1.AgentRun) admission.Run {
	return admission.Run{UID: run.UID, Namespace: run.Namespace, Name: run.Name, Place: admission.PlaceOf(run)}
}

// queuedShownAfter is how long a run waits in line before its status says
// Queued: most runs of a burst get their turn within it, and writing
// Queued (then clearing it) would cost every one of them a status write.
const queuedShownAfter = 5 * time.Second

// admit reports whether the run may be driven now, and if not, how long it
// has waited. The first call in a process first puts every run that was
// working in line, in order, so after a restart runs are taken up first
// come, first served rather than in the order the cache lists them.
func (r *AgentRunReconciler) admit(ctx context.Context, run *arv1.AgentRun, now time.Time) (bool, time.Duration) {
	r.seedOnce.Do(func() { r.seedAdmission(ctx) })
	ok, since := r.admission.Admit(admissionRun(run), now)
	return ok, now.Sub(since)
}

func (r *AgentRunReconciler) seedAdmission(ctx context.Context) {
	var list arv1.AgentRunList
	if err := r.runsReader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing runs to admit in order; admitting as they come")
		return
	}
	r.admission.Enqueue(working(list.Items)...)
}

// working is the runs that were being driven (not parked, not finished),
// as admission sees them.
func working(runs []arv1.AgentRun) []admission.Run {
	var line []admission.Run
	for i := range runs {
		if p := runs[i].Status.Phase; p.IsUnstarted() || p == arv1.PhaseStarting || p == arv1.PhaseRunning {
			line = append(line, admissionRun(&runs[i]))
		}
	}
	return line
}

// releaseIfIdle gives the run's slot back when it no longer works: it
// finished, parked or is paused, or it waits on MCP servers only (its tool
// listing, a slot of the server's lane, or tool calls in flight), so that
// runs held up by a slow or hung server do not hold the active-run slots
// every other run needs. Something waking it (the call's end among them)
// queues it again, with its place.
func (r *AgentRunReconciler) releaseIfIdle(run *arv1.AgentRun, out actOutcome) {
	switch {
	case out.catalogWait || out.serverWait || r.pool.OnlyRemote(run.UID):
	case run.Status.Phase == arv1.PhaseStarting, run.Status.Phase == arv1.PhaseRunning:
		return
	}
	r.admission.Release(run.UID)
}
