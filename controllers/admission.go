package controllers

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/priority"
	"github.com/agentrun-dev/agentrun-operator/internal/runqueue"
)

// admissionRun is the run as admission sees it (runqueue.RunOf, which
// kubectl agentrun ps places runs in line by too).
func admissionRun(run *arv1.AgentRun, classes priority.Classes, rootOf func(ns, name string) *arv1.AgentRun) runqueue.Run {
	return runqueue.RunOf(run, classes, rootOf)
}

// cachedRun reads a run from the cache (nil when not there); the caller
// must not modify it.
func (r *AgentRunReconciler) cachedRun(ctx context.Context, ns, name string) *arv1.AgentRun {
	var run arv1.AgentRun
	if err := r.runsReader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &run, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	return &run
}

// PrioritiesChanged re-orders the runs waiting in line after the priority
// classes changed: each takes its class's new value.
func (r *AgentRunReconciler) PrioritiesChanged(ctx context.Context) {
	classes := r.priorities.Load()
	rootOf := func(ns, name string) *arv1.AgentRun { return r.cachedRun(ctx, ns, name) }
	r.admission.Reprioritize(func(q runqueue.Run) int32 {
		run := r.cachedRun(ctx, q.Namespace, q.Name)
		if run == nil {
			return q.Place.Priority
		}
		return admissionRun(run, classes, rootOf).Place.Priority
	})
}

// queuedShownAfter is how long a run waits in line before its status says
// Queued: most runs of a burst get their turn within it, and writing
// Queued (then clearing it) would cost every one of them a status write.
const queuedShownAfter = 5 * time.Second

// admit reports whether the run may be driven now, and if not, how long it
// has waited. The first call in a process first puts every run that was
// working in line, in order, so after a restart runs are taken up by
// priority, then first come, first served, rather than in the order the
// cache lists them.
func (r *AgentRunReconciler) admit(ctx context.Context, run *arv1.AgentRun, now time.Time) (bool, time.Duration) {
	r.seedOnce.Do(func() { r.seedAdmission(ctx) })
	rootOf := func(ns, name string) *arv1.AgentRun { return r.cachedRun(ctx, ns, name) }
	ok, since := r.admission.Admit(admissionRun(run, r.priorities.Load(), rootOf), now)
	return ok, now.Sub(since)
}

func (r *AgentRunReconciler) seedAdmission(ctx context.Context) {
	var list arv1.AgentRunList
	if err := r.runsReader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing runs to admit in order; admitting as they come")
		return
	}
	r.admission.Enqueue(working(list.Items, r.priorities.Load())...)
}

// working is the runs that were being driven (not parked, not finished),
// as admission sees them.
func working(runs []arv1.AgentRun, classes priority.Classes) []runqueue.Run {
	byName := make(map[types.NamespacedName]*arv1.AgentRun, len(runs))
	for i := range runs {
		byName[types.NamespacedName{Namespace: runs[i].Namespace, Name: runs[i].Name}] = &runs[i]
	}
	rootOf := func(ns, name string) *arv1.AgentRun { return byName[types.NamespacedName{Namespace: ns, Name: name}] }
	var line []runqueue.Run
	for i := range runs {
		if p := runs[i].Status.Phase; p.IsUnstarted() || p == arv1.PhaseStarting || p == arv1.PhaseRunning {
			line = append(line, admissionRun(&runs[i], classes, rootOf))
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
