package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
)

// runningPeak watches a namespace's runs and keeps the largest number seen
// in phase Running at once. A slot is released only after the status that
// ends its run is written, and one watch delivers writes in order, so the
// peak never overstates how many runs were active together.
type runningPeak struct {
	mu      sync.Mutex
	phase   map[string]arv1.Phase
	peak    int
	stopped func()
}

func watchRunning(t *testing.T, ns string) *runningPeak {
	t.Helper()
	w, err := watchClient(t).Watch(context.Background(), &arv1.AgentRunList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	p := &runningPeak{phase: map[string]arv1.Phase{}, stopped: w.Stop}
	t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			r, ok := ev.Object.(*arv1.AgentRun)
			if !ok {
				continue
			}
			p.mu.Lock()
			p.phase[r.Name] = r.Status.Phase
			n := 0
			for _, ph := range p.phase {
				if ph == arv1.PhaseRunning {
					n++
				}
			}
			p.peak = max(p.peak, n)
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *runningPeak) max() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peak
}

func (p *runningPeak) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.peak = 0
}

func annotateNamespace(t *testing.T, ns, value string) {
	t.Helper()
	obj := &corev1.Namespace{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: ns}, obj); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(obj.DeepCopy())
	if obj.Annotations == nil {
		obj.Annotations = map[string]string{}
	}
	obj.Annotations[arv1.AnnotationMaxActiveRuns] = value
	if err := k8s.Patch(context.Background(), obj, patch); err != nil {
		t.Fatal(err)
	}
}

// TestNamespaceCapBoundsOneTenant: with 8 active-run slots and
// --max-active-runs-per-namespace=2, a namespace without an annotation runs
// at most 2 at once; one the admin annotated agentrun.dev/max-active-runs=1
// runs one at a time, showing why in its Queued condition; raising the
// annotation admits its waiting runs without waiting for one to finish.
func TestNamespaceCapBoundsOneTenant(t *testing.T) {
	capped, flagged := newNamespace(t), newNamespace(t)
	annotateNamespace(t, capped, "1") // before the manager starts: in its cache when runs come
	// Runs are counted through their phase: every status change is
	// written at once, so a run shows Running while it is active.
	startManagerWith(t, manager.Options{MaxActiveRuns: 8, MaxConcurrentSteps: 8, MaxActiveRunsPerNamespace: 2, StatusInterval: -1})
	for ns, delay := range map[string]string{capped: "1000", flagged: "300"} {
		createConfigMap(t, ns, "paced", map[string]string{"agent.toml": strings.ReplaceAll(stages(2), "text = ", "delay_ms = "+delay+"\ntext = ")})
		createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	}
	cappedPeak, flaggedPeak := watchRunning(t, capped), watchRunning(t, flagged)
	const n = 6
	for i := range n {
		createRun(t, capped, fmt.Sprintf("c%d", i), "paced")
		createRun(t, flagged, fmt.Sprintf("f%d", i), "paced")
	}
	queued := waitFor(t, capped, fmt.Sprintf("c%d", n-1), 30*time.Second, "Queued shown", func(r *arv1.AgentRun) bool {
		c := meta.FindStatusCondition(r.Status.Conditions, arv1.ConditionReconciling)
		return c != nil && c.Reason == arv1.ReasonQueued
	})
	if c := meta.FindStatusCondition(queued.Status.Conditions, arv1.ConditionReconciling); !strings.Contains(c.Message, arv1.AnnotationMaxActiveRuns) {
		t.Errorf("Queued message %q does not name the annotation", c.Message)
	}
	if p := cappedPeak.max(); p != 1 {
		t.Errorf("the annotated namespace ran up to %d runs at once, want 1", p)
	}

	cappedPeak.reset()
	annotateNamespace(t, capped, "4")
	waitFor(t, capped, fmt.Sprintf("c%d", n-1), 30*time.Second, "admitted after the bound was raised", phaseIs(arv1.PhaseRunning))
	for i := range n {
		waitFor(t, flagged, fmt.Sprintf("f%d", i), 60*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
		waitFor(t, capped, fmt.Sprintf("c%d", i), 60*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	}
	if p := cappedPeak.max(); p < 2 {
		t.Errorf("after raising the annotation to 4 the namespace still ran %d at a time", p)
	}
	if p := flaggedPeak.max(); p != 2 {
		t.Errorf("the namespace under the flag ran up to %d runs at once, want exactly its bound of 2", p)
	}
}
