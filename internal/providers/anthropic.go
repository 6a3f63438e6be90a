package providers

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// DefaultAnthropicBaseURL is where an Anthropic provider without a base URL
// sends its calls.
const DefaultAnthropicBaseURL = "https://api.anthropic.com/"

// AnthropicMaxTokens caps each answer's length.
const AnthropicMaxTokens = 4096

// Anthropic calls the Anthropic Messages API, non-streaming, offering the
// model the transition and complete tools. The base URL is the API root,
// without /v1 (the SDK adds v1/messages).
//
// It never retries on its own (the caller does) and reads no ANTHROPIC_*
// environment variables or credential profiles.
type Anthropic struct {
	baseURL string
	client  *http.Client
}

// NewAnthropic returns an Anthropic provider for baseURL (empty means
// DefaultAnthropicBaseURL). A nil httpClient uses a client without an
// overall timeout: each call is bounded by its context.
func NewAnthropic(baseURL string, httpClient *http.Client) *Anthropic {
	if strings.TrimSpace(baseURL) == "" {
		baseURL = DefaultAnthropicBaseURL
	}
	if httpClient == nil {
		httpClient = defaultHTTPClient()
	}
	return &Anthropic{baseURL: baseURL, client: httpClient}
}

// BaseURL is where the provider sends its calls.
func (p *Anthropic) BaseURL() string { return p.baseURL }

// Call implements Provider.
func (p *Anthropic) Call(ctx context.Context, req Request) (Result, error) {
	key := req.APIKey.Reveal()
	client := anthropic.NewClient(
		option.WithoutEnvironmentDefaults(),
		option.WithHTTPClient(p.client),
		option.WithBaseURL(p.baseURL),
		option.WithAPIKey(key),
		option.WithMaxRetries(0),
	)
	params := anthropic.MessageNewParams{
		Model:     anthropic.Model(req.Model),
		MaxTokens: AnthropicMaxTokens,
		Messages:  anthropicMessages(req),
		Tools: []anthropic.ToolUnionParam{
			{OfTool: &anthropic.ToolParam{
				Name:        ToolTransition,
				Description: anthropic.String(transitionDescription),
				InputSchema: anthropic.ToolInputSchemaParam{Properties: transitionSchema(), Required: []string{"target"}},
			}},
			{OfTool: &anthropic.ToolParam{
				Name:        ToolComplete,
				Description: anthropic.String(completeDescription),
				InputSchema: anthropic.ToolInputSchemaParam{Properties: completeSchema(), Required: []string{"output"}},
			}},
		},
	}
	if req.SystemPrompt != "" {
		params.System = []anthropic.TextBlockParam{{Text: req.SystemPrompt}}
	}

	var httpRes *http.Response
	msg, err := client.Messages.New(ctx, params, option.WithResponseInto(&httpRes))
	if err != nil {
		return Result{}, anthropicError(ctx, err, httpRes, key)
	}
	if msg == nil {
		return Result{}, &Error{Class: journal.FailFailed, Message: "the provider answered with no message"}
	}

	var res Result
	var text []string
	for _, block := range msg.Content {
		switch block.Type {
		case "text":
			text = append(text, block.Text)
		case "tool_use":
			applyToolCall(&res.Response, block.Name, block.Input)
		}
	}
	res.Response.Text = strings.Join(text, "\n")
	u := msg.Usage
	res.Usage = journal.Usage{
		// input_tokens already excludes tokens read from or written to cache.
		Prompt:     nonNegative(u.InputTokens),
		Completion: nonNegative(u.OutputTokens),
		Cached:     nonNegative(u.CacheReadInputTokens),
		CacheWrite: nonNegative(u.CacheCreationInputTokens),
	}
	return res, nil
}

// anthropicError classifies a failed Messages call.
func anthropicError(ctx context.Context, err error, httpRes *http.Response, key string) *Error {
	var apiErr *anthropic.Error
	switch {
	case errors.As(err, &apiErr):
		f := apiFailure{status: apiErr.StatusCode, kind: string(apiErr.Type()), message: apiErr.Message}
		if f.message == "" && apiErr.Response != nil {
			f = failureFromBody(apiErr.Response)
		}
		return f.classify(key)
	case httpRes != nil && httpRes.StatusCode >= 400 && ctx.Err() == nil:
		return failureFromBody(httpRes).classify(key)
	default:
		return transportError(ctx, err, key)
	}
}

// anthropicMessages is the task, then each earlier answer and its feedback.
func anthropicMessages(req Request) []anthropic.MessageParam {
	msgs := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(userContent(req)))}
	as, us := turns(req)
	for i := range as {
		msgs = append(msgs, anthropic.NewAssistantMessage(anthropic.NewTextBlock(as[i])), anthropic.NewUserMessage(anthropic.NewTextBlock(us[i])))
	}
	return msgs
}
