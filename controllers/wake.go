package controllers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/executor"
)

// Wake sources: what will reconcile a run again after a reconcile that
// left it unfinished. Every non-terminal outcome must have at least one,
// or the run would sit until a resync that may never come.
const (
	// wakeStep: a step of the run is running; the executor wakes it when
	// the step ends.
	wakeStep = "step"
	// wakeTimer: the reconcile asked to be requeued at a time (a retry, a
	// sleep's wake time, a question's expiry).
	wakeTimer = "timer"
	// wakeExecutorRoom: the pool was full; the executor wakes the run when
	// a slot of its lane frees.
	wakeExecutorRoom = "executor-room"
	// wakeCatalog: the run waits for a tool listing, which wakes it.
	wakeCatalog = "tool-catalog"
	// wakeAdmission: the run is queued; admission wakes it when a slot is
	// its.
	wakeAdmission = "admission"
	// wakeSetupRefs: a Secret or ConfigMap named in status.setupRefs
	// changing wakes the run (the metadata watches and their index).
	wakeSetupRefs = "setup-refs"
	// wakeAnswers: an AgentRunAnswer for the run wakes it.
	wakeAnswers = "answers"
	// wakeChildren: a child's phase or wait changing wakes its parent.
	wakeChildren = "children"
	// wakeSpec: a change of the run's spec (paused, budgets) wakes it.
	wakeSpec = "spec"
	// wakeStore: the prober of the runs' store wakes the runs that waited
	// on it once it answers.
	wakeStore = "store"
	// wakeQuota: a change of the quota a run waits on (raised, or room
	// showing in its status) wakes it (queue.QuotaHandler); its period's
	// reset is a timer.
	wakeQuota = "quota"
)

// wakeSources lists what will wake a run whose status a reconcile just
// wrote, from that status and what the reconcile did; stepRunning says a
// step of the run is running or about to start.
func wakeSources(st *arv1.AgentRunStatus, out actOutcome, stepRunning bool) []string {
	var w []string
	if stepRunning {
		w = append(w, wakeStep)
	}
	if out.requeueAfter > 0 {
		w = append(w, wakeTimer)
	}
	if out.backpressure {
		w = append(w, wakeExecutorRoom)
	}
	if out.catalogWait {
		w = append(w, wakeCatalog)
	}
	if out.queued && out.quotaWait == nil {
		w = append(w, wakeAdmission)
	}
	if st.Phase == arv1.PhasePaused {
		w = append(w, wakeSpec)
	}
	if len(st.SetupRefs) > 0 {
		w = append(w, wakeSetupRefs)
	}
	if wt := st.WaitingOn; wt != nil {
		switch wt.Reason {
		case arv1.WaitFanOutWorkers, arv1.WaitChildren:
			w = append(w, wakeChildren)
		case arv1.WaitBudgetExceeded:
			w = append(w, wakeSpec)
		case arv1.WaitToolApproval, arv1.WaitUserPrompt, arv1.WaitTaintGate, arv1.WaitInteractionPoint,
			arv1.WaitNeedsReconciliation, arv1.WaitSignal:
			w = append(w, wakeAnswers)
		case arv1.WaitStoreUnavailable:
			w = append(w, wakeStore)
		case arv1.WaitQuotaExceeded:
			w = append(w, wakeQuota)
		}
	}
	return w
}

// unstartedIntents remembers intents this manager issued and never
// started (their status write failed, the quota refused them, a step's
// next call was not made), each with the Lost it was issued with: such an
// intent, if stored after all (an ambiguous write), is safe to start later
// whatever its effect, and a model call of it is not counted as lost. Only
// that very intent: if the pending intent's Lost differs, what is pending
// is an earlier issue (a dead replica's, say) that may have been sent.
type unstartedIntents struct {
	mu sync.Mutex
	m  map[executor.Key]int
}

func newUnstartedIntents() *unstartedIntents {
	return &unstartedIntents{m: map[executor.Key]int{}}
}

func (u *unstartedIntents) markAll(s *scope) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, in := range s.intents {
		u.m[in.key] = in.lost
	}
}

func (u *unstartedIntents) clearAll(s *scope) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, in := range s.intents {
		delete(u.m, in.key)
	}
}

// mark records one intent, issued with lost, that was never started.
func (u *unstartedIntents) mark(k executor.Key, lost int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.m[k] = lost
}

// has says an intent of step k was issued here and never started.
func (u *unstartedIntents) has(k executor.Key) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	_, ok := u.m[k]
	return ok
}

// issuedUnstarted says the intent of step k pending with lost is one
// this manager issued and never started.
func (u *unstartedIntents) issuedUnstarted(k executor.Key, lost int) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	marked, ok := u.m[k]
	return ok && marked == lost
}

// Forget drops the run's unstarted intents.
func (u *unstartedIntents) Forget(uid types.UID) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for k := range u.m {
		if k.Run == uid {
			delete(u.m, k)
		}
	}
}

// Has reports whether the run has an unstarted intent.
func (u *unstartedIntents) Has(uid types.UID) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	for k := range u.m {
		if k.Run == uid {
			return true
		}
	}
	return false
}

// EachRun calls fn with every run that has an unstarted intent.
func (u *unstartedIntents) EachRun(fn func(types.UID)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for k := range u.m {
		fn(k.Run)
	}
}

// wakeTimes holds, per run woken and not reconciled since, when it was
// first woken. Each wake queues a reconcile, which takes its entry, so
// nothing stays.
type wakeTimes struct {
	mu sync.Mutex
	m  map[types.NamespacedName]time.Time
}

func newWakeTimes() *wakeTimes { return &wakeTimes{m: map[types.NamespacedName]time.Time{}} }

// mark notes that the run was woken at, unless an earlier wake waits.
func (w *wakeTimes) mark(key types.NamespacedName, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.m[key]; !ok {
		w.m[key] = at
	}
}

// take returns and forgets when the run was first woken.
func (w *wakeTimes) take(key types.NamespacedName) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.m[key]
	delete(w.m, key)
	return at, ok
}
