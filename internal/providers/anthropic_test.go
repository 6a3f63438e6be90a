package providers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/providers/providertest"
)

func TestAnthropicText(t *testing.T) {
	srv := providertest.NewAnthropicServer(t)
	srv.Push(providertest.Reply{Text: "Pods drift like leaves", PromptTokens: 12, CompletionTokens: 7})
	res := mustCall(t, providers.NewAnthropic(srv.URL, nil), baseRequest())

	if want := (journal.Response{Text: "Pods drift like leaves"}); !reflect.DeepEqual(res.Response, want) {
		t.Errorf("Response = %+v, want %+v", res.Response, want)
	}
	if want := (journal.Usage{Prompt: 12, Completion: 7}); res.Usage != want {
		t.Errorf("Usage = %+v, want %+v", res.Usage, want)
	}
	if res.CostNanoUSD != nil {
		t.Errorf("CostNanoUSD = %d, want nil", *res.CostNanoUSD)
	}
	if n := srv.Requests(); n != 1 {
		t.Errorf("server saw %d requests, want 1", n)
	}

	last := srv.Last()
	if last.Path != "/v1/messages" {
		t.Errorf("path = %q, want /v1/messages", last.Path)
	}
	if got := last.APIKey(); got != testKey {
		t.Errorf("credential sent = %q (x-api-key %q, Authorization %q), want the key",
			got, last.Header.Get("X-Api-Key"), last.Authorization())
	}
	var body struct {
		Model     string `json:"model"`
		MaxTokens int    `json:"max_tokens"`
		Stream    bool   `json:"stream"`
		System    []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"system"`
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Name        string         `json:"name"`
			InputSchema map[string]any `json:"input_schema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(last.Body, &body); err != nil {
		t.Fatalf("request body: %v", err)
	}
	if body.Model != "m1" || body.MaxTokens != 4096 || body.Stream {
		t.Errorf("model=%q max_tokens=%d stream=%v, want m1, 4096, non-streaming", body.Model, body.MaxTokens, body.Stream)
	}
	if len(body.System) != 1 || body.System[0].Text != "You are a careful planner." {
		t.Errorf("system = %+v, want the system prompt", body.System)
	}
	if len(body.Messages) != 1 || body.Messages[0].Role != "user" ||
		len(body.Messages[0].Content) != 1 || body.Messages[0].Content[0].Text != "Write a haiku about Kubernetes." {
		t.Errorf("messages = %+v, want the task as the user message", body.Messages)
	}
	tools := map[string]map[string]any{}
	for _, tool := range body.Tools {
		tools[tool.Name] = tool.InputSchema
	}
	for name, param := range map[string]string{"transition": "target", "complete": "output"} {
		props, _ := tools[name]["properties"].(map[string]any)
		if _, ok := props[param]; !ok || tools[name]["type"] != "object" {
			t.Errorf("tool %s input_schema = %v, want an object with property %q", name, tools[name], param)
		}
	}
}

func TestAnthropicNoSystemPrompt(t *testing.T) {
	srv := providertest.NewAnthropicServer(t)
	req := baseRequest()
	req.SystemPrompt = ""
	mustCall(t, providers.NewAnthropic(srv.URL, nil), req)
	if _, ok := srv.Last().JSON()["system"]; ok {
		t.Errorf("request has a system field without a system prompt: %s", srv.Last().Body)
	}
}

func TestAnthropicToolCalls(t *testing.T) {
	srv := providertest.NewAnthropicServer(t)
	p := providers.NewAnthropic(srv.URL, nil)

	srv.Push(providertest.Reply{Text: "Moving on.", ToolCall: &providertest.ToolCall{Name: "transition", Args: `{"target":"review"}`}})
	if got, want := mustCall(t, p, baseRequest()).Response, (journal.Response{Text: "Moving on.", Next: "review", ToolCalls: 1, Moves: []journal.Move{move("toolu_1", "transition", `{"target":"review"}`, "")}}); !reflect.DeepEqual(got, want) {
		t.Errorf("transition: Response = %+v, want %+v", got, want)
	}

	srv.Push(providertest.Reply{ToolCall: &providertest.ToolCall{Name: "complete", Args: `{"output":"final answer"}`}})
	if got, want := mustCall(t, p, baseRequest()).Response, (journal.Response{Complete: true, Output: "final answer", ToolCalls: 1, Moves: []journal.Move{move("toolu_1", "complete", `{"output":"final answer"}`, "")}}); !reflect.DeepEqual(got, want) {
		t.Errorf("complete: Response = %+v, want %+v", got, want)
	}

	srv.Push(providertest.Reply{ToolCall: &providertest.ToolCall{Name: "transition", Args: `{"target":""}`}})
	if got := mustCall(t, p, baseRequest()).Response; got.Next != "" || got.Complete {
		t.Errorf("empty target: Response = %+v, want no transition", got)
	}
}

func TestAnthropicUsageCache(t *testing.T) {
	srv := providertest.NewAnthropicServer(t)
	srv.Push(providertest.Reply{Text: "x", PromptTokens: 20, CompletionTokens: 40, CachedTokens: 900, CacheWriteTokens: 300})
	res := mustCall(t, providers.NewAnthropic(srv.URL, nil), baseRequest())
	// input_tokens already excludes cache reads and writes: nothing is subtracted.
	if want := (journal.Usage{Prompt: 20, Completion: 40, Cached: 900, CacheWrite: 300}); res.Usage != want {
		t.Errorf("Usage = %+v, want %+v", res.Usage, want)
	}
}

func TestAnthropicErrors(t *testing.T) {
	for _, tc := range []errorCase{
		{name: "401", reply: providertest.Reply{Status: 401}, class: journal.FailAuth, status: 401, msgHas: "invalid x-api-key"},
		{name: "403", reply: providertest.Reply{Status: 403}, class: journal.FailForbidden, status: 403, msgHas: "permission_error"},
		{name: "402 billing_error", reply: providertest.Reply{Status: 402, ErrorMessage: "Payment required"}, class: journal.FailCredits, status: 402, msgHas: "billing_error"},
		{
			name:  "400 credit balance too low",
			reply: providertest.Reply{Status: 400, ErrorMessage: "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."},
			class: journal.FailCredits, status: 400, msgHas: "credit balance",
		},
		{
			name:  "400 billing_error type",
			reply: providertest.Reply{Status: 400, ErrorType: "billing_error", ErrorMessage: "Your organization has no active plan."},
			class: journal.FailCredits, status: 400,
		},
		{
			name:  "429 billing",
			reply: providertest.Reply{Status: 429, ErrorType: "billing_error", ErrorMessage: "Monthly spend limit reached for billing."},
			class: journal.FailCredits, status: 0, msgHas: "HTTP 429",
		},
		{name: "429 rate limit", reply: providertest.Reply{Status: 429}, class: journal.FailFailed, status: 429, retryable: true, msgHas: "rate_limit_error"},
		{name: "408", reply: providertest.Reply{Status: 408}, class: journal.FailFailed, status: 408, retryable: true},
		{name: "500", reply: providertest.Reply{Status: 500}, class: journal.FailFailed, status: 500, retryable: true, msgHas: "api_error"},
		{name: "529 overloaded", reply: providertest.Reply{Status: 529}, class: journal.FailFailed, status: 529, retryable: true, msgHas: "overloaded_error"},
		{
			name:  "400",
			reply: providertest.Reply{Status: 400, ErrorMessage: "messages: at least one message is required"},
			class: journal.FailFatal, status: 400, msgHas: "at least one message is required",
		},
		{
			name:  "502 from a proxy, not JSON",
			reply: providertest.Reply{Status: 502, RawBody: "<html><body>Bad Gateway</body></html>", ContentType: "text/html"},
			class: journal.FailFailed, status: 502, retryable: true, msgHas: "Bad Gateway",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := providertest.NewAnthropicServer(t)
			srv.Push(tc.reply)
			pe := mustFail(t, providers.NewAnthropic(srv.URL, nil), baseRequest())
			checkError(t, pe, tc)
			if n := srv.Requests(); n != 1 {
				t.Errorf("server saw %d requests, want 1 (the SDK must not retry)", n)
			}
		})
	}
}

func TestAnthropicRedactsEchoedKey(t *testing.T) {
	for _, status := range []int{400, 401, 429, 500} {
		srv := providertest.NewAnthropicServer(t)
		srv.Push(providertest.Reply{Status: status, EchoKey: true, ErrorMessage: "invalid x-api-key"})
		pe := mustFail(t, providers.NewAnthropic(srv.URL, nil), baseRequest())
		if strings.Contains(pe.Message, testKey) || strings.Contains(pe.Error(), testKey) {
			t.Errorf("HTTP %d: message leaks the key: %q", status, pe.Message)
		}
		if !strings.Contains(pe.Message, "[redacted]") {
			t.Errorf("HTTP %d: message %q does not show where the key was redacted", status, pe.Message)
		}
	}
}

func TestAnthropicUnreachable(t *testing.T) {
	pe := mustFail(t, providers.NewAnthropic(closedURL(t), nil), baseRequest())
	if pe.Class != journal.FailUnreachable || pe.Status != 0 {
		t.Errorf("connection refused: error = {%s %d %q}, want %s status 0", pe.Class, pe.Status, pe.Message, journal.FailUnreachable)
	}
	pe = mustFail(t, providers.NewAnthropic("http://agentrun-provider.invalid", nil), baseRequest())
	if pe.Class != journal.FailUnreachable || pe.Status != 0 {
		t.Errorf("DNS failure: error = {%s %d %q}, want %s status 0", pe.Class, pe.Status, pe.Message, journal.FailUnreachable)
	}
}

func TestAnthropicTimeout(t *testing.T) {
	srv := providertest.NewAnthropicServer(t)
	srv.Push(providertest.Reply{Text: "late", Delay: 5 * time.Second})

	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	_, err := providers.NewAnthropic(srv.URL, nil).Call(ctx, baseRequest())
	if pe := providers.AsError(err); err == nil || pe.Class != journal.FailTimedOut || pe.Status != 0 {
		t.Errorf("context deadline: error = %v, want %s status 0", err, journal.FailTimedOut)
	}

	pe := mustFail(t, providers.NewAnthropic(srv.URL, &http.Client{Timeout: 150 * time.Millisecond}), baseRequest())
	if pe.Class != journal.FailTimedOut || pe.Status != 0 {
		t.Errorf("client timeout: error = {%s %d %q}, want %s status 0", pe.Class, pe.Status, pe.Message, journal.FailTimedOut)
	}
}

func TestAnthropicDefaultBaseURL(t *testing.T) {
	if got := providers.NewAnthropic("", nil).BaseURL(); got != providers.DefaultAnthropicBaseURL {
		t.Errorf("BaseURL() = %q, want %q", got, providers.DefaultAnthropicBaseURL)
	}
}

// Environment variables the SDKs would otherwise read must not redirect
// calls or replace the key.
func TestProvidersIgnoreSDKEnvironment(t *testing.T) {
	elsewhere := closedURL(t)
	t.Setenv("OPENAI_BASE_URL", elsewhere)
	t.Setenv("OPENAI_API_KEY", "env-key")
	t.Setenv("ANTHROPIC_BASE_URL", elsewhere)
	t.Setenv("ANTHROPIC_API_KEY", "env-key")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "env-token")

	o := providertest.NewOpenAIServer(t)
	mustCall(t, providers.NewOpenAI(o.URL, nil), baseRequest())
	if got := o.Last().APIKey(); got != testKey {
		t.Errorf("openai sent key %q, want the request's key", got)
	}
	a := providertest.NewAnthropicServer(t)
	mustCall(t, providers.NewAnthropic(a.URL, nil), baseRequest())
	if got := a.Last().APIKey(); got != testKey {
		t.Errorf("anthropic sent key %q, want the request's key", got)
	}
}

func TestChildOutputsInUserMessage(t *testing.T) {
	req := baseRequest()
	req.ChildOutputs = []string{"alpha result", "beta result"}

	o := providertest.NewOpenAIServer(t)
	mustCall(t, providers.NewOpenAI(o.URL, nil), req)
	a := providertest.NewAnthropicServer(t)
	mustCall(t, providers.NewAnthropic(a.URL, nil), req)
	for name, body := range map[string][]byte{"openai": o.Last().Body, "anthropic": a.Last().Body} {
		for _, want := range []string{"Write a haiku about Kubernetes.", "alpha result", "beta result"} {
			if !strings.Contains(string(body), want) {
				t.Errorf("%s request does not contain %q: %s", name, want, body)
			}
		}
	}
}
