package controllers_test

import (
	"testing"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/providers/providertest"
)

// threeMoves answers a three-stage run's calls: into b, into c, complete.
func threeMoves() []providertest.Reply {
	return []providertest.Reply{
		{ToolCall: &providertest.ToolCall{ID: "to-b", Name: "transition", Args: `{"target":"b"}`}, PromptTokens: 1, CompletionTokens: 1},
		{ToolCall: &providertest.ToolCall{ID: "to-c", Name: "transition", Args: `{"target":"c"}`}, PromptTokens: 1, CompletionTokens: 1},
		{ToolCall: &providertest.ToolCall{ID: "done", Name: "complete", Args: `{"output":"ok"}`}, PromptTokens: 1, CompletionTokens: 1},
	}
}

// TestFailedModelsAreRememberedForTheRun: in a three-stage run whose every
// stage lists a failing model before a good one, the rejected key is sent
// once and the model answering 500 costs its three attempts once, not once
// per stage: the run remembers both until their Secret or the provider
// config changes.
func TestFailedModelsAreRememberedForTheRun(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	bad := providertest.NewOpenAIServer(t)
	bad.Push(providertest.Reply{Status: 401, ErrorMessage: "Incorrect API key provided"})
	down := providertest.NewOpenAIServer(t)
	down.Push(providertest.Reply{Status: 500, ErrorMessage: "internal error"})
	goodA, goodB := providertest.NewOpenAIServer(t), providertest.NewOpenAIServer(t)
	goodA.Push(threeMoves()...)
	goodB.Push(threeMoves()...)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": providerConfig(
		openAIEntry("bad", bad.URL, false), openAIEntry("down", down.URL, false),
		openAIEntry("gooda", goodA.URL, false), openAIEntry("goodb", goodB.URL, false),
	)})
	for _, n := range []string{"bad", "down", "gooda", "goodb"} {
		createSecret(t, ns, n+"-key", map[string]string{"api-key": "sk-" + n})
	}
	createConfigMap(t, ns, "keyed", map[string]string{"agent.toml": threeStageDirect(`{provider = "bad", model = "gpt-x"}, {provider = "gooda", model = "gpt-x"}`)})
	createConfigMap(t, ns, "outage", map[string]string{"agent.toml": threeStageDirect(`{provider = "down", model = "gpt-x"}, {provider = "goodb", model = "gpt-x"}`)})
	createRun(t, ns, "keyed", "keyed")
	createRun(t, ns, "outage", "outage")

	for _, c := range []struct {
		run           string
		failing, good *providertest.Server
		goodRef       string
		want          int
	}{
		{run: "keyed", failing: bad, good: goodA, goodRef: "gooda/gpt-x", want: 1},
		{run: "outage", failing: down, good: goodB, goodRef: "goodb/gpt-x", want: 3},
	} {
		done := waitFor(t, ns, c.run, 60*time.Second, "Complete", func(r *arv1.AgentRun) bool {
			return r.Status.Phase == arv1.PhaseComplete || r.Status.Phase == arv1.PhaseError
		})
		if done.Status.Phase != arv1.PhaseComplete || done.Status.Model != c.goodRef {
			t.Errorf("%s: phase %s (%s), model %q; want Complete on %s", c.run, done.Status.Phase, done.Status.Error, done.Status.Model, c.goodRef)
		}
		if got := c.failing.Requests(); got != c.want {
			t.Errorf("%s: the failing model was sent %d requests over three stages, want %d (once for the run)", c.run, got, c.want)
		}
		if got := c.good.Requests(); got != 3 {
			t.Errorf("%s: the good model was sent %d requests, want 3 (one per stage)", c.run, got)
		}
	}
}
