package controllers_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/providers/providertest"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
)

// threeStages goes plan -> build -> ship; ship's prompt is the one a fix
// changes.
func threeStages(shipPrompt string) string {
	return `[agent]
name = "three"
[agent.title]
enabled = false
[stages.plan]
[stages.plan.model]
models = [{provider = "oa", model = "gpt-x"}]
[stages.plan.transitions.build]
[stages.build]
[stages.build.model]
models = [{provider = "oa", model = "gpt-x"}]
[stages.build.transitions.ship]
[stages.ship]
allow_complete = true
system_prompt = "` + shipPrompt + `"
[stages.ship.model]
models = [{provider = "oa", model = "gpt-x"}]
`
}

// sourceBytes is the run and its journal objects exactly as the API
// server serves them.
func sourceBytes(t *testing.T, ns, name string) string {
	t.Helper()
	run := &unstructured.Unstructured{}
	run.SetGroupVersionKind(arv1.GroupVersion.WithKind("AgentRun"))
	if err := k8s.Get(context.Background(), keyOf(ns, name), run); err != nil {
		t.Fatal(err)
	}
	cms := &unstructured.UnstructuredList{}
	cms.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	if err := k8s.List(context.Background(), cms, client.InNamespace(ns), configmaps.Selector(run.GetUID())); err != nil {
		t.Fatal(err)
	}
	if len(cms.Items) == 0 {
		t.Fatalf("%s has no journal objects", name)
	}
	b, err := json.Marshal([]any{run.Object, cms.Items})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestForkFromFailedStageWithFixedBlueprint: a run fails in its third
// stage; a fork from that stage with a fixed blueprint makes only the
// third stage's call, shows the first two stages' usage as inherited and
// its own apart, and leaves the source's status and journal byte for byte
// as they were.
func TestForkFromFailedStageWithFixedBlueprint(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	srv := providertest.NewOpenAIServer(t)
	srv.Push(
		providertest.Reply{ToolCall: &providertest.ToolCall{Name: "transition", Args: `{"target":"build"}`}, PromptTokens: 100, CompletionTokens: 10},
		providertest.Reply{ToolCall: &providertest.ToolCall{Name: "transition", Args: `{"target":"ship"}`}, PromptTokens: 200, CompletionTokens: 20},
		providertest.Reply{Status: 400, ErrorMessage: "the ship prompt is malformed"},
	)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": openAIEntry("oa", srv.URL, true)})
	createSecret(t, ns, "oa-key", map[string]string{"api-key": "sk-x"})
	createConfigMap(t, ns, "three", map[string]string{"agent.toml": threeStages("Ship it, broken.")})
	createConfigMap(t, ns, "three-fixed", map[string]string{"agent.toml": threeStages("Ship it, fixed.")})
	createRun(t, ns, "src", "three")
	src := waitFor(t, ns, "src", 30*time.Second, "Error in ship", func(r *arv1.AgentRun) bool {
		return r.Status.Phase == arv1.PhaseError && r.Status.FinishedAt != nil && r.Status.Driver == ""
	})
	if src.Status.CurrentStage != "ship" || srv.Requests() != 3 {
		t.Fatalf("source ended in %q after %d requests, want ship after 3", src.Status.CurrentStage, srv.Requests())
	}
	before := sourceBytes(t, ns, "src")

	srv.Push(providertest.Reply{ToolCall: &providertest.ToolCall{Name: "complete", Args: `{"output":"shipped"}`}, PromptTokens: 50, CompletionTokens: 5})
	createRun(t, ns, "fork", "three-fixed", func(r *arv1.AgentRun) {
		r.Spec.Task = src.Spec.Task
		r.Spec.ForkOf = &arv1.ForkSource{Run: "src", Stage: "ship"}
	})
	fork := waitFor(t, ns, "fork", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))

	reqs := srv.All()
	if len(reqs) != 4 {
		t.Fatalf("the provider saw %d requests, want 3 from the source and 1 from the fork", len(reqs))
	}
	if text := wireText(reqs[3]); !strings.Contains(text, "Ship it, fixed.") || strings.Contains(text, "broken") {
		t.Errorf("the fork's one request is not ship's under the fixed blueprint:\n%s", text)
	}
	u, in := fork.Status.Usage, fork.Status.InheritedUsage
	if u.ModelCalls != 1 || u.PromptTokens != 50 || u.CompletionTokens != 5 || u.CostUSD == "unknown" {
		t.Errorf("own usage %+v, want the ship call only (1 call, 50+5 tokens, priced)", u)
	}
	if in == nil || in.ModelCalls != 2 || in.PromptTokens != 300 || in.CompletionTokens != 30 || in.CostUSD == "unknown" || in.CostUSD == "0" {
		t.Errorf("inherited usage %+v, want plan's and build's calls (2 calls, 300+30 tokens, priced)", in)
	}
	o := fork.Status.Origin
	if o == nil || o.Kind != arv1.OriginFork || o.Run != "src" || o.UID != string(src.UID) || o.Stage != "ship" || o.Entries == 0 {
		t.Errorf("origin %+v, want a fork of src (%s) at ship", o, src.UID)
	}
	if fork.Status.BlueprintSnapshot == src.Status.BlueprintSnapshot {
		t.Errorf("the fork runs the source's snapshot %s, not a snapshot of its fixed blueprint", fork.Status.BlueprintSnapshot)
	}
	entries := journalEntries(t, ns, string(fork.UID))
	for i, e := range entries {
		if inherited := int64(i) < o.Entries; e.Inherited != inherited {
			t.Errorf("fork entry %d (%s) inherited=%v, want %v", i, e.Kind, e.Inherited, inherited)
		}
	}
	if entries[0].Snapshot != fork.Status.BlueprintSnapshot {
		t.Errorf("the fork's first entry binds snapshot %q, want its own %q", entries[0].Snapshot, fork.Status.BlueprintSnapshot)
	}
	if after := sourceBytes(t, ns, "src"); after != before {
		t.Errorf("the source changed:\nbefore %s\nafter  %s", before, after)
	}
}

// TestForkRefusalsAndWaits: a fork of a run that does not exist waits on
// it (NeedsSetup ForkSourceMissing) and goes on when it is created; a
// stage the source's blueprint lacks and an entry past its journal's end
// end the fork in Error saying so; forkOf cannot be changed or given
// both cuts. A rerun's status names the run it reruns.
func TestForkRefusalsAndWaits(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createConfigMap(t, ns, "echo", map[string]string{"agent.toml": `[agent]
name = "echo"
[agent.title]
enabled = false
[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.work.script]]
complete = true
output = "done"
`})
	zero := int64(0)
	createRun(t, ns, "early", "echo", func(r *arv1.AgentRun) { r.Spec.ForkOf = &arv1.ForkSource{Run: "later", Entry: &zero} })
	waiting := waitFor(t, ns, "early", 30*time.Second, "ForkSourceMissing", blockedOn(arv1.BlockerForkSourceMissing))
	if !strings.Contains(waiting.Status.WaitingOn.Remedy, ns+"/later") {
		t.Errorf("remedy %q does not name the missing source", waiting.Status.WaitingOn.Remedy)
	}
	later := createRun(t, ns, "later", "echo")
	early := waitFor(t, ns, "early", 30*time.Second, "Complete once its source exists", phaseIs(arv1.PhaseComplete))
	if o := early.Status.Origin; o == nil || o.UID != string(later.UID) || o.Entries != 0 || early.Status.InheritedUsage != nil {
		t.Errorf("origin %+v inherited %+v, want a fork of later inheriting nothing", o, early.Status.InheritedUsage)
	}
	waitFor(t, ns, "later", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))

	// A rerun (what `kubectl agentrun rerun` creates) records where it
	// came from, and inherits nothing: every call is made again.
	createRun(t, ns, "again", "echo", func(r *arv1.AgentRun) {
		r.Labels = map[string]string{arv1.LabelRerunOf: "later"}
		r.Annotations = map[string]string{arv1.LabelRerunOf: "later", arv1.AnnotationRerunOfUID: string(later.UID)}
	})
	again := waitFor(t, ns, "again", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	if o := again.Status.Origin; o == nil || o.Kind != arv1.OriginRerun || o.Run != "later" || o.UID != string(later.UID) || again.Status.InheritedUsage != nil || again.Status.Usage.ModelCalls != 1 {
		t.Errorf("rerun: origin %+v inherited %+v model calls %d, want a rerun of later that made its own call", o, again.Status.InheritedUsage, again.Status.Usage.ModelCalls)
	}

	far := int64(99)
	createRun(t, ns, "nostage", "echo", func(r *arv1.AgentRun) { r.Spec.ForkOf = &arv1.ForkSource{Run: "later", Stage: "review"} })
	createRun(t, ns, "noentry", "echo", func(r *arv1.AgentRun) { r.Spec.ForkOf = &arv1.ForkSource{Run: "later", Entry: &far} })
	for name, want := range map[string]string{
		"nostage": `stage "review" is not a stage of the source's blueprint`,
		"noentry": "entry 99 is out of range: the journal of later holds",
	} {
		run := waitFor(t, ns, name, 30*time.Second, "Error", phaseIs(arv1.PhaseError))
		if !strings.Contains(run.Status.Error, want) {
			t.Errorf("%s: error %q, want it to say %q", name, run.Status.Error, want)
		}
	}

	run := getRun(t, ns, "early")
	run.Spec.ForkOf = &arv1.ForkSource{Run: "nostage", Entry: &zero}
	if err := k8s.Update(context.Background(), run); err == nil || !strings.Contains(err.Error(), "forkOf is fixed at creation") {
		t.Errorf("changing forkOf: %v, want it refused", err)
	}
	both := &arv1.AgentRun{}
	both.Namespace, both.Name = ns, "both"
	both.Spec = arv1.AgentRunSpec{Agent: "echo", Task: "t", ForkOf: &arv1.ForkSource{Run: "later", Stage: "work", Entry: &zero}}
	if err := k8s.Create(context.Background(), both); err == nil || !strings.Contains(err.Error(), "exactly one of stage and entry") {
		t.Errorf("forkOf with stage and entry: %v, want it refused", err)
	}
}
