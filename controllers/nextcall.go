package controllers

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/agentrun-dev/agentrun-operator/internal/builtin"
	"github.com/agentrun-dev/agentrun-operator/internal/steps"
)

// The reconciler's side of a step that continues its run (driver.go): the
// next call, prepared as the reconcile's dispatch would, and what runs
// once the step journaled its intent.

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
	call.Next = r.driver.next(run)
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
	call := steps.ToolCall{Run: steps.RunRef(run), Intent: intent, Server: f.tool.server, Trace: r.traceParent(s), Next: r.driver.next(run)}
	return &steps.Continuation{Tool: &call, Done: release}
}

// continued arms the step's next call: once its intent is journaled, the
// effects the decision queued run and the run's status is due within the
// status interval; a call not made is marked so its reissue counts no
// lost call.
func (r *AgentRunReconciler) continued(s *scope, next *steps.Continuation) {
	run, effects, k, lost := s.run, s.effects, stepKey(s.run, next.Intent().Seq), next.Intent().Lost
	next.Journaled = func() {
		for _, fn := range effects {
			fn()
		}
		r.pace.due(run, s.now)
	}
	next.NotMade = func() { r.unstarted.mark(k, lost) }
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
