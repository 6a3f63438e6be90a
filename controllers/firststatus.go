package controllers

import (
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/perrun"
)

// A new run's first status write shows it left the queue: its phase is
// Running (or Starting) within a second of its admission, never Queued
// while it works. That write does not stand between the run and its first
// call, though: when every intent the reconcile records is journaled by
// the step that makes the call (the step writes it before calling), the
// step starts before the status write (scope.go), so under load the
// write's wait in the API server's queue is not the run's.
//
// Whether a run whose status records nothing has a journal is then a
// question: this process knows for the runs it saw created (born), whose
// journal it alone wrote; for any other (found at start, or when a shard
// or the leadership came here) the journal is read. Runs divided among
// replicas are written at once as before, since a run may move between
// shards without being created anew.

// firstStatus knows which new runs cannot have a journal yet.
type firstStatus struct {
	// on: a new run's first intent may go into the journal, written by its
	// step, before its first status write.
	on bool
	// born are the runs seen created by this process whose status was
	// never written.
	born *perrun.Box[struct{}]
}

func newFirstStatus(on bool) *firstStatus {
	return &firstStatus{on: on, born: perrun.New[struct{}]()}
}

// fresh says the run has no journal to read: its status records nothing,
// and either first status writes never wait (the status write that
// records the snapshot then precedes every journal write but a
// cancellation's) or this process saw the run created. A wrong guess is
// still caught by the journal store: the first write of a journal creates
// its first chunk, which fails if one exists, and the store then reads it.
func (fs *firstStatus) fresh(run *arv1.AgentRun) bool {
	return neverDriven(run) && (!fs.on || fs.born.Has(run.UID))
}

// statusNeverWritten says no reconcile wrote the run's status yet: it
// holds at most the phase the API server defaults (Queued), and no
// condition (every written status has some).
func statusNeverWritten(st *arv1.AgentRunStatus) bool {
	return (st.Phase == "" || st.Phase == arv1.PhaseQueued) && len(st.Conditions) == 0 && st.BlueprintSnapshot == "" && st.PendingCall == nil
}

// progressOnly says after differs from before, the stored status, only
// by a running run's progress. A status never written is never that: the
// first write shows the run has left the queue.
func (fs *firstStatus) progressOnly(before, after *arv1.AgentRunStatus) bool {
	return !statusNeverWritten(before) && onlyProgress(before, after)
}

// written forgets what was kept of a new run once its status is written.
func (fs *firstStatus) written(uid types.UID) { fs.born.Take(uid) }

// births is a predicate that passes every event and notes the runs this
// process sees created (not listed at its start: those may have been
// driven by another), with a status that records nothing.
func (fs *firstStatus) births() predicate.Predicate {
	return predicate.Funcs{CreateFunc: func(e event.CreateEvent) bool {
		if run, ok := e.Object.(*arv1.AgentRun); ok && fs.on && !e.IsInInitialList && neverDriven(run) {
			fs.born.Put(run.UID, struct{}{})
		}
		return true
	}}
}
