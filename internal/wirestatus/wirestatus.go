// Package wirestatus renders an AgentRun into the stable, self-describing JSON
// shapes of seed 002 (Salvor's wire status): a status object
// {"state": "<snake_case>", ...}, a pending-call object (or null), and the
// run-state object that combines them with usage. It is the one place those
// shapes are fixed, so every surface (the kubectl plugin, an HTTP API, a
// webhook) returns a run's status the same way.
//
// Everything here is a pure function of the AgentRun and, for the sleeping
// state's overdue check only, the caller's clock. Nothing is fetched.
package wirestatus

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// State tokens: the values of a status object's "state" key.
const (
	StateNotStarted          = "not_started"
	StateRunning             = "running"
	StateAwaitingModel       = "awaiting_model"
	StateAwaitingTool        = "awaiting_tool"
	StateNeedsReconciliation = "needs_reconciliation"
	StateSuspended           = "suspended"
	StateSleeping            = "sleeping"
	StateBudgetExceeded      = "budget_exceeded"
	StateCompleted           = "completed"
	StateFailed              = "failed"
	StateAbandoned           = "abandoned"
)

// SuspensionKindSignal is the "kind" a suspended status carries when the run
// waits on an external system rather than a person. A person's gate carries
// no "kind" key at all, so a client that has never heard of the
// discriminator reads every gate as before.
const SuspensionKindSignal = "signal"

// ReasonPaused is the suspended reason of a run paused by spec.paused.
const ReasonPaused = "paused"

// ReasonCancelled is the abandoned reason of a cancelled run.
const ReasonCancelled = "cancelled"

// Status is the status object of run at now. The mapping, checked in this
// order:
//
//   - phase Cancelled: {"state":"abandoned","reason":"cancelled"}, plus
//     "unresolved_write":{"seq":n,"tool":".."} when the run was cancelled with
//     a write tool call whose outcome was never recorded (a pending write
//     call, or a NeedsReconciliation wait): the evidence that cancelling did
//     not settle it.
//   - phase Complete or CompleteInteractive: {"state":"completed","output":o},
//     o being the final-output descriptor as an object (see OutputDescriptor)
//     or null when the run handed nothing back. The output bytes live in a
//     ConfigMap; the descriptor names it.
//   - phase Error: {"state":"failed","error":status.error}.
//   - phase Paused: {"state":"suspended","reason":"paused","input_schema":{}}
//     (resumed by setting spec.paused false, not by an input; no "kind": a
//     person paused it and a person resumes it).
//   - otherwise, while status.waitingOn is set, by its reason:
//   - NeedsReconciliation: {"state":"needs_reconciliation"} and nothing more;
//     the dangling write is the pending object.
//   - Sleeping: {"state":"sleeping","wake_at":"<RFC 3339, UTC>"}, plus
//     "overdue":true and "overdue_seconds":n (whole seconds since wake_at)
//     once now is past wake_at; before the deadline neither key appears.
//   - BudgetExceeded: {"state":"budget_exceeded","budget":{"kind":k,
//     "limit":n},"observed":n}, k in snake_case (steps, tokens, cost_usd,
//     wall_time, tool_calls) and the decimal strings as JSON numbers (a wall
//     time written as a Go duration becomes seconds).
//   - Signal: {"state":"suspended","reason":<signal>,"input_schema":s,
//     "kind":"signal"}, s being waitingOn.inputSchema, else {}.
//   - FanOutWorkers, Children: {"state":"running"}: the run is healthy and
//     working through its workers or children.
//   - every wait on a person (ToolApproval, UserPrompt, TaintGate,
//     InteractionPoint, NeedsSetup, and any reason this package does not
//     know): {"state":"suspended","reason":r,"input_schema":s} with no "kind"
//     key. r is the remedy (NeedsSetup) or the question (the others) when
//     set, else waitingOn.summary, else the reason's name. s is the
//     question's own schema (waitingOn.inputSchema, an agent's question)
//     when set, else InputSchema(reason).
//   - phase WaitingInput without waitingOn (a record the controller has not
//     explained yet): {"state":"suspended","reason":"WaitingInput",
//     "input_schema":{}}.
//   - phase Queued or empty (the controller has not taken the run up) or
//     Starting with no call made or pending: {"state":"not_started"}.
//   - phase Starting or Running with a pending call: {"state":"awaiting_model"}
//     or {"state":"awaiting_tool"} by status.pendingCall.kind.
//   - phase Starting or Running otherwise: {"state":"running"}.
func Status(run *arv1.AgentRun, now time.Time) Object {
	st := &run.Status
	switch st.Phase {
	case arv1.PhaseCancelled:
		o := Object{{"state", StateAbandoned}, {"reason", ReasonCancelled}}
		if w := unresolvedWrite(st); w != nil {
			o = append(o, Field{"unresolved_write", w})
		}
		return o
	case arv1.PhaseComplete, arv1.PhaseCompleteInteractive:
		return Object{{"state", StateCompleted}, {"output", OutputDescriptor(st.FinalOutput)}}
	case arv1.PhaseError:
		return Object{{"state", StateFailed}, {"error", st.Error}}
	case arv1.PhasePaused:
		return suspended(ReasonPaused, Object{})
	}
	if w := st.WaitingOn; w != nil {
		return waitStatus(w, now)
	}
	switch st.Phase {
	case arv1.PhaseWaitingInput:
		return suspended(string(arv1.PhaseWaitingInput), Object{})
	case "", arv1.PhaseQueued:
		return Object{{"state", StateNotStarted}}
	}
	if pc := st.PendingCall; pc != nil {
		switch pc.Kind {
		case arv1.CallKindModel:
			return Object{{"state", StateAwaitingModel}}
		case arv1.CallKindTool:
			return Object{{"state", StateAwaitingTool}}
		}
	}
	if st.Phase == arv1.PhaseStarting && st.Usage.ModelCalls == 0 && st.Usage.ToolCalls == 0 {
		return Object{{"state", StateNotStarted}}
	}
	return Object{{"state", StateRunning}}
}

func waitStatus(w *arv1.WaitingOn, now time.Time) Object {
	switch w.Reason {
	case arv1.WaitNeedsReconciliation:
		return Object{{"state", StateNeedsReconciliation}}
	case arv1.WaitSleeping:
		o := Object{{"state", StateSleeping}}
		if w.WakeAt == nil {
			return append(o, Field{"wake_at", nil})
		}
		o = append(o, Field{"wake_at", w.WakeAt.UTC().Format(time.RFC3339)})
		if now.After(w.WakeAt.Time) {
			o = append(o, Field{"overdue", true}, Field{"overdue_seconds", int64(now.Sub(w.WakeAt.Time) / time.Second)})
		}
		return o
	case arv1.WaitBudgetExceeded:
		budget := Object{{"kind", nil}, {"limit", nil}}
		if b := w.Budget; b != nil {
			budget = Object{{"kind", BudgetKind(b.Kind)}, {"limit", budgetNumber(b.Kind, b.Limit)}}
		}
		var kind arv1.BudgetKind
		if w.Budget != nil {
			kind = w.Budget.Kind
		}
		return Object{{"state", StateBudgetExceeded}, {"budget", budget}, {"observed", budgetNumber(kind, w.Observed)}}
	case arv1.WaitSignal:
		o := Object{{"state", StateSuspended}, {"reason", w.Signal}, {"input_schema", questionSchema(w, Object{})}}
		return append(o, Field{"kind", SuspensionKindSignal})
	case arv1.WaitFanOutWorkers, arv1.WaitChildren, arv1.WaitRateLimited:
		return Object{{"state", StateRunning}}
	}
	return Object{{"state", StateSuspended}, {"reason", personReason(w)}, {"input_schema", questionSchema(w, InputSchema(w.Reason))}}
}

// questionSchema is the question's own schema (waitingOn.inputSchema) when
// it has one that parses, else def.
func questionSchema(w *arv1.WaitingOn, def Object) any {
	if w.InputSchema != "" && json.Valid([]byte(w.InputSchema)) {
		return json.RawMessage(w.InputSchema)
	}
	return def
}

func suspended(reason string, schema Object) Object {
	return Object{{"state", StateSuspended}, {"reason", reason}, {"input_schema", schema}}
}

// personReason is what a person is told: the remedy or the question when
// there is one, else the listing's summary, else the reason's name.
func personReason(w *arv1.WaitingOn) string {
	switch {
	case w.Remedy != "":
		return w.Remedy
	case w.Question != "":
		return w.Question
	case w.Summary != "":
		return w.Summary
	}
	return string(w.Reason)
}

// InputSchema is the JSON Schema of the input that clears a wait on a
// person, as the suspended status's "input_schema":
//
//   - ToolApproval, TaintGate, InteractionPoint: {"type":"object",
//     "properties":{"approved":{"type":"boolean"}},"required":["approved"]}
//     (approve or deny).
//   - UserPrompt: {"type":"object","properties":{"answer":{"type":"string"}},
//     "required":["answer"]}.
//   - NeedsSetup and anything else: {} (nothing is answered: the cluster is
//     fixed and the run goes on by itself).
//
// These schemas describe the decision in the seeds' terms; in Kubernetes the
// answer is an AgentRunAnswer (decision, text or input), checked by the run
// against the question's own choices and input_schema.
func InputSchema(reason arv1.WaitReason) Object {
	switch reason {
	case arv1.WaitToolApproval, arv1.WaitTaintGate, arv1.WaitInteractionPoint:
		return Object{
			{"type", "object"},
			{"properties", Object{{"approved", Object{{"type", "boolean"}}}}},
			{"required", []string{"approved"}},
		}
	case arv1.WaitUserPrompt:
		return Object{
			{"type", "object"},
			{"properties", Object{{"answer", Object{{"type", "string"}}}}},
			{"required", []string{"answer"}},
		}
	}
	return Object{}
}

// unresolvedWrite is {"seq","tool"} of a write call whose outcome was never
// recorded, or nil.
func unresolvedWrite(st *arv1.AgentRunStatus) Object {
	if pc := st.PendingCall; pc != nil && pc.Kind == arv1.CallKindTool && pc.Effect == arv1.EffectWrite {
		return Object{{"seq", pc.Seq}, {"tool", pc.Tool}}
	}
	if w := st.WaitingOn; w != nil && w.Reason == arv1.WaitNeedsReconciliation && w.Seq != nil {
		return Object{{"seq", *w.Seq}, {"tool", w.Tool}}
	}
	return nil
}

// BudgetKind is the snake_case wire name of a budget kind: steps, tokens,
// cost_usd, wall_time, tool_calls. An unknown kind is lower-cased.
func BudgetKind(k arv1.BudgetKind) string {
	switch k {
	case arv1.BudgetSteps:
		return "steps"
	case arv1.BudgetTokens:
		return "tokens"
	case arv1.BudgetCostUSD:
		return "cost_usd"
	case arv1.BudgetWallTime:
		return "wall_time"
	case arv1.BudgetToolCalls:
		return "tool_calls"
	}
	return strings.ToLower(string(k))
}

// budgetNumber is a budget figure as a JSON number. A wall time written as
// a Go duration ("30m") becomes seconds. A figure that is neither is kept
// as its string rather than guessed at; an empty one is null.
func budgetNumber(kind arv1.BudgetKind, s string) any {
	if n, ok := Number(s); ok {
		return n
	}
	if kind == arv1.BudgetWallTime {
		if d, err := time.ParseDuration(s); err == nil {
			return json.Number(strconv.FormatFloat(d.Seconds(), 'f', -1, 64))
		}
	}
	if s == "" {
		return nil
	}
	return s
}

// Number returns the decimal string s as a json.Number, which marshals as
// the exact digits given ("2.50" stays 2.50), and false when s is not a
// JSON number.
func Number(s string) (json.Number, bool) {
	if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) || !json.Valid([]byte(s)) {
		return "", false
	}
	return json.Number(s), true
}

// OutputDescriptor is the final-output descriptor as a wire object, or nil
// (JSON null) when there is none. Every key is always present:
// {"format","stage","submitted_at" (RFC 3339 or null),"bytes","truncated",
// "object_name","artifacts" ([] when none)}.
func OutputDescriptor(d *arv1.FinalOutputDescriptor) any {
	if d == nil {
		return nil
	}
	var submitted any
	if d.SubmittedAt != nil {
		submitted = d.SubmittedAt.UTC().Format(time.RFC3339)
	}
	artifacts := d.Artifacts
	if artifacts == nil {
		artifacts = []string{}
	}
	return Object{
		{"format", string(d.Format)},
		{"stage", d.Stage},
		{"submitted_at", submitted},
		{"bytes", d.Bytes},
		{"truncated", d.Truncated},
		{"object_name", d.ObjectName},
		{"artifacts", artifacts},
	}
}

// Pending is the pending-call object, or nil (JSON null) when no call intent
// is dangling:
//
//   - {"kind":"model","seq":n,"request_hash":".."}
//   - {"kind":"tool","seq":n,"tool":"..","input":<json>,"effect":
//     "read|idempotent|write","idempotency_key":".."|null}
//
// A tool call's input is the recorded JSON, parsed; input that is not valid
// JSON is given as a string rather than dropped, and an empty input is null.
func Pending(run *arv1.AgentRun) any {
	pc := run.Status.PendingCall
	if pc == nil {
		return nil
	}
	if pc.Kind == arv1.CallKindModel {
		return Object{{"kind", string(pc.Kind)}, {"seq", pc.Seq}, {"request_hash", pc.RequestHash}}
	}
	var input any
	switch {
	case pc.Input == "":
	case json.Valid([]byte(pc.Input)):
		input = json.RawMessage(pc.Input)
	default:
		input = pc.Input
	}
	var key any
	if pc.IdempotencyKey != "" {
		key = pc.IdempotencyKey
	}
	return Object{
		{"kind", string(pc.Kind)},
		{"seq", pc.Seq},
		{"tool", pc.Tool},
		{"input", input},
		{"effect", string(pc.Effect)},
		{"idempotency_key", key},
	}
}

// Usage is a usage record as a wire object:
// {"prompt_tokens","completion_tokens","cached_tokens","cache_write_tokens",
// "model_calls","tool_calls","cost_usd","cost_priced_usd","unpriced_calls",
// "cost_is_exact"}. cost_usd is a JSON number, or null when it is "unknown"
// (unknown is never free) or unset with unpriced calls; unset with every
// call priced is 0. cost_priced_usd is a number, 0 when unset.
func Usage(u arv1.Usage) Object {
	var cost any
	switch n, ok := Number(u.CostUSD); {
	case ok:
		cost = n
	case u.CostUSD == "" && u.UnpricedCalls == 0:
		cost = json.Number("0")
	}
	var priced any = json.Number("0")
	if n, ok := Number(u.CostPricedUSD); ok {
		priced = n
	}
	return Object{
		{"prompt_tokens", u.PromptTokens},
		{"completion_tokens", u.CompletionTokens},
		{"cached_tokens", u.CachedTokens},
		{"cache_write_tokens", u.CacheWriteTokens},
		{"model_calls", u.ModelCalls},
		{"tool_calls", u.ToolCalls},
		{"cost_usd", cost},
		{"cost_priced_usd", priced},
		{"unpriced_calls", u.UnpricedCalls},
		{"cost_is_exact", u.CostIsExact},
	}
}

// NextSeq is the journal position the run's next entry takes, as far as the
// AgentRun itself records it: the pending call's seq + 1 while a call is
// pending (an intent with no completion is always the journal's last
// entry), else unknown (false), because the object does not carry the
// journal head.
func NextSeq(run *arv1.AgentRun) (int64, bool) {
	if pc := run.Status.PendingCall; pc != nil {
		return pc.Seq + 1, true
	}
	return 0, false
}

// RunState is the full run-state object at now:
// {"status":Status,"usage":Usage(status.usage),"next_seq":n|null,
// "pending":Pending}. next_seq is NextSeq, null when unknown. usage is the
// run's own, not its tree's.
func RunState(run *arv1.AgentRun, now time.Time) Object {
	var next any
	if n, ok := NextSeq(run); ok {
		next = n
	}
	return Object{
		{"status", Status(run, now)},
		{"usage", Usage(run.Status.Usage)},
		{"next_seq", next},
		{"pending", Pending(run)},
	}
}
