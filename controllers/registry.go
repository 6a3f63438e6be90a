package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/circuit"
	"github.com/agentrun-dev/agentrun-operator/internal/perrun"
)

// Per-run state in memory. While this process drives a run it keeps some
// of it in memory: the journal as read, children created but not seen yet,
// its active-run slot, timers, a held first status, and so on. Every
// holder of such state registers here, and forget drops a run from all of
// them at once. It is called wherever a run stops being driven here:
//
//   - it finished (finish, once its terminal status is written);
//   - it was deleted (forgetGone, and the finisher: deleted, deleteTree);
//   - it went to a shard another replica drives (forgetGone when the
//     informer saw it leave, dropShard when this replica's Lease ended,
//     and a reconcile that saw the Lease end while it ran);
//   - a step of a run deleted or handed over ended after that run was
//     forgotten, and may have put something back (step).
//
// A new map of per-run state registers in registerRunState;
// TestEveryPerRunMapIsRegistered fails for one reachable from the
// reconciler that does not.

// registerRunState makes the registry of every holder of per-run state.
func (r *AgentRunReconciler) registerRunState() *perrun.Registry {
	g := perrun.NewRegistry()
	g.Register("journal", r.journals)
	g.Register("expected children", r.children.Expected())
	g.Register("unstarted intents", r.unstarted)
	g.Register("failures", r.failures.box)
	g.Register("backpressure", r.pressure)
	g.Register("admission", r.queue.Slots())
	g.Register("status writes", r.pace.writes)
	g.Register("unjournaled intents", r.unjournaled)
	g.Register("rate holds", r.rateHolds)
	g.Register("status timers", r.pace.timers)
	g.Register("born", r.pace.first.born)
	g.Register("held first status", r.pace.first.held)
	g.Register("webhook reports", r.steps.Deliveries)
	g.Register("journal refusals", r.steps.Refusals)
	g.Register("unrecorded answers", r.steps.Unrecorded)
	g.Register("store waiters", r.store.waiters)
	g.Register("executor", r.pool)
	g.Register("circuit probes", probes{r.breakers})
	g.Register("written status", r.runs)
	g.Register("quotas", r.queue.Quotas())
	return g
}

// forget drops everything this process keeps in memory of the run.
func (r *AgentRunReconciler) forget(uid types.UID) { r.runState.Forget(uid) }

// RunsInMemory counts the runs this process keeps any state of in memory
// (the agentrun_runs_in_memory gauge): the runs it drives, and for a
// moment those that just finished, were deleted or went to another
// replica.
func (r *AgentRunReconciler) RunsInMemory() int { return r.runState.Runs() }

// HeldFor names what this process keeps in memory of the run (none: it
// was forgotten, or never driven here).
func (r *AgentRunReconciler) HeldFor(uid types.UID) []string { return r.runState.HeldBy(uid) }

// step is a step of run, as the executor runs it. A step that was stopped
// (its run deleted, or its shard gone to another replica) may have put
// state back after the run was forgotten; once it ends, the run is
// forgotten again if it is no longer driven here. The step logs as the
// reconcile that started it (ctx's logger: the run and the reconcile).
func (r *AgentRunReconciler) step(ctx context.Context, run *arv1.AgentRun, fn func(context.Context)) func(context.Context) {
	key, uid, log := client.ObjectKeyFromObject(run), run.UID, ctrl.LoggerFrom(ctx)
	return func(ctx context.Context) {
		ctx = ctrl.LoggerInto(ctx, log)
		fn(ctx)
		if ctx.Err() == nil {
			return
		}
		cur, err := r.runs.Get(context.Background(), key)
		if err == nil && (cur == nil || cur.UID != uid || !r.drives(cur)) {
			r.forget(uid)
		}
	}
}

// probes are the circuit probes runs hold (a probe's owner is its run's
// UID).
type probes struct{ b *circuit.Breakers }

func (p probes) Forget(uid types.UID)   { p.b.Release(string(uid)) }
func (p probes) Has(uid types.UID) bool { return p.b.Probing(string(uid)) }
func (p probes) EachRun(fn func(types.UID)) {
	p.b.EachProber(func(owner string) { fn(types.UID(owner)) })
}
