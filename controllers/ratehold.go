package controllers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
	"github.com/agentrun-dev/agentrun-operator/internal/steps"
)

// rateShownAfter is how long a call must have been held by a provider's
// limit before its run's status says so: a moment's hold is normal and
// would cost two status writes to show and clear. Showing it costs one
// write and clearing it one more, however often the provider refuses in
// between.
const rateShownAfter = 5 * time.Second

// rateHolds remembers, per run, the provider limit holding its call in
// flight, so the reconcile can show it as a healthy RateLimited wait.
type rateHolds struct {
	mu sync.Mutex
	m  map[types.UID]*rateHold
}

type rateHold struct {
	provider, model string
	until           time.Time
	// shown: the reconcile was woken to show the hold, with shownUntil.
	shown      bool
	shownUntil time.Time
	timer      *time.Timer
}

func newRateHolds() *rateHolds { return &rateHolds{m: map[types.UID]*rateHold{}} }

// track wires a model call's Held and Sent to the run's hold: the first
// hold arms a timer that shows it once it has lasted rateShownAfter; the
// send ends it, and wakes the reconcile to clear a hold it showed.
func (r *AgentRunReconciler) track(run *arv1.AgentRun, call *steps.ModelCall) {
	uid, key := run.UID, types.NamespacedName{Namespace: run.Namespace, Name: run.Name}
	h := r.rateHolds
	call.Held = func(until time.Time) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if hold, ok := h.m[uid]; ok {
			hold.until = until
			return
		}
		hold := &rateHold{provider: call.Intent.Provider, model: call.Intent.Model, until: until}
		hold.timer = time.AfterFunc(rateShownAfter, func() {
			h.mu.Lock()
			cur, ok := h.m[uid]
			show := ok && cur == hold
			if show {
				hold.shown, hold.shownUntil = true, hold.until
			}
			h.mu.Unlock()
			if show {
				r.wake(key)
			}
		})
		h.m[uid] = hold
	}
	call.Sent = func() {
		if h.end(uid) {
			r.wake(key)
		}
	}
}

// end forgets the run's hold; true when it was shown (its status must be
// cleared).
func (h *rateHolds) end(uid types.UID) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	hold, ok := h.m[uid]
	if !ok {
		return false
	}
	hold.timer.Stop()
	delete(h.m, uid)
	return hold.shown
}

// Forget drops the run's hold and stops its timer.
func (h *rateHolds) Forget(uid types.UID) { h.end(uid) }

// Has reports whether a limit holds the run's call.
func (h *rateHolds) Has(uid types.UID) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.m[uid]
	return ok
}

// EachRun calls fn with every run whose call a limit holds.
func (h *rateHolds) EachRun(fn func(types.UID)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for uid := range h.m {
		fn(uid)
	}
}

// shown is the run's hold as its status is to show it, if it is shown.
func (h *rateHolds) shown(uid types.UID) *runstate.RateLimit {
	h.mu.Lock()
	defer h.mu.Unlock()
	hold, ok := h.m[uid]
	if !ok || !hold.shown {
		return nil
	}
	return &runstate.RateLimit{Provider: hold.provider, Model: hold.model, RetryAt: hold.shownUntil}
}
