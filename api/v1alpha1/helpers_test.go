package v1alpha1_test

// Pure unit tests of helpers.go and the small methods on the API types; no
// API server is involved.

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func mt(d time.Duration) *metav1.Time {
	t := metav1.NewTime(t0.Add(d))
	return &t
}

func TestNeedsAPerson(t *testing.T) {
	cases := []struct {
		reason arv1.WaitReason
		want   bool
	}{
		{arv1.WaitToolApproval, true},
		{arv1.WaitUserPrompt, true},
		{arv1.WaitTaintGate, true},
		{arv1.WaitInteractionPoint, true},
		{arv1.WaitFanOutWorkers, false},
		{arv1.WaitChildren, false},
		{arv1.WaitNeedsSetup, true},
		{arv1.WaitSleeping, false},
		{arv1.WaitBudgetExceeded, true},
		{arv1.WaitNeedsReconciliation, true},
		{arv1.WaitSignal, false},
	}
	if len(cases) != 11 {
		t.Fatalf("%d reasons, want 11", len(cases))
	}
	for _, c := range cases {
		t.Run(string(c.reason), func(t *testing.T) {
			if got := c.reason.NeedsAPerson(); got != c.want {
				t.Errorf("WaitReason(%q).NeedsAPerson() = %v, want %v", c.reason, got, c.want)
			}
			run := &arv1.AgentRun{Status: arv1.AgentRunStatus{
				Phase: arv1.PhaseWaitingInput, WaitingOn: &arv1.WaitingOn{Reason: c.reason},
			}}
			if got := run.NeedsAPerson(); got != c.want {
				t.Errorf("AgentRun.NeedsAPerson() parked on %q = %v, want %v", c.reason, got, c.want)
			}
		})
	}

	t.Run("not parked", func(t *testing.T) {
		run := &arv1.AgentRun{Status: arv1.AgentRunStatus{Phase: arv1.PhaseRunning}}
		if run.NeedsAPerson() {
			t.Error("a run with no waitingOn needs a person")
		}
	})
	t.Run("empty reason", func(t *testing.T) {
		if arv1.WaitReason("").NeedsAPerson() {
			t.Error(`WaitReason("").NeedsAPerson() = true`)
		}
		run := &arv1.AgentRun{Status: arv1.AgentRunStatus{WaitingOn: &arv1.WaitingOn{}}}
		if run.NeedsAPerson() {
			t.Error("a waitingOn without a reason needs a person")
		}
	})
}

func TestPhaseIsTerminal(t *testing.T) {
	want := map[arv1.Phase]bool{
		arv1.PhaseQueued: false, arv1.PhaseStarting: false, arv1.PhaseRunning: false, arv1.PhaseWaitingInput: false,
		arv1.PhasePaused: false, arv1.PhaseCompleteInteractive: false,
		arv1.PhaseComplete: true, arv1.PhaseError: true, arv1.PhaseCancelled: true,
		"": false,
	}
	for p, w := range want {
		if got := p.IsTerminal(); got != w {
			t.Errorf("Phase(%q).IsTerminal() = %v, want %v", p, got, w)
		}
	}
	// Only a run never taken up is unstarted.
	unstarted := map[arv1.Phase]bool{
		"": true, arv1.PhaseQueued: true,
		arv1.PhaseStarting: false, arv1.PhaseRunning: false, arv1.PhaseWaitingInput: false, arv1.PhasePaused: false,
		arv1.PhaseCompleteInteractive: false, arv1.PhaseComplete: false, arv1.PhaseError: false, arv1.PhaseCancelled: false,
	}
	for p, w := range unstarted {
		if got := p.IsUnstarted(); got != w {
			t.Errorf("Phase(%q).IsUnstarted() = %v, want %v", p, got, w)
		}
	}
}

func TestAgeSeconds(t *testing.T) {
	run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(t0)}}
	cases := []struct {
		name string
		now  time.Time
		want int64
	}{
		{"at creation", t0, 0},
		{"sub-second truncates", t0.Add(999 * time.Millisecond), 0},
		{"90 seconds", t0.Add(90 * time.Second), 90},
		{"90.9 seconds truncates", t0.Add(90*time.Second + 900*time.Millisecond), 90},
		{"three days", t0.Add(72 * time.Hour), 259200},
		{"clock behind creation", t0.Add(-time.Hour), 0},
	}
	for _, c := range cases {
		if got := run.AgeSeconds(c.now); got != c.want {
			t.Errorf("%s: AgeSeconds = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestActiveRuntimeSeconds(t *testing.T) {
	now := t0.Add(10 * time.Hour)
	cases := []struct {
		name   string
		status arv1.AgentRunStatus
		want   int64
	}{
		{"no clock falls back to updatedAt - startedAt",
			arv1.AgentRunStatus{StartedAt: mt(0), UpdatedAt: mt(42 * time.Minute)}, 2520},
		{"no clock ignores now",
			arv1.AgentRunStatus{StartedAt: mt(0), UpdatedAt: mt(5 * time.Second)}, 5},
		{"no clock and no startedAt",
			arv1.AgentRunStatus{UpdatedAt: mt(time.Hour)}, 0},
		{"no clock and no updatedAt",
			arv1.AgentRunStatus{StartedAt: mt(0)}, 0},
		{"no clock, updatedAt before startedAt",
			arv1.AgentRunStatus{StartedAt: mt(time.Hour), UpdatedAt: mt(0)}, 0},
		{"empty clock is a genuine zero, not the fallback",
			arv1.AgentRunStatus{StartedAt: mt(0), UpdatedAt: mt(time.Hour), Active: &arv1.ActiveClock{}}, 0},
		{"banked only (clock stopped)",
			arv1.AgentRunStatus{StartedAt: mt(0), UpdatedAt: mt(time.Hour), Active: &arv1.ActiveClock{BankedSeconds: 600}}, 600},
		{"open span only",
			arv1.AgentRunStatus{Active: &arv1.ActiveClock{Since: mt(10*time.Hour - 90*time.Second)}}, 90},
		{"banked plus open span",
			arv1.AgentRunStatus{Active: &arv1.ActiveClock{BankedSeconds: 600, Since: mt(10*time.Hour - 30*time.Second)}}, 630},
		{"open span starting in the future counts 0",
			arv1.AgentRunStatus{Active: &arv1.ActiveClock{BankedSeconds: 600, Since: mt(11 * time.Hour)}}, 600},
	}
	for _, c := range cases {
		run := &arv1.AgentRun{Status: c.status}
		if got := run.ActiveRuntimeSeconds(now); got != c.want {
			t.Errorf("%s: ActiveRuntimeSeconds = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestActiveClockTotalSeconds(t *testing.T) {
	c := &arv1.ActiveClock{BankedSeconds: 100, Since: mt(0)}
	for _, x := range []struct {
		now  time.Time
		want int64
	}{
		{t0, 100},
		{t0.Add(1500 * time.Millisecond), 101},
		{t0.Add(time.Hour), 3700},
		{t0.Add(-time.Second), 100},
	} {
		if got := c.TotalSeconds(x.now); got != x.want {
			t.Errorf("TotalSeconds(%v) = %d, want %d", x.now.Sub(t0), got, x.want)
		}
	}
}

func TestLastMovedSeconds(t *testing.T) {
	cases := []struct {
		name   string
		status arv1.AgentRunStatus
		now    time.Time
		want   int64
		wantOK bool
	}{
		{"never moved", arv1.AgentRunStatus{}, t0, 0, false},
		{"never moved, updatedAt is not progress", arv1.AgentRunStatus{UpdatedAt: mt(0)}, t0.Add(time.Hour), 0, false},
		{"moved just now", arv1.AgentRunStatus{LastProgressAt: mt(0)}, t0, 0, true},
		{"moved 5 minutes ago", arv1.AgentRunStatus{LastProgressAt: mt(0), UpdatedAt: mt(5 * time.Minute)}, t0.Add(5 * time.Minute), 300, true},
		{"last progress in the future counts 0", arv1.AgentRunStatus{LastProgressAt: mt(time.Minute)}, t0, 0, true},
	}
	for _, c := range cases {
		run := &arv1.AgentRun{Status: c.status}
		got, ok := run.LastMovedSeconds(c.now)
		if got != c.want || ok != c.wantOK {
			t.Errorf("%s: LastMovedSeconds = (%d, %v), want (%d, %v)", c.name, got, ok, c.want, c.wantOK)
		}
	}
}
