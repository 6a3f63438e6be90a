package controllers

import (
	"reflect"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/perrun"
)

// A new run's first status write used to stand between its creation and
// its first model call: the reconcile recorded the snapshot and the
// intent in status, waited for the API server, and only then started the
// call. Under load that write, queued behind every other run's, was most
// of a run's overhead. So a run this process saw created starts its first
// call with the intent (and the snapshot it binds the run to) in the
// journal, and its first status write waits, but never longer than
// phaseShownWithin: a person reading the run must not see it Queued once
// it works. A run that ends or parks within that second is written once,
// at its end or its wait; any other shows Running a second after it was
// admitted.
//
// Whether a run whose status records nothing has a journal is then a
// question: this process knows for the runs it saw created (born), whose
// journal it alone wrote; for any other (found at start, or when a shard
// or the leadership came here) the journal is read. Runs divided among
// replicas are written at once as before, since a run may move between
// shards without being created anew.

// phaseShownWithin bounds how long a run's phase may go unwritten after it
// changed: a new run's first write (it leaves Queued) waits at most this.
const phaseShownWithin = time.Second

// firstStatus holds what deferring a new run's first status write needs.
type firstStatus struct {
	// on: new runs' first status writes may wait.
	on bool
	// born are the runs seen created by this process whose status was
	// never written; held is the status a reconcile projected for such a
	// run and did not write (the stored one is empty), which the next
	// reconcile and the run's steps read instead.
	born *perrun.Box[struct{}]
	held *perrun.Box[*arv1.AgentRunStatus]
}

func newFirstStatus(on bool) *firstStatus {
	return &firstStatus{on: on, born: perrun.New[struct{}](), held: perrun.New[*arv1.AgentRunStatus]()}
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

// waitsUnwritten says a status projected for a run whose status was never
// written may stay unwritten: new runs' first writes may wait, and it
// shows the run plainly running: no wait, error, end, flag or signal edge,
// and no condition true but Reconciling for its progress (each of those
// is written at once).
func (fs *firstStatus) waitsUnwritten(after *arv1.AgentRunStatus) bool {
	if !fs.on || after.Phase != arv1.PhaseRunning || after.WaitingOn != nil || after.Error != "" || after.FinalOutput != nil || after.Callback != nil {
		return false
	}
	if !reflect.DeepEqual(after.Flags, arv1.RunFlags{}) || newSignalEdge(&arv1.AgentRunStatus{}, after) != nil {
		return false
	}
	for _, c := range after.Conditions {
		progressing := c.Type == arv1.ConditionReconciling && c.Reason == arv1.ReasonProgressing
		if c.Status != metav1.ConditionFalse && !progressing {
			return false
		}
	}
	return true
}

// progressOnly says after differs from before only by a running run's
// progress, before being the stored status, or when that was never
// written, nothing at all.
func (fs *firstStatus) progressOnly(before, after *arv1.AgentRunStatus) bool {
	if statusNeverWritten(before) {
		return fs.waitsUnwritten(after)
	}
	return onlyProgress(before, after)
}

// hold keeps a status projected and not written for a run whose stored
// status is empty.
func (fs *firstStatus) hold(uid types.UID, before, after *arv1.AgentRunStatus) {
	if statusNeverWritten(before) {
		fs.held.Put(uid, after.DeepCopy())
	}
}

// written forgets what deferring kept once the run's status is written.
func (fs *firstStatus) written(uid types.UID) {
	fs.born.Take(uid)
	fs.held.Take(uid)
}

// withHeld puts the status held for run in place of its empty stored one,
// on run itself (a copy the caller owns), and says whether it did.
func (fs *firstStatus) withHeld(run *arv1.AgentRun) bool {
	if !statusNeverWritten(&run.Status) {
		return false
	}
	h, ok := fs.held.Get(run.UID)
	if ok {
		run.Status = *h.DeepCopy()
		// Its intent is durable in the journal (or about to be, by its
		// step), never in a status that was not written.
		run.Status.PendingCall = nil
	}
	return ok
}

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
