package controllers_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// fairnessExtraDelay is the bound the fairness test states: another
// namespace's 10 runs finish at most this much later behind 1,000 queued
// runs than they do on an idle manager.
const fairnessExtraDelay = 5 * time.Second

// completions counts the runs of a namespace that reached Complete, from
// a watch.
type completions struct {
	mu   sync.Mutex
	done map[string]time.Time
}

func watchCompletions(t *testing.T, c client.WithWatch, ns string) *completions {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cs := &completions{done: map[string]time.Time{}}
	w, err := c.Watch(ctx, &arv1.AgentRunList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		// The API server closes a watch it finds too slow (a loaded
		// machine, thousands of events): list what was missed and watch
		// again, so the count never freezes.
		for {
			for ev := range w.ResultChan() {
				if r, ok := ev.Object.(*arv1.AgentRun); ok {
					cs.saw(r)
				}
			}
			if ctx.Err() != nil {
				return
			}
			var list arv1.AgentRunList
			if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
				continue
			}
			for i := range list.Items {
				cs.saw(&list.Items[i])
			}
			if w, err = c.Watch(ctx, &arv1.AgentRunList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}}); err != nil {
				return
			}
		}
	}()
	return cs
}

// saw records a run that reached Complete, the first time it is seen so.
func (c *completions) saw(r *arv1.AgentRun) {
	if r.Status.Phase != arv1.PhaseComplete {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, seen := c.done[r.Name]; !seen {
		c.done[r.Name] = time.Now()
	}
}

func (c *completions) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.done)
}

// awaitCount waits until n runs completed and returns when the last did.
func (c *completions) awaitCount(t *testing.T, n int, timeout time.Duration, what string) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for c.count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d runs complete after %s", what, c.count(), n, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var last time.Time
	for _, at := range c.done {
		if at.After(last) {
			last = at
		}
	}
	return last
}

// createRuns creates n runs of agent in ns from 16 goroutines.
func createRuns(t *testing.T, c client.Client, ns, prefix string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s%04d", prefix, i), Namespace: ns},
					Spec: arv1.AgentRunSpec{Agent: "fast", Task: "fairness"}}
				if err := c.Create(context.Background(), run); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestTenantsDoNotStarveEachOther runs on a control plane of its own (it
// leaves 1,000 runs behind) a manager with 4 active-run slots and 4
// executor slots. It measures 10 runs of namespace "alone" on the idle
// manager; then namespace A creates 1,000 runs and, once they are all
// created, namespace B creates 10. B's runs must finish within
// fairnessExtraDelay of the idle measure, while A's runs keep completing
// during and after B's (A is neither paused for B nor finished before it).
func TestTenantsDoNotStarveEachOther(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own control plane and 1,000 runs")
	}
	own, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = own.Stop() })
	c, err := client.NewWithWatch(own.Config, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := manager.New(own.Config, manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true, Scripted: providers.NewScripted(),
		MaxActiveRuns: 4, MaxConcurrentSteps: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for _, ns := range []string{"alone", "tenant-a", "tenant-b"} {
		for _, obj := range []client.Object{
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fast", Namespace: ns}, Data: map[string]string{"agent.toml": stages(1)}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "agentrun-providers", Namespace: ns}, Data: map[string]string{"providers.toml": scriptedProviders}},
		} {
			if err := c.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
		}
	}
	alone, a, b := watchCompletions(t, c, "alone"), watchCompletions(t, c, "tenant-a"), watchCompletions(t, c, "tenant-b")

	createRuns(t, c, "alone", "warm", 1) // the first run pays for cold caches
	alone.awaitCount(t, 1, time.Minute, "warm-up")
	start := time.Now()
	createRuns(t, c, "alone", "r", 10)
	idle := alone.awaitCount(t, 11, time.Minute, "alone").Sub(start)

	start = time.Now()
	createRuns(t, c, "tenant-a", "a", 1000)
	created := time.Since(start)
	aBefore := a.count()
	start = time.Now()
	createRuns(t, c, "tenant-b", "b", 10)
	loaded := b.awaitCount(t, 10, time.Minute, "tenant-b behind tenant-a").Sub(start)
	aDuring := a.count() - aBefore
	// tenant-a goes on once tenant-b's runs are done: wait up to 2s for
	// its next completion.
	aAfter := a.count()
	for end := time.Now().Add(2 * time.Second); aAfter == aBefore+aDuring && time.Now().Before(end); aAfter = a.count() {
		time.Sleep(10 * time.Millisecond)
	}

	t.Logf("10 runs alone on an idle manager: %s; 1,000 runs of tenant-a created in %s (%d of them complete by then); "+
		"tenant-b's 10 runs behind them: %s (bound: idle + %s); tenant-a completed %d runs meanwhile and %d more within 2s after (%d of 1000 in all)",
		idle.Round(time.Millisecond), created.Round(time.Millisecond), aBefore, loaded.Round(time.Millisecond), fairnessExtraDelay,
		aDuring, aAfter-aBefore-aDuring, aAfter)
	if loaded > idle+fairnessExtraDelay {
		t.Errorf("tenant-b's 10 runs took %s behind tenant-a's 1,000, over the bound of %s (idle %s + %s)", loaded, idle+fairnessExtraDelay, idle, fairnessExtraDelay)
	}
	if aDuring == 0 {
		t.Errorf("tenant-a completed no run while tenant-b's ran: it was starved in turn")
	}
	if aAfter >= 1000 {
		t.Errorf("tenant-a had finished all its runs; the test did not measure tenant-b behind a backlog")
	} else if aAfter == aBefore+aDuring {
		t.Errorf("tenant-a stopped progressing after tenant-b's runs finished (%d complete)", aAfter)
	}
}
