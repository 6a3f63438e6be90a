package controllers_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// TestFixingOneSecretWakesOnlyItsRuns parks 200 runs across 4 Secrets,
// creates one Secret, and checks that exactly its 50 runs were reconciled
// and moved on by themselves, with no polling anywhere. How fast they move
// is a speed target, so it lives in BenchmarkSecretFixResume (this machine
// is shared and noisy); the latency is logged here too.
func TestFixingOneSecretWakesOnlyItsRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("200 runs")
	}
	h := startManager(t, managerOpts{steps: 64})
	ns, before, moved := parkAndFixOneSecret(t, func(n types.NamespacedName) int64 { return h.reconcileCount(n) })
	t.Logf("resume latency after the Secret fix: worst %v over %d runs", worstOf(moved), len(moved))
	waitAll(t, ns, 30*time.Second, "s1 runs complete", func(r *arv1.AgentRun) bool {
		return r.Name[len(r.Name)-2:] != "s1" || r.Status.Phase == arv1.PhaseComplete
	})
	// The runs of the other Secrets stay untouched while the s1 runs'
	// last writes land.
	if err := holdsFor(300*time.Millisecond, func() error {
		for name, n := range before {
			if name[len(name)-2:] == "s1" {
				continue
			}
			if after := h.reconcileCount(types.NamespacedName{Namespace: ns, Name: name}); after != n {
				return fmt.Errorf("%s waits on another Secret but was reconciled %d more times", name, after-n)
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	woken, reconciles := 0, int64(0)
	for name, n := range before {
		if name[len(name)-2:] != "s1" {
			continue
		}
		after := h.reconcileCount(types.NamespacedName{Namespace: ns, Name: name})
		if after == n {
			t.Errorf("%s was not reconciled after its Secret appeared", name)
		}
		woken++
		reconciles += after - n
	}
	t.Logf("reconciled after the fix: %d runs (the Secret's own), %d reconciles in all through completion; other runs: 0", woken, reconciles)
}

// BenchmarkSecretFixResume measures how long 50 runs parked on a missing
// Secret take to move once it is created, beside 150 runs parked on other
// Secrets. Target: the slowest within 1s.
func BenchmarkSecretFixResume(b *testing.B) {
	startCountingManager(b, 64)
	for b.Loop() {
		_, _, moved := parkAndFixOneSecret(b, nil)
		worst := worstOf(moved)
		b.ReportMetric(float64(worst.Milliseconds()), "ms/slowest-resume")
		fmt.Printf("Secret fix: %d runs resumed, slowest after %v (target 1s)\n", len(moved), worst)
	}
}

// parkAndFixOneSecret parks 200 runs across 4 Secrets, then creates the
// second Secret and samples until each of its 50 runs has left NeedsSetup.
// It returns the namespace, every run's reconcile count before the fix (when
// count is given), and how long after the fix each of the 50 moved.
func parkAndFixOneSecret(tb testing.TB, count func(types.NamespacedName) int64) (string, map[string]int64, map[string]time.Duration) {
	tb.Helper()
	ns := newNamespace(tb)
	providersTOML := ""
	for i := range 4 {
		providersTOML += fmt.Sprintf("[providers.p%d]\ntype = \"scripted\"\nmodels = [\"m1\"]\napi_key_secret = {name = \"s%d\", key = \"api-key\"}\n", i, i)
	}
	createConfigMap(tb, ns, "agentrun-providers", map[string]string{"providers.toml": providersTOML})
	createConfigMap(tb, ns, "single", map[string]string{"agent.toml": oneStage})
	const perSecret = 50
	for i := range 4 * perSecret {
		secret := i % 4
		createRun(tb, ns, fmt.Sprintf("r%03d-s%d", i, secret), "single", func(r *arv1.AgentRun) { r.Spec.Model = fmt.Sprintf("p%d/m1", secret) })
	}
	waitAll(tb, ns, 60*time.Second, "all 200 parked on SecretMissing", func(r *arv1.AgentRun) bool { return blockedOn(arv1.BlockerSecretMissing)(r) })

	// Once the parked state has settled (the reconciles the parking writes
	// trigger have run), snapshot every run's reconcile count.
	before := map[string]int64{}
	var list arv1.AgentRunList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		tb.Fatal(err)
	}
	if count != nil {
		before = steady(tb, 500*time.Millisecond, 30*time.Second, "the parked runs' reconcile counts", func() map[string]int64 {
			counts := map[string]int64{}
			for _, r := range list.Items {
				counts[r.Name] = count(types.NamespacedName{Namespace: ns, Name: r.Name})
			}
			return counts
		})
	}

	fixed := time.Now()
	createSecret(tb, ns, "s1", map[string]string{"api-key": "k1"})
	moved := map[string]time.Duration{}
	deadline := fixed.Add(30 * time.Second)
	for len(moved) < perSecret && time.Now().Before(deadline) {
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			tb.Fatal(err)
		}
		for _, r := range list.Items {
			if _, seen := moved[r.Name]; seen || r.Name[len(r.Name)-2:] != "s1" {
				continue
			}
			if !blockedOn(arv1.BlockerSecretMissing)(&r) {
				moved[r.Name] = time.Since(fixed)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(moved) != perSecret {
		tb.Fatalf("%d of %d runs moved after the Secret was created", len(moved), perSecret)
	}
	return ns, before, moved
}

func worstOf(d map[string]time.Duration) time.Duration {
	var worst time.Duration
	for _, v := range d {
		worst = max(worst, v)
	}
	return worst
}

func waitAll(t testing.TB, ns string, timeout time.Duration, what string, cond func(*arv1.AgentRun) bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var list arv1.AgentRunList
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		bad := 0
		var example *arv1.AgentRun
		for i := range list.Items {
			if !cond(&list.Items[i]) {
				bad++
				example = &list.Items[i]
			}
		}
		if bad == 0 && len(list.Items) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %d runs not there, e.g. %s phase=%s waitingOn=%+v", what, bad, example.Name, example.Status.Phase, example.Status.WaitingOn)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rejectOnce answers 401 on the first attempt, then completes.
const rejectOnce = `
[agent]
name = "rejected"
[stages.only]
[stages.only.model]
models = [{provider = "keyed", model = "m1"}]
[[stages.only.script]]
text = "done"
complete = true
error = {status = 401, message = "invalid api key", times = 1}
usage = {prompt = 10, completion = 2}
`

// TestRejectedKeyWaitsForSecretChange: a 401 parks the run on AuthFailed;
// the provider is not called again until the Secret changes; then it
// completes.
func TestRejectedKeyWaitsForSecretChange(t *testing.T) {
	h := startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "rejected", map[string]string{"agent.toml": rejectOnce})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": keyedProviders})
	createSecret(t, ns, "model-creds", map[string]string{"api-key": "bad"})
	createSecret(t, ns, "unrelated", map[string]string{"x": "y"})
	run := createRun(t, ns, "r", "rejected")

	parked := waitFor(t, ns, "r", 20*time.Second, "AuthFailed", blockedOn(arv1.BlockerAuthFailed))
	w := parked.Status.WaitingOn
	if want := fmt.Sprintf("Secret %s/model-creds key \"api-key\"", ns); !contains(w.Remedy, want) || !contains(w.Remedy, "HTTP 401") {
		t.Errorf("remedy %q does not name %s and the 401", w.Remedy, want)
	}
	if calls := h.scripted.Calls(string(run.UID)); calls != 1 {
		t.Fatalf("provider calls = %d, want 1", calls)
	}
	// An unrelated Secret changing, and time passing, must not retry.
	setSecretData(t, ns, "unrelated", map[string]string{"x": "z"})
	if err := holdsFor(2*time.Second, func() error {
		if calls := h.scripted.Calls(string(run.UID)); calls != 1 {
			return fmt.Errorf("provider called again (%d calls) though the Secret did not change", calls)
		}
		if r := getRun(t, ns, "r"); !blockedOn(arv1.BlockerAuthFailed)(r) {
			return fmt.Errorf("run left AuthFailed without a fix: %+v", r.Status.WaitingOn)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	setSecretData(t, ns, "model-creds", map[string]string{"api-key": "good"})
	waitFor(t, ns, "r", 20*time.Second, "Complete after the key was replaced", phaseIs(arv1.PhaseComplete))
	if calls := h.scripted.Calls(string(run.UID)); calls != 2 {
		t.Errorf("provider calls = %d, want 2 (the rejected one and the retry)", calls)
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

var _ sync.Mutex
