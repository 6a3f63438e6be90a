package providers_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/providers/providertest"
)

const testKey = "sk-test-0123456789abcdef"

func baseRequest() providers.Request {
	return providers.Request{
		RunUID: "run-1", Seq: 1, Stage: "plan", Model: "m1",
		SystemPrompt: "You are a careful planner.", Task: "Write a haiku about Kubernetes.",
		APIKey: providers.Secret(testKey),
	}
}

func call(t *testing.T, p providers.Provider, req providers.Request) (providers.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.Call(ctx, req)
}

func mustCall(t *testing.T, p providers.Provider, req providers.Request) providers.Result {
	t.Helper()
	res, err := call(t, p, req)
	if err != nil {
		t.Fatalf("Call: %v", err)
	}
	return res
}

func mustFail(t *testing.T, p providers.Provider, req providers.Request) *providers.Error {
	t.Helper()
	_, err := call(t, p, req)
	if err == nil {
		t.Fatal("Call succeeded, want an error")
	}
	var pe *providers.Error
	if !errors.As(err, &pe) {
		t.Fatalf("Call error %T %v is not a *providers.Error", err, err)
	}
	return pe
}

func TestOpenAIText(t *testing.T) {
	srv := providertest.NewOpenAIServer(t)
	srv.Push(providertest.Reply{Text: "Pods drift like leaves", PromptTokens: 12, CompletionTokens: 7})
	res := mustCall(t, providers.NewOpenAI(srv.URL, nil), baseRequest())

	if want := (journal.Response{Text: "Pods drift like leaves"}); !reflect.DeepEqual(res.Response, want) {
		t.Errorf("Response = %+v, want %+v", res.Response, want)
	}
	if want := (journal.Usage{Prompt: 12, Completion: 7}); res.Usage != want {
		t.Errorf("Usage = %+v, want %+v", res.Usage, want)
	}
	if res.CostNanoUSD != nil {
		t.Errorf("CostNanoUSD = %d, want nil (no cost reported)", *res.CostNanoUSD)
	}
	if n := srv.Requests(); n != 1 {
		t.Errorf("server saw %d requests, want 1", n)
	}

	last := srv.Last()
	if last.Path != "/chat/completions" {
		t.Errorf("path = %q, want /chat/completions", last.Path)
	}
	if got := last.Authorization(); got != "Bearer "+testKey {
		t.Errorf("Authorization = %q, want the key as a Bearer token", got)
	}
	var body struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Type     string `json:"type"`
			Function struct {
				Name       string         `json:"name"`
				Parameters map[string]any `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
		Stream bool `json:"stream"`
	}
	if err := json.Unmarshal(last.Body, &body); err != nil {
		t.Fatalf("request body: %v", err)
	}
	if body.Model != "m1" || body.Stream {
		t.Errorf("model=%q stream=%v, want m1, non-streaming", body.Model, body.Stream)
	}
	if len(body.Messages) != 2 ||
		body.Messages[0].Role != "system" || body.Messages[0].Content != "You are a careful planner." ||
		body.Messages[1].Role != "user" || body.Messages[1].Content != "Write a haiku about Kubernetes." {
		t.Errorf("messages = %+v, want system prompt then task", body.Messages)
	}
	tools := map[string]map[string]any{}
	for _, tool := range body.Tools {
		if tool.Type != "function" {
			t.Errorf("tool type %q, want function", tool.Type)
		}
		tools[tool.Function.Name] = tool.Function.Parameters
	}
	for name, param := range map[string]string{"transition": "target", "complete": "output"} {
		props, _ := tools[name]["properties"].(map[string]any)
		if _, ok := props[param]; !ok {
			t.Errorf("tool %s parameters = %v, want property %q", name, tools[name], param)
		}
	}
}

func TestOpenAINoSystemPromptAndV1Path(t *testing.T) {
	srv := providertest.NewOpenAIServer(t)
	req := baseRequest()
	req.SystemPrompt = ""
	mustCall(t, providers.NewOpenAI(srv.URL+"/v1", nil), req)
	last := srv.Last()
	if last.Path != "/v1/chat/completions" {
		t.Errorf("path = %q, want /v1/chat/completions", last.Path)
	}
	msgs, _ := last.JSON()["messages"].([]any)
	if len(msgs) != 1 || msgs[0].(map[string]any)["role"] != "user" {
		t.Errorf("messages = %v, want only the user task", msgs)
	}
}

func TestOpenAIToolCalls(t *testing.T) {
	srv := providertest.NewOpenAIServer(t)
	p := providers.NewOpenAI(srv.URL, nil)

	srv.Push(providertest.Reply{ToolCall: &providertest.ToolCall{Name: "transition", Args: `{"target":"review"}`}})
	if got, want := mustCall(t, p, baseRequest()).Response, (journal.Response{Next: "review", ToolCalls: 1, Moves: []journal.Move{move("call_1", "transition", `{"target":"review"}`, "")}}); !reflect.DeepEqual(got, want) {
		t.Errorf("transition: Response = %+v, want %+v", got, want)
	}

	srv.Push(providertest.Reply{Text: "Done.", ToolCall: &providertest.ToolCall{Name: "complete", Args: `{"output":"final answer"}`}})
	if got, want := mustCall(t, p, baseRequest()).Response, (journal.Response{Text: "Done.", Complete: true, Output: "final answer", ToolCalls: 1, Moves: []journal.Move{move("call_1", "complete", `{"output":"final answer"}`, "")}}); !reflect.DeepEqual(got, want) {
		t.Errorf("complete: Response = %+v, want %+v", got, want)
	}

	// A call to an unknown tool, or with malformed arguments, is no choice.
	srv.Push(providertest.Reply{ToolCall: &providertest.ToolCall{Name: "transition", Args: `{"target":`}})
	if got := mustCall(t, p, baseRequest()).Response; got.Next != "" || got.Complete {
		t.Errorf("malformed: Response = %+v, want no transition", got)
	}
	srv.Push(providertest.Reply{ToolCall: &providertest.ToolCall{Name: "shell", Args: `{"cmd":"ls"}`}})
	if got := mustCall(t, p, baseRequest()).Response; got.Next != "" || got.Complete {
		t.Errorf("unknown tool: Response = %+v, want no transition", got)
	}
}

func TestOpenAIUsageSubtractsCachedTokens(t *testing.T) {
	srv := providertest.NewOpenAIServer(t)
	srv.Push(providertest.Reply{Text: "x", PromptTokens: 1000, CompletionTokens: 50, CachedTokens: 800})
	res := mustCall(t, providers.NewOpenAI(srv.URL, nil), baseRequest())
	if want := (journal.Usage{Prompt: 200, Completion: 50, Cached: 800}); res.Usage != want {
		t.Errorf("Usage = %+v, want %+v", res.Usage, want)
	}

	// OpenAI-compatible gateways that report cache writes count them in
	// prompt_tokens too.
	srv.Push(providertest.Reply{Text: "x", PromptTokens: 1000, CompletionTokens: 50, CachedTokens: 300, CacheWriteTokens: 600})
	res = mustCall(t, providers.NewOpenAI(srv.URL, nil), baseRequest())
	if want := (journal.Usage{Prompt: 100, Completion: 50, Cached: 300, CacheWrite: 600}); res.Usage != want {
		t.Errorf("Usage with cache writes = %+v, want %+v", res.Usage, want)
	}
}

func TestOpenAIProviderCost(t *testing.T) {
	for _, tc := range []struct {
		cost string
		want int64
	}{
		{"0.0012", 1_200_000},
		{"0.000123", 123_000},
		{"1.2e-05", 12_000},
		{"0.1", 100_000_000},
		{"3", 3_000_000_000},
		{"0.0000000015", 2}, // finer than a nano-dollar: rounds half up
		{"0", 0},
	} {
		srv := providertest.NewOpenAIServer(t)
		srv.Push(providertest.Reply{Text: "x", PromptTokens: 10, CompletionTokens: 5, CostUSD: tc.cost})
		res := mustCall(t, providers.NewOpenAI(srv.URL, nil), baseRequest())
		if res.CostNanoUSD == nil {
			t.Errorf("cost %s: CostNanoUSD = nil, want %d", tc.cost, tc.want)
			continue
		}
		if *res.CostNanoUSD != tc.want {
			t.Errorf("cost %s: CostNanoUSD = %d, want %d", tc.cost, *res.CostNanoUSD, tc.want)
		}
	}
}

// errorCase is one scripted failure and the class it must map to.
type errorCase struct {
	name      string
	reply     providertest.Reply
	class     journal.FailureClass
	status    int
	retryable bool
	msgHas    string
}

func checkError(t *testing.T, pe *providers.Error, tc errorCase) {
	t.Helper()
	if pe.Class != tc.class || pe.Status != tc.status {
		t.Errorf("error = {%s %d %q}, want class %s status %d", pe.Class, pe.Status, pe.Message, tc.class, tc.status)
	}
	if _, retryable := providers.ClassifyStatus(pe.Status); (retryable && pe.Status != 0) != tc.retryable {
		t.Errorf("retryable per ClassifyStatus(%d) = %v, want %v", pe.Status, retryable, tc.retryable)
	}
	if tc.msgHas != "" && !strings.Contains(pe.Message, tc.msgHas) {
		t.Errorf("message %q does not contain %q", pe.Message, tc.msgHas)
	}
	if strings.Contains(pe.Message, testKey) || strings.Contains(pe.Error(), testKey) {
		t.Errorf("error leaks the API key: %q", pe.Message)
	}
}

func TestOpenAIErrors(t *testing.T) {
	for _, tc := range []errorCase{
		{name: "401", reply: providertest.Reply{Status: 401}, class: journal.FailAuth, status: 401, msgHas: "Incorrect API key"},
		{name: "403", reply: providertest.Reply{Status: 403}, class: journal.FailForbidden, status: 403},
		{name: "402", reply: providertest.Reply{Status: 402, ErrorMessage: "This request requires more credits"}, class: journal.FailCredits, status: 402, msgHas: "more credits"},
		{
			name:  "429 insufficient_quota",
			reply: providertest.Reply{Status: 429, ErrorType: "insufficient_quota", ErrorCode: "insufficient_quota", ErrorMessage: "You exceeded your current quota, please check your plan and billing details."},
			class: journal.FailCredits, status: 0, msgHas: "HTTP 429",
		},
		{name: "429 rate limit", reply: providertest.Reply{Status: 429}, class: journal.FailFailed, status: 429, retryable: true, msgHas: "rate_limit_exceeded"},
		{name: "408", reply: providertest.Reply{Status: 408}, class: journal.FailFailed, status: 408, retryable: true},
		{name: "500", reply: providertest.Reply{Status: 500, ErrorMessage: "The server had an error"}, class: journal.FailFailed, status: 500, retryable: true},
		{name: "503", reply: providertest.Reply{Status: 503}, class: journal.FailFailed, status: 503, retryable: true},
		{
			name:  "400",
			reply: providertest.Reply{Status: 400, ErrorMessage: "Invalid value for 'max_tokens': must be positive."},
			class: journal.FailFatal, status: 400, msgHas: "Invalid value for 'max_tokens'",
		},
		{name: "404 model", reply: providertest.Reply{Status: 404, ErrorMessage: "The model `m1` does not exist"}, class: journal.FailFatal, status: 404, msgHas: "does not exist"},
		{
			name:  "502 from a proxy, not JSON",
			reply: providertest.Reply{Status: 502, RawBody: "<html><body>Bad Gateway</body></html>", ContentType: "text/html"},
			class: journal.FailFailed, status: 502, retryable: true, msgHas: "Bad Gateway",
		},
		{
			name:  "Ollama-style string error",
			reply: providertest.Reply{Status: 404, RawBody: `{"error":"model \"m1\" not found, try pulling it first"}`, ContentType: "application/json"},
			class: journal.FailFatal, status: 404, msgHas: "try pulling it first",
		},
		{
			name:  "vLLM-style flat error",
			reply: providertest.Reply{Status: 400, RawBody: `{"object":"error","message":"This model's maximum context length is 4096 tokens","type":"BadRequestError","param":null,"code":400}`, ContentType: "application/json"},
			class: journal.FailFatal, status: 400, msgHas: "maximum context length",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := providertest.NewOpenAIServer(t)
			srv.Push(tc.reply)
			pe := mustFail(t, providers.NewOpenAI(srv.URL, nil), baseRequest())
			checkError(t, pe, tc)
			if n := srv.Requests(); n != 1 {
				t.Errorf("server saw %d requests, want 1 (the SDK must not retry)", n)
			}
		})
	}
}

func TestOpenAIRedactsEchoedKey(t *testing.T) {
	for _, status := range []int{400, 401, 429, 500} {
		srv := providertest.NewOpenAIServer(t)
		srv.Push(providertest.Reply{Status: status, EchoKey: true, ErrorMessage: "Incorrect API key provided"})
		pe := mustFail(t, providers.NewOpenAI(srv.URL, nil), baseRequest())
		if strings.Contains(pe.Message, testKey) || strings.Contains(pe.Error(), testKey) {
			t.Errorf("HTTP %d: message leaks the key: %q", status, pe.Message)
		}
		if !strings.Contains(pe.Message, "[redacted]") {
			t.Errorf("HTTP %d: message %q does not show where the key was redacted", status, pe.Message)
		}
	}
}

func TestOpenAIUnreachable(t *testing.T) {
	pe := mustFail(t, providers.NewOpenAI(closedURL(t), nil), baseRequest())
	if pe.Class != journal.FailUnreachable || pe.Status != 0 {
		t.Errorf("connection refused: error = {%s %d %q}, want %s status 0", pe.Class, pe.Status, pe.Message, journal.FailUnreachable)
	}
	pe = mustFail(t, providers.NewOpenAI("http://agentrun-provider.invalid/v1", nil), baseRequest())
	if pe.Class != journal.FailUnreachable || pe.Status != 0 {
		t.Errorf("DNS failure: error = {%s %d %q}, want %s status 0", pe.Class, pe.Status, pe.Message, journal.FailUnreachable)
	}
}

func TestOpenAITimeout(t *testing.T) {
	srv := providertest.NewOpenAIServer(t)
	srv.Push(providertest.Reply{Text: "late", Delay: 5 * time.Second})

	// The call's context deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	_, err := providers.NewOpenAI(srv.URL, nil).Call(ctx, baseRequest())
	if pe := providers.AsError(err); err == nil || pe.Class != journal.FailTimedOut || pe.Status != 0 {
		t.Errorf("context deadline: error = %v, want %s status 0", err, journal.FailTimedOut)
	}

	// The HTTP client's own timeout.
	pe := mustFail(t, providers.NewOpenAI(srv.URL, &http.Client{Timeout: 150 * time.Millisecond}), baseRequest())
	if pe.Class != journal.FailTimedOut || pe.Status != 0 {
		t.Errorf("client timeout: error = {%s %d %q}, want %s status 0", pe.Class, pe.Status, pe.Message, journal.FailTimedOut)
	}
}

func TestOpenAIDefaultBaseURL(t *testing.T) {
	if got := providers.NewOpenAI("", nil).BaseURL(); got != providers.DefaultOpenAIBaseURL {
		t.Errorf("BaseURL() = %q, want %q", got, providers.DefaultOpenAIBaseURL)
	}
}

// closedURL is the URL of a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return "http://" + addr
}
