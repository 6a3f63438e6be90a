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
// model the operator's tools and the request's own. The base URL is the API root,
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
	}
	tools, external := offeredTools(req)
	for _, t := range tools {
		params.Tools = append(params.Tools, anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
			Name:        t.Name,
			Description: anthropic.String(t.Description),
			InputSchema: anthropicSchema(toolSchema(t)),
		}})
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
			applyToolCall(&res.Response, external, block.ID, block.Name, block.Input)
		}
	}
	res.Response.Text = strings.Join(text, "\n")
	res.ResponseModel, res.FinishReason = string(msg.Model), string(msg.StopReason)
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
		f := apiFailure{status: apiErr.StatusCode, kind: string(apiErr.Type()), message: apiErr.Message, header: responseHeader(apiErr.Response, httpRes)}
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

// anthropicSchema carries a whole JSON schema in the SDK's input-schema
// type, which names only some of the keywords: the rest go as extra fields.
func anthropicSchema(m map[string]any) anthropic.ToolInputSchemaParam {
	s := anthropic.ToolInputSchemaParam{ExtraFields: map[string]any{}}
	for k, v := range m {
		if k != "type" { // always "object", which the SDK writes itself
			s.ExtraFields[k] = v
		}
	}
	return s
}

// anthropicMessages is the task, then each earlier answer and what followed
// it: the feedback, or, when the answer called tools, its text and tool_use
// blocks and a user message of tool_result blocks (then any feedback).
func anthropicMessages(req Request) []anthropic.MessageParam {
	msgs := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(userContent(req)))}
	for _, t := range turns(req) {
		if len(t.tools) == 0 {
			msgs = append(msgs, anthropic.NewAssistantMessage(anthropic.NewTextBlock(t.assistant)), anthropic.NewUserMessage(anthropic.NewTextBlock(t.feedback)))
			continue
		}
		var calls, results []anthropic.ContentBlockParamUnion
		if strings.TrimSpace(t.assistant) != "" { // empty text blocks are refused
			calls = append(calls, anthropic.NewTextBlock(t.assistant))
		}
		for _, r := range t.tools {
			calls = append(calls, anthropic.NewToolUseBlock(r.ID, argsObject(r.Arguments), r.Name))
			res := anthropic.ToolResultBlockParam{ToolUseID: r.ID, IsError: anthropic.Bool(r.IsError)}
			if r.Result != "" { // likewise: an empty result is sent without content
				res.Content = []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: r.Result}}}
			}
			results = append(results, anthropic.ContentBlockParamUnion{OfToolResult: &res})
		}
		if t.feedback != "" { // text must follow the tool results
			results = append(results, anthropic.NewTextBlock(t.feedback))
		}
		msgs = append(msgs, anthropic.NewAssistantMessage(calls...), anthropic.NewUserMessage(results...))
	}
	return msgs
}
