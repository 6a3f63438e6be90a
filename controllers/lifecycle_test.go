package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// threeStage is a blueprint whose scripted model plans twice, builds, and
// reviews: 4 model calls across 3 stages.
const threeStage = `
[agent]
name = "triple"

[stages.plan]
system_prompt = "Plan the work."
max_iterations = 5
[stages.plan.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.plan.transitions.build]
condition = "llm_choice"
[[stages.plan.script]]
text = "thinking"
usage = {prompt = 100, completion = 10}
cost_usd = "0.001"
[[stages.plan.script]]
text = "plan ready"
next = "build"
usage = {prompt = 120, completion = 20}
cost_usd = "0.002"

[stages.build]
[stages.build.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.build.transitions.review]
condition = "always"
[[stages.build.script]]
text = "built"
usage = {prompt = 200, completion = 50, cached = 30}
cost_usd = "0.003"

[stages.review]
allow_complete = true
[stages.review.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.review.script]]
text = "looks good"
complete = true
output = "all done"
usage = {prompt = 50, completion = 5}
cost_usd = "0.0005"
`

const scriptedProviders = `
[providers.demo]
type = "scripted"
models = ["scripted-1"]
`

func TestThreeStageRunCompletes(t *testing.T) {
	h := startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "triple", map[string]string{"agent.toml": threeStage})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createRun(t, ns, "r1", "triple")

	run := waitFor(t, ns, "r1", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	st := run.Status
	if st.CurrentStage != "review" || st.StageIndex != 2 || st.NumStages != 3 || st.Stage != "review 3/3" {
		t.Errorf("stage = %q index %d of %d (%q), want review 2 of 3", st.CurrentStage, st.StageIndex, st.NumStages, st.Stage)
	}
	if st.Iteration != 1 {
		t.Errorf("iteration = %d, want 1 (reset on entering review)", st.Iteration)
	}
	var turns int32
	var names []string
	for _, ss := range st.Stages {
		names = append(names, ss.Name)
		turns += ss.Iterations
		if ss.State != arv1.StageComplete || ss.Visits != 1 || ss.Entered == nil {
			t.Errorf("stage %s: %+v, want Complete, entered once", ss.Name, ss)
		}
	}
	if strings.Join(names, ",") != "plan,build,review" || int64(turns) != st.Usage.ModelCalls {
		t.Errorf("stages %v with %d turns, want plan,build,review with %d", names, turns, st.Usage.ModelCalls)
	}
	u := st.Usage
	if u.PromptTokens != 470 || u.CompletionTokens != 85 || u.CachedTokens != 30 || u.TotalTokens != 555 || u.ModelCalls != 4 {
		t.Errorf("usage = %+v, want prompt 470 completion 85 cached 30 total 555 calls 4", u)
	}
	if u.CostUSD != "0.0065" || u.CostPricedUSD != "0.0065" || !u.CostIsExact || u.UnpricedCalls != 0 {
		t.Errorf("cost = %q priced %q exact %v unpriced %d, want 0.0065 exact", u.CostUSD, u.CostPricedUSD, u.CostIsExact, u.UnpricedCalls)
	}
	if st.AgentName != "triple" || st.Model != "demo/scripted-1" {
		t.Errorf("agentName %q model %q", st.AgentName, st.Model)
	}
	if st.WaitingOn != nil || st.PendingCall != nil {
		t.Errorf("a complete run has waitingOn %+v pendingCall %+v", st.WaitingOn, st.PendingCall)
	}
	if st.FinalOutput == nil || st.FinalOutput.Bytes != int64(len("all done")) || st.FinalOutput.Stage != "review" {
		t.Errorf("finalOutput = %+v", st.FinalOutput)
	}
	if st.Active == nil || st.Active.Since != nil {
		t.Errorf("active clock must be stopped once complete: %+v", st.Active)
	}
	if st.ObservedGeneration != run.Generation {
		t.Errorf("observedGeneration %d, generation %d", st.ObservedGeneration, run.Generation)
	}
	if c := meta.FindStatusCondition(st.Conditions, arv1.ConditionReady); c == nil || c.Status != "True" || c.ObservedGeneration != run.Generation {
		t.Errorf("Ready = %+v", c)
	}
	if meta.FindStatusCondition(st.Conditions, arv1.ConditionReconciling) != nil || meta.FindStatusCondition(st.Conditions, arv1.ConditionStalled) != nil {
		t.Errorf("a complete run keeps Reconciling/Stalled: %+v", st.Conditions)
	}
	if calls := h.scripted.Calls(string(run.UID)); calls != 4 {
		t.Errorf("provider saw %d calls, want 4", calls)
	}
	if st.Title != "test task for r1" || h.scripted.TitleCalls(string(run.UID)) != 1 {
		t.Errorf("title %q after %d titling calls, want the task's words after one", st.Title, h.scripted.TitleCalls(string(run.UID)))
	}
	if st.Flags.EmptyOutput || !st.Flags.ProducedOutput {
		t.Errorf("flags = %+v: the run produced output", st.Flags)
	}
	_ = context.Background()
}
