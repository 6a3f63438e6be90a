package controllers

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/caches"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
	"github.com/agentrun-dev/agentrun-operator/internal/steps"
)

// Who drives a run. One mechanism moves every run forward: the driver
// derives the facts, asks runstate.Decide what comes next, and has it
// done. It has two entry points, and which one acts is decided in one
// place (stepContinues):
//
//   - Drive is the reconcile's. It runs for every event that wakes a run
//     (its spec, a child, an answer, a Secret it waits on, a finished
//     step, a timer) and acts on any decision: it admits the run, derives,
//     decides and acts in rounds, and the reconcile then writes status
//     once.
//   - Continue is the step's. Agent work is latency-bound: a model call
//     takes seconds, the manager's work between two calls milliseconds.
//     So when a call has answered and the run's own journal alone says
//     what comes next (another model call, across a transition if need
//     be, or an MCP tool call no gate holds), the step that made the call
//     asks the driver, which derives with the call's outcome ahead of the
//     journal and decides as Drive would, and the step journals the
//     completion and the next intent in one write and makes the call,
//     instead of waking the run and waiting in the reconcile queue behind
//     every other run.
//
// Anything else is Drive's: a wait, a gate, a built-in tool, a child, a
// budget, an error, the end, a spec change the reconcile has not observed
// yet, and any status that is more than progress (a condition, a signal
// edge). Continue then answers nil: the step journals the completion
// alone and wakes the run. Exactly-once holds as for a reconcile's
// dispatch: the intent is on record before the call, a replica that loses
// its shard's Lease cancels the step (its fence), and the journal's
// resourceVersion fences a stale writer out. docs/architecture.md tells
// the same for readers of the docs.
type driver struct {
	clock    clock.PassiveClock
	identity string
	first    *firstStatus
	runs     *caches.Runs
	jobs     runJobs
}

// runJobs are the jobs the driver has done, in its order; the reconciler
// does them.
type runJobs interface {
	// admitted says whether the run may be driven now: the queue and the
	// store hold it back otherwise (s.out says why). Drive's only.
	admitted(ctx context.Context, s *scope) (bool, error)
	// deriveWith gathers the facts (ahead: a step's call outcome the
	// journal does not hold yet).
	deriveWith(ctx context.Context, run *arv1.AgentRun, now time.Time, fresh bool, ahead []journal.Entry) (*facts, error)
	// act carries the decision out, reporting whether the facts changed.
	act(ctx context.Context, s *scope) (bool, error)
	// drives: this replica drives the run (its shard is held here).
	drives(run *arv1.AgentRun) bool
	// nextModelCall and nextToolCall prepare the call Decide asked for as
	// a step's next (nil: it cannot be made from the step).
	nextModelCall(ctx context.Context, s *scope) *steps.Continuation
	nextToolCall(s *scope) *steps.Continuation
	// continued arms a step's next call: what runs once its intent is
	// journaled, and once it was not made.
	continued(s *scope, next *steps.Continuation)
}

// maxRounds bounds derive-decide-act rounds in one reconcile. Acting may
// change the facts (a snapshot taken, an answer journaled); deciding again
// goes as far as one reconcile can, and status is still written once.
const maxRounds = 4

// begin starts a reconcile of run (a copy the reconcile owns): before is
// the run as stored, run starts from the status held for it if its stored
// one was never written.
func (d *driver) begin(run *arv1.AgentRun) *scope {
	s := &scope{run: run, before: run.DeepCopy(), now: d.clock.Now(), fresh: d.first.fresh(run), driver: d.identity}
	d.first.withHeld(s.run)
	return s
}

// decide derives the facts and decides on them.
func (d *driver) decide(ctx context.Context, s *scope, fresh bool, ahead []journal.Entry) error {
	f, err := d.jobs.deriveWith(ctx, s.run, s.now, fresh, ahead)
	if err != nil {
		return err
	}
	s.facts, s.action = f, runstate.Decide(f.Facts)
	return nil
}

// Drive is the reconcile's entry: it derives, decides and acts until
// acting changes nothing more. A run without an active-run slot waits in
// line instead, visibly. The reconcile writes status after it (finish).
func (d *driver) Drive(ctx context.Context, s *scope) error {
	if ok, err := d.jobs.admitted(ctx, s); !ok || err != nil {
		return err
	}
	for range maxRounds {
		if err := d.decide(ctx, s, s.fresh, nil); err != nil {
			return err
		}
		again, err := d.jobs.act(ctx, s)
		if err != nil || !again {
			return err
		}
	}
	// Still changing after maxRounds: look again at once rather than rely
	// on an event that may never come.
	s.out.requeueAfter = time.Millisecond
	return nil
}

// next is a call's Next: the step that holds the run's call asks it, once
// the call answered, what it does next (Continue).
func (d *driver) next(ref *arv1.AgentRun) func(context.Context, []journal.Entry) *steps.Continuation {
	key, uid := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, ref.UID
	return func(ctx context.Context, done []journal.Entry) *steps.Continuation {
		return d.Continue(ctx, key, uid, done)
	}
}

// Continue is the step's entry: the run's next call (a model call, or an
// MCP tool call no gate holds), or nil to hand the run back to Drive.
func (d *driver) Continue(ctx context.Context, key types.NamespacedName, uid types.UID, done []journal.Entry) *steps.Continuation {
	run, err := d.runs.Get(ctx, key)
	if err != nil || run == nil || run.UID != uid {
		return nil
	}
	d.first.withHeld(run) // a new run's status not written yet
	if !mayContinue(run) || !d.jobs.drives(run) {
		return nil
	}
	s := d.begin(run)
	if err := d.decide(ctx, s, false, done); err != nil || !stepContinues(s.facts, s.action) {
		return nil
	}
	var next *steps.Continuation
	switch s.action.Kind {
	case runstate.ActDispatch:
		next = d.jobs.nextModelCall(ctx, s)
	case runstate.ActToolCall:
		next = d.jobs.nextToolCall(s)
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
	d.jobs.continued(s, next)
	return next
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

// stepContinues is the choice of who acts on a decision made for a step:
// the step itself only for a model call or an MCP tool call that needs
// nothing else done first (no intent issued again, no child to create, no
// tool listing, no answer to record); Drive for anything else.
func stepContinues(f *facts, a runstate.Action) bool {
	if a.Reissue || len(a.CreateChildren) > 0 || len(f.listings) > 0 || len(f.answerUpdates) > 0 {
		return false
	}
	return a.Kind == runstate.ActDispatch || a.Kind == runstate.ActToolCall
}
