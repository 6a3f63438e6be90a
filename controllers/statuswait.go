package controllers

import (
	"reflect"
	"time"

	"k8s.io/apimachinery/pkg/types"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/perrun"
)

// A running run's status is the cost of every step: each write makes the
// API server decode, validate, diff and re-encode the whole AgentRun, about
// four times what a journal append costs. So while a run only progresses
// from one model call to the next, the intent of the next call goes into
// the journal (which is as durable as status, and read back the same way)
// and the status write waits until StatusInterval has passed since the
// last one. Everything a person or another controller acts on is written at
// once: a phase, a wait, a condition, an error, a signal edge, the end; a
// new run's first write (it leaves Queued) within a second.

// statusPacer decides when a run's status is written: at once for
// what people act on, on the interval for a running run's progress, within
// a second for a new run's first write (firststatus.go); and it wakes a
// run whose steps moved it on when its write is due.
type statusPacer struct {
	// interval is Deps.StatusInterval (0: every change at once).
	interval time.Duration
	// writes is the time of each driven run's last status write.
	writes *perrun.Box[time.Time]
	// timers wake runs whose steps moved them on when their status is due.
	timers *statusTimers
	// first defers new runs' first status writes.
	first *firstStatus
	// wake queues a run's reconcile.
	wake func(...types.NamespacedName)
}

func newStatusPacer(interval time.Duration, firstDeferred bool, wake func(...types.NamespacedName)) *statusPacer {
	return &statusPacer{interval: interval, writes: perrun.New[time.Time](), timers: newStatusTimers(), first: newFirstStatus(firstDeferred), wake: wake}
}

// mayWait says, at dispatch, that this reconcile's status write may
// wait: the stored status records the run's snapshot and shows it running,
// unparked, and this process wrote it less than the interval ago.
func (p *statusPacer) mayWait(s *scope) bool {
	if p.interval <= 0 {
		return false
	}
	b := &s.before.Status
	at, ok := p.writes.Get(s.run.UID)
	if statusNeverWritten(b) {
		// A new run: its first write may wait, a second at most
		// (firststatus.go).
		return p.first.on && (!ok || s.now.Sub(at) < p.firstWait())
	}
	if b.BlueprintSnapshot == "" || b.Phase != arv1.PhaseRunning || b.WaitingOn != nil {
		return false
	}
	return ok && s.now.Sub(at) < p.interval
}

// statusWaits says the status this reconcile projected may stay unwritten
// until the interval is up (the run is looked at again then, unless
// something sooner writes it): every intent it records is journaled, and
// it differs from the stored status only by a running run's progress.
func (p *statusPacer) waits(s *scope, err error) bool {
	if err != nil || s.out.queued || s.out.journaledIntents != len(s.intents) || !p.mayWait(s) {
		return false
	}
	if !p.first.progressOnly(&s.before.Status, &s.run.Status) {
		return false
	}
	at, ok := p.writes.Get(s.run.UID)
	if !ok {
		// A new run's first status waits from now.
		at = s.now
		p.writes.Put(s.run.UID, at)
	}
	p.first.hold(s.run.UID, &s.before.Status, &s.run.Status)
	interval := p.interval
	if statusNeverWritten(&s.before.Status) {
		interval = p.firstWait()
	}
	if left := at.Add(interval).Sub(s.now); s.out.requeueAfter == 0 || left < s.out.requeueAfter {
		s.out.requeueAfter = max(left, time.Millisecond)
	}
	return true
}

// firstWait is how long a new run's first status write may wait.
func (p *statusPacer) firstWait() time.Duration {
	return min(p.interval, phaseShownWithin)
}

// written notes that the run's status was just written.
func (p *statusPacer) written(run *arv1.AgentRun, now time.Time) {
	p.first.written(run.UID)
	if !run.Status.Phase.IsTerminal() {
		p.writes.Put(run.UID, now)
	}
}

// due sees that a run whose steps move it on has its status written
// once the status interval is up: the reconcile it wakes then finds the
// call in flight, starts nothing, and writes the progress. One timer per
// run at most.
func (p *statusPacer) due(run *arv1.AgentRun, now time.Time) {
	key := types.NamespacedName{Namespace: run.Namespace, Name: run.Name}
	left := time.Duration(0) // no interval, or never written: due now
	if at, ok := p.writes.Get(run.UID); ok && p.interval > 0 {
		interval := p.interval
		if p.first.held.Has(run.UID) {
			interval = p.firstWait() // its first write: a second at most
		}
		left = at.Add(interval).Sub(now)
	}
	if left <= 0 {
		p.wake(key)
		return
	}
	p.timers.arm(run.UID, left, func() { p.wake(key) })
}

// onlyProgress: both statuses show the run running, unparked and without
// error, with the same conditions, and no edge the runtime took (an error,
// stuck or dead_end edge, which warns) lies between them.
func onlyProgress(before, after *arv1.AgentRunStatus) bool {
	if after.Phase != arv1.PhaseRunning || before.Phase != after.Phase || after.WaitingOn != nil || after.Error != "" || after.FinalOutput != nil || after.Callback != nil {
		return false
	}
	return reflect.DeepEqual(after.Flags, before.Flags) && sameConditions(before, after) && newSignalEdge(before, after) == nil
}

// sameConditions compares the conditions people and tools read (type,
// status, reason, message).
func sameConditions(a, b *arv1.AgentRunStatus) bool {
	if len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message {
			return false
		}
	}
	return true
}
