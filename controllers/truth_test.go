package controllers_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/plugin"
	"github.com/agentrun-dev/agentrun-operator/internal/providers/providertest"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// kubectlOut runs the real kubectl against the test API server.
func kubectlOut(t *testing.T, args ...string) string {
	t.Helper()
	kc, err := env.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	out, err := testenv.Kubectl(kc, args...)
	if err != nil {
		t.Fatalf("kubectl %v: %v\n%s", args, err, out)
	}
	return out
}

// eventsOf lists the events recorded about a run.
func eventsOf(t *testing.T, ns, name string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// TestModelIsTheOneThatAnswered: with models [bad (401), good], status.model
// and the MODEL column name good, the model that answered, for every run,
// also once bad's circuit is open; the failover shows in an event and in
// `kubectl agentrun describe`.
func TestModelIsTheOneThatAnswered(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	bad := providertest.NewOpenAIServer(t)
	for range 10 {
		bad.Push(providertest.Reply{Status: 401, ErrorMessage: "Incorrect API key provided"})
	}
	good := providertest.NewOpenAIServer(t)
	for range 10 {
		good.Push(providertest.Reply{ToolCall: &providertest.ToolCall{Name: "complete", Args: `{"output":"ok"}`}, PromptTokens: 10, CompletionTokens: 1})
	}
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": providerConfig(openAIEntry("bad", bad.URL, false), openAIEntry("good", good.URL, false))})
	createSecret(t, ns, "bad-key", map[string]string{"api-key": "sk-bad"})
	createSecret(t, ns, "good-key", map[string]string{"api-key": "sk-good"})
	createConfigMap(t, ns, "failover", map[string]string{"agent.toml": "[agent]\nname = \"one\"\n[agent.title]\nenabled = false\n[stages.only]\n[stages.only.model]\nmodels = [{provider = \"bad\", model = \"gpt-x\"}, {provider = \"good\", model = \"gpt-x\"}]\n"})
	for i := range 5 {
		name := fmt.Sprintf("r%d", i)
		createRun(t, ns, name, "failover")
		done := waitFor(t, ns, name, 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
		if done.Status.Model != "good/gpt-x" {
			t.Errorf("%s: status.model = %q, want good/gpt-x (the model that answered)", name, done.Status.Model)
		}
	}
	wide := kubectlOut(t, "get", "ar", "-n", ns, "-o", "wide", "--no-headers")
	for _, line := range strings.Split(strings.TrimSpace(wide), "\n") {
		if !strings.Contains(line, "good/gpt-x") || strings.Contains(line, "bad/gpt-x") {
			t.Errorf("MODEL column in %q, want good/gpt-x", line)
		}
	}
	// The failover Event is Normal: it may give way to the runs' writes.
	waitForEvent(t, ns, "r0", arv1.ReasonModelFailover, "good/gpt-x")
	var failover string
	for _, e := range eventsOf(t, ns, "r0") {
		if e.Reason == arv1.ReasonModelFailover {
			failover = e.Note
		}
	}
	if !strings.Contains(failover, "bad/gpt-x (AuthFailed)") || !strings.Contains(failover, "good/gpt-x") {
		t.Errorf("failover event %q, want it to name bad/gpt-x and why, and good/gpt-x", failover)
	}
	run := getRun(t, ns, "r0")
	var buf bytes.Buffer
	if err := plugin.RenderDescribe(&buf, run, time.Now(), nil, plugin.Failovers(journalEntries(t, ns, string(run.UID)))...); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "Failover:") || !strings.Contains(buf.String(), "bad/gpt-x failed (AuthFailed, HTTP 401), answered by good/gpt-x") {
		t.Errorf("describe does not show the failover:\n%s", buf.String())
	}
}

// TestNeedsAPersonIsAlwaysThere: a fan-out parent waiting on its workers
// reads needsAPerson "false" through kubectl's jsonpath, not nothing; a
// checkpoint reads "true".
func TestNeedsAPersonIsAlwaysThere(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "fan", map[string]string{"agent.toml": fanOutBlueprint(2, 2, "continue", 1, 3000)})
	createConfigMap(t, ns, "gated", map[string]string{"agent.toml": withCheckpoint})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createRun(t, ns, "fan", "fan")
	createRun(t, ns, "gate", "gated")
	waitFor(t, ns, "fan", 30*time.Second, "FanOutWorkers", waitingOn(arv1.WaitFanOutWorkers))
	waitFor(t, ns, "gate", 30*time.Second, "InteractionPoint", waitingOn(arv1.WaitInteractionPoint))
	path := "-o=jsonpath={.status.waitingOn.needsAPerson}"
	if got := kubectlOut(t, "get", "ar", "fan", "-n", ns, path); got != "false" {
		t.Errorf("fan-out parent needsAPerson = %q, want false", got)
	}
	if got := kubectlOut(t, "get", "ar", "gate", "-n", ns, path); got != "true" {
		t.Errorf("checkpoint needsAPerson = %q, want true", got)
	}
}

// TestWorkersNameTheirAgent: a fan-out worker's AGENT column and
// status.agentName name the agent, not the snapshot it runs from, which is
// its own field.
func TestWorkersNameTheirAgent(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "fan", map[string]string{"agent.toml": fanOutBlueprint(2, 2, "continue", 1, 0)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	parent := createRun(t, ns, "p", "fan")
	done := waitFor(t, ns, "p", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	workers := listChildren(t, ns, parent)
	if len(workers) != 2 {
		t.Fatalf("%d workers, want 2", len(workers))
	}
	for _, w := range workers {
		if w.Spec.Agent != "fan" || w.Status.AgentName != "fan" || w.Spec.BlueprintSnapshot != done.Status.BlueprintSnapshot {
			t.Errorf("%s: agent %q, agentName %q, snapshot %q; want fan, fan and the parent's %q", w.Name, w.Spec.Agent, w.Status.AgentName, w.Spec.BlueprintSnapshot, done.Status.BlueprintSnapshot)
		}
	}
	out := kubectlOut(t, "get", "ar", "-n", ns, "-l", arv1.LabelParentUID+"="+string(parent.UID), "--no-headers", "-o", "custom-columns=NAME:.metadata.name,AGENT:.spec.agent")
	table := kubectlOut(t, "get", "ar", "-n", ns, "--no-headers")
	for _, w := range workers {
		if !strings.Contains(out, w.Name+"   fan") || strings.Contains(table, "agentrun-blueprint-") {
			t.Errorf("kubectl shows the workers as\n%s\n%s", out, table)
		}
	}
}

// TestTranscriptShowsRefusals: a run whose first output failed its schema
// reads that way in the transcript, numbered by the turn each line belongs
// to, and the refusal says nothing of the manager's filesystem.
func TestTranscriptShowsRefusals(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	srv := providertest.NewOpenAIServer(t)
	srv.Push(
		providertest.Reply{Text: "here", ToolCall: &providertest.ToolCall{Name: "complete", Args: `{"output":"{\"verdict\":\"maybe\"}"}`}, PromptTokens: 10, CompletionTokens: 5},
		providertest.Reply{Text: "fixed", ToolCall: &providertest.ToolCall{Name: "complete", Args: `{"output":"{\"verdict\":\"ok\"}"}`}, PromptTokens: 20, CompletionTokens: 5},
	)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": openAIEntry("oa", srv.URL, false)})
	createSecret(t, ns, "oa-key", map[string]string{"api-key": "sk-x"})
	createConfigMap(t, ns, "judge", map[string]string{"agent.toml": "[agent]\nname = \"judge\"\n[agent.title]\nenabled = false\n[stages.only]\nmax_iterations = 3\n[stages.only.model]\nmodels = [{provider = \"oa\", model = \"gpt-x\"}]\n"})
	run := createRun(t, ns, "r", "judge", func(r *arv1.AgentRun) {
		r.Spec.Output = &arv1.OutputSpec{Format: arv1.OutputFormatJSON, Schema: `{"type":"object","properties":{"verdict":{"enum":["ok","bad"]}}}`}
	})
	waitFor(t, ns, "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	var buf bytes.Buffer
	if err := plugin.RenderTranscript(&buf, journalEntries(t, ns, string(run.UID)), nil); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var refused, answered string
	for _, l := range lines {
		switch {
		case strings.Contains(l, "output refused"):
			refused = l
		case strings.Contains(l, "model answered"):
			answered = l
		}
	}
	if !strings.Contains(refused, "only[0]") || !strings.Contains(refused, "does not match the schema") {
		t.Errorf("the refused first answer reads %q, want it in turn only[0] with the reason\n%s", refused, buf.String())
	}
	if !strings.Contains(answered, "only[1]") {
		t.Errorf("the accepted second answer reads %q, want it in turn only[1]\n%s", answered, buf.String())
	}
	wd, _ := os.Getwd()
	for _, leak := range []string{"file://", wd} {
		if strings.Contains(buf.String(), leak) {
			t.Errorf("the refusal shows %q:\n%s", leak, buf.String())
		}
	}
	msgs, _ := srv.Last().JSON()["messages"].([]any)
	if told := fmt.Sprint(msgs); strings.Contains(told, "file://") || strings.Contains(told, wd) {
		t.Errorf("the model was told the manager's paths: %s", told)
	}
}

// TestScriptedErrorsClassifyLikeAProvider: a scripted 429 saying
// insufficient_quota and a scripted 400 "credit balance is too low" both
// park on CreditsExhausted, as they do over the wire.
func TestScriptedErrorsClassifyLikeAProvider(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	broke := func(status int, typ, msg string) string {
		return fmt.Sprintf("[agent]\nname = \"broke\"\n[agent.title]\nenabled = false\n[stages.only]\n[stages.only.model]\nmodels = [{provider = \"demo\", model = \"scripted-1\"}]\n[[stages.only.script]]\nerror = {status = %d, type = %q, message = %q}\n", status, typ, msg)
	}
	createConfigMap(t, ns, "quota", map[string]string{"agent.toml": broke(429, "insufficient_quota", "You exceeded your current quota, please check your plan and billing details.")})
	createConfigMap(t, ns, "balance", map[string]string{"agent.toml": broke(400, "", "Your credit balance is too low to access the Anthropic API.")})
	createRun(t, ns, "quota", "quota")
	createRun(t, ns, "balance", "balance")
	for _, name := range []string{"quota", "balance"} {
		waitFor(t, ns, name, 30*time.Second, "CreditsExhausted", blockedOn(arv1.BlockerCreditsExhausted))
	}
}
