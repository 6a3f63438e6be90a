// Package providers calls model providers. A Provider turns one request
// into an answer or a classified failure; the class decides whether the run
// retries, parks on NeedsSetup, or fails.
package providers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/builtin"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// Secret holds an API key. It prints as [redacted] in every format, so a key
// passed through logs or errors by mistake is still never shown.
type Secret string

// String implements fmt.Stringer.
func (Secret) String() string { return "[redacted]" }

// GoString implements fmt.GoStringer.
func (Secret) GoString() string { return "[redacted]" }

// Reveal returns the key, for the one place that sends it to the provider.
func (s Secret) Reveal() string { return string(s) }

// Request is one model call.
type Request struct {
	// RunUID identifies the run, for providers that count calls per run.
	RunUID string
	// Seq is the journal seq of the call's intent; a re-issued call keeps it.
	Seq          int64
	Stage        string
	Iteration    int
	Attempt      int
	Model        string
	SystemPrompt string
	Task         string
	APIKey       Secret
	// Script is the stage's scripted responses (scripted provider only).
	Script []blueprint.ScriptStep
	// ChildOutputs are the final outputs of the fan-out workers this stage
	// merges, in item order (empty outside a merge stage).
	ChildOutputs []string
	// History is the model's earlier answers in this stage, each with what
	// it was told back, oldest first.
	History []Turn
	// Messages are what the run's parent sent (send_to_agent) before the
	// stage's first answer; later ones ride on History's turns.
	Messages []string
	// Notices are the operator's own messages before the stage's first
	// answer, each complete and marked as the operator's: the results of
	// the run's sub-agents that finished (the drain). Later ones ride on
	// History's turns, in their Feedback.
	Notices []string
	// OutputInstructions tell the model what output to hand back.
	OutputInstructions string
	// StageNote is why the run entered this stage, when a runtime signal
	// (an error, stuck, dead_end or max_iterations edge) took it there.
	StageNote string
	// TransitionPrompt tells the model which edges it may take and how.
	TransitionPrompt string
	// Purpose is "title" for the call that names the run.
	Purpose string
	// Tools are the tools the run executes itself (MCP and built-in ones
	// like ask_user), offered besides the operator's own; the model's calls
	// to them come back as Response.Calls.
	Tools []ToolSpec
	// Document is the region the stage works on (its document_region, or
	// the draft a person just edited at a checkpoint), nil when none.
	Document *Document
	// Directive is a person's instructions to a stage a checkpoint sent
	// back.
	Directive string
	// Choices are what people answered at the checkpoints the run passed
	// to enter this stage (a multiple_choice option, a free_text text).
	Choices []journal.PointChoice
}

// Document is a region and its content, as a call carries it.
type Document struct {
	Name    string
	Content string
}

// ToolSpec is a tool offered to the model.
type ToolSpec = builtin.Spec

// Turn is an earlier answer and the feedback that followed it.
type Turn struct {
	Assistant string
	Feedback  string
	// Tools are the answer's tool calls with their results.
	Tools []journal.ToolResult
	// Messages are what the run's parent sent after this answer.
	Messages []string
}

// Result is a model's answer.
type Result struct {
	Response journal.Response
	Usage    journal.Usage
	// CostNanoUSD is the provider's own cost figure, when it reports one.
	CostNanoUSD *int64
	// ResponseModel is the model that answered, as the provider named it,
	// and FinishReason why it stopped (its own word: "stop", "tool_calls",
	// "end_turn", "max_tokens", ...), when it says; for traces.
	ResponseModel, FinishReason string
}

// Error is a classified provider failure.
type Error struct {
	Class   journal.FailureClass
	Status  int
	Message string
	// RateLimited is set when the provider refused because of a rate limit
	// or overload and asks to be tried again later: an HTTP 429 (unless it
	// says the account is out of credit or quota, which is FailCredits), a
	// 529 (Anthropic's overloaded_error), or a 503 that carries Retry-After
	// (or retry-after-ms). Class stays FailFailed for these.
	RateLimited bool
	// Overloaded is set, with RateLimited, when the refusal is the
	// provider's own overload rather than the caller's limit: a 529
	// (Anthropic's overloaded_error), a 503 with Retry-After, or any
	// refusal whose type says overloaded_error. A model overloaded for long
	// is failed over (steps.ModelCall.OverloadFailover); a 429 is waited
	// out however long it lasts.
	Overloaded bool
	// RetryAfter is how long the provider asked to wait before the next
	// try (see RateLimitHint), 0 when it did not say. It is read for
	// failures worth retrying only: from the retry-after headers whatever
	// the status, and from the rate-limit reset headers when RateLimited.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("%s (HTTP %d): %s", e.Class, e.Status, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Class, e.Message)
}

// AsError extracts a classified error, classifying anything else as a
// provider failure.
func AsError(err error) *Error {
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	return &Error{Class: journal.FailFailed, Message: err.Error()}
}

// ClassifyStatus maps an HTTP status to a failure class; ok is false for
// statuses worth retrying (408, 429, 5xx).
func ClassifyStatus(status int) (class journal.FailureClass, retryable bool) {
	switch {
	case status == 401:
		return journal.FailAuth, false
	case status == 403:
		return journal.FailForbidden, false
	case status == 402:
		return journal.FailCredits, false
	case status == 408 || status == 429 || status >= 500:
		return journal.FailFailed, true
	default:
		return journal.FailFatal, false
	}
}

// Provider calls one kind of model API.
type Provider interface {
	Call(ctx context.Context, req Request) (Result, error)
}

// PromptBytes is the size of what the request sends to the model: every
// text part of it. The rate limiter estimates tokens from it and quotas
// bound a call's worst case by it, so both count the same parts.
func (r *Request) PromptBytes() int64 {
	n := len(r.SystemPrompt) + len(r.Task) + len(r.OutputInstructions) + len(r.TransitionPrompt) + len(r.StageNote) + len(r.Directive)
	for _, t := range r.History {
		n += len(t.Assistant) + len(t.Feedback)
		for _, tr := range t.Tools {
			n += len(tr.Name) + len(tr.Arguments) + len(tr.Result)
		}
		for _, m := range t.Messages {
			n += len(m)
		}
	}
	for _, t := range r.Tools {
		n += len(t.Name) + len(t.Description) + len(t.InputSchema)
	}
	for _, parts := range [][]string{r.ChildOutputs, r.Messages, r.Notices} {
		for _, s := range parts {
			n += len(s)
		}
	}
	for _, c := range r.Choices {
		n += len(c.Point) + len(c.Text)
	}
	if d := r.Document; d != nil {
		n += len(d.Name) + len(d.Content)
	}
	return int64(n)
}
