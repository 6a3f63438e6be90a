package controllers

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
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
