package controllers_test

import (
	"context"
	"testing"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/journal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
)

// TestStatusWaitsWhileARunOnlyProgresses: with a status interval longer
// than the run, a 6-stage run's status is written twice, when it starts
// (the write that records its snapshot) and when it ends; the five intents
// between go into the journal, each with the completion before it. The
// final status misses nothing.
func TestStatusWaitsWhileARunOnlyProgresses(t *testing.T) {
	ns := newNamespace(t)
	wc, scripted := countingManager(t, ns, manager.Options{MaxConcurrentSteps: 16, StatusInterval: time.Hour})
	createConfigMap(t, ns, "six", map[string]string{"agent.toml": stages(6)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createRun(t, ns, "warm", "six") // snapshots the blueprint
	waitFor(t, ns, "warm", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	time.Sleep(300 * time.Millisecond)
	before := wc.snapshot()
	run := createRun(t, ns, "r", "six")
	done := waitFor(t, ns, "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	time.Sleep(500 * time.Millisecond)
	after := wc.snapshot()
	statusWrites := after["PATCH agentruns/status"] - before["PATCH agentruns/status"]
	journalWrites := after["PATCH configmaps"] - before["PATCH configmaps"] + after["POST configmaps"] - before["POST configmaps"]
	t.Logf("status writes %d, journal writes %d (%v)", statusWrites, journalWrites, after)
	if statusWrites != 2 {
		t.Errorf("%d status writes, want 2: the first and the last", statusWrites)
	}
	// Six completions, each with the next call's intent (the first intent
	// rides in status): one journal write per call.
	if journalWrites != 6 {
		t.Errorf("%d journal writes, want 6", journalWrites)
	}
	st := done.Status
	if st.Usage.ModelCalls != 6 || st.Usage.LostCalls != 0 || st.PendingCall != nil || st.CurrentStage != "s5" || scripted.Calls(string(run.UID)) != 6 {
		t.Errorf("final status %+v (stage %s, pending %+v); the provider served %d calls; want 6 calls, none lost, at s5",
			st.Usage, st.CurrentStage, st.PendingCall, scripted.Calls(string(run.UID)))
	}
	for _, s := range st.Stages {
		if s.State != arv1.StageComplete || s.Visits != 1 {
			t.Errorf("stage %s: %s, %d visits; want Complete after 1", s.Name, s.State, s.Visits)
		}
	}
}

// TestRestartWithTheIntentOnlyInTheJournal stops the manager while a call
// whose intent only the journal holds (status waited) is at the provider.
// The next manager reads the intent there, issues the call again once,
// counts the first dispatch as lost, and records that in the journal over
// the unanswered intent.
func TestRestartWithTheIntentOnlyInTheJournal(t *testing.T) {
	ns := newNamespace(t)
	createConfigMap(t, ns, "slow", map[string]string{"agent.toml": slowMiddle})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	h1 := startManager(t, managerOpts{statusInterval: time.Hour})
	run := createRun(t, ns, "r", "slow")
	deadline := time.Now().Add(20 * time.Second)
	for h1.scripted.Calls(string(run.UID)) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the slow second call never reached the provider")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := getRun(t, ns, "r"); r.Status.CurrentStage != "first" || r.Status.PendingCall == nil || r.Status.PendingCall.Seq != 0 {
		t.Fatalf("status shows stage %q, pending %+v; want it still at the first write (stage first, call #0)", r.Status.CurrentStage, r.Status.PendingCall)
	}
	h1.stop()
	intent := lastIntent(t, ns, run)
	if intent == nil || intent.Stage != "second" || intent.Lost != 0 {
		t.Fatalf("the journal's last model intent is %+v, want the second stage's call, not yet lost", intent)
	}

	h2 := startManager(t, managerOpts{statusInterval: time.Hour})
	done := waitFor(t, ns, "r", 30*time.Second, "Complete after restart", phaseIs(arv1.PhaseComplete))
	c1, c2 := h1.scripted.Calls(string(run.UID)), h2.scripted.Calls(string(run.UID))
	u := done.Status.Usage
	if c1 != 2 || c2 != 2 || u.ModelCalls != 3 || u.LostCalls != 1 || u.PromptTokens != 60 || u.CostIsExact {
		t.Errorf("calls before/after restart %d/%d, usage %+v; want 2/2, 3 calls answered, 1 lost, 60 prompt tokens, cost not exact", c1, c2, u)
	}
	if again := intentAt(t, ns, run, intent.Seq); again == nil || again.Lost != 1 {
		t.Errorf("the journal's intent #%d is %+v after the restart, want it issued again with lost = 1", intent.Seq, again)
	}
}

// lastIntent is the journal's last model-call intent.
func lastIntent(t *testing.T, ns string, run *arv1.AgentRun) *journal.Entry {
	t.Helper()
	es, err := store.Read(context.Background(), k8s, ns, run.UID)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(es) - 1; i >= 0; i-- {
		if es[i].Kind == journal.ModelCallRequested {
			return &es[i]
		}
	}
	return nil
}

// intentAt is the journal's model-call intent under seq.
func intentAt(t *testing.T, ns string, run *arv1.AgentRun, seq int64) *journal.Entry {
	t.Helper()
	es, err := store.Read(context.Background(), k8s, ns, run.UID)
	if err != nil {
		t.Fatal(err)
	}
	for i := range es {
		if es[i].Seq == seq && es[i].Kind == journal.ModelCallRequested {
			return &es[i]
		}
	}
	return nil
}
