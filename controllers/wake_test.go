package controllers_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool/mcptest"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
)

// chaos is the path wake events take in TestNoInterleavingLeavesARunUnwoken:
// every event is delayed by a random time and some are sent twice, so
// steps finishing, children changing, answers arriving and timers firing
// interleave with reconciles in ever different orders. No wake is made up:
// a run whose reconcile relied on a source that never fires would hang.
type chaos struct {
	rng *rand.Rand
	mu  sync.Mutex
}

func (c *chaos) through(in <-chan event.GenericEvent) <-chan event.GenericEvent {
	out := make(chan event.GenericEvent, 1024)
	send := func(ev event.GenericEvent, after time.Duration) {
		time.AfterFunc(after, func() {
			defer func() { _ = recover() }() // the test may have ended
			out <- ev
		})
	}
	go func() {
		for ev := range in {
			c.mu.Lock()
			delay, twice, again := time.Duration(c.rng.IntN(250))*time.Millisecond, c.rng.IntN(4) == 0, time.Duration(c.rng.IntN(400))*time.Millisecond
			c.mu.Unlock()
			send(ev, delay)
			if twice {
				send(ev, again)
			}
		}
	}()
	return out
}

// TestNoInterleavingLeavesARunUnwoken runs every kind of run (model steps,
// tool calls, a fan-out, sub-agents, a sleep, a checkpoint answered by a
// person, a setup wait fixed by creating its Secret) while wake events are
// delayed and duplicated. Every reconcile of an
// unfinished run must leave it something that will wake it again (the
// controller reports its wake sources), and every run must finish.
func TestNoInterleavingLeavesARunUnwoken(t *testing.T) {
	// A slow tool server: runs starting together find its listing under way
	// and must be woken by it.
	srv := mcptest.New(t, mcptest.Options{RequestDelay: 150 * time.Millisecond})
	c := &chaos{rng: rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))}
	var mu sync.Mutex
	unwoken := map[string]string{}
	checked := 0
	opts := manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true, Scripted: providers.NewScripted(),
		MaxConcurrentSteps: 4,
		Egress:             loopbackEgress(),
		EgressOptions:      suiteEgressOptions(),
		WakeThrough:        c.through,
		OnWake: func(run *arv1.AgentRun, sources []string) {
			mu.Lock()
			defer mu.Unlock()
			checked++
			if len(sources) == 0 {
				unwoken[run.Name] = fmt.Sprintf("phase %s waitingOn %+v", run.Status.Phase, run.Status.WaitingOn)
			}
		},
	}
	mgr, err := manager.New(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	ns := newNamespace(t)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders + keyedProviders})
	blueprints := map[string]string{
		"triple": threeStage, "fan": fanOutBlueprint(4, 2, "continue", 1, 50), "napper": napper, "gated": withCheckpoint,
		"tooling": toolAgent(srv.URL(), "", "", `read_doc {"id":"a"}`, `read_doc {"id":"b"}`),
		"keyed":   oneStage,
	}
	for name, bp := range blueprints {
		createConfigMap(t, ns, name, map[string]string{"agent.toml": bp})
	}
	want := map[string]string{}
	for i := range 4 {
		want[fmt.Sprintf("triple-%d", i)] = "triple"
	}
	for name, agent := range map[string]string{"fan-0": "fan", "nap-0": "napper", "gate-0": "gated", "gate-1": "gated", "tools-0": "tooling", "tools-1": "tooling", "tools-2": "tooling", "keyed-0": "keyed"} {
		want[name] = agent
	}
	for name, agent := range want {
		createRun(t, ns, name, agent)
	}
	// A person answers the checkpoints; an operator creates the missing key.
	for _, g := range []string{"gate-0", "gate-1"} {
		w := waitFor(t, ns, g, 30*time.Second, "InteractionPoint", waitingOn(arv1.WaitInteractionPoint)).Status.WaitingOn
		a := &arv1.AgentRunAnswer{ObjectMeta: metav1.ObjectMeta{Name: g + "-ok", Namespace: ns},
			Spec: arv1.AgentRunAnswerSpec{Run: g, Point: w.Point, By: "admin", Decision: arv1.DecisionApprove}}
		if err := k8s.Create(context.Background(), a); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ns, "keyed-0", 30*time.Second, "SecretMissing", blockedOn(arv1.BlockerSecretMissing))
	createSecret(t, ns, "model-creds", map[string]string{"api-key": "k"})

	for name := range want {
		waitFor(t, ns, name, 60*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(unwoken) > 0 {
		t.Errorf("reconciles left unfinished runs with nothing to wake them: %v", unwoken)
	}
	if checked < 50 {
		t.Errorf("only %d reconciles of unfinished runs were checked; the hook is not reached", checked)
	}
	t.Logf("%d reconciles of unfinished runs checked under delayed and duplicated wake events", checked)
}
