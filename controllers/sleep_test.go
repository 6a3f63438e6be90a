package controllers_test

import (
	"testing"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/wirestatus"
)

const napper = `
[agent]
name = "napper"
[agent.title]
enabled = false
[stages.only]
[stages.only.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.only.script]]
text = "back in a bit"
sleep_seconds = 2
[[stages.only.script]]
text = "awake"
complete = true
`

func sleeping(r *arv1.AgentRun) bool {
	return r.Status.WaitingOn != nil && r.Status.WaitingOn.Reason == arv1.WaitSleeping
}

// TestSleepWakesAtWakeAtNotBefore: the sleep tool parks the run on a durable
// timer that needs nobody; it is woken by a requeue at wakeAt, never early.
func TestSleepWakesAtWakeAtNotBefore(t *testing.T) {
	h := startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "napper", map[string]string{"agent.toml": napper})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	run := createRun(t, ns, "r", "napper")
	s := waitFor(t, ns, "r", 20*time.Second, "Sleeping", sleeping)
	wakeAt := s.Status.WaitingOn.WakeAt.Time
	if s.NeedsAPerson() || s.Status.Phase != arv1.PhaseWaitingInput {
		t.Errorf("a sleeping run: phase %s needsAPerson %v", s.Status.Phase, s.NeedsAPerson())
	}
	for time.Now().Before(wakeAt.Add(-200 * time.Millisecond)) {
		if r := getRun(t, ns, "r"); !sleeping(r) || h.scripted.Calls(string(run.UID)) != 1 {
			t.Fatalf("woke early: phase %s, %d calls, %s before wakeAt", r.Status.Phase, h.scripted.Calls(string(run.UID)), time.Until(wakeAt))
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitFor(t, ns, "r", 10*time.Second, "Complete after waking", phaseIs(arv1.PhaseComplete))
	if !time.Now().After(wakeAt) {
		t.Error("completed before wakeAt")
	}
}

// TestSleepOverdueWhileNobodyDrivesIt: with the manager down past wakeAt the
// run reads overdue; the next manager wakes it.
func TestSleepOverdueWhileNobodyDrivesIt(t *testing.T) {
	h := startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "napper", map[string]string{"agent.toml": napper})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createRun(t, ns, "r", "napper")
	s := waitFor(t, ns, "r", 20*time.Second, "Sleeping", sleeping)
	h.stop()
	// Nobody drives it, so it stays sleeping, and reads overdue once wakeAt
	// is behind it.
	deadline := s.Status.WaitingOn.WakeAt.Add(20 * time.Second)
	for {
		st := wirestatus.Status(getRun(t, ns, "r"), time.Now())
		state, _ := st.Get("state")
		overdue, _ := st.Get("overdue")
		if state != "sleeping" {
			t.Fatalf("wire status while nobody drives it = %v, want sleeping and overdue", st)
		}
		if overdue == true {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("wire status while nobody drives it = %v, want sleeping and overdue", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	startManager(t, managerOpts{})
	waitFor(t, ns, "r", 20*time.Second, "Complete once driven again", phaseIs(arv1.PhaseComplete))
}
