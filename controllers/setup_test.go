package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/eventsink"
)

// oneStage completes on its first call.
const oneStage = `
[agent]
name = "single"
[stages.only]
[stages.only.model]
models = [{provider = "keyed", model = "m1"}]
[[stages.only.script]]
text = "done"
complete = true
usage = {prompt = 10, completion = 2}
`

// keyedProviders is a scripted provider that requires its key to exist.
const keyedProviders = `
[providers.keyed]
type = "scripted"
models = ["m1"]
api_key_secret = {name = "model-creds", key = "api-key"}
[providers.keyed.rates.m1]
prompt = "1"
completion = "2"
`

func setSecretData(t *testing.T, ns, name string, data map[string]string) {
	t.Helper()
	s := &corev1.Secret{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	s.Data = nil
	s.StringData = data
	if err := k8s.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

func setConfigMapData(t *testing.T, ns, name string, data map[string]string) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data = data
	if err := k8s.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
}

// TestNeedsSetupBlockersResumeWhenFixed parks a run on each Kubernetes
// blocker in turn, checks the blocker, remedy, conditions and event, fixes
// the object, and checks the run continues by itself.
func TestNeedsSetupBlockersResumeWhenFixed(t *testing.T) {
	startManager(t, managerOpts{})
	cases := []struct {
		name      string
		arrange   func(t *testing.T, ns string)
		blocker   arv1.SetupBlocker
		remedyHas []string
		refs      []string
		fix       func(t *testing.T, ns string)
	}{
		{
			name: "blueprint ConfigMap missing",
			arrange: func(t *testing.T, ns string) {
				createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": keyedProviders})
				createSecret(t, ns, "model-creds", map[string]string{"api-key": "k"})
			},
			blocker:   arv1.BlockerBlueprintMissing,
			remedyHas: []string{"/single", "kubectl create configmap single -n "},
			refs:      []string{"ConfigMap/single"},
			fix: func(t *testing.T, ns string) {
				createConfigMap(t, ns, "single", map[string]string{"agent.toml": oneStage})
			},
		},
		{
			name: "provider ConfigMap missing",
			arrange: func(t *testing.T, ns string) {
				createConfigMap(t, ns, "single", map[string]string{"agent.toml": oneStage})
				createSecret(t, ns, "model-creds", map[string]string{"api-key": "k"})
			},
			blocker:   arv1.BlockerProviderConfigMissing,
			remedyHas: []string{"/agentrun-providers", "providers.toml", "kubectl create configmap agentrun-providers -n "},
			refs:      []string{"ConfigMap/agentrun-providers"},
			fix: func(t *testing.T, ns string) {
				createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": keyedProviders})
			},
		},
		{
			name: "provider ConfigMap invalid",
			arrange: func(t *testing.T, ns string) {
				createConfigMap(t, ns, "single", map[string]string{"agent.toml": oneStage})
				createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": "[providers.keyed]\ntype = \"nonsense\"\n"})
				createSecret(t, ns, "model-creds", map[string]string{"api-key": "k"})
			},
			blocker:   arv1.BlockerProviderConfigInvalid,
			remedyHas: []string{"/agentrun-providers", "providers.toml line 2"},
			refs:      []string{"ConfigMap/agentrun-providers"},
			fix: func(t *testing.T, ns string) {
				setConfigMapData(t, ns, "agentrun-providers", map[string]string{"providers.toml": keyedProviders})
			},
		},
		{
			name: "provider not declared",
			arrange: func(t *testing.T, ns string) {
				createConfigMap(t, ns, "single", map[string]string{"agent.toml": oneStage})
				createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": strings.ReplaceAll(keyedProviders, "keyed", "other")})
				createSecret(t, ns, "model-creds", map[string]string{"api-key": "k"})
			},
			blocker:   arv1.BlockerProviderMissing,
			remedyHas: []string{"keyed/m1", "/agentrun-providers"},
			refs:      []string{"ConfigMap/agentrun-providers"},
			fix: func(t *testing.T, ns string) {
				setConfigMapData(t, ns, "agentrun-providers", map[string]string{"providers.toml": keyedProviders})
			},
		},
		{
			name: "Secret missing",
			arrange: func(t *testing.T, ns string) {
				createConfigMap(t, ns, "single", map[string]string{"agent.toml": oneStage})
				createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": keyedProviders})
			},
			blocker:   arv1.BlockerSecretMissing,
			remedyHas: []string{"/model-creds", `"api-key"`, "kubectl create secret generic model-creds -n ", "--from-literal=api-key=<api key>"},
			refs:      []string{"Secret/model-creds", "ConfigMap/agentrun-providers"},
			fix: func(t *testing.T, ns string) {
				createSecret(t, ns, "model-creds", map[string]string{"api-key": "k"})
			},
		},
		{
			name: "Secret key missing",
			arrange: func(t *testing.T, ns string) {
				createConfigMap(t, ns, "single", map[string]string{"agent.toml": oneStage})
				createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": keyedProviders})
				createSecret(t, ns, "model-creds", map[string]string{"other": "x"})
			},
			blocker:   arv1.BlockerSecretKeyMissing,
			remedyHas: []string{"/model-creds", `"api-key"`},
			refs:      []string{"Secret/model-creds", "ConfigMap/agentrun-providers"},
			fix: func(t *testing.T, ns string) {
				setSecretData(t, ns, "model-creds", map[string]string{"api-key": "k"})
			},
		},
		{
			name: "Secret key empty",
			arrange: func(t *testing.T, ns string) {
				createConfigMap(t, ns, "single", map[string]string{"agent.toml": oneStage})
				createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": keyedProviders})
				createSecret(t, ns, "model-creds", map[string]string{"api-key": ""})
			},
			blocker:   arv1.BlockerSecretKeyMissing,
			remedyHas: []string{"/model-creds", `"api-key"`},
			refs:      []string{"Secret/model-creds", "ConfigMap/agentrun-providers"},
			fix: func(t *testing.T, ns string) {
				setSecretData(t, ns, "model-creds", map[string]string{"api-key": "k"})
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ns := newNamespace(t)
			c.arrange(t, ns)
			createRun(t, ns, "r", "single")
			run := waitFor(t, ns, "r", 20*time.Second, "NeedsSetup "+string(c.blocker), blockedOn(c.blocker))
			w := run.Status.WaitingOn
			for _, s := range c.remedyHas {
				if !strings.Contains(w.Remedy, s) {
					t.Errorf("remedy %q lacks %q", w.Remedy, s)
				}
			}
			if !strings.Contains(w.Remedy, ns) {
				t.Errorf("remedy %q does not name the namespace %s", w.Remedy, ns)
			}
			if !w.NeedsAPerson || !run.NeedsAPerson() {
				t.Error("NeedsSetup must need a person")
			}
			if fmt.Sprint(run.Status.SetupRefs) != fmt.Sprint(c.refs) {
				t.Errorf("setupRefs = %v, want %v", run.Status.SetupRefs, c.refs)
			}
			stalled := meta.FindStatusCondition(run.Status.Conditions, arv1.ConditionStalled)
			if stalled == nil || stalled.Status != "True" || stalled.Reason != string(arv1.WaitNeedsSetup) || stalled.Message != w.Remedy {
				t.Errorf("Stalled = %+v, want True/NeedsSetup with the remedy", stalled)
			}
			// (That kstatus reads this as Failed is test/kstatus's to prove.)
			if run.Status.Active != nil && run.Status.Active.Since != nil {
				t.Error("the active clock runs while parked on setup")
			}
			waitForEvent(t, ns, "r", string(arv1.WaitNeedsSetup), w.Remedy)

			c.fix(t, ns)
			done := waitFor(t, ns, "r", 20*time.Second, "Complete after the fix", phaseIs(arv1.PhaseComplete))
			if done.Status.WaitingOn != nil || len(done.Status.SetupRefs) != 0 {
				t.Errorf("a finished run keeps waitingOn %+v refs %v", done.Status.WaitingOn, done.Status.SetupRefs)
			}
		})
	}
}

// waitForEvent waits for an Event on the run with the given reason whose
// note contains text. A Normal Event may give way to the shared manager's
// writes for up to eventsink.DefaultGiveWayFor before it is sent.
func waitForEvent(t *testing.T, ns, run, reason, text string) {
	t.Helper()
	deadline := time.Now().Add(eventsink.DefaultGiveWayFor + 20*time.Second)
	for {
		var list corev1.EventList
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if e.InvolvedObject.Name == run && e.Reason == reason && strings.Contains(e.Message, text) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no event %s on %s containing %q; events: %+v", reason, run, text, list.Items)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
