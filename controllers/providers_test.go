package controllers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/providers/providertest"
)

// twoStage moves from draft to final through the transition tool, then
// completes with output: the shape real models drive through tool calls.
func twoStage(models string) string {
	return fmt.Sprintf(`
[agent]
name = "two"
[stages.draft]
system_prompt = "Draft it."
[stages.draft.model]
models = [%s]
[stages.draft.transitions.final]
condition = "llm_choice"
[stages.final]
allow_complete = true
[stages.final.model]
models = [%s]
`, models, models)
}

func providerConfig(entries ...string) string { return strings.Join(entries, "\n") }

func openAIEntry(name, url string, rated bool) string {
	s := fmt.Sprintf("[providers.%s]\ntype = \"openai\"\nbase_url = %q\nmodels = [\"gpt-x\"]\napi_key_secret = {name = \"%s-key\", key = \"api-key\"}\n", name, url+"/v1", name)
	if rated {
		s += fmt.Sprintf("[providers.%s.rates.gpt-x]\nprompt = \"2\"\ncompletion = \"8\"\n", name)
	}
	return s
}

// TestRealProvidersCompleteTwoStages runs a two-stage run against the
// OpenAI SDK and the Anthropic SDK talking to loopback servers that speak
// each wire protocol, and checks counters equal what the servers reported.
func TestRealProvidersCompleteTwoStages(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)

	oa := providertest.NewOpenAIServer(t)
	oa.Push(
		providertest.Reply{Text: "Drafting the answer", PromptTokens: 30, CompletionTokens: 4},
		providertest.Reply{ToolCall: &providertest.ToolCall{Name: "transition", Args: `{"target":"final"}`}, PromptTokens: 1000, CompletionTokens: 100, CachedTokens: 200},
		providertest.Reply{ToolCall: &providertest.ToolCall{Name: "complete", Args: `{"output":"the answer"}`}, PromptTokens: 500, CompletionTokens: 50},
	)
	an := providertest.NewAnthropicServer(t)
	an.Push(
		// Overloaded is a rate limit: waited out as the provider says, not
		// an attempt; the 500s after it are, and the titling gives up.
		providertest.Reply{Status: 529, ErrorMessage: "overloaded", Header: map[string]string{"retry-after": "0.2"}},
		providertest.Reply{Status: 500, ErrorMessage: "internal error"},
		providertest.Reply{Status: 500, ErrorMessage: "internal error"},
		providertest.Reply{Status: 500, ErrorMessage: "internal error"},
		providertest.Reply{ToolCall: &providertest.ToolCall{Name: "transition", Args: `{"target":"final"}`}, PromptTokens: 300, CompletionTokens: 30, CachedTokens: 40, CacheWriteTokens: 10},
		providertest.Reply{Text: "done", ToolCall: &providertest.ToolCall{Name: "complete", Args: `{"output":"from claude"}`}, PromptTokens: 200, CompletionTokens: 20},
	)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": providerConfig(
		openAIEntry("oa", oa.URL, true),
		fmt.Sprintf("[providers.an]\ntype = \"anthropic\"\nbase_url = %q\nmodels = [\"claude-x\"]\napi_key_secret = {name = \"an-key\", key = \"api-key\"}\n", an.URL),
	)})
	createSecret(t, ns, "oa-key", map[string]string{"api-key": "sk-openai-test"})
	createSecret(t, ns, "an-key", map[string]string{"api-key": "sk-ant-test"})
	createConfigMap(t, ns, "two-oa", map[string]string{"agent.toml": twoStage(`{provider = "oa", model = "gpt-x"}`)})
	createConfigMap(t, ns, "two-an", map[string]string{"agent.toml": twoStage(`{provider = "an", model = "claude-x"}`)})
	createRun(t, ns, "oa", "two-oa")
	createRun(t, ns, "an", "two-an")

	o := waitFor(t, ns, "oa", 30*time.Second, "OpenAI run Complete", phaseIs(arv1.PhaseComplete))
	u := o.Status.Usage
	// OpenAI counts cached tokens inside prompt_tokens; the run bills them
	// once. The titling call's tokens are billed too, but it is no turn.
	if u.PromptTokens != 1330 || u.CachedTokens != 200 || u.CompletionTokens != 154 || u.ModelCalls != 2 {
		t.Errorf("openai usage = %+v, want prompt 1330 (30 title + 1500 - 200 cached), cached 200, completion 154, 2 calls", u)
	}
	// Rate card: 1330 prompt at $2/M + 200 cached at the prompt rate + 154 at $8/M.
	if u.CostUSD != "0.004292" || u.CostIsExact {
		t.Errorf("openai cost = %q exact=%v, want 0.004292 reconstructed from the rate card", u.CostUSD, u.CostIsExact)
	}
	if u.ToolCalls != 2 {
		t.Errorf("tool calls = %d, want 2 (transition, complete)", u.ToolCalls)
	}
	if o.Status.Title != "Drafting the answer" || o.Status.TitleError != "" {
		t.Errorf("title %q (error %q)", o.Status.Title, o.Status.TitleError)
	}
	if oa.Requests() != 3 || oa.Last().Authorization() != "Bearer sk-openai-test" {
		t.Errorf("openai server saw %d requests, auth %q", oa.Requests(), oa.Last().Authorization())
	}
	if o.Status.FinalOutput == nil || o.Status.FinalOutput.Bytes != int64(len("the answer")) {
		t.Errorf("final output = %+v", o.Status.FinalOutput)
	}

	a := waitFor(t, ns, "an", 30*time.Second, "Anthropic run Complete", phaseIs(arv1.PhaseComplete))
	ua := a.Status.Usage
	if ua.PromptTokens != 500 || ua.CachedTokens != 40 || ua.CacheWriteTokens != 10 || ua.CompletionTokens != 50 {
		t.Errorf("anthropic usage = %+v", ua)
	}
	if ua.CostUSD != "unknown" || ua.UnpricedCalls != 2 || ua.CostPricedUSD != "0" {
		t.Errorf("anthropic cost = %q priced %q unpriced %d: no rate card means unknown, never 0", ua.CostUSD, ua.CostPricedUSD, ua.UnpricedCalls)
	}
	// The titling call failed (529 waited out, then three 500s): the run
	// went on and says why it has no title.
	if a.Status.Title != "" || !strings.Contains(a.Status.TitleError, "ProviderFailed") {
		t.Errorf("title %q error %q, want no title and the reason", a.Status.Title, a.Status.TitleError)
	}
	if an.Requests() != 6 {
		t.Errorf("anthropic server saw %d requests, want 6 (one refused and 3 title attempts, 2 turns)", an.Requests())
	}
}

// TestProviderErrorsParkFailOverAndOpenTheCircuit: a 401 from the first
// model fails over to the second before any park; a 401 with nowhere to go
// parks on AuthFailed; a 400 ends the run in Error with the provider's
// message; three failing runs open the provider's circuit so a fourth run
// does not call it.
func TestProviderErrorsParkFailOverAndOpenTheCircuit(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	bad := providertest.NewOpenAIServer(t)
	bad.Push(providertest.Reply{Status: 401, ErrorMessage: "Incorrect API key provided"})
	good := providertest.NewOpenAIServer(t)
	good.Push(providertest.Reply{ToolCall: &providertest.ToolCall{Name: "complete", Args: `{"output":"ok"}`}, PromptTokens: 10, CompletionTokens: 1})
	fatal := providertest.NewOpenAIServer(t)
	fatal.Push(providertest.Reply{Status: 400, ErrorMessage: "messages: field required"})
	down := providertest.NewOpenAIServer(t)
	down.Push(providertest.Reply{Status: 503, ErrorMessage: "overloaded"})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": providerConfig(
		openAIEntry("bad", bad.URL, false), openAIEntry("good", good.URL, false),
		openAIEntry("fatal", fatal.URL, false), openAIEntry("down", down.URL, false),
	)})
	for _, n := range []string{"bad", "good", "fatal", "down"} {
		createSecret(t, ns, n+"-key", map[string]string{"api-key": "sk-" + n})
	}
	single := func(models string) string {
		return fmt.Sprintf("[agent]\nname = \"one\"\n[stages.only]\n[stages.only.model]\nmodels = [%s]\n", models)
	}
	createConfigMap(t, ns, "failover", map[string]string{"agent.toml": single(`{provider = "bad", model = "gpt-x"}, {provider = "good", model = "gpt-x"}`)})
	createConfigMap(t, ns, "only-bad", map[string]string{"agent.toml": single(`{provider = "bad", model = "gpt-x"}`)})
	createConfigMap(t, ns, "fatal", map[string]string{"agent.toml": single(`{provider = "fatal", model = "gpt-x"}`)})
	createConfigMap(t, ns, "down", map[string]string{"agent.toml": single(`{provider = "down", model = "gpt-x"}`)})

	createRun(t, ns, "failover", "failover")
	done := waitFor(t, ns, "failover", 30*time.Second, "Complete via the second model", phaseIs(arv1.PhaseComplete))
	if done.Status.Usage.ModelCalls != 1 || good.Requests() != 1 {
		t.Errorf("failover: %d completed calls, good server saw %d", done.Status.Usage.ModelCalls, good.Requests())
	}

	createRun(t, ns, "only-bad", "only-bad")
	p := waitFor(t, ns, "only-bad", 30*time.Second, "AuthFailed", blockedOn(arv1.BlockerAuthFailed))
	if strings.Contains(p.Status.WaitingOn.Remedy, "sk-bad") {
		t.Error("the remedy shows the key")
	}

	createRun(t, ns, "fatal", "fatal")
	f := waitFor(t, ns, "fatal", 30*time.Second, "Error", phaseIs(arv1.PhaseError))
	if !strings.Contains(f.Status.Error, "messages: field required") {
		t.Errorf("error %q lacks the provider's message", f.Status.Error)
	}

	for i := range 3 {
		createRun(t, ns, fmt.Sprintf("down-%d", i), "down")
	}
	for i := range 3 {
		waitFor(t, ns, fmt.Sprintf("down-%d", i), 60*time.Second, "parked on the outage", blockedOn(arv1.BlockerProviderFailed))
	}
	before := down.Requests()
	createRun(t, ns, "down-after", "down")
	w := waitFor(t, ns, "down-after", 30*time.Second, "parked on the open circuit", blockedOn(arv1.BlockerProviderFailed))
	if got := down.Requests(); got != before {
		t.Errorf("the open circuit let %d more requests through", got-before)
	}
	if !strings.Contains(w.Status.WaitingOn.Remedy, "circuit is open") {
		t.Errorf("remedy %q does not say the circuit is open", w.Status.WaitingOn.Remedy)
	}
}

// TestOutputFailingItsSchemaIsRefusedAndTheModelTold: output that fails the
// run's JSON Schema is refused, the model is told why on its next turn (the
// conversation carries its earlier answer and the refusal), and valid output
// is stored and described.
func TestOutputFailingItsSchemaIsRefusedAndTheModelTold(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	srv := providertest.NewOpenAIServer(t)
	srv.Push(
		providertest.Reply{Text: "Verdict"},
		providertest.Reply{Text: "here", ToolCall: &providertest.ToolCall{Name: "complete", Args: `{"output":"{\"verdict\":\"maybe\"}"}`}, PromptTokens: 10, CompletionTokens: 5},
		providertest.Reply{Text: "fixed", ToolCall: &providertest.ToolCall{Name: "complete", Args: `{"output":"{\"verdict\":\"ok\"}"}`}, PromptTokens: 20, CompletionTokens: 5},
	)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": openAIEntry("oa", srv.URL, false)})
	createSecret(t, ns, "oa-key", map[string]string{"api-key": "sk-x"})
	createConfigMap(t, ns, "judge", map[string]string{"agent.toml": "[agent]\nname = \"judge\"\n[stages.only]\n[stages.only.model]\nmodels = [{provider = \"oa\", model = \"gpt-x\"}]\n"})
	createRun(t, ns, "r", "judge", func(r *arv1.AgentRun) {
		r.Spec.Output = &arv1.OutputSpec{Format: arv1.OutputFormatJSON, Instructions: "Answer with a verdict.",
			Schema: `{"type":"object","required":["verdict"],"properties":{"verdict":{"enum":["ok","bad"]}}}`}
	})
	done := waitFor(t, ns, "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	if done.Status.Usage.ModelCalls != 2 || srv.Requests() != 3 {
		t.Fatalf("model calls %d, server requests %d, want 2 turns and 3 requests (with the title)", done.Status.Usage.ModelCalls, srv.Requests())
	}
	msgs, _ := srv.Last().JSON()["messages"].([]any)
	var texts []string
	for _, m := range msgs {
		mm, _ := m.(map[string]any)
		texts = append(texts, fmt.Sprintf("%v:%v", mm["role"], mm["content"]))
	}
	joined := strings.Join(texts, "\n")
	for _, want := range []string{"user:test task for r", "Output: Answer with a verdict.", "assistant:here", "Your output was refused", "does not match the schema"} {
		if !strings.Contains(joined, want) {
			t.Errorf("second request's messages lack %q:\n%s", want, joined)
		}
	}
	fo := done.Status.FinalOutput
	if fo == nil || fo.Format != arv1.OutputFormatJSON || fo.Bytes != int64(len(`{"verdict":"ok"}`)) || done.Status.Flags.EmptyOutput {
		t.Errorf("final output = %+v, flags %+v", fo, done.Status.Flags)
	}
}

// TestEachProviderErrorClassParks: each provider answer that needs a person
// parks the run on its own blocker (never Error), through the real SDK.
func TestEachProviderErrorClassParks(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	closed := freePort(t) // nothing listens here
	cases := []struct {
		name    string
		reply   *providertest.Reply
		url     string
		timeout bool
		want    arv1.SetupBlocker
	}{
		{name: "forbidden", reply: &providertest.Reply{Status: 403, ErrorMessage: "model not allowed for this key"}, want: arv1.BlockerForbidden},
		{name: "credits", reply: &providertest.Reply{Status: 402, ErrorMessage: "payment required"}, want: arv1.BlockerCreditsExhausted},
		{name: "quota", reply: &providertest.Reply{Status: 429, ErrorCode: "insufficient_quota", ErrorMessage: "You exceeded your current quota"}, want: arv1.BlockerCreditsExhausted},
		{name: "unreachable", url: fmt.Sprintf("http://127.0.0.1:%d", closed), want: arv1.BlockerProviderUnreachable},
		{name: "slow", reply: &providertest.Reply{Delay: 3 * time.Second, Text: "late"}, timeout: true, want: arv1.BlockerProviderTimedOut},
	}
	var entries []string
	for _, c := range cases {
		url := c.url
		if c.reply != nil {
			srv := providertest.NewOpenAIServer(t)
			srv.Push(*c.reply)
			url = srv.URL
		}
		e := openAIEntry(c.name, url, false)
		if c.timeout {
			e += "timeout_seconds = 1\n"
		}
		entries = append(entries, e)
		createSecret(t, ns, c.name+"-key", map[string]string{"api-key": "sk-" + c.name})
		createConfigMap(t, ns, "bp-"+c.name, map[string]string{"agent.toml": fmt.Sprintf("[agent]\nname = \"one\"\n[agent.title]\nenabled = false\n[stages.only]\n[stages.only.model]\nmodels = [{provider = %q, model = \"gpt-x\"}]\n", c.name)})
	}
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": providerConfig(entries...)})
	for _, c := range cases {
		createRun(t, ns, c.name, "bp-"+c.name)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := waitFor(t, ns, c.name, 60*time.Second, string(c.want), blockedOn(c.want))
			if r.Status.Phase == arv1.PhaseError || !r.NeedsAPerson() {
				t.Errorf("phase %s needsAPerson %v", r.Status.Phase, r.NeedsAPerson())
			}
			if strings.Contains(r.Status.WaitingOn.Remedy, "sk-"+c.name) {
				t.Error("the remedy shows the key")
			}
		})
	}
}
