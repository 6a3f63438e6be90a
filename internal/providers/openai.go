package providers

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// DefaultOpenAIBaseURL is where an OpenAI provider without a base URL sends
// its calls.
const DefaultOpenAIBaseURL = "https://api.openai.com/v1/"

// OpenAI calls any OpenAI-compatible chat-completions API (OpenAI, vLLM,
// Ollama, LiteLLM, OpenRouter, ...), non-streaming, offering the model the
// operator's tools and the request's own. The base URL includes the API version
// prefix, e.g. https://openrouter.ai/api/v1 or http://ollama:11434/v1.
//
// It never retries on its own (the caller does) and reads no OPENAI_*
// environment variables.
type OpenAI struct {
	baseURL string
	client  *http.Client
}

// NewOpenAI returns an OpenAI-compatible provider for baseURL (empty means
// DefaultOpenAIBaseURL). A nil httpClient uses a client without an overall
// timeout: each call is bounded by its context.
func NewOpenAI(baseURL string, httpClient *http.Client) *OpenAI {
	if strings.TrimSpace(baseURL) == "" {
		baseURL = DefaultOpenAIBaseURL
	}
	if httpClient == nil {
		httpClient = defaultHTTPClient()
	}
	return &OpenAI{baseURL: baseURL, client: httpClient}
}

// BaseURL is where the provider sends its calls.
func (p *OpenAI) BaseURL() string { return p.baseURL }

// Call implements Provider.
func (p *OpenAI) Call(ctx context.Context, req Request) (Result, error) {
	key := req.APIKey.Reveal()
	// The service is built directly rather than through openai.NewClient so
	// that no OPENAI_* environment variable (base URL, key, organization,
	// custom headers) leaks into the operator's calls.
	svc := openai.NewChatCompletionService(
		option.WithHTTPClient(p.client),
		option.WithBaseURL(p.baseURL),
		option.WithAPIKey(key),
		option.WithMaxRetries(0),
	)
	body, external, err := openAIRequestBody(req)
	if err != nil {
		return Result{}, &Error{Class: journal.FailFailed, Message: "encoding the request: " + err.Error()}
	}

	var httpRes *http.Response
	resp, err := svc.New(ctx, openai.ChatCompletionNewParams{}, option.WithRequestBody("application/json", body), option.WithResponseInto(&httpRes))
	if err != nil {
		return Result{}, openAIError(ctx, err, httpRes, key)
	}
	if resp == nil || len(resp.Choices) == 0 {
		return Result{}, &Error{Class: journal.FailFailed, Message: "the provider answered with no choices"}
	}

	var res Result
	msg := resp.Choices[0].Message
	res.ResponseModel, res.FinishReason = resp.Model, resp.Choices[0].FinishReason
	res.Response.Text = msg.Content
	for _, tc := range msg.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			continue
		}
		applyToolCall(&res.Response, external, tc.ID, tc.Function.Name, []byte(tc.Function.Arguments))
	}

	u := resp.Usage
	cached := nonNegative(u.PromptTokensDetails.CachedTokens)
	written := nonNegative(u.PromptTokensDetails.CacheWriteTokens)
	res.Usage = journal.Usage{
		// prompt_tokens counts cached tokens (and, where reported, tokens
		// written to cache) too; Prompt is only the uncached remainder.
		Prompt:     nonNegative(u.PromptTokens - cached - written),
		Completion: nonNegative(u.CompletionTokens),
		Cached:     cached,
		CacheWrite: written,
	}
	// OpenRouter's usage.cost (USD). The SDK keeps unknown fields' raw JSON
	// but marks them not Valid, having no type to check them against.
	if f, ok := u.JSON.ExtraFields["cost"]; ok {
		if n, ok := parseCostUSD(f.Raw()); ok {
			res.CostNanoUSD = &n
		}
	}
	return res, nil
}

// openAIError classifies a failed chat-completions call.
func openAIError(ctx context.Context, err error, httpRes *http.Response, key string) *Error {
	var apiErr *openai.Error
	switch {
	case errors.As(err, &apiErr):
		f := apiFailure{status: apiErr.StatusCode, kind: firstNonEmpty(apiErr.Code, apiErr.Type), message: apiErr.Message, header: responseHeader(apiErr.Response, httpRes)}
		if f.message == "" && apiErr.Response != nil {
			f = failureFromBody(apiErr.Response)
		}
		if f.status == http.StatusTooManyRequests && (apiErr.Type == "insufficient_quota" || apiErr.Code == "insufficient_quota") {
			f.kind = "insufficient_quota"
		}
		return f.classify(key)
	case httpRes != nil && httpRes.StatusCode >= 400 && ctx.Err() == nil:
		// An error body the SDK could not parse (another server's shape).
		return failureFromBody(httpRes).classify(key)
	default:
		return transportError(ctx, err, key)
	}
}
