package steps

import (
	"context"
	"fmt"
	"time"

	"k8s.io/utils/ptr"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/metrics"
	"github.com/agentrun-dev/agentrun-operator/internal/output"
	"github.com/agentrun-dev/agentrun-operator/internal/providerconfig"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/retry"
	"github.com/agentrun-dev/agentrun-operator/internal/tracing"
)

// Caps on what one journal entry keeps of a model answer, so an entry
// always fits a journal chunk (a ConfigMap holds 1 MiB).
const (
	// MaxToolArguments caps one tool call's arguments as journaled.
	MaxToolArguments = 64 << 10
	// MaxAnswerText caps the text of a model answer as journaled.
	MaxAnswerText = 256 << 10
)

// ModelCall is one model call to make.
type ModelCall struct {
	Run *arv1.AgentRun
	// Agent names the blueprint's agent, for metrics.
	Agent string
	// Intent is the call's intent, recorded in status before the call; it
	// is journaled with the outcome.
	Intent journal.Entry
	// JournalIntent: status does not record the intent (its write waits),
	// so the step journals it before the call is made.
	JournalIntent bool
	Request       providers.Request
	Provider      *providerconfig.Provider
	// SecretVersion is the credentials Secret's resourceVersion the call
	// used, so a rejected key is not retried until the Secret changes.
	SecretVersion string
	// Check is the output the run must hand back.
	Check output.Spec
	// BreakerKey scopes the provider's circuit.
	BreakerKey string
	// Trace is where the call's span goes, when tracing is on.
	Trace tracing.Parent
}

// RunModelCall calls the provider, retrying transient failures with capped
// exponential backoff and jitter, and journals the answer or the final
// classified failure together with the intent. A cancelled step (run
// cancelled, manager stopping) journals no outcome: the intent stays
// pending (in status, or in the journal when the step journaled it first)
// and whoever drives the run next issues it again, counting it as possibly
// lost.
func (rt *Runtime) RunModelCall(ctx context.Context, c ModelCall) {
	started, start := time.Now(), rt.Clock.Now()
	log := logFor(rt.Log.WithName("step"), c.Run, "seq", c.Intent.Seq)
	if c.JournalIntent {
		// On record before the provider sees anything: a call is never
		// made that a restarted manager could not find.
		if err := rt.record(ctx, c.Run, nil, c.Intent); err != nil || ctx.Err() != nil {
			if err != nil {
				log.Error(err, "Journaling the call's intent failed; the call was not made")
			}
			return
		}
	}
	result, callErr := rt.callModel(ctx, c)
	if ctx.Err() != nil {
		log.V(1).Info("Step cancelled before completion; its intent stays pending")
		return
	}
	done := journal.Entry{Seq: c.Intent.Seq + 1, Call: c.Intent.Seq, At: rt.Clock.Now(), Provider: c.Intent.Provider, Model: c.Intent.Model,
		Stage: c.Intent.Stage, Iteration: c.Intent.Iteration}
	if callErr != nil {
		rt.failed(&done, c, callErr)
	} else {
		rt.answered(&done, c, result)
	}
	outcome, u := "ok", journal.Usage{}
	if done.Failure != nil {
		outcome = string(done.Failure.Class)
	}
	if done.Usage != nil {
		u = *done.Usage
	}
	metrics.RecordCall(c.Run.Namespace, c.Agent, c.Provider.Name, outcome, time.Since(started), u.Prompt, u.Completion, u.Cached, u.CacheWrite, done.CostNanoUSD)
	// A manager that dies before this write leaves the intent pending in
	// status; the call is issued again once, counted as lost.
	if err := rt.record(ctx, c.Run, finalOutput(done.Response), c.Intent, done); err != nil {
		log.Error(err, "Journaling the step's completion failed; the call will be issued again")
	}
	if rt.Tracer.On() {
		rt.Tracer.ModelCall(tracing.ModelCall{
			Parent: c.Trace, Intent: c.Intent, ProviderType: c.Provider.Type, Start: start, End: done.At,
			Answer: done.Response, Usage: done.Usage, Failure: done.Failure,
			ResponseModel: result.ResponseModel, FinishReason: result.FinishReason, Request: &c.Request,
		})
	}
}

// callModel makes the call, retrying what the provider's status says is
// worth retrying.
func (rt *Runtime) callModel(ctx context.Context, c ModelCall) (providers.Result, error) {
	p, ok := rt.providerFor(c.Provider, c.Run.Namespace)
	if !ok {
		return providers.Result{}, &providers.Error{Class: journal.FailFatal, Message: fmt.Sprintf("provider type %q is not supported by this operator version", c.Provider.Type)}
	}
	timeout := rt.StepTimeout
	if c.Provider.TimeoutSeconds > 0 {
		timeout = time.Duration(c.Provider.TimeoutSeconds) * time.Second
	}
	var result providers.Result
	b := retry.Backoff{Attempts: 3, Base: 500 * time.Millisecond, Cap: 30 * time.Second, Jitter: 0.5}
	_, err := retry.Do(ctx, b, func(int) (bool, error) {
		callCtx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var err error
		result, err = p.Call(callCtx, c.Request)
		if err == nil {
			return false, nil
		}
		pe := providers.AsError(err)
		_, retryable := providers.ClassifyStatus(pe.Status)
		return retryable && pe.Status != 0, err
	})
	return result, err
}

// failed records a classified failure; every class but Fatal and
// EgressRefused counts against the provider's circuit (a refusal is one
// namespace's policy, not the provider's health, and must not open the
// circuit for namespaces the policy allows).
func (rt *Runtime) failed(done *journal.Entry, c ModelCall, err error) {
	pe := providers.AsError(err)
	if pe.Class != journal.FailFatal && pe.Class != journal.FailEgressRefused {
		rt.Breakers.Failure(c.BreakerKey, string(pe.Class), rt.Clock.Now())
	}
	done.Kind = journal.ModelCallFailed
	done.Failure = &journal.Failure{
		Class: pe.Class, Status: pe.Status, SecretVersion: c.SecretVersion,
		Message: providers.Redact(pe.Message, c.Request.APIKey.Reveal()),
	}
}

// answered records the model's answer: refused output is told to the
// model next turn, oversized parts are cut to fit the journal, and the
// call is priced (the provider's figure, else the rate card).
func (rt *Runtime) answered(done *journal.Entry, c ModelCall, result providers.Result) {
	rt.Breakers.Success(c.BreakerKey)
	done.Kind = journal.ModelCallCompleted
	r := &result.Response
	if o := r.Output; o != "" {
		if why := output.Check(c.Check, o); why != "" {
			r.Output, r.Complete, r.OutputRejected = "", false, why
		}
	}
	if len(r.Text) > MaxAnswerText {
		r.Text = clip(r.Text, MaxAnswerText)
	}
	for i, call := range r.Calls {
		if len(call.Arguments) > MaxToolArguments {
			// The call is kept, its arguments replaced by a note the tool
			// will refuse.
			r.Calls[i].Arguments = fmt.Sprintf(`{"_dropped":"the arguments were %d bytes, over the %d-byte limit"}`, len(call.Arguments), MaxToolArguments)
		}
	}
	done.Response, done.Usage = r, &result.Usage
	if result.CostNanoUSD != nil {
		done.CostNanoUSD, done.CostExact = result.CostNanoUSD, true
		return
	}
	u := result.Usage
	if cost, priced := c.Provider.Price(c.Request.Model, providerconfig.Usage{Prompt: u.Prompt, Completion: u.Completion, Cached: u.Cached, CacheWrite: u.CacheWrite}); priced {
		done.CostNanoUSD = ptr.To(int64(cost))
	}
}

// finalOutput is the output an answer submits with the run's completion,
// as it is stored; nil when it submits none.
func finalOutput(r *journal.Response) *string {
	if r == nil || !r.Complete || r.Output == "" {
		return nil
	}
	text, _ := output.Stored(r.Output)
	return &text
}

// clip bounds text to n bytes, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
