package controllers

import (
	"context"
	"errors"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/caches"
	"github.com/agentrun-dev/agentrun-operator/internal/perrun"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// When the database the journals are kept in cannot be used, no call may
// start (its intent could not be recorded first) and no answer already
// paid for may be lost. So the first failure marks the store down: every
// reconcile then parks its run on StoreUnavailable at once, without trying
// the store, and a prober tries it with backoff until it answers, then
// wakes every run it parked. A step whose answer could not be journaled
// keeps it (steps.Runtime.Unrecorded) for the run's next reconcile, which
// journals it first.

// storeProbeMax bounds the prober's backoff: a store back is seen within
// this long.
const storeProbeMax = 2 * time.Second

// storeHealth tracks whether the runs' store can be used.
type storeHealth struct {
	check func(context.Context) error
	wake  func(...types.NamespacedName)

	mu   sync.Mutex
	down *store.UnavailableError
	kick chan struct{}
	// waiters are the runs parked on the store, by UID (registered with
	// the per-run state, so a deleted run is forgotten).
	waiters *perrun.Box[types.NamespacedName]
}

func newStoreHealth(check func(context.Context) error, wake func(...types.NamespacedName)) *storeHealth {
	return &storeHealth{check: check, wake: wake, waiters: perrun.New[types.NamespacedName](), kick: make(chan struct{}, 1)}
}

// failed marks the store down when err says it cannot be used.
func (h *storeHealth) failed(err error) {
	var ue *store.UnavailableError
	if !errors.As(err, &ue) {
		return
	}
	h.mu.Lock()
	h.down = ue
	h.mu.Unlock()
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// problem is why the store cannot be used, or nil.
func (h *storeHealth) problem() *store.UnavailableError {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down
}

// park remembers a run parked on the store, to wake it when it is back.
func (h *storeHealth) park(run *arv1.AgentRun) {
	h.waiters.Put(run.UID, types.NamespacedName{Namespace: run.Namespace, Name: run.Name})
}

// NeedLeaderElection: every replica probes the store its runs use.
func (h *storeHealth) NeedLeaderElection() bool { return false }

// Start probes the store while it is down, and wakes the parked runs once
// it answers.
func (h *storeHealth) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("store")
	// A store that cannot be used at start is said at once, before any run
	// tries it.
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	h.failed(h.check(pctx))
	cancel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-h.kick:
		}
		if p := h.problem(); p != nil {
			log.Info("The runs' store cannot be used; runs wait until it answers", "error", p.Error())
		}
		backoff := 100 * time.Millisecond
		for h.problem() != nil {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := h.check(pctx)
			cancel()
			if err == nil {
				h.up(log)
				break
			}
			h.failed(err) // the newest cause
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, storeProbeMax)
		}
	}
}

func (h *storeHealth) up(log interface{ Info(string, ...any) }) {
	h.mu.Lock()
	h.down = nil
	h.mu.Unlock()
	var uids []types.UID
	h.waiters.EachRun(func(uid types.UID) { uids = append(uids, uid) })
	keys := make([]types.NamespacedName, 0, len(uids))
	for _, uid := range uids {
		if k, ok := h.waiters.Take(uid); ok {
			keys = append(keys, k)
		}
	}
	log.Info("The runs' store answers again; waking the runs that waited on it", "runs", len(keys))
	h.wake(keys...)
}

// storeWait says whether the reconcile parks its run on the store: it is
// known down, or err (what driving the run returned) says it cannot be
// used. The run then shows the wait; nothing else of its record moves.
func (r *AgentRunReconciler) storeWait(s *scope, err error) bool {
	if err != nil {
		r.store.failed(err)
		if !errors.Is(err, store.ErrUnavailable) {
			return false
		}
	}
	p := r.store.problem()
	if p == nil {
		return false
	}
	s.out.storeDown = p
	r.store.park(s.run)
	return true
}

// projectStoreWait shows a run parked on its store: phase WaitingInput,
// waitingOn StoreUnavailable with the cause and, when a person must act,
// the remedy; the rest of the record stays as last written (its journal
// could not be read), as of status.observedAt.
func projectStoreWait(s *scope, p *store.UnavailableError) {
	st, t := &s.run.Status, metav1.NewTime(s.now)
	prev := s.before.Status.DeepCopy()
	st.ObservedGeneration = s.run.Generation
	if st.StartedAt == nil {
		st.StartedAt = &t
	}
	w := &arv1.WaitingOn{Reason: arv1.WaitStoreUnavailable, NeedsAPerson: p.Remedy != "", Summary: "StoreUnavailable: " + p.Backend,
		StoreError: clipTo(p.Cause, 1024), Remedy: clipTo(p.Remedy, 1024), Since: &t}
	if prev.WaitingOn != nil && prev.WaitingOn.Reason == arv1.WaitStoreUnavailable && prev.WaitingOn.Since != nil {
		w.Since = prev.WaitingOn.Since
	}
	if st.Phase != arv1.PhaseWaitingInput {
		st.LastProgressAt = &t
	}
	st.Phase, st.WaitingOn, st.Driver = arv1.PhaseWaitingInput, w, s.driver
	setConditions(s.run, conditionInputs{})
	if !caches.SameStatus(prev, st) {
		st.UpdatedAt = &t
	}
}

// recordHeld journals what a step could not while the store was away: a
// call and its answer, paid for. Another writer's entries under their
// seqs (the run driven elsewhere meanwhile) make them moot.
func (r *AgentRunReconciler) recordHeld(ctx context.Context, run *arv1.AgentRun) error {
	u, ok := r.steps.Unrecorded.Get(run.UID)
	if !ok {
		return nil
	}
	var err error
	if u.Final != nil {
		err = r.journals.AppendWithOutput(ctx, run, *u.Final, u.Entries...)
	} else {
		err = r.journals.Append(ctx, run, u.Entries...)
	}
	switch {
	case err == nil:
	case errors.Is(err, store.ErrSeqTaken), errors.Is(err, store.ErrFenced):
		ctrl.LoggerFrom(ctx).Info("A held answer was journaled by another writer meanwhile; dropping it", "error", err.Error())
	default:
		return err
	}
	r.steps.Unrecorded.Take(run.UID)
	return nil
}
