package controllers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/providers/providertest"
)

// recoveringOverTheWire: plan chooses build (told how by its
// transition_prompt); build's call fails terminally and its error edge
// takes the run to fix, which completes.
const recoveringOverTheWire = `[agent]
name = "wire"
[agent.title]
enabled = false
[stages.plan]
transition_prompt = "Choose the next stage with care."
[stages.plan.model]
models = [{provider = "oa", model = "gpt-x"}]
[stages.plan.transitions.build]
hint = "the plan is ready"
[stages.plan.transitions.giveup]
condition = "dead_end"
[stages.build]
[stages.build.model]
models = [{provider = "oa", model = "gpt-x"}]
[stages.build.transitions.fix]
condition = "error"
[stages.fix]
allow_complete = true
[stages.fix.model]
models = [{provider = "oa", model = "gpt-x"}]
[stages.giveup]
`

// TestSignalsReachTheModelOverTheWire: through the real OpenAI SDK, the
// transition prompt lists the choosable edges (not dead_end), an error
// edge replaces the run's end, and the stage it enters is sent why along
// with the conversation carried over the direct edges.
func TestSignalsReachTheModelOverTheWire(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	srv := providertest.NewOpenAIServer(t)
	srv.Push(
		providertest.Reply{Text: "planned it", ToolCall: &providertest.ToolCall{Name: "transition", Args: `{"target":"build"}`}},
		providertest.Reply{Status: 400, ErrorMessage: "context length exceeded"},
		providertest.Reply{ToolCall: &providertest.ToolCall{Name: "complete", Args: `{"output":"fixed"}`}},
	)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": openAIEntry("oa", srv.URL, false)})
	createSecret(t, ns, "oa-key", map[string]string{"api-key": "sk-x"})
	createConfigMap(t, ns, "wire", map[string]string{"agent.toml": recoveringOverTheWire})
	createRun(t, ns, "r", "wire")
	run := waitFor(t, ns, "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))

	if l := run.Status.LastTransition; l == nil || l.From != "build" || l.To != "fix" || l.Condition != "error" || !strings.Contains(l.Reason, "context length exceeded") {
		t.Errorf("lastTransition %+v, want build -> fix by error naming the failure", l)
	}
	waitForEvent(t, ns, "r", arv1.ReasonSignalTransition, "Took the error edge from stage build to fix")
	reqs := srv.All()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	plan, fix := wireText(reqs[0]), wireText(reqs[2])
	for _, want := range []string{"Choose the next stage with care.", "- build: the plan is ready"} {
		if !strings.Contains(plan, want) {
			t.Errorf("plan's request lacks %q:\n%s", want, plan)
		}
	}
	if strings.Contains(plan, "giveup") {
		t.Errorf("plan's request offers the dead_end edge:\n%s", plan)
	}
	for _, want := range []string{"Why this stage was entered: model call failed:", "context length exceeded", "assistant:planned it"} {
		if !strings.Contains(fix, want) {
			t.Errorf("fix's request lacks %q:\n%s", want, fix)
		}
	}
}

// wireText is a request's messages as "role:content" lines.
func wireText(r providertest.Request) string {
	var lines []string
	for _, m := range r.Messages() {
		lines = append(lines, fmt.Sprintf("%v:%v", m["role"], m["content"]))
	}
	return strings.Join(lines, "\n")
}

// TestUnmeasurableThresholdAndUnrunValidatorAreSaid: what the operator
// cannot do is said in Warning events, never silently skipped: a
// same-file-edits threshold in a stage offering no edit tool, and a
// validator script it cannot run (the output stands, flagged).
func TestUnmeasurableThresholdAndUnrunValidatorAreSaid(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createConfigMap(t, ns, "edits", map[string]string{"check.rhai": "fn validate(c) { () }", "agent.toml": `[agent]
name = "edits"
[agent.title]
enabled = false
[agent.output]
validator = "check.rhai"
[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.work.transitions.reassess]
condition = "stuck"
stuck_after_same_file_edits = 3
[[stages.work.script]]
complete = true
output = "done"
[stages.reassess]
`})
	createRun(t, ns, "r", "edits")
	run := waitFor(t, ns, "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	if !run.Status.Flags.BrokenScripts || !run.Status.Flags.ProducedOutput {
		t.Errorf("flags %+v, want brokenScripts and producedOutput", run.Status.Flags)
	}
	waitForEvent(t, ns, "r", arv1.ReasonStuckThresholdUnmeasured, "Stage work: stuck_after_same_file_edits")
	waitForEvent(t, ns, "r", arv1.ReasonValidatorNotRun, "cannot run")
}
