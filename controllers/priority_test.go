package controllers_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/priority"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/providers/providertest"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// priorityQueued is how many runs wait in line ahead of the urgent ones.
const priorityQueued = 2000

// oneCall is a blueprint of one stage whose one model call (to the
// loopback OpenAI server) completes the run; titles off.
const oneCall = `
[agent]
name = "one"
[agent.title]
enabled = false
[stages.only]
allow_complete = true
[stages.only.model]
models = [{provider = "oa", model = "gpt-x"}]
`

// startOneSlotManager runs a manager with one active-run slot reading the
// priority classes from agentrun-system, and returns its stop function.
func startOneSlotManager(t *testing.T, cfg *rest.Config, identity string) func() {
	t.Helper()
	mgr, err := manager.New(cfg, manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true, Scripted: providers.NewScripted(),
		MaxActiveRuns: 1, MaxConcurrentSteps: 4, Identity: identity,
		Egress: loopbackEgress(), EgressOptions: suiteEgressOptions(),
		PriorityClasses: types.NamespacedName{Namespace: "agentrun-system", Name: priority.DefaultConfigMapName},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// TestUrgentRunIsAdmittedNext runs on a control plane of its own (it
// leaves 2,000 runs behind) a manager with one active-run slot, held by a
// run whose model call the loopback server holds. 2,000 runs queue behind
// it; then a run of class "urgent" is created. When the holder is
// cancelled, the next model call the server sees is the urgent run's,
// not the 2,000 created before it. Then, with the next run holding the
// slot the same way, a run with spec.priority 5 queues and the manager is
// restarted: the new manager lines the runs up again from the API server
// (seedAdmission), and the urgent run's call is again the next.
func TestUrgentRunIsAdmittedNext(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own control plane and 2,000 runs")
	}
	own, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = own.Stop() })
	c, err := client.New(own.Config, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	srv := providertest.NewOpenAIServer(t)
	done := &providertest.ToolCall{Name: "complete", Args: `{"output":"done"}`}
	hold := providertest.Reply{Delay: 10 * time.Minute, ToolCall: done}
	// The blocker's call is held; the next answers at once; the one after
	// is held again (the next queued run holds the slot); then all answer.
	srv.Push(hold, providertest.Reply{ToolCall: done}, hold, providertest.Reply{ToolCall: done})
	// The control plane ships the classes ConfigMap empty, as an install does.
	classes := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: priority.DefaultConfigMapName, Namespace: testenv.SystemNamespace},
		Data: map[string]string{"urgent": "1000", "normal": "0", priority.DefaultKey: "normal"}}
	if err := c.Update(ctx, classes); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "prio"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fast", Namespace: "prio"}, Data: map[string]string{"agent.toml": oneCall}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "agentrun-providers", Namespace: "prio"}, Data: map[string]string{"providers.toml": openAIEntry("oa", srv.URL, false)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "oa-key", Namespace: "prio"}, StringData: map[string]string{"api-key": "sk-test"}},
	} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	stop := startOneSlotManager(t, own.Config, "first")

	mustCreate(t, c, priorityRun("blocker", "the blocker", nil))
	awaitRequests(t, srv, 1, "the blocker's call")
	start := time.Now()
	createRuns(t, c, "prio", "q", priorityQueued)
	t.Logf("%d runs created behind the blocker in %s", priorityQueued, time.Since(start).Round(time.Millisecond))
	mustCreate(t, c, priorityRun("urgent", "the urgent one", func(s *arv1.AgentRunSpec) { s.PriorityClassName = "urgent" }))
	awaitQueued(t, c, "urgent")
	cancelRun(t, c, "blocker")
	awaitRequests(t, srv, 2, "the call after the blocker's")
	if body := srv.All()[1].Body; !bytes.Contains(body, []byte("the urgent one")) {
		t.Fatalf("the call after the blocker's was not the urgent run's: %.300s", body)
	}

	// The next run in line holds the slot as the blocker did.
	awaitRequests(t, srv, 3, "the next queued run's call")
	five := int32(5)
	mustCreate(t, c, priorityRun("urgent2", "the second urgent one", func(s *arv1.AgentRunSpec) { s.Priority = &five }))
	awaitQueued(t, c, "urgent2")
	stop()
	before := srv.Requests()
	startOneSlotManager(t, own.Config, "second")
	awaitRequests(t, srv, before+1, "the first call after the restart")
	if body := srv.All()[before].Body; !bytes.Contains(body, []byte("the second urgent one")) {
		t.Fatalf("after the restart the first call was not the priority-5 run's: %.300s", body)
	}
}

func priorityRun(name, task string, mutate func(*arv1.AgentRunSpec)) *arv1.AgentRun {
	run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "prio"}, Spec: arv1.AgentRunSpec{Agent: "fast", Task: task}}
	if mutate != nil {
		mutate(&run.Spec)
	}
	return run
}

func mustCreate(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

// awaitRequests waits until the server has seen n requests.
func awaitRequests(t *testing.T, srv *providertest.Server, n int, what string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for srv.Requests() < n {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: the model server saw %d requests, want %d", what, srv.Requests(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitQueued waits until the run's status says it waits in line: the
// manager has put it there.
func awaitQueued(t *testing.T, c client.Client, name string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var run arv1.AgentRun
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: "prio", Name: name}, &run); err != nil {
			t.Fatal(err)
		}
		for _, cond := range run.Status.Conditions {
			if cond.Reason == arv1.ReasonQueued {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never showed Queued: %+v", name, run.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func cancelRun(t *testing.T, c client.Client, name string) {
	t.Helper()
	run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "prio"}}
	if err := c.Patch(context.Background(), run, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))); err != nil {
		t.Fatal(err)
	}
}
