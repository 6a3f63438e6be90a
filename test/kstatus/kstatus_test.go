package kstatus_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

var (
	env *testenv.Env
	k8s client.Client
)

func TestMain(m *testing.M) {
	code := func() int {
		var err error
		if env, err = testenv.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = env.Stop() }()
		if k8s, err = client.New(env.Config, client.Options{Scheme: manager.Scheme()}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// oneStage completes on its first call, with a provider whose key must
// exist.
const oneStage = `
[agent]
name = "single"
[stages.only]
[stages.only.model]
models = [{provider = "keyed", model = "m1"}]
[[stages.only.script]]
text = "done"
complete = true
`

const keyedProviders = `
[providers.keyed]
type = "scripted"
models = ["m1"]
api_key_secret = {name = "model-creds", key = "api-key"}
`

// TestRunsReadAsKstatusSays: a run parked on setup (its model key's Secret
// is missing) is Failed in kstatus terms, and once the Secret exists and
// the run completes it is Current.
func TestRunsReadAsKstatusSays(t *testing.T) {
	startManager(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kstatus-"}}
	create(t, ns)
	create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "single"},
		Data: map[string]string{"agent.toml": oneStage}})
	create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "agentrun-providers"},
		Data: map[string]string{"providers.toml": keyedProviders}})
	create(t, &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "r"},
		Spec: arv1.AgentRunSpec{Agent: "single", Task: "a task"}})
	key := types.NamespacedName{Namespace: ns.Name, Name: "r"}

	run := waitFor(ctx, t, key, "NeedsSetup", func(r *arv1.AgentRun) bool {
		w := r.Status.WaitingOn
		return w != nil && w.Reason == arv1.WaitNeedsSetup
	})
	if got := kstatusOf(t, run); got != status.FailedStatus {
		t.Errorf("kstatus = %s, want Failed while it needs setup", got)
	}

	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "model-creds"},
		StringData: map[string]string{"api-key": "k"}})
	run = waitFor(ctx, t, key, "Complete", func(r *arv1.AgentRun) bool { return r.Status.Phase == arv1.PhaseComplete })
	if got := kstatusOf(t, run); got != status.CurrentStatus {
		t.Errorf("kstatus = %s, want Current once complete", got)
	}
}

// kstatusOf is the run's health as kstatus computes it.
func kstatusOf(t *testing.T, run *arv1.AgentRun) status.Status {
	t.Helper()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(run)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion(arv1.GroupVersion.String())
	u.SetKind("AgentRun")
	res, err := status.Compute(u)
	if err != nil {
		t.Fatal(err)
	}
	return res.Status
}

// startManager runs the operator's manager against the test API server
// with the scripted model provider, until the test ends.
func startManager(t *testing.T) {
	t.Helper()
	mgr, err := manager.New(env.Config, manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true,
		Scripted: providers.NewScripted(), StatusInterval: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls the run until cond holds, for up to 30 seconds.
func waitFor(ctx context.Context, t *testing.T, key types.NamespacedName, what string, cond func(*arv1.AgentRun) bool) *arv1.AgentRun {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		run := &arv1.AgentRun{}
		if err := k8s.Get(ctx, key, run); err != nil {
			t.Fatal(err)
		}
		if cond(run) {
			return run
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: timed out waiting for %s; phase=%s waitingOn=%+v", key, what, run.Status.Phase, run.Status.WaitingOn)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
