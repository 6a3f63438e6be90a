package controllers

import (
	"reflect"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
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

// intentMayWait says, at dispatch, that this reconcile's status write may
// wait: the stored status records the run's snapshot and shows it running,
// unparked, and this process wrote it less than the interval ago.
func (r *AgentRunReconciler) intentMayWait(s *scope) bool {
	if r.statusInterval <= 0 {
		return false
	}
	b := &s.before.Status
	at, ok := r.statusWrites.Get(s.run.UID)
	if statusNeverWritten(b) {
		// A new run: its first write may wait, a second at most
		// (firststatus.go).
		return r.first.on && (!ok || s.now.Sub(at) < r.firstWait())
	}
	if b.BlueprintSnapshot == "" || b.Phase != arv1.PhaseRunning || b.WaitingOn != nil {
		return false
	}
	return ok && s.now.Sub(at) < r.statusInterval
}

// statusWaits says the status this reconcile projected may stay unwritten
// until the interval is up (the run is looked at again then, unless
// something sooner writes it): every intent it records is journaled, and
// it differs from the stored status only by a running run's progress.
func (r *AgentRunReconciler) statusWaits(s *scope, err error) bool {
	if err != nil || s.out.queued || s.out.journaledIntents != len(s.intents) || !r.intentMayWait(s) {
		return false
	}
	if !r.first.progressOnly(&s.before.Status, &s.run.Status) {
		return false
	}
	at, ok := r.statusWrites.Get(s.run.UID)
	if !ok {
		// A new run's first status waits from now.
		at = s.now
		r.statusWrites.Put(s.run.UID, at)
	}
	r.first.hold(s.run.UID, &s.before.Status, &s.run.Status)
	interval := r.statusInterval
	if statusNeverWritten(&s.before.Status) {
		interval = r.firstWait()
	}
	if left := at.Add(interval).Sub(s.now); s.out.requeueAfter == 0 || left < s.out.requeueAfter {
		s.out.requeueAfter = max(left, time.Millisecond)
	}
	return true
}

// firstWait is how long a new run's first status write may wait.
func (r *AgentRunReconciler) firstWait() time.Duration {
	return min(r.statusInterval, phaseShownWithin)
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
