package controllers

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/controllers/agentrun/queue"
	"github.com/agentrun-dev/agentrun-operator/internal/caches"
	"github.com/agentrun-dev/agentrun-operator/internal/executor"
	"github.com/agentrun-dev/agentrun-operator/internal/metrics"
	"github.com/agentrun-dev/agentrun-operator/internal/perrun"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
)

// safetyRequeue is how soon a run is looked at again when a reconcile
// found nothing that would wake it (a bug; counted in
// agentrun_unwoken_reconciles_total).
const safetyRequeue = 30 * time.Second

// scope is one reconcile of one non-terminal run.
type scope struct {
	// run is the run being reconciled; its status is projected into it.
	run *arv1.AgentRun
	// before is the run as read: the base of the status patch.
	before *arv1.AgentRun
	now    time.Time
	// fresh: the run was never driven (no snapshot, no intent), so it has
	// no journal to read.
	fresh bool
	// showPressure: backpressure has lasted long enough to show.
	showPressure bool
	// driver names this replica in status.driver.
	driver string
	// facts, action and out are set once a round has run.
	facts  *facts
	action runstate.Action
	out    actOutcome
	// tickets are executor slots reserved for steps the status write
	// records; they start once it succeeded and are released if it failed.
	tickets []startable
	// intents are the calls whose intents this status write records.
	intents []issuedIntent
	// effects run after the status write succeeded (events, webhooks);
	// aborts undo what was begun for it if the write failed.
	effects []func()
	aborts  []func()
}

// startable is a reserved step.
type startable struct {
	ticket *executor.Ticket
	fn     func(context.Context)
}

// start reserves nothing itself: it records a reserved step to start once
// status records it.
func (s *scope) start(t *executor.Ticket, fn func(context.Context)) {
	s.tickets = append(s.tickets, startable{ticket: t, fn: fn})
}

// unstart gives back the slots reserved for the steps this reconcile
// would have started, and undoes what was begun for them.
func (s *scope) unstart() {
	for _, t := range s.tickets {
		t.ticket.Release()
	}
	for _, fn := range s.aborts {
		fn()
	}
}

// after queues an effect for once status is written.
func (s *scope) after(fn func()) { s.effects = append(s.effects, fn) }

// admitted says whether the run may be driven now: a quota with no room
// holds its start, and a run without an active-run slot waits in line,
// visibly; a store that cannot be used parks it. What a step could not
// record while the store was down is recorded first.
func (r *AgentRunReconciler) admitted(ctx context.Context, s *scope) (bool, error) {
	hold, err := r.queue.HoldStart(ctx, s.run, s.before.Status.WaitingOn, s.now)
	switch {
	case err != nil:
		return false, err
	case hold != nil:
		s.out.queued, s.out.quotaWait = true, hold.Wait
		if hold.RequeueAfter > 0 {
			s.out.requeueAfter = hold.RequeueAfter
		}
		return false, nil
	}
	if ok, waited := r.queue.Admit(ctx, s.run, s.now); !ok {
		s.out.queued = true
		if waited < queue.ShownAfter && !r.handedOver(s.run) {
			// Not shown yet: look again when it would be.
			s.out.quietQueue, s.out.requeueAfter = true, queue.ShownAfter-waited
		}
		return false, nil
	}
	if r.storeWait(s, nil) {
		return false, nil
	}
	return true, r.recordHeld(ctx, s.run)
}

// finish writes status once, on success and on failure alike (a failure
// shows in the Reconciling or Stalled condition), then starts what the
// write recorded and returns when to look at the run again.
func (r *AgentRunReconciler) finish(ctx context.Context, s *scope, err error) (ctrl.Result, error) {
	if err != nil && r.storeWait(s, err) {
		err = nil
	}
	switch {
	case s.out.storeDown != nil:
		projectStoreWait(s, s.out.storeDown)
	case err == nil && s.out.quietQueue:
		// In line for a moment only: status unchanged.
	case err == nil && s.out.queued:
		projectQueued(s)
	case err == nil:
		var showIn time.Duration
		s.showPressure, showIn = r.pressure.lasted(s.run.UID, s.out.backpressure, s.now)
		if showIn > 0 && (s.out.requeueAfter == 0 || showIn < s.out.requeueAfter) {
			// Look again when the wait would show, in case no slot frees
			// before then.
			s.out.requeueAfter = showIn
		}
		project(s)
		if last, failed := r.failures.take(s.run.UID); failed {
			retried(s.run, last)
		}
	default:
		markError(s.run, err, s.now)
	}
	waits := r.beforeWrite(ctx, s, err)
	if perr := r.writeStatus(ctx, s, waits); perr != nil {
		if !errors.Is(perr, caches.ErrStatusConflict) {
			r.failures.put(s.run.UID, perr)
		}
		s.unstart()
		r.unstarted.markAll(s)
		if errors.Is(perr, caches.ErrStatusConflict) && err == nil {
			return ctrl.Result{RequeueAfter: time.Millisecond}, nil
		}
		return ctrl.Result{}, errors.Join(err, perr)
	}
	if err != nil {
		r.failures.put(s.run.UID, err)
		kind := "transient"
		if errors.Is(err, reconcile.TerminalError(nil)) {
			kind = "terminal"
		}
		metrics.ReconcileErrors.WithLabelValues(kind).Inc()
		s.unstart()
		return ctrl.Result{}, err
	}
	if !waits {
		r.traceStatus(s)
	}
	if !r.drives(s.run) {
		// The shard's Lease ended while the status was written: start
		// nothing; whoever drives the shard now takes the intents up.
		s.unstart()
		return ctrl.Result{}, nil
	}
	r.startSteps(ctx, s)
	r.queue.ReleaseIfIdle(s.run, s.out.catalogWait || s.out.serverWait || r.pool.OnlyRemote(s.run.UID))
	if s.run.Status.Phase.IsTerminal() {
		// What it held of its quotas goes back once its end shows (a run
		// waiting for its slot never starts before this one reads finished).
		r.queue.End(ctx, s.run)
		// A finished run is never folded again: what was kept to drive it
		// would only grow the manager's memory with history.
		r.forget(s.run.UID)
	}
	if !waits {
		// A status that waits is compared with the stored one when it is
		// written: its events come then.
		r.emitEvents(s.run, &s.before.Status)
	}
	for _, fn := range s.effects {
		fn()
	}
	r.deliverCallback(ctx, s.run)
	return r.wakeup(ctx, s), nil
}

// issuedIntent is an intent this reconcile issued: its step's key and
// the Lost it was issued with (unstartedIntents).
type issuedIntent struct {
	key  executor.Key
	lost int
}

// beforeWrite completes the record before its write (where the journal
// is, the archive of a run this reconcile ends), says whether the write
// waits, and starts the steps that need nothing of it: those that journal
// their own intents.
func (r *AgentRunReconciler) beforeWrite(ctx context.Context, s *scope, err error) bool {
	s.run.Status.JournalStore = r.journals.Where(s.run)
	if err == nil {
		r.finisher.archive.end(ctx, s)
	}
	waits := r.pace.waits(s, err)
	if !waits && err == nil && s.out.journaledIntents == len(s.intents) {
		r.startSteps(ctx, s)
	}
	return waits
}

// startSteps starts the steps the reconcile reserved, unless the shard's
// Lease has ended (whoever drives the shard now takes their intents up):
// once started, nothing of theirs is undone.
func (r *AgentRunReconciler) startSteps(ctx context.Context, s *scope) {
	if len(s.tickets) == 0 || !r.drives(s.run) {
		return
	}
	for _, t := range s.tickets {
		t.ticket.Start(r.step(ctx, s.run, t.fn))
	}
	r.unstarted.clearAll(s)
	s.tickets, s.intents, s.aborts = nil, nil, nil
}

// writeStatus patches status, unless it waits, and notes when a change
// was written.
func (r *AgentRunReconciler) writeStatus(ctx context.Context, s *scope, waits bool) error {
	if waits {
		return nil
	}
	written, err := r.runs.PatchStatus(ctx, s.before, s.run)
	if err != nil {
		return err
	}
	if written {
		r.pace.written(s.run, s.now)
	}
	return nil
}

// wakeup returns the reconcile's result, making sure a run that is not
// finished has something that will wake it again.
func (r *AgentRunReconciler) wakeup(ctx context.Context, s *scope) ctrl.Result {
	res := ctrl.Result{RequeueAfter: s.out.requeueAfter}
	if s.out.queued {
		res.Priority = ptr.To(queuedPriority)
	}
	if s.run.Status.Phase.IsTerminal() {
		return r.finisher.retention.requeue(s.run, s.now, res)
	}
	w := wakeSources(&s.run.Status, s.out, len(s.tickets) > 0 || r.pool.RunInFlight(s.run.UID))
	if len(w) == 0 {
		metrics.UnwokenReconciles.Inc()
		ctrl.LoggerFrom(ctx).Info("No wake source for a run in progress; requeueing as a safety net", "phase", s.run.Status.Phase, "action", s.action.Kind)
		if res.RequeueAfter == 0 {
			res.RequeueAfter = safetyRequeue
		}
	}
	if r.onWake != nil {
		r.onWake(s.run, w)
	}
	return res
}

// failures remembers each run's last failed reconcile, so the next status
// that can be written shows it (a failed status write cannot show itself).
type failures struct{ box *perrun.Box[string] }

func newFailures() *failures { return &failures{box: perrun.New[string]()} }

func (f *failures) put(uid types.UID, err error) { f.box.Put(uid, err.Error()) }

func (f *failures) take(uid types.UID) (string, bool) { return f.box.Take(uid) }

// pressureShownAfter is how long a run must have found the executor full
// before its status says so: a moment's backpressure is normal and would
// cost two status writes to show and clear.
const pressureShownAfter = 5 * time.Second

// pressure remembers since when each run has found the executor full (its
// Box: Forget, Has, EachRun).
type pressure struct{ *perrun.Box[time.Time] }

func newPressure() *pressure { return &pressure{perrun.New[time.Time]()} }

// lasted records whether the run found backpressure now and reports
// whether it has lasted pressureShownAfter, or else how long until it
// would have (0 when there is none).
func (p *pressure) lasted(uid types.UID, now bool, at time.Time) (bool, time.Duration) {
	if !now {
		p.Forget(uid)
		return false, 0
	}
	var shown bool
	var left time.Duration
	p.Update(uid, func(since time.Time, ok bool) (time.Time, bool) {
		switch waited := at.Sub(since); {
		case !ok:
			since, left = at, pressureShownAfter
		case waited < pressureShownAfter:
			left = pressureShownAfter - waited
		default:
			shown = true
		}
		return since, true
	})
	return shown, left
}
