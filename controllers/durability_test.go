package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
)

// slowMiddle has a slow second stage so a test can stop the manager while
// its call is in flight.
const slowMiddle = `
[agent]
name = "slow"
[stages.first]
[stages.first.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.first.transitions.second]
condition = "always"
[[stages.first.script]]
text = "one"
usage = {prompt = 10, completion = 1}
[stages.second]
[stages.second.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.second.transitions.third]
condition = "always"
[[stages.second.script]]
text = "two"
delay_ms = 1500
usage = {prompt = 20, completion = 2}
[stages.third]
[stages.third.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.third.script]]
text = "three"
complete = true
usage = {prompt = 30, completion = 3}
`

// TestManagerRestartMidRun stops the manager while a call is in flight,
// edits the blueprint ConfigMap, starts a new manager, and checks the run
// completes on the snapshotted blueprint with no completed call issued twice.
func TestManagerRestartMidRun(t *testing.T) {
	h1 := startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "slow", map[string]string{"agent.toml": slowMiddle})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	run := createRun(t, ns, "r", "slow")
	waitFor(t, ns, "r", 20*time.Second, "the slow call in flight", func(r *arv1.AgentRun) bool {
		return r.Status.CurrentStage == "second" && r.Status.PendingCall != nil
	})
	h1.stop()

	// Change the blueprint under the run: a restart must not pick this up.
	edited := strings.NewReplacer(`name = "slow"`, `name = "edited"`, `text = "three"`, `text = "changed"`, "prompt = 30", "prompt = 999").Replace(slowMiddle)
	setConfigMapData(t, ns, "slow", map[string]string{"agent.toml": edited})

	h2 := startManager(t, managerOpts{})
	done := waitFor(t, ns, "r", 30*time.Second, "Complete after restart", phaseIs(arv1.PhaseComplete))
	if done.Status.AgentName != "slow" {
		t.Errorf("agentName = %q: the edited blueprint was used", done.Status.AgentName)
	}
	if done.Status.Usage.PromptTokens != 60 || done.Status.Usage.ModelCalls != 3 {
		t.Errorf("usage = %+v, want 60 prompt tokens over 3 calls (each counted once, from the snapshot)", done.Status.Usage)
	}
	c1, c2 := h1.scripted.Calls(string(run.UID)), h2.scripted.Calls(string(run.UID))
	if c1 != 2 || c2 != 2 {
		t.Errorf("calls before/after restart = %d/%d, want 2/2: the interrupted call re-issued once, no completed call again", c1, c2)
	}
	// The interrupted call reached the provider (which may bill it) and its
	// answer was lost: it is counted, and the cost is no longer exact.
	u := done.Status.Usage
	if u.LostCalls != 1 || u.ModelCalls+u.LostCalls != int64(c1+c2) || u.CostIsExact || u.CostUSD != "unknown" {
		t.Errorf("usage = %+v, want 1 lost call (the provider served %d), cost unknown and not exact", u, c1+c2)
	}
}

// TestSecretValueNeverLeaks runs with a canary API key and a provider that
// rejects it, then searches status, events, logs and metrics for it.
func TestSecretValueNeverLeaks(t *testing.T) {
	const canary = "canary-sk-7f3a9e21d4"
	port := freePort(t)
	h := startManager(t, managerOpts{metricsAddr: fmt.Sprintf("127.0.0.1:%d", port)})
	ns := newNamespace(t)
	createConfigMap(t, ns, "rejected", map[string]string{"agent.toml": rejectOnce})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": keyedProviders})
	createSecret(t, ns, "model-creds", map[string]string{"api-key": canary})
	createRun(t, ns, "r", "rejected")
	waitFor(t, ns, "r", 20*time.Second, "AuthFailed", blockedOn(arv1.BlockerAuthFailed))
	setSecretData(t, ns, "model-creds", map[string]string{"api-key": canary + "-rotated"})
	waitFor(t, ns, "r", 20*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	_ = h

	var runs arv1.AgentRunList
	if err := k8s.List(context.Background(), &runs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	statusJSON, _ := json.Marshal(runs)
	var evs corev1.EventList
	if err := k8s.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	eventsJSON, _ := json.Marshal(evs)
	var cms corev1.ConfigMapList
	if err := k8s.List(context.Background(), &cms, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	journalJSON, _ := json.Marshal(cms)
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), "controller_runtime_reconcile_total") {
		t.Fatal("metrics endpoint did not answer with the manager's metrics")
	}
	for what, text := range map[string]string{
		"status": string(statusJSON), "events": string(eventsJSON), "journal and owned objects": string(journalJSON),
		"logs": logSink.String(), "metrics": string(metrics),
	} {
		if strings.Contains(text, canary) {
			t.Errorf("the secret value appears in %s", what)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// pacedThree takes 600ms per call over three stages.
const pacedThree = `
[agent]
name = "paced"
[stages.a]
[stages.a.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.a.transitions.b]
condition = "always"
[[stages.a.script]]
text = "a"
delay_ms = 600
[stages.b]
[stages.b.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.b.transitions.c]
condition = "always"
[[stages.b.script]]
text = "b"
delay_ms = 600
[stages.c]
[stages.c.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.c.script]]
text = "c"
complete = true
delay_ms = 600
`

func patchSpec(t *testing.T, ns, name string, mutate func(*arv1.AgentRun)) {
	t.Helper()
	run := getRun(t, ns, name)
	orig := run.DeepCopy()
	mutate(run)
	if err := k8s.Patch(context.Background(), run, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}

// TestPauseHoldsResultAndResumes pauses a run while a call is in flight: the
// result lands while paused and is held (no error, no new call), and resume
// carries on to completion.
func TestPauseHoldsResultAndResumes(t *testing.T) {
	h := startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "paced", map[string]string{"agent.toml": pacedThree})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	run := createRun(t, ns, "r", "paced")
	waitFor(t, ns, "r", 20*time.Second, "first call in flight", func(r *arv1.AgentRun) bool { return r.Status.PendingCall != nil })
	patchSpec(t, ns, "r", func(r *arv1.AgentRun) { r.Spec.Paused = true })
	paused := waitFor(t, ns, "r", 10*time.Second, "Paused", phaseIs(arv1.PhasePaused))
	if c := meta.FindStatusCondition(paused.Status.Conditions, arv1.ConditionReconciling); c == nil || c.Reason != arv1.ReasonPaused {
		t.Errorf("Reconciling = %+v, want reason Paused", c)
	}
	// A loaded machine may see the pause only after the first call landed
	// and the second started: either way, nothing starts once Paused.
	atPause := h.scripted.Calls(string(run.UID))
	// The call in flight lands while paused: wait until the run's record
	// shows it landed (no call pending, every call the provider got
	// answered and counted, the pause observed), then that it was held.
	landed := func(r *arv1.AgentRun) bool {
		return r.Status.PendingCall == nil && int(r.Status.Usage.ModelCalls) == h.scripted.Calls(string(run.UID)) &&
			r.Status.ObservedGeneration == r.Generation
	}
	held := waitFor(t, ns, "r", 10*time.Second, "the in-flight call landed and held", landed)
	if held.Status.Phase != arv1.PhasePaused || held.Status.Error != "" {
		t.Fatalf("a result landing while paused changed the run: phase %s error %q", held.Status.Phase, held.Status.Error)
	}
	if calls := h.scripted.Calls(string(run.UID)); calls != atPause || calls > 2 {
		t.Fatalf("calls while paused = %d, %d when it paused (nothing new starts)", calls, atPause)
	}
	// That no call starts later while paused has no event to wait on: look
	// for longer than a paced call takes (600ms).
	if err := holdsFor(time.Second, func() error {
		r := getRun(t, ns, "r")
		if calls := h.scripted.Calls(string(run.UID)); calls != atPause || r.Status.Phase != arv1.PhasePaused || r.Status.Error != "" {
			return fmt.Errorf("while paused: %d calls (%d when it paused), phase %s, error %q", calls, atPause, r.Status.Phase, r.Status.Error)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if held.Status.Active == nil || held.Status.Active.Since != nil {
		t.Errorf("the active clock runs while paused: %+v", held.Status.Active)
	}
	patchSpec(t, ns, "r", func(r *arv1.AgentRun) { r.Spec.Paused = false })
	done := waitFor(t, ns, "r", 20*time.Second, "Complete after resume", phaseIs(arv1.PhaseComplete))
	if done.Status.Usage.ModelCalls != 3 || h.scripted.Calls(string(run.UID)) != 3 {
		t.Errorf("model calls = %d (provider saw %d), want 3", done.Status.Usage.ModelCalls, h.scripted.Calls(string(run.UID)))
	}
}

// TestCancelAndDelete cancels a run mid-call (terminal Cancelled, distinct
// from Error) and deletes another mid-call: it goes at once (runs carry no
// finalizer) and its work stops.
func TestCancelAndDelete(t *testing.T) {
	h := startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "paced", map[string]string{"agent.toml": pacedThree})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	run := createRun(t, ns, "c", "paced")
	// A call in flight, as the provider sees it (a new run's status may
	// not show it yet: its first write waits while it only progresses).
	waitCalls(t, h.scripted, run, 1)
	atCancel := h.scripted.Calls(string(run.UID))
	patchSpec(t, ns, "c", func(r *arv1.AgentRun) { r.Spec.Cancel = true })
	// The record shows the cancel observed and acted on: Cancelled, at the
	// spec's generation.
	c := waitFor(t, ns, "c", 10*time.Second, "Cancelled, the cancel observed", func(r *arv1.AgentRun) bool {
		return r.Status.Phase == arv1.PhaseCancelled && r.Status.ObservedGeneration == r.Generation
	})
	if c.Status.Error != "" {
		t.Errorf("a cancelled run reports an error: %q", c.Status.Error)
	}
	if cond := meta.FindStatusCondition(c.Status.Conditions, arv1.ConditionStalled); cond == nil || cond.Reason != arv1.ReasonCancelled {
		t.Errorf("Stalled = %+v, want reason Cancelled", cond)
	}
	// The call in flight at the cancel, or one whose intent was recorded
	// just before it, may have reached the provider or been stopped
	// before it did (a loaded machine); nothing starts after. Nothing
	// signals that no call will start: look for longer than a paced call
	// takes (600ms), so a run that went on would call again meanwhile.
	if err := holdsFor(time.Second, func() error {
		if calls := h.scripted.Calls(string(run.UID)); calls > atCancel+1 {
			return fmt.Errorf("calls after cancel = %d (%d at the cancel), want at most one more", calls, atCancel)
		}
		if r := getRun(t, ns, "c"); r.Status.Phase != arv1.PhaseCancelled {
			return fmt.Errorf("phase moved after cancel: %s", r.Status.Phase)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}

	// Created now, so it is mid-run when it is deleted (created with the
	// first, it could have finished by now, and its calls would stop
	// whether or not the deletion stopped them).
	createRun(t, ns, "d", "paced")
	waitCalls(t, h.scripted, getRun(t, ns, "d"), 1)
	d := getRun(t, ns, "d")
	if d.Status.Phase.IsTerminal() || h.scripted.Calls(string(d.UID)) >= 3 {
		t.Fatalf("run d finished (%s, %d calls) before it could be deleted mid-run", d.Status.Phase, h.scripted.Calls(string(d.UID)))
	}
	if len(d.Finalizers) != 0 {
		t.Errorf("finalizers = %v, want none (a finalizer costs a write per run)", d.Finalizers)
	}
	journaled := len(journalEntries(t, ns, string(d.UID)))
	if err := k8s.Delete(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "d"}, &arv1.AgentRun{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("the deleted run is still there: %v", err)
	}
	calls := h.scripted.Calls(string(d.UID))
	// The API server no longer has the run; when the manager has seen that
	// and stopped its step shows nowhere outside the manager, so look for
	// 2s: the paced stage, had it gone on, would have called again within
	// 600ms of the call in flight landing.
	if err := holdsFor(2*time.Second, func() error {
		if got := h.scripted.Calls(string(d.UID)); got != calls {
			return fmt.Errorf("the deleted run's calls went on: %d, then %d", calls, got)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	// The call in flight at the deletion may still record its outcome (an
	// intent and its completion); nothing after it may.
	if n := len(journalEntries(t, ns, string(d.UID))); n > journaled+2 {
		t.Errorf("the deleted run's journal grew from %d to %d entries after it was deleted", journaled, n)
	}
}

// waitCalls waits until the provider has received at least n calls of run.
func waitCalls(t *testing.T, p *providers.Scripted, run *arv1.AgentRun, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for p.Calls(string(run.UID)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the provider received %d calls, want %d", run.Name, p.Calls(string(run.UID)), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
