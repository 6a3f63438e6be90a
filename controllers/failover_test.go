package controllers_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
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

// anthropicEntry declares an Anthropic provider on a loopback server.
func anthropicEntry(name, url, extra string) string {
	return fmt.Sprintf("[providers.%s]\ntype = \"anthropic\"\nbase_url = %q\nmodels = [\"claude-x\"]\napi_key_secret = {name = \"%s-key\", key = \"api-key\"}\n%s", name, url, name, extra)
}

// TestOverloadedModelIsFailedOver: a model answering 529 overloaded_error
// on every try is given up on after its provider's
// overload_failover_seconds, and the stage moves to its next model; the
// run says so (a ModelFailover Event, status.model, the calls metric's
// outcome). A model refusing with 429 and Retry-After for as long stays a
// healthy wait and answers in the end; an overloaded model with no other
// to go to is waited on, shown RateLimited, never parked.
func TestOverloadedModelIsFailedOver(t *testing.T) {
	port := freePort(t)
	startManager(t, managerOpts{metricsAddr: fmt.Sprintf("127.0.0.1:%d", port)})
	ns := newNamespace(t)
	busy, calm := providertest.NewAnthropicServer(t), providertest.NewAnthropicServer(t)
	busy.Push(providertest.Reply{Status: 529, Header: map[string]string{"Retry-After": "0.3"}})
	calm.Push(providertest.Reply{ToolCall: &providertest.ToolCall{ID: "done", Name: "complete", Args: `{"output":"ok"}`}, PromptTokens: 1, CompletionTokens: 1})
	limited, spare := providertest.NewAnthropicServer(t), providertest.NewAnthropicServer(t)
	for range 8 {
		limited.Push(providertest.Reply{Status: 429, Header: map[string]string{"Retry-After": "0.3"}})
	}
	limited.Push(providertest.Reply{ToolCall: &providertest.ToolCall{ID: "done", Name: "complete", Args: `{"output":"ok"}`}, PromptTokens: 1, CompletionTokens: 1})
	lone := providertest.NewAnthropicServer(t)
	lone.Push(providertest.Reply{Status: 529, Header: map[string]string{"Retry-After": "0.3"}})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": providerConfig(
		anthropicEntry("busy", busy.URL, "overload_failover_seconds = 1\n"), anthropicEntry("calm", calm.URL, ""),
		anthropicEntry("limited", limited.URL, "overload_failover_seconds = 1\n"), anthropicEntry("spare", spare.URL, ""),
		anthropicEntry("lone", lone.URL, "overload_failover_seconds = 1\n"),
	)})
	for _, n := range []string{"busy", "calm", "limited", "spare", "lone"} {
		createSecret(t, ns, n+"-key", map[string]string{"api-key": "sk-" + n})
	}
	single := func(models string) string {
		return fmt.Sprintf("[agent]\nname = \"one\"\n[agent.title]\nenabled = false\n[stages.only]\n[stages.only.model]\nmodels = [%s]\n", models)
	}
	createConfigMap(t, ns, "overloaded", map[string]string{"agent.toml": single(`{provider = "busy", model = "claude-x"}, {provider = "calm", model = "claude-x"}`)})
	createConfigMap(t, ns, "limited", map[string]string{"agent.toml": single(`{provider = "limited", model = "claude-x"}, {provider = "spare", model = "claude-x"}`)})
	createConfigMap(t, ns, "lone", map[string]string{"agent.toml": single(`{provider = "lone", model = "claude-x"}`)})
	createRun(t, ns, "overloaded", "overloaded")
	createRun(t, ns, "limited", "limited")
	createRun(t, ns, "lone", "lone")

	done := waitFor(t, ns, "overloaded", 60*time.Second, "Complete on the next model", phaseIs(arv1.PhaseComplete))
	if done.Status.Model != "calm/claude-x" || calm.Requests() != 1 || busy.Requests() < 2 {
		t.Errorf("status.model %q, calm saw %d requests, busy %d; want calm/claude-x, 1, and busy refusing more than once", done.Status.Model, calm.Requests(), busy.Requests())
	}
	if wide := kubectlOut(t, "get", "ar", "overloaded", "-n", ns, "-o", "wide", "--no-headers"); !strings.Contains(wide, "calm/claude-x") {
		t.Errorf("kubectl get ar -o wide shows %q, want the model that answered", wide)
	}
	waitForEvent(t, ns, "overloaded", arv1.ReasonModelFailover, "busy/claude-x (ProviderOverloaded)")
	waitForMetric(t, port, `agentrun_model_calls_total{outcome="ProviderOverloaded",provider="busy"} 1`)

	l := waitFor(t, ns, "limited", 60*time.Second, "Complete after its 429s", phaseIs(arv1.PhaseComplete))
	if l.Status.Model != "limited/claude-x" || spare.Requests() != 0 || limited.Requests() != 9 {
		t.Errorf("status.model %q, spare saw %d requests, limited %d; want the 429s waited out on limited (9 requests) and spare never called", l.Status.Model, spare.Requests(), limited.Requests())
	}

	waitFor(t, ns, "lone", 30*time.Second, "RateLimited", func(r *arv1.AgentRun) bool {
		return r.Status.WaitingOn != nil && r.Status.WaitingOn.Reason == arv1.WaitRateLimited
	})
	if err := holdsFor(3*time.Second, func() error {
		r := getRun(t, ns, "lone")
		if w := r.Status.WaitingOn; w == nil || w.Reason != arv1.WaitRateLimited {
			return fmt.Errorf("the lone overloaded model's run left its RateLimited wait: phase %s waitingOn %+v", r.Status.Phase, w)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// waitForMetric scrapes the manager's metrics until want is in them.
func waitForMetric(t *testing.T, port int, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var body string
	for {
		if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port)); err == nil {
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			body = string(b)
		}
		if strings.Contains(body, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics lack %q", want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
