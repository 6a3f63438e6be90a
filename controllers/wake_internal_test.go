package controllers

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// TestEveryParkHasAWakeSource: each wait a run can park on names what
// wakes it, without a step in flight or a timer: the watches the
// controller sets up (answers, children, setup refs, spec).
func TestEveryParkHasAWakeSource(t *testing.T) {
	want := map[arv1.WaitReason]string{
		arv1.WaitToolApproval:        wakeAnswers,
		arv1.WaitUserPrompt:          wakeAnswers,
		arv1.WaitTaintGate:           wakeAnswers,
		arv1.WaitInteractionPoint:    wakeAnswers,
		arv1.WaitNeedsReconciliation: wakeAnswers,
		arv1.WaitSignal:              wakeAnswers,
		arv1.WaitFanOutWorkers:       wakeChildren,
		arv1.WaitChildren:            wakeChildren,
		arv1.WaitBudgetExceeded:      wakeSpec,
		arv1.WaitStoreUnavailable:    wakeStore,
		arv1.WaitQuotaExceeded:       wakeQuota,
	}
	for _, r := range arv1.WaitReasons {
		st := &arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput, WaitingOn: &arv1.WaitingOn{Reason: r}}
		switch r {
		case arv1.WaitNeedsSetup:
			// A setup wait names its objects; one without (an outage) retries
			// on a timer.
			st.SetupRefs = []string{"Secret/key"}
			if got := wakeSources(st, actOutcome{}, false); len(got) != 1 || got[0] != wakeSetupRefs {
				t.Errorf("NeedsSetup with refs: %v", got)
			}
			st.SetupRefs = nil
			if got := wakeSources(st, actOutcome{requeueAfter: time.Minute}, false); len(got) != 1 || got[0] != wakeTimer {
				t.Errorf("NeedsSetup on an outage: %v", got)
			}
			continue
		case arv1.WaitSleeping:
			if got := wakeSources(st, actOutcome{requeueAfter: time.Second}, false); len(got) != 1 || got[0] != wakeTimer {
				t.Errorf("Sleeping: %v", got)
			}
			continue
		case arv1.WaitRateLimited:
			// Only ever shown while the held call's step is in flight; its
			// end wakes the run.
			if got := wakeSources(st, actOutcome{}, true); len(got) != 1 || got[0] != wakeStep {
				t.Errorf("RateLimited: %v", got)
			}
			continue
		}
		got := wakeSources(st, actOutcome{}, false)
		if len(got) != 1 || got[0] != want[r] {
			t.Errorf("%s: wake sources %v, want [%s]", r, got, want[r])
		}
	}
}

// TestWorkInProgressHasAWakeSource: a run that is not parked is woken by
// its step, the executor's room, a listing, admission or a timer.
func TestWorkInProgressHasAWakeSource(t *testing.T) {
	running := &arv1.AgentRunStatus{Phase: arv1.PhaseRunning}
	cases := map[string]struct {
		out  actOutcome
		step bool
		want string
	}{
		"step in flight": {step: true, want: wakeStep},
		"backpressure":   {out: actOutcome{backpressure: true}, want: wakeExecutorRoom},
		"tool listing":   {out: actOutcome{catalogWait: true}, want: wakeCatalog},
		"queued":         {out: actOutcome{queued: true}, want: wakeAdmission},
		"cancel waiting": {out: actOutcome{requeueAfter: 100 * time.Millisecond}, want: wakeTimer},
	}
	for name, c := range cases {
		if got := wakeSources(running, c.out, c.step); len(got) != 1 || got[0] != c.want {
			t.Errorf("%s: %v, want [%s]", name, got, c.want)
		}
	}
	if got := wakeSources(running, actOutcome{}, false); len(got) != 0 {
		t.Errorf("a running run with nothing in flight claims wake sources %v", got)
	}
	if got := wakeSources(&arv1.AgentRunStatus{Phase: arv1.PhasePaused}, actOutcome{}, false); len(got) != 1 || got[0] != wakeSpec {
		t.Errorf("paused: %v, want [spec]", got)
	}
}

// A run woken again before its reconcile keeps its first wake's time (its
// wait is from then), and the reconcile's take leaves nothing behind.
func TestWakeTimesKeepTheFirstWake(t *testing.T) {
	w := newWakeTimes()
	key := types.NamespacedName{Namespace: "team", Name: "r"}
	first := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	w.mark(key, first)
	w.mark(key, first.Add(time.Second))
	if at, ok := w.take(key); !ok || !at.Equal(first) {
		t.Fatalf("take = %v, %v; want the first wake, %v", at, ok, first)
	}
	if _, ok := w.take(key); ok || len(w.m) != 0 {
		t.Fatalf("%d woken runs kept after their reconcile took them", len(w.m))
	}
}

// TestReissueCountsADispatchItDidNotIssue: a pending model-call intent
// counts as possibly sent (its reissue raises Lost, as the store's ledger
// does) unless it is the very intent this manager issued and never
// started. A reissue whose status write failed before its own intent was
// stored leaves the earlier intent pending (a dead replica's, which may
// have reached the provider): that one still counts.
func TestReissueCountsADispatchItDidNotIssue(t *testing.T) {
	r := &AgentRunReconciler{unstarted: newUnstartedIntents()}
	run := &arv1.AgentRun{}
	run.UID = "u"
	f := &facts{}
	pending := func(lost int) journal.Entry {
		return journal.Entry{Seq: 4, Kind: journal.ModelCallRequested, Lost: lost}
	}
	if !r.mayHaveBeenSent(run, f, pending(0)) {
		t.Fatal("an intent nobody here issued: want it counted as possibly sent")
	}
	// The reissue counted the dead replica's dispatch lost (Lost 1); its
	// reconcile failed before the step started.
	s := &scope{intents: []issuedIntent{{key: stepKey(run, 4), lost: 1}}}
	r.unstarted.markAll(s)
	if !r.mayHaveBeenSent(run, f, pending(0)) {
		t.Error("the reissue's own intent was never stored (Lost 0 pending, the dead replica's): want its dispatch counted as possibly sent")
	}
	if r.mayHaveBeenSent(run, f, pending(1)) {
		t.Error("the reissue's own intent, stored (Lost 1) and never started: want it not counted again")
	}
	if !r.unstarted.has(stepKey(run, 4)) {
		t.Error("has: want the never-started intent known (tool calls read it)")
	}
	r.unstarted.clearAll(s)
	if !r.mayHaveBeenSent(run, f, pending(1)) {
		t.Error("after its step started: want it counted as possibly sent")
	}
	// A fresh intent the quota refused (mark) is never counted.
	r.unstarted.mark(stepKey(run, 4), 0)
	if r.mayHaveBeenSent(run, f, pending(0)) {
		t.Error("a refused fresh intent, pending: want it not counted as sent")
	}
}
