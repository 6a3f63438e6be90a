package controllers

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/builtin"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
	"github.com/agentrun-dev/agentrun-operator/internal/steps"
)

// Agent work is latency-bound: a model call takes seconds, the manager's
// work between two calls milliseconds. So when a call has answered and the
// run's own journal alone says what comes next (another model call, across
// a transition if need be, or an MCP tool call no gate holds), the step
// that made the call decides it with the reconcile's own derive and
// Decide, journals the completion and the next intent in one write, and
// makes the call, instead of waking the run and waiting in the reconcile
// queue behind every other run.
//
// Anything else is the reconcile's: a wait, a gate, a built-in tool, a
// child, a budget, an error, the end, a spec change it has not observed
// yet, and any status that is more than progress (a condition, a signal
// edge). The step then journals the completion alone and wakes the run, as
// before. Exactly-once holds as for a reconcile's dispatch: the intent is
// on record before the call, a replica that loses its shard's Lease
// cancels the step (its fence), and the journal's resourceVersion fences a
// stale writer out.

// continuation is a call's Next: it decides, for the step that holds the
// run's call, what that step does once the call answered.
func (r *AgentRunReconciler) continuation(ref *arv1.AgentRun) func(context.Context, []journal.Entry) *steps.Continuation {
	key, uid := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, ref.UID
	return func(ctx context.Context, done []journal.Entry) *steps.Continuation {
		return r.continueRun(ctx, key, uid, done)
	}
}

// continueRun is the run's next call (a model call, or an MCP tool call no
// gate holds), or nil to hand the run back to its reconcile.
func (r *AgentRunReconciler) continueRun(ctx context.Context, key types.NamespacedName, uid types.UID, done []journal.Entry) *steps.Continuation {
	run, err := r.runs.Get(ctx, key)
	if err != nil || run == nil || run.UID != uid {
		return nil
	}
	r.first.withHeld(run) // a new run's status not written yet
	if !mayContinue(run) || !r.drives(run) {
		return nil
	}
	s := r.begin(run)
	f, err := r.deriveWith(ctx, run, s.now, false, done)
	if err != nil {
		return nil
	}
	s.facts, s.action = f, runstate.Decide(f.Facts)
	a := s.action
	if a.Reissue || len(a.CreateChildren) > 0 || len(f.listings) > 0 || len(f.answerUpdates) > 0 {
		return nil
	}
	var next *steps.Continuation
	switch a.Kind {
	case runstate.ActDispatch:
		next = r.nextModelCall(ctx, s)
	case runstate.ActToolCall:
		next = r.nextToolCall(s)
	}
	if next == nil {
		return nil
	}
	project(s)
	if !onlyProgress(&s.before.Status, &s.run.Status) {
		// Something people or tools read changed: the reconcile writes it.
		if next.Done != nil {
			next.Done()
		}
		return nil
	}
	effects, k := s.effects, stepKey(run, next.Intent().Seq)
	next.Journaled = func() {
		for _, fn := range effects {
			fn()
		}
		r.statusDue(run, s.now)
	}
	next.NotMade = func() { r.unstarted.mark(k) }
	return next
}

// nextModelCall is the model call Decide asked for, as the step's next.
func (r *AgentRunReconciler) nextModelCall(ctx context.Context, s *scope) *steps.Continuation {
	f, run := s.facts, s.run
	if f.resolved == nil {
		return nil
	}
	intent := modelIntent(f, s.action)
	intent.RequestHash = requestHash(run, &intent)
	call, err := r.modelCall(ctx, s, intent)
	if err != nil || r.quotaCharge(ctx, s, &call, true) != nil {
		return nil
	}
	f.State.Apply(f.Blueprint, intent)
	call.Next = r.continuation(run)
	r.track(run, &call)
	return &steps.Continuation{Call: call}
}

// nextToolCall is the MCP tool call Decide asked for (one no gate holds),
// as the step's next, holding a slot of its server's lane so a hung
// server still holds at most its lane. The built-in tools the reconcile
// runs itself (the agent tools, write_region) are the reconcile's.
func (r *AgentRunReconciler) nextToolCall(s *scope) *steps.Continuation {
	f, run := s.facts, s.run
	h := f.State.HeadCall()
	if h == nil || f.tool == nil || slices.Contains(builtin.AgentTools, h.Name) || h.Name == builtin.WriteRegion {
		return nil
	}
	release, ok := r.pool.TakeLane(steps.Lane(f.tool.server))
	if !ok {
		return nil // the reconcile waits for the lane's room, visibly
	}
	intent := toolIntent(run, f)
	f.State.Apply(f.Blueprint, intent)
	call := steps.ToolCall{Run: steps.RunRef(run), Intent: intent, Server: f.tool.server, Trace: r.traceParent(s), Next: r.continuation(run)}
	return &steps.Continuation{Tool: &call, Done: release}
}

// mayContinue: the run as last seen is driven, running and unparked, and
// its reconcile has observed its spec (a spec change it has not, such as a
// raised budget or a pause, is the reconcile's to act on first).
func mayContinue(run *arv1.AgentRun) bool {
	st := &run.Status
	return run.DeletionTimestamp.IsZero() && !run.Spec.Cancel && !run.Spec.Paused &&
		st.Phase == arv1.PhaseRunning && st.WaitingOn == nil && st.ObservedGeneration == run.Generation &&
		st.BlueprintSnapshot != ""
}

// statusDue sees that a run whose steps move it on has its status written
// once the status interval is up: the reconcile it wakes then finds the
// call in flight, starts nothing, and writes the progress. One timer per
// run at most.
func (r *AgentRunReconciler) statusDue(run *arv1.AgentRun, now time.Time) {
	key := client.ObjectKeyFromObject(run)
	left := time.Duration(0) // no interval, or never written: due now
	if at, ok := r.statusWrites.Get(run.UID); ok && r.statusInterval > 0 {
		interval := r.statusInterval
		if r.first.held.Has(run.UID) {
			interval = r.firstWait() // its first write: a second at most
		}
		left = at.Add(interval).Sub(now)
	}
	if left <= 0 {
		r.wake(key)
		return
	}
	r.statusTimers.arm(run.UID, left, func() { r.wake(key) })
}

// statusTimers holds at most one pending status-due wake per run.
type statusTimers struct {
	mu sync.Mutex
	m  map[types.UID]*time.Timer
}

func newStatusTimers() *statusTimers { return &statusTimers{m: map[types.UID]*time.Timer{}} }

// arm runs fn after d, unless a wake for the run is already pending.
func (t *statusTimers) arm(uid types.UID, d time.Duration, fn func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.m[uid]; ok {
		return
	}
	t.m[uid] = time.AfterFunc(d, func() {
		t.mu.Lock()
		delete(t.m, uid)
		t.mu.Unlock()
		fn()
	})
}

// Forget stops and drops the run's pending wake.
func (t *statusTimers) Forget(uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tm, ok := t.m[uid]; ok {
		tm.Stop()
		delete(t.m, uid)
	}
}

// Has reports whether a wake is pending for the run.
func (t *statusTimers) Has(uid types.UID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.m[uid]
	return ok
}

// EachRun calls fn with every run a wake is pending for.
func (t *statusTimers) EachRun(fn func(types.UID)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for uid := range t.m {
		fn(uid)
	}
}
