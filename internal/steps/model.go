package steps

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/metrics"
	"github.com/agentrun-dev/agentrun-operator/internal/output"
	"github.com/agentrun-dev/agentrun-operator/internal/providerconfig"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/ratelimit"
	"github.com/agentrun-dev/agentrun-operator/internal/retry"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
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
	// used, so a rejected key is not retried until the Secret changes;
	// ConfigVersion the provider ConfigMap's, likewise.
	SecretVersion, ConfigVersion string
	// Check is the output the run must hand back.
	Check output.Spec
	// BreakerKey scopes the provider's circuit.
	BreakerKey string
	// OverloadFailover, when set, is how long the model may keep answering
	// that it is overloaded (providers.Error.Overloaded) before the call
	// gives up with FailOverloaded, so that its stage fails over to its
	// next model. Zero when there is no other model to go to: the call
	// then waits as long as the provider asks, as for a rate limit.
	OverloadFailover time.Duration
	// Trace is where the call's span goes, when tracing is on.
	Trace tracing.Parent
	// Next, when set, is asked after the call has answered (never after a
	// failure) what the run does next, given the call's intent and
	// completion: a Continuation names the next call, which this step then
	// journals together with the completion, in one write, and makes
	// itself, without a trip through the control loop. Nil hands the run
	// back to its reconcile.
	Next func(ctx context.Context, done []journal.Entry) *Continuation
	// Held, when set, is told each time the call is held back by a
	// provider's limit (its declared limits, or its 429/529), with when it
	// is expected to go (zero: unknown); Sent once the provider has taken
	// a held call (answered it with anything but a refusal).
	Held func(until time.Time)
	Sent func()
	// Quota is what the call reserves against its run's quotas (the
	// store's worst case, in its intent's write); nil: no quota counts
	// the run. OverQuota is told when a quota has no room for it: the
	// call is not made, and the run parks on the quota.
	Quota     *store.Charge
	OverQuota func(*store.QuotaExceededError)
	// NotMade, when set, is told when the step does not make the call
	// because journaling its intent (JournalIntent) failed. A failed write
	// may have been stored all the same (its answer lost with the
	// connection, a database frozen mid-write): whoever issues the intent
	// next must know it was never sent, and not count it as lost.
	NotMade func()
}

// Continuation is the call that follows a finished one, decided from the
// run's own journal by the same decision core its reconcile uses: a model
// call, or (Tool set) an MCP tool call that needs no gate.
type Continuation struct {
	Call ModelCall
	Tool *ToolCall
	// Journaled runs once the next call's intent is on record (the
	// decision's events, which must not precede it).
	Journaled func()
	// NotMade runs when the step will not make the call after all (its
	// intent could not be journaled, or the step was cancelled, fenced or
	// stopped first): whoever issues it next knows it was never sent, and
	// what was held for it is given back.
	NotMade func()
	// Done runs once the call is over (what was held for it is given back).
	Done func()
}

// notMade gives up a continuation the step will not follow.
func (n *Continuation) notMade() {
	if n == nil {
		return
	}
	if n.NotMade != nil {
		n.NotMade()
	}
	if n.Done != nil {
		n.Done()
	}
}

// RunModelCall calls the provider, retrying transient failures with capped
// exponential backoff and jitter, and journals the answer or the final
// classified failure together with the intent. When the answer leaves the
// run with nothing but another call to make (a model call, or a tool call
// no gate holds: Next says which), the completion and the next call's
// intent go into the journal in one write and the step makes that call
// too, and so on. A cancelled step (run
// cancelled, manager stopping) journals no outcome: the intent stays
// pending (in status, or in the journal) and whoever drives the run next
// issues it again, counting it as possibly lost.
func (rt *Runtime) RunModelCall(ctx context.Context, c ModelCall) {
	if c.JournalIntent {
		// On record before the provider sees anything: a call is never
		// made that a restarted manager could not find.
		if err := rt.record(store.WithCharges(ctx, c.Quota), c.Run, nil, c.Intent); err != nil || ctx.Err() != nil {
			if c.NotMade != nil {
				c.NotMade()
			}
			if overQuota(c, err) {
				rt.logFor(ctx, "step", c.Run, "seq", c.Intent.Seq).V(1).Info("A quota has no room for the call; it was not made", "quota", err.Error())
			} else if err != nil {
				rt.logFor(ctx, "step", c.Run, "seq", c.Intent.Seq).Error(err, "Journaling the call's intent failed; the call was not made")
			}
			rt.Breakers.Release(string(c.Run.UID)) // not made: a probe goes back
			return
		}
	}
	cur := &Continuation{Call: c}
	for {
		var next *Continuation
		if cur.Tool != nil {
			next = rt.toolCallOnce(ctx, *cur.Tool)
		} else {
			next = rt.modelCallOnce(ctx, cur.Call)
		}
		if cur.Done != nil {
			cur.Done()
		}
		if next == nil {
			return
		}
		if ctx.Err() != nil {
			next.notMade()
			return
		}
		cur = next
	}
}

// modelCallOnce makes one call and journals its outcome, with the next
// call's intent when there is one to make (returned).
func (rt *Runtime) modelCallOnce(ctx context.Context, c ModelCall) *Continuation {
	started, start := time.Now(), rt.Clock.Now()
	log := rt.logFor(ctx, "step", c.Run, "seq", c.Intent.Seq)
	result, callErr := rt.callModel(ctx, c)
	if ctx.Err() != nil {
		rt.Breakers.Release(string(c.Run.UID)) // no verdict on the provider: a probe goes back
		log.V(1).Info("Step cancelled before completion; its intent stays pending")
		return nil
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
	entries := []journal.Entry{c.Intent, done}
	var next *Continuation
	if c.Next != nil && done.Kind == journal.ModelCallCompleted {
		if next = c.Next(ctx, entries); next != nil {
			entries = append(entries, next.Intent())
		}
	}
	// A manager that dies before this write leaves the intent pending; the
	// call is issued again once, counted as lost.
	final := finalOutput(done.Response)
	err := rt.record(store.WithCharges(ctx, c.Quota, next.charge()), c.Run, final, entries...)
	if next != nil && overQuota(next.Call, err) {
		// No room for the next call: the answer (paid for) is journaled
		// alone, and the run parks on the quota before that call.
		next.notMade()
		next = nil
		err = rt.record(store.WithCharges(ctx, c.Quota), c.Run, final, entries[:2]...)
	}
	switch {
	case rt.keep(c.Run, err, final, c.Intent, done):
		log.Error(err, "The store is unavailable; the answer is kept until it is back, and the run waits on it")
	case errors.Is(err, store.ErrRefused):
		log.Error(err, "The API server refuses to journal the step's completion; the answer is not kept and the run stalls until the cause is fixed")
	case err != nil:
		log.Error(err, "Journaling the step's completion failed; the call will be issued again")
	}
	if rt.Tracer.On() {
		rt.Tracer.ModelCall(tracing.ModelCall{
			Parent: c.Trace, Intent: c.Intent, ProviderType: c.Provider.Type, Start: start, End: done.At,
			Answer: done.Response, Usage: done.Usage, Failure: done.Failure,
			ResponseModel: result.ResponseModel, FinishReason: result.FinishReason, Request: &c.Request,
		})
	}
	return followed(ctx, next, err)
}

// charge is what the continuation's model call reserves (nil for none,
// and for a tool call).
func (n *Continuation) charge() *store.Charge {
	if n == nil || n.Tool != nil {
		return nil
	}
	return n.Call.Quota
}

// overQuota reports whether err is a quota's refusal of c's intent, and
// tells c's OverQuota.
func overQuota(c ModelCall, err error) bool {
	var qe *store.QuotaExceededError
	if !errors.As(err, &qe) {
		return false
	}
	if c.OverQuota != nil {
		c.OverQuota(qe)
	}
	return true
}

// followed is the continuation a step goes on to once the write that
// journaled its intent returned err: none when the write failed (or not
// certainly) or the step was stopped, and the reconcile then takes the run
// over from what the journal holds.
func followed(ctx context.Context, next *Continuation, err error) *Continuation {
	if next == nil {
		return nil
	}
	if err != nil || ctx.Err() != nil {
		next.notMade()
		return nil
	}
	if next.Journaled != nil {
		next.Journaled()
	}
	return next
}

// Intent is the continuation's call's intent.
func (n *Continuation) Intent() journal.Entry {
	if n.Tool != nil {
		return n.Tool.Intent
	}
	return n.Call.Intent
}

// callModel makes the call, within the provider's limits, retrying what
// the provider's status says is worth retrying. A rate limit (the limits
// providers.toml declares, or the provider's 429/529) is waited out for as
// long as the provider says, however often: it is the normal case, never
// a failure, and it is not counted against the attempts. Only a model
// overloaded for longer than c.OverloadFailover is given up on.
func (rt *Runtime) callModel(ctx context.Context, c ModelCall) (providers.Result, error) {
	p, ok := rt.providerFor(c.Provider, c.Run.Namespace)
	if !ok {
		return providers.Result{}, &providers.Error{Class: journal.FailFatal, Message: fmt.Sprintf("provider type %q is not supported by this operator version", c.Provider.Type)}
	}
	timeout := rt.StepTimeout
	if c.Provider.TimeoutSeconds > 0 {
		timeout = time.Duration(c.Provider.TimeoutSeconds) * time.Second
	}
	limit := ratelimit.Request{
		Key: LimitKey(c.Provider, c.Run.Namespace, c.Request.Model, c.Request.APIKey), Limits: c.Provider.LimitsFor(c.Request.Model),
		Namespace: c.Run.Namespace, Tokens: EstimateTokens(c.Request), Provider: c.Provider.Name, Model: c.Request.Model,
		UnderWay: c.Intent.Seq > 0, // the run has journaled before
	}
	held := false
	onWait := func(until time.Time) {
		held = true
		if c.Held != nil {
			c.Held(until)
		}
	}
	var result providers.Result
	over := overload{bound: c.OverloadFailover}
	b := retry.Backoff{Attempts: 3, Base: 500 * time.Millisecond, Cap: 30 * time.Second, Jitter: 0.5}
	_, err := retry.Do(ctx, b, func(int) (bool, error) {
		for refused := 0; ; refused++ {
			permit, err := rt.Limiter.Acquire(ctx, limit, onWait)
			if err != nil {
				return false, err
			}
			callCtx, cancel := context.WithTimeout(ctx, timeout)
			result, err = p.Call(callCtx, c.Request)
			cancel()
			pe := (*providers.Error)(nil)
			if err != nil {
				pe = providers.AsError(err)
			}
			if pe != nil && pe.RateLimited && ctx.Err() == nil {
				metrics.RateLimitRefusals.WithLabelValues(c.Provider.Name).Inc()
				now := rt.Clock.Now()
				until, giveUp := over.refused(pe, now, now.Add(rateLimitWait(pe.RetryAfter, refused)))
				paused := rt.Limiter.Refused(permit, limit.Key, until)
				if giveUp {
					return false, over.failure(pe, now)
				}
				onWait(until)
				if !paused && !sleepUntil(ctx, rt.Clock, until) {
					return false, ctx.Err()
				}
				continue
			}
			if held {
				// The provider took the call: the hold is over.
				held = false
				if c.Sent != nil {
					c.Sent()
				}
			}
			if err == nil {
				permit.Done(result.Usage.Prompt + result.Usage.Completion + result.Usage.Cached + result.Usage.CacheWrite)
				return false, nil
			}
			permit.Done(0)
			_, retryable := providers.ClassifyStatus(pe.Status)
			return retryable && pe.Status != 0, err
		}
	})
	return result, err
}

// overload times how long a call's model has kept answering that it is
// overloaded, to give the call up once that has lasted its bound.
type overload struct {
	// bound is ModelCall.OverloadFailover (0: never given up).
	bound time.Duration
	// since is the first of the overload refusals in a row.
	since time.Time
}

// refused takes a refusal at now after which the provider (or the
// backoff) would have the call wait until then. It returns when to try
// again, or giveUp once the model has been overloaded for the bound, or
// the provider asks to wait past it. A wait of the operator's own choosing
// is cut to the bound, so the last try is made there. A rate limit (429)
// is no overload and restarts the count.
func (o *overload) refused(pe *providers.Error, now, until time.Time) (next time.Time, giveUp bool) {
	if !pe.Overloaded || o.bound <= 0 {
		o.since = time.Time{}
		return until, false
	}
	if o.since.IsZero() {
		o.since = now
	}
	deadline := o.since.Add(o.bound)
	switch {
	case !now.Before(deadline), pe.RetryAfter > 0 && until.After(deadline):
		return until, true
	case until.After(deadline):
		return deadline, false
	}
	return until, false
}

// failure is the failure a call given up on for overload is journaled
// with: its stage fails over to its next model.
func (o *overload) failure(pe *providers.Error, now time.Time) *providers.Error {
	return &providers.Error{Class: journal.FailOverloaded, Status: pe.Status, Message: fmt.Sprintf(
		"overloaded for %s (overload_failover_seconds is %d): %s", now.Sub(o.since).Round(time.Second), int(o.bound/time.Second), pe.Message)}
}

// sleepUntil waits until t as clk tells it; false when ctx ended first.
func sleepUntil(ctx context.Context, clk clock.PassiveClock, t time.Time) bool {
	d := t.Sub(clk.Now())
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// rateLimitWait is how long a refused call waits: what the provider said,
// else a backoff doubling from 1s to a minute with its n-th refusal.
func rateLimitWait(said time.Duration, n int) time.Duration {
	if said > 0 {
		return said
	}
	d := time.Second << min(n, 6)
	return min(d, time.Minute)
}

// LimitKey names the limit bucket of a call: one provider account (its
// type, base URL and a fingerprint of its key, so namespaces sharing a key
// share its limits) and model. The scripted provider has no account: each
// namespace's is its own.
func LimitKey(p *providerconfig.Provider, namespace, model string, key providers.Secret) string {
	if p.Type == providerconfig.TypeScripted {
		return "scripted " + namespace + "/" + p.Name + " " + model
	}
	h := sha256.Sum256([]byte(key.Reveal()))
	return p.Type + " " + p.BaseURL + " " + hex.EncodeToString(h[:8]) + " " + model
}

// EstimateTokens guesses a call's tokens before it is made (about four
// characters a token, plus room for the answer); the limiter corrects it
// from the usage the provider reports.
func EstimateTokens(req providers.Request) int64 {
	return req.PromptBytes()/4 + expectedAnswerTokens
}

// expectedAnswerTokens is what an answer is assumed to cost before it is
// known.
const expectedAnswerTokens = 256

// failed records a classified failure; every class but Fatal,
// EgressRefused and Overloaded counts against the provider's circuit (a
// refusal is one namespace's policy, not the provider's health, and must
// not open the circuit for namespaces the policy allows; an overload is one
// model's, and the provider's other models may be the failover).
func (rt *Runtime) failed(done *journal.Entry, c ModelCall, err error) {
	pe := providers.AsError(err)
	if pe.Class != journal.FailFatal && pe.Class != journal.FailEgressRefused && pe.Class != journal.FailOverloaded {
		rt.Breakers.Failure(c.BreakerKey, string(pe.Class), rt.Clock.Now())
	} else {
		rt.Breakers.Release(string(c.Run.UID)) // no verdict on the provider's health
	}
	done.Kind = journal.ModelCallFailed
	done.Failure = &journal.Failure{
		Class: pe.Class, Status: pe.Status, SecretVersion: c.SecretVersion, ConfigVersion: c.ConfigVersion,
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
	if n := len(r.Output); n > output.MaxBytes {
		// Checked whole above; kept as it is stored, with its length, so
		// the entry fits a chunk (a larger one could never be journaled,
		// and the run would wait on it for ever).
		r.Output, _ = output.Stored(r.Output)
		r.OutputBytes = n
	}
	for i, call := range r.Calls {
		if len(call.Arguments) > MaxToolArguments {
			// The call is kept, its arguments replaced by a note the tool
			// will refuse.
			r.Calls[i].Arguments = droppedArguments(len(call.Arguments))
		}
	}
	for i, m := range r.Moves {
		if len(m.Arguments) > MaxToolArguments {
			// Already acted on (a large output is kept in Output); what
			// the later calls show of the call is the note.
			r.Moves[i].Arguments = droppedArguments(len(m.Arguments))
		}
	}
	fitJournal(r)
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

// droppedArguments stands for tool-call arguments too large to journal.
func droppedArguments(n int) string {
	return fmt.Sprintf(`{"_dropped":"the arguments were %d bytes, over the %d-byte limit"}`, n, MaxToolArguments)
}

// MaxAnswerEntry bounds a model answer as journaled (its JSON). The caps
// above bound each part, but not how many tool calls an answer makes, nor
// JSON's escaping (a control character takes six bytes): an answer over
// this could not be stored beside the final output in one ConfigMap (1
// MiB), and a completion that can never be journaled would have the call
// made again and again.
const MaxAnswerEntry = 640 << 10

// fitJournal replaces an answer too large to journal by a note saying so,
// which the model reads on its next turn: nothing it asked for (tool
// calls, a transition, the completion) is acted on.
func fitJournal(r *journal.Response) {
	b, err := json.Marshal(r)
	if err == nil && len(b) <= MaxAnswerEntry {
		return
	}
	*r = journal.Response{
		Text:      fmt.Sprintf("[the answer was dropped: %d bytes as journaled, over the %d-byte limit; answer again, shorter or with fewer tool calls]", len(b), MaxAnswerEntry),
		ToolCalls: r.ToolCalls,
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
