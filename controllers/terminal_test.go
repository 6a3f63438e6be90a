package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
)

// slowSecond has a second stage whose call takes long enough for a test
// to damage the run's records while it is in flight.
const slowSecond = `
[agent]
name = "slowsecond"
[stages.first]
[stages.first.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.first.transitions.second]
condition = "always"
[[stages.first.script]]
text = "one"
[stages.second]
[stages.second.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.second.transitions.third]
condition = "always"
[[stages.second.script]]
text = "two"
delay_ms = 4000
[stages.third]
[stages.third.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.third.script]]
text = "three"
complete = true
`

// corruptCanary is written into damaged records; it must never be shown.
const corruptCanary = "canary-payload-5be1c0"

// stalledWith says the run shows Stalled=True, reason ReconcileFailed,
// with a message containing every one of texts.
func stalledWith(texts ...string) func(*arv1.AgentRun) bool {
	return func(r *arv1.AgentRun) bool {
		c := meta.FindStatusCondition(r.Status.Conditions, arv1.ConditionStalled)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != arv1.ReasonReconcileFailed {
			return false
		}
		for _, t := range texts {
			if !strings.Contains(c.Message, t) {
				return false
			}
		}
		return true
	}
}

func logStalled(t *testing.T, r *arv1.AgentRun) {
	t.Helper()
	t.Logf("Stalled: %s", meta.FindStatusCondition(r.Status.Conditions, arv1.ConditionStalled).Message)
}

// notRetried watches the run for a while after it stalled and fails if
// it is reconciled more than a straggler or two (the wake of the step
// that found the damage): a retry with backoff would reconcile it about
// ten times in this window.
func notRetried(t *testing.T, h *harness, ns, name string) {
	t.Helper()
	key := types.NamespacedName{Namespace: ns, Name: name}
	start := h.reconcileCount(key)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if n := h.reconcileCount(key) - start; n > 2 {
			t.Fatalf("a stalled run was reconciled %d more times within 3s: retried in a loop", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !stalledWith()(getRun(t, ns, name)) {
		t.Fatal("the run no longer shows Stalled: ReconcileFailed, though nothing was fixed")
	}
}

// retry annotates the run, which is how a person asks the controller to
// look at a stalled run again once its records are restored.
func retry(t *testing.T, ns, name, value string) {
	t.Helper()
	run := getRun(t, ns, name)
	patch := client.MergeFrom(run.DeepCopy())
	if run.Annotations == nil {
		run.Annotations = map[string]string{}
	}
	run.Annotations["agentrun.dev/retry"] = value
	if err := k8s.Patch(context.Background(), run, patch); err != nil {
		t.Fatal(err)
	}
}

// noCanary fails if the damaged text shows in the run's status or Events.
func noCanary(t *testing.T, ns, name string) {
	t.Helper()
	run := getRun(t, ns, name)
	for _, c := range run.Status.Conditions {
		if strings.Contains(c.Message, corruptCanary) {
			t.Errorf("condition %s repeats the damaged text: %q", c.Type, c.Message)
		}
	}
	var evs corev1.EventList
	if err := k8s.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if strings.Contains(e.Message, corruptCanary) {
			t.Errorf("event %s repeats the damaged text: %q", e.Reason, e.Message)
		}
	}
}

// TestCorruptJournalStallsUntilRestored damages a journal entry while the
// run's call is in flight: the step's write then finds the chunk changed,
// the reconcile reads it back and cannot decode it, and the run shows
// Stalled: ReconcileFailed naming the chunk and key, with a Warning Event,
// and is not retried. Restored and annotated, it completes.
func TestCorruptJournalStallsUntilRestored(t *testing.T) {
	h := startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "slowsecond", map[string]string{"agent.toml": slowSecond})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	run := createRun(t, ns, "r", "slowsecond")
	waitFor(t, ns, "r", 20*time.Second, "the slow call in flight", func(r *arv1.AgentRun) bool {
		return r.Status.CurrentStage == "second" && r.Status.PendingCall != nil
	})

	chunk := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: configmaps.ChunkName(run, 0)}, chunk); err != nil {
		t.Fatal(err)
	}
	good, ok := chunk.Data["000000"]
	if !ok {
		t.Fatalf("journal chunk %s has no entry 000000: %v", chunk.Name, chunk.Data)
	}
	chunk.Data["000000"] = "not json " + corruptCanary
	if err := k8s.Update(context.Background(), chunk); err != nil {
		t.Fatal(err)
	}

	logStalled(t, waitFor(t, ns, "r", 20*time.Second, "Stalled: ReconcileFailed naming the chunk and key",
		stalledWith("journal "+chunk.Name+" key 000000", "not valid JSON")))
	waitForEvent(t, ns, "r", arv1.ReasonReconcileFailed, chunk.Name+" key 000000")
	notRetried(t, h, ns, "r")
	noCanary(t, ns, "r")
	if got := getRun(t, ns, "r"); got.Status.Phase.IsTerminal() {
		t.Fatalf("a stalled run ended (%s): it must be able to go on once restored", got.Status.Phase)
	}

	// Annotated while still damaged: looked at once more, stalled again.
	before := h.reconcileCount(keyOf(ns, "r"))
	retry(t, ns, "r", "1")
	waitFor(t, ns, "r", 10*time.Second, "reconciled again on the annotation", func(*arv1.AgentRun) bool {
		return h.reconcileCount(keyOf(ns, "r")) > before
	})
	notRetried(t, h, ns, "r")

	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(chunk), chunk); err != nil {
		t.Fatal(err)
	}
	chunk.Data["000000"] = good
	if err := k8s.Update(context.Background(), chunk); err != nil {
		t.Fatal(err)
	}
	retry(t, ns, "r", "2")
	done := waitFor(t, ns, "r", 30*time.Second, "Complete once restored", phaseIs(arv1.PhaseComplete))
	if c := meta.FindStatusCondition(done.Status.Conditions, arv1.ConditionStalled); c != nil && c.Reason == arv1.ReasonReconcileFailed {
		t.Errorf("Stalled still reads %s after the run completed: %q", c.Reason, c.Message)
	}
}

// TestUndecodableSnapshotStallsUntilRestored: a restarted manager finds
// the run's blueprint snapshot missing, then holding text that does not
// parse; each time the run shows Stalled: ReconcileFailed with the cause
// (not Error: the run is fine, its record is not), and is not retried.
// With the snapshot restored and the run annotated it completes.
func TestUndecodableSnapshotStallsUntilRestored(t *testing.T) {
	h1 := startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "slowsecond", map[string]string{"agent.toml": slowSecond})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createRun(t, ns, "r", "slowsecond")
	parked := waitFor(t, ns, "r", 20*time.Second, "the slow call in flight", func(r *arv1.AgentRun) bool {
		return r.Status.CurrentStage == "second" && r.Status.PendingCall != nil
	})
	h1.stop()

	name := parked.Status.BlueprintSnapshot
	snap := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, snap); err != nil {
		t.Fatal(err)
	}
	original := snap.DeepCopy()
	if err := k8s.Delete(context.Background(), snap); err != nil {
		t.Fatal(err)
	}

	h2 := startManager(t, managerOpts{})
	logStalled(t, waitFor(t, ns, "r", 20*time.Second, "Stalled: ReconcileFailed, the snapshot missing",
		stalledWith("blueprint snapshot "+name, "missing")))
	waitForEvent(t, ns, "r", arv1.ReasonReconcileFailed, name)
	notRetried(t, h2, ns, "r")

	// An immutable snapshot is put back by deleting and creating it; this
	// one holds text that does not parse.
	recreate(t, original, map[string]string{"agent.toml": "[agent\nname = \"" + corruptCanary})
	retry(t, ns, "r", "1")
	logStalled(t, waitFor(t, ns, "r", 20*time.Second, "Stalled: ReconcileFailed, the snapshot not parsing",
		stalledWith("blueprint snapshot "+name, "agent.toml")))
	notRetried(t, h2, ns, "r")
	if got := getRun(t, ns, "r"); got.Status.Phase.IsTerminal() {
		t.Fatalf("a stalled run ended (%s): it must be able to go on once restored", got.Status.Phase)
	}

	if err := k8s.Delete(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
	recreate(t, original, original.Data)
	retry(t, ns, "r", "2")
	waitFor(t, ns, "r", 30*time.Second, "Complete once restored", phaseIs(arv1.PhaseComplete))
}

// recreate creates the snapshot cm again with data.
func recreate(t *testing.T, cm *corev1.ConfigMap, data map[string]string) {
	t.Helper()
	c := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: cm.Namespace, Name: cm.Name, Labels: cm.Labels, Annotations: cm.Annotations},
		Immutable:  cm.Immutable,
		Data:       data,
	}
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}
