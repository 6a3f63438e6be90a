package controllers_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool/mcptest"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
)

// statusFaults fails some of a namespace's AgentRun status writes with a
// 503, as an overloaded API server would: for each run, the writes whose
// number (1, 2, ...) is in fail.
type statusFaults struct {
	ns   string
	fail map[int]bool

	mu       sync.Mutex
	attempts map[string]int
	failed   int
}

func (f *statusFaults) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		prefix := "/apis/agentrun.dev/v1alpha1/namespaces/" + f.ns + "/agentruns/"
		if (req.Method != http.MethodPut && req.Method != http.MethodPatch) || !strings.HasPrefix(req.URL.Path, prefix) || !strings.HasSuffix(req.URL.Path, "/status") {
			return rt.RoundTrip(req)
		}
		run := strings.TrimSuffix(strings.TrimPrefix(req.URL.Path, prefix), "/status")
		f.mu.Lock()
		f.attempts[run]++
		fail := f.fail[f.attempts[run]]
		if fail {
			f.failed++
		}
		f.mu.Unlock()
		if !fail {
			return rt.RoundTrip(req)
		}
		body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the server is currently unable to handle the request (injected)","reason":"ServiceUnavailable","code":503}`
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
	})
}

// TestStatusWriteFaultsShowAndHeal injects API server errors into status
// writes while runs take model steps, a write tool call, a checkpoint a
// person answers, and a webhook. Each failure shows in the run's
// Reconciling condition (RetryingAfterError), and every run completes with
// nothing lost or done twice: each answer applied once, each call made
// and journaled once, each webhook delivered once.
func TestStatusWriteFaultsShowAndHeal(t *testing.T) {
	tools := mcptest.New(t, mcptest.Options{})
	rc := &webhookReceiver{key: []byte("k"), accepted: map[string]int{}}
	hook := httptest.NewServer(rc)
	defer hook.Close()

	ns := newNamespace(t)
	faults := &statusFaults{ns: ns, fail: map[int]bool{2: true, 3: true, 5: true}, attempts: map[string]int{}}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(faults.wrap)
	scripted := providers.NewScripted()
	o := manager.Options{MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true, Scripted: scripted, Egress: loopbackEgress(), EgressOptions: suiteEgressOptions()}
	o.Store.DSN = storeDSN(t)
	mgr, err := manager.New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	reasons := watchReasons(t, ns)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createSecret(t, ns, "hook-key", map[string]string{"key": "k"})
	createConfigMap(t, ns, "triple", map[string]string{"agent.toml": threeStage})
	createConfigMap(t, ns, "gated", map[string]string{"agent.toml": withCheckpoint})
	createConfigMap(t, ns, "writer", map[string]string{"agent.toml": toolAgent(tools.URL(), "", "[tools.create_ticket]\npermission = \"allow\"", `create_ticket {"title":"once"}`)})
	runs := map[string]*arv1.AgentRun{
		"hooked": createRun(t, ns, "hooked", "triple", func(r *arv1.AgentRun) {
			r.Spec.Callback = &arv1.CallbackSpec{URL: viaName(hook.URL), SigningKeySecretRef: &arv1.SecretKeyRef{Name: "hook-key", Key: "key"}}
		}),
		"gate":  createRun(t, ns, "gate", "gated"),
		"write": createRun(t, ns, "write", "writer"),
	}
	w := waitFor(t, ns, "gate", 30*time.Second, "InteractionPoint", waitingOn(arv1.WaitInteractionPoint)).Status.WaitingOn
	a := &arv1.AgentRunAnswer{ObjectMeta: metav1.ObjectMeta{Name: "gate-ok", Namespace: ns},
		Spec: arv1.AgentRunAnswerSpec{Run: "gate", Point: w.Point, By: "admin", Decision: arv1.DecisionApprove}}
	if err := k8s.Create(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	for name := range runs {
		waitFor(t, ns, name, 60*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	}
	waitFor(t, ns, "hooked", 30*time.Second, "webhook recorded", func(r *arv1.AgentRun) bool {
		return r.Status.Callback != nil && r.Status.Callback.State == arv1.CallbackDelivered
	})

	faults.mu.Lock()
	failed := faults.failed
	faults.mu.Unlock()
	if failed < len(runs) {
		t.Fatalf("only %d status writes failed; the faults did not bite", failed)
	}
	if seen := reasons(); !seen[arv1.ReasonRetryingAfterError] {
		t.Errorf("Reconciling reasons seen %v: no failure showed as %s", seen, arv1.ReasonRetryingAfterError)
	}
	for name, run := range runs {
		r := getRun(t, ns, name)
		if c := meta.FindStatusCondition(r.Status.Conditions, arv1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("%s: Ready = %+v after healing", name, c)
		}
		entries := journalEntries(t, ns, string(run.UID))
		completions := 0
		for _, e := range entries {
			if e.Kind == journal.ModelCallCompleted {
				completions++
			}
		}
		calls, titles := scripted.Calls(string(run.UID)), scripted.TitleCalls(string(run.UID))
		if calls+titles != completions || int64(calls) != r.Status.Usage.ModelCalls || r.Status.Usage.LostCalls != 0 {
			t.Errorf("%s: the provider served %d calls (and %d titles), the journal holds %d completions, status counts %d (lost %d): a call was made twice or lost",
				name, calls, titles, completions, r.Status.Usage.ModelCalls, r.Status.Usage.LostCalls)
		}
	}
	if n := tools.Executed("create_ticket"); n != 1 {
		t.Errorf("the write tool ran %d times, want once", n)
	}
	if st := answerState(t, ns, "gate-ok"); st.State != arv1.AnswerApplied {
		t.Errorf("answer = %+v, want Applied", st)
	}
	applied := 0
	for _, e := range journalEntries(t, ns, string(runs["gate"].UID)) {
		if e.Kind == journal.InteractionAnswered && e.Message == "gate-ok" {
			applied++
		}
	}
	if applied != 1 {
		t.Errorf("the answer was journaled %d times, want once", applied)
	}
	accepted, _, _ := rc.counts()
	if id := "agent_completed:" + string(runs["hooked"].UID); len(accepted) != 1 || accepted[id] != 1 {
		t.Errorf("webhook deliveries %v, want exactly one of %s", accepted, id)
	}
	t.Logf("%d status writes failed with 503; reasons seen: %v", failed, reasons())
}

// watchReasons records every Reconciling reason the namespace's runs show.
func watchReasons(t *testing.T, ns string) func() map[string]bool {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), &arv1.AgentRunList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	var mu sync.Mutex
	seen := map[string]bool{}
	go func() {
		for ev := range w.ResultChan() {
			if r, ok := ev.Object.(*arv1.AgentRun); ok {
				if c := meta.FindStatusCondition(r.Status.Conditions, arv1.ConditionReconciling); c != nil {
					mu.Lock()
					seen[c.Reason] = true
					mu.Unlock()
				}
			}
		}
	}()
	return func() map[string]bool {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]bool{}
		for k := range seen {
			out[k] = true
		}
		return out
	}
}
