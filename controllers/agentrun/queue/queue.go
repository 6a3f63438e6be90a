package queue

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/perrun"
	"github.com/agentrun-dev/agentrun-operator/internal/priority"
	"github.com/agentrun-dev/agentrun-operator/internal/runqueue"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// ShownAfter is how long a run waits in line before its status says
// Queued: most runs of a burst get their turn within it, and writing
// Queued (then clearing it) would cost every one of them a status write.
const ShownAfter = 5 * time.Second

// Options are what a Queue is built from.
type Options struct {
	// Cache reads quotas and Namespaces (metadata) from the manager's cache.
	Cache client.Reader
	// Runs reads AgentRuns: the manager's cache, or the shards' caches.
	Runs client.Reader
	// Quotas counts quotas in the database store (nil: none).
	Quotas store.Quotas
	// Cluster: ClusterAgentRunQuotas apply (a cluster-wide install).
	Cluster bool
	// MaxActiveRuns bounds the runs driven at once (0: no bound).
	MaxActiveRuns int
	// MaxActiveRunsPerNamespace is a namespace's default bound (0: none).
	MaxActiveRunsPerNamespace int
	// Priorities are the cluster's priority classes (nil: none).
	Priorities *priority.Store
	// Wake re-queues runs whose turn came.
	Wake func(...types.NamespacedName)
}

// Queue decides when a run may be driven: an active-run slot, in order of
// priority and then first come, first served, within the manager's and
// each namespace's bounds; and room in the quotas that count it.
type Queue struct {
	runs       client.Reader
	line       *runqueue.Controller
	caps       *namespaceCaps
	priorities *priority.Store
	seedOnce   sync.Once
	quotas     *quotaGate
}

// New builds a Queue.
func New(o Options) *Queue {
	q := &Queue{runs: o.Runs, priorities: o.Priorities, caps: newNamespaceCaps(o.MaxActiveRunsPerNamespace)}
	q.line = runqueue.New(o.MaxActiveRuns, q.caps.limit, func(ns, name string) { o.Wake(types.NamespacedName{Namespace: ns, Name: name}) })
	q.quotas = newQuotaGate(o.Cache, o.Runs, o.Quotas, o.Cluster, q.cachedRun, o.Wake)
	return q
}

// Slots holds the runs' places in line and their active-run slots (for
// the registry of per-run state).
func (q *Queue) Slots() perrun.Holder { return q.line }

// Quotas holds what is kept of the runs' quotas (for the registry of
// per-run state).
func (q *Queue) Quotas() perrun.Holder { return q.quotas }

// admissionRun is the run as admission sees it (runqueue.RunOf, which
// kubectl agentrun ps places runs in line by too).
func admissionRun(run *arv1.AgentRun, classes priority.Classes, rootOf func(ns, name string) *arv1.AgentRun) runqueue.Run {
	return runqueue.RunOf(run, classes, rootOf)
}

// cachedRun reads a run from the cache (nil when not there); the caller
// must not modify it.
func (q *Queue) cachedRun(ctx context.Context, ns, name string) *arv1.AgentRun {
	var run arv1.AgentRun
	if err := q.runs.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &run, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	return &run
}

// PrioritiesChanged re-orders the runs waiting in line after the priority
// classes changed: each takes its class's new value.
func (q *Queue) PrioritiesChanged(ctx context.Context) {
	classes := q.priorities.Load()
	rootOf := func(ns, name string) *arv1.AgentRun { return q.cachedRun(ctx, ns, name) }
	q.line.Reprioritize(func(w runqueue.Run) int32 {
		run := q.cachedRun(ctx, w.Namespace, w.Name)
		if run == nil {
			return w.Place.Priority
		}
		return admissionRun(run, classes, rootOf).Place.Priority
	})
}

// Admit reports whether the run may be driven now, and if not, how long it
// has waited. The first call in a process first puts every run that was
// working in line, in order, so after a restart runs are taken up by
// priority, then first come, first served, rather than in the order the
// cache lists them.
func (q *Queue) Admit(ctx context.Context, run *arv1.AgentRun, now time.Time) (bool, time.Duration) {
	q.seedOnce.Do(func() { q.seed(ctx) })
	rootOf := func(ns, name string) *arv1.AgentRun { return q.cachedRun(ctx, ns, name) }
	ok, since := q.line.Admit(admissionRun(run, q.priorities.Load(), rootOf), now)
	return ok, now.Sub(since)
}

func (q *Queue) seed(ctx context.Context) {
	var list arv1.AgentRunList
	if err := q.runs.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing runs to admit in order; admitting as they come")
		return
	}
	q.Enqueue(list.Items)
}

// Enqueue puts the runs that were being driven (a shard's, taken over) in
// line, in order.
func (q *Queue) Enqueue(runs []arv1.AgentRun) {
	q.line.Enqueue(working(runs, q.priorities.Load())...)
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

// Release gives the run's active-run slot to the next in line.
func (q *Queue) Release(uid types.UID) { q.line.Release(uid) }

// ReleaseIfIdle gives the run's slot back when it no longer works: it
// finished, parked or is paused, or it waits on MCP servers only
// (onlyServers: its tool listing, a slot of the server's lane, or tool
// calls in flight), so that runs held up by a slow or hung server do not
// hold the active-run slots every other run needs. Something waking it
// (the call's end among them) queues it again, with its place.
func (q *Queue) ReleaseIfIdle(run *arv1.AgentRun, onlyServers bool) {
	switch {
	case onlyServers:
	case run.Status.Phase == arv1.PhaseStarting, run.Status.Phase == arv1.PhaseRunning:
		return
	}
	q.line.Release(run.UID)
}
