package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
)

// TestStatusWaitsWhileARunOnlyProgresses: with a status interval longer
// than the run, a 6-stage run's status is written once, when it ends: its
// first intent goes into the journal with the snapshot it binds the run
// to, and the five after it each with the completion before it. The final
// status misses nothing, and names the snapshot the journal does.
func TestStatusWaitsWhileARunOnlyProgresses(t *testing.T) {
	ns := newNamespace(t)
	wc, scripted := countingManager(t, ns, manager.Options{MaxConcurrentSteps: 16, StatusInterval: time.Hour})
	createConfigMap(t, ns, "six", map[string]string{"agent.toml": stages(6)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createRun(t, ns, "warm", "six") // snapshots the blueprint
	waitFor(t, ns, "warm", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	wc.settle(t, settleQuiet, settleTimeout) // the warm run has stopped writing
	before := wc.snapshot()
	run := createRun(t, ns, "r", "six")
	waitFor(t, ns, "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	wc.settle(t, settleQuiet, settleTimeout) // a late write is counted, not cut off
	after := wc.snapshot()
	done := getRun(t, ns, "r") // the final record, after every write
	if done.Status.Phase != arv1.PhaseComplete {
		t.Fatalf("the run left Complete: %s", done.Status.Phase)
	}
	statusWrites := after["PUT agentruns/status"] - before["PUT agentruns/status"]
	journalWrites := after["PUT configmaps"] - before["PUT configmaps"] + after["POST configmaps"] - before["POST configmaps"]
	t.Logf("status writes %d, journal writes %d (%v)", statusWrites, journalWrites, after)
	if statusWrites != 1 {
		t.Errorf("%d status writes, want 1: the last", statusWrites)
	}
	// The first intent, then six completions, five of them with the next
	// call's intent: one journal write per call, and one to start; none
	// with a database store.
	want := 7
	if suiteStore != "" {
		want = 0
	}
	if journalWrites != want {
		t.Errorf("%d journal writes to the API server, want %d", journalWrites, want)
	}
	entries := journalEntries(t, ns, string(run.UID))
	if got := journal.StartedFrom(entries); got == "" || got != done.Status.BlueprintSnapshot {
		t.Errorf("the journal's first entry binds the run to snapshot %q, status names %q", got, done.Status.BlueprintSnapshot)
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
// whose intent the journal holds is at the provider (the run's first
// status write waits up to a second, so status may not have recorded the
// run, its snapshot or the call yet), and deletes the blueprint ConfigMap.
// The next manager, which did not see the run created, reads the journal:
// it uses the snapshot the journal binds the run to, issues the call again
// once, counts the first dispatch as lost, and records that in the journal
// over the unanswered intent.
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
	h1.stop()
	bp := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "slow"}}
	if err := k8s.Delete(context.Background(), bp); err != nil {
		t.Fatal(err)
	}
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
	es := journalEntries(t, ns, string(run.UID))
	if started := journal.StartedFrom(es); started == "" || done.Status.BlueprintSnapshot != started {
		t.Errorf("status names snapshot %q, the journal binds the run to %q", done.Status.BlueprintSnapshot, started)
	}
}

// lastIntent is the journal's last model-call intent.
func lastIntent(t *testing.T, ns string, run *arv1.AgentRun) *journal.Entry {
	t.Helper()
	es := journalEntries(t, ns, string(run.UID))
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
	es := journalEntries(t, ns, string(run.UID))
	for i := range es {
		if es[i].Seq == seq && es[i].Kind == journal.ModelCallRequested {
			return &es[i]
		}
	}
	return nil
}

// TestALongRunsJournalGoesOnInChunks: with --journal-chunk-bytes at its
// least (16 KiB), an 8-stage run whose model answers are 4 KB each
// journals into several chunks, none holding more than that, at one
// journal write per call as before (a chunk's first write is its create),
// and completes with every call counted once.
func TestALongRunsJournalGoesOnInChunks(t *testing.T) {
	ns := newNamespace(t)
	wc, scripted := countingManager(t, ns, manager.Options{MaxConcurrentSteps: 16, StatusInterval: time.Hour, JournalChunkBytes: configmaps.MinChunkBytes})
	const n = 8
	answer := strings.Repeat("a long answer. ", 4000/15)
	createConfigMap(t, ns, "long", map[string]string{"agent.toml": stagesAnswering(n, func(int) string { return answer })})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createRun(t, ns, "warm", "long") // snapshots the blueprint
	waitFor(t, ns, "warm", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	wc.settle(t, settleQuiet, settleTimeout)
	before := wc.snapshot()
	run := createRun(t, ns, "r", "long")
	done := waitFor(t, ns, "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	wc.settle(t, settleQuiet, settleTimeout)
	after := wc.snapshot()
	journalWrites := after["PUT configmaps"] - before["PUT configmaps"] + after["POST configmaps"] - before["POST configmaps"]
	if journalWrites != n+1 {
		t.Errorf("%d journal writes, want %d: the first intent, then one per call (%v)", journalWrites, n+1, after)
	}
	if u := done.Status.Usage; u.ModelCalls != n || u.LostCalls != 0 || scripted.Calls(string(run.UID)) != n {
		t.Errorf("usage %+v, the provider served %d calls; want %d, none lost", u, scripted.Calls(string(run.UID)), n)
	}
	var chunks corev1.ConfigMapList
	if err := k8s.List(context.Background(), &chunks, client.InNamespace(ns), client.MatchingLabels{configmaps.LabelRunUID: string(run.UID)}); err != nil {
		t.Fatal(err)
	}
	if len(chunks.Items) < 2 {
		t.Fatalf("%d journal chunks; want the %d KB of answers in several 16 KiB ones", len(chunks.Items), n*len(answer)/1000)
	}
	for _, cm := range chunks.Items {
		entries, bytes := 0, 0
		for k, v := range cm.Data {
			if k != configmaps.OutputKey {
				entries, bytes = entries+1, bytes+len(v)
			}
		}
		if entries > 1 && bytes > configmaps.MinChunkBytes {
			t.Errorf("chunk %s holds %d entries of %d bytes, more than the chunk's %d", cm.Name, entries, bytes, configmaps.MinChunkBytes)
		}
	}
	entries, err := configmaps.Read(context.Background(), k8s, ns, run.UID)
	if err != nil || len(entries) < 2*n {
		t.Fatalf("read back %d entries, %v; want every call's intent and completion", len(entries), err)
	}
}
