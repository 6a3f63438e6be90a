package shards

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// patchOrder is a Writer that records the runs it labels, in order, each
// patch taking a little while (the API server's answer), and calls
// after(n) after the n-th.
type patchOrder struct {
	client.Client
	mu    sync.Mutex
	names []string
	after func(n int)
}

func (p *patchOrder) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	time.Sleep(20 * time.Millisecond)
	if err := p.Client.Patch(ctx, obj, patch, opts...); err != nil {
		return err
	}
	p.mu.Lock()
	p.names = append(p.names, obj.GetName())
	n := len(p.names)
	p.mu.Unlock()
	if p.after != nil {
		p.after(n)
	}
	return nil
}

func (p *patchOrder) order() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.names)
}

// TestLabelerLabelsRunsInFlightFirst: of the runs without a shard, the
// labeller labels those in flight before the finished ones (an upgrade's
// backlog), and a run created while it works through finished runs is
// labelled before the rest of them, not after.
func TestLabelerLabelsRunsInFlightFirst(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scheme, c, ns := clientInNamespace(t, ctx, "labeler-")
	create := func(name string, phase arv1.Phase) {
		t.Helper()
		run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name}, Spec: arv1.AgentRunSpec{Agent: "a", Task: "t"}}
		if err := c.Create(ctx, run); err != nil {
			t.Fatal(err)
		}
		if phase != "" {
			run.Status.Phase = phase
			if err := c.Status().Update(ctx, run); err != nil {
				t.Fatal(err)
			}
		}
	}
	const finished = 40
	for i := range finished {
		create(fmt.Sprintf("done-%02d", i), arv1.PhaseComplete)
	}
	for i := range 3 {
		create(fmt.Sprintf("running-%d", i), arv1.PhaseRunning)
	}
	w := &patchOrder{Client: c}
	created := make(chan struct{})
	w.after = func(n int) {
		if n == 3+5 { // five finished runs labelled: a new run arrives
			go func() {
				create("fresh", "")
				close(created)
			}()
		}
	}
	l := NewLabeler(LabelerConfig{
		Shards: 2, Owns: func(int) bool { return true }, Rest: env.Config, Scheme: scheme,
		Namespaces: map[string]cache.Config{ns.Name: {}}, Writer: w, Reader: c,
	})
	go func() { _ = l.Start(ctx) }()
	l.Kick()

	deadline := time.Now().Add(time.Minute)
	for len(w.order()) < finished+3+1 {
		if time.Now().After(deadline) {
			t.Fatalf("labelled %d runs in a minute, want %d: %v", len(w.order()), finished+4, w.order())
		}
		time.Sleep(50 * time.Millisecond)
	}
	<-created
	got := w.order()
	for i, name := range got[:3] {
		if !strings.HasPrefix(name, "running-") {
			t.Errorf("label %d went to %s; want the three runs in flight first: %v", i, name, got)
		}
	}
	at := slices.Index(got, "fresh")
	// It arrives after the eighth label; the informer tells the labeller
	// within a few labels of 20 ms (without the ordering, it would be
	// labelled after every finished run).
	if at < 0 || at > 3+5+15 {
		t.Errorf("the run created meanwhile was label %d of %d; want it ahead of most finished runs: %v", at, len(got), got)
	}
}

// clientInNamespace is a client of the test API server that knows
// AgentRuns, its scheme, and a new namespace named from prefix.
func clientInNamespace(t *testing.T, ctx context.Context, prefix string) (*runtime.Scheme, client.Client, *corev1.Namespace) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := arv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	return scheme, c, ns
}
