package runstate

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/builtin"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// Tool-call actions.
const (
	// ActToolDecide: journal a gate's decision on the next tool call
	// (Action.Decision).
	ActToolDecide ActionKind = "ToolDecide"
	// ActToolCall: issue the next tool call (Reissue: its intent is
	// journaled already and it is safe to run again).
	ActToolCall ActionKind = "ToolCall"
	// ActToolComplete: journal a result nobody had to call a server for: an
	// answered question, a delivered signal, a resolved dangling write
	// (Action.Completion).
	ActToolComplete ActionKind = "ToolComplete"
	// ActToolRetry: a person says a dangling write did not happen; journal
	// it so the write is issued again.
	ActToolRetry ActionKind = "ToolRetry"
	// ActAbandon: a person abandons the run over a dangling write.
	ActAbandon ActionKind = "Abandon"
	// ActAsk: journal that a question (Action.Ask, its point) is shown to a
	// person, then wait on it; its expiry counts from then.
	ActAsk ActionKind = "Ask"
	// ActToolPolicy: journal the tool policies' decision on the next tool
	// call (Action.Policy) before anything else happens to it.
	ActToolPolicy ActionKind = "ToolPolicy"
)

// PolicyPointSuffix ends the point of the question a tool policy's
// RequireApproval asks, apart from the blueprint's approval question.
const PolicyPointSuffix = "-policy"

// Answer decisions beyond approve and deny, for a dangling write.
const (
	DecisionDone    = "Done"
	DecisionRetry   = "Retry"
	DecisionAbandon = "Abandon"
)

// ToolFact is what the controller found out about the next tool call.
type ToolFact struct {
	// Known: a built-in tool, or one an MCP server of the blueprint offers.
	Known bool
	// Effect is read, idempotent or write (write when unknown).
	Effect string
	// Server is the MCP server offering it (empty for built-in tools).
	Server string
	// Setup is why the tool's server cannot be used now, if it cannot.
	Setup        *SetupBlock
	SetupRetryAt *time.Time
	// Pending: the server is being listed, so whether it offers the tool
	// (and with what effect) is not known yet.
	Pending bool
	// InputSchema is the tool's JSON Schema for its arguments, as its
	// server lists it ("" when it gives none); edited arguments must
	// satisfy it.
	InputSchema string
}

// ToolDecision is a gate's decision to journal.
type ToolDecision struct {
	Gate     string
	Approved bool
	Auto     bool
	Expired  bool
	By       string
	Answer   string
	// Reason is the person's reason: for a denial, told to the model.
	Reason string
	// Args are the arguments a person approved in place of the model's
	// (compact JSON; "" when the model's stand).
	Args string
}

// ToolCompletion is a tool result to journal without calling a server.
type ToolCompletion struct {
	Result  string
	IsError bool
	By      string
	Answer  string
}

// AskArgs are ask_user's arguments.
type AskArgs struct {
	Question string `json:"question"`
	// Style is free_text (default), choice or confirm.
	Style   string   `json:"style,omitempty"`
	Options []string `json:"options,omitempty"`
	// InputSchema is a JSON Schema the answer must satisfy.
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// Ask styles.
const (
	StyleFreeText = "free_text"
	StyleChoice   = "choice"
	StyleConfirm  = "confirm"
)

// ReviewArgs are present_for_review's arguments.
type ReviewArgs struct {
	Summary string `json:"summary,omitempty"`
	Content string `json:"content"`
}

// SignalArgs are wait_for_signal's arguments.
type SignalArgs struct {
	Reason      string          `json:"reason"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// decideTool settles the next tool call of the model's last answer, in the
// seeds' order: a dangling intent first, then built-in tools, then the
// fail-closed checks (unknown, deny), the taint gate, the approval gate, and
// finally the call. ok is false when no tool call is due.
func decideTool(f Facts) (Action, bool) {
	st := f.State
	h := st.HeadCall()
	if h == nil {
		return Action{}, false
	}
	point := st.CallPoint()
	if in := h.Intent; in != nil {
		return decideIntent(f, in, point), true
	}
	if stage, _, ok := f.Blueprint.Stage(st.Stage); ok && len(stage.AvailableTools) > 0 && !slices.Contains(stage.AvailableTools, h.Name) {
		// What the model is offered is enforced, not only advertised.
		return decided(journal.GateApproval, false, true, false, fmt.Sprintf("policy: %s is not in stage %q's available_tools", h.Name, st.Stage), ""), true
	}
	if stage, _, ok := f.Blueprint.Stage(st.Stage); ok && stage.HideBlockingTools && builtin.Blocking(h.Name) {
		return decided(journal.GateApproval, false, true, false, fmt.Sprintf("policy: stage %q sets allow_blocking_tools = false, and %s waits on a person", st.Stage, h.Name), ""), true
	}
	t := f.Tool
	effect := blueprint.EffectWrite
	if t != nil {
		effect = t.Effect
	}
	perm := f.Blueprint.Permission(st.Stage, h.Name, effect)
	if perm == blueprint.PermDeny {
		// Holds under yolo and every profile, built-in tools included.
		return decided(journal.GateApproval, false, true, false, "policy: permission deny", ""), true
	}
	if builtin.IsRunTool(h.Name) {
		if a, ok := policyStep(f, h, point); ok {
			return a, true
		}
	}
	if a, ok := decideBuiltin(f, h, point); ok {
		return a, true
	}
	if t != nil && t.Pending {
		return Action{Kind: ActWaitCatalog}, true
	}
	if t == nil || !t.Known {
		return decided(journal.GateApproval, false, true, false, "policy: unknown tool (tools fail closed)", ""), true
	}
	if t.Setup != nil {
		// Before any gate: nobody should approve a call that cannot be made,
		// and the effect is only known once the server can be listed.
		return Action{Kind: ActPark, Markers: Markers{Setup: t.Setup}, RetryAt: t.SetupRetryAt}, true
	}
	if a, ok := policyStep(f, h, point); ok {
		// Before the taint and approval gates: neither a profile nor
		// spec.yolo may pass a call a policy holds or denies.
		return a, true
	}
	if t.Effect != blueprint.EffectRead && st.Tainted && !h.TaintCleared {
		// Idempotent calls change the world too; only reads pass untouched.
		return taintGate(f, h, t, point), true
	}
	if perm == blueprint.PermAsk && !h.Approved {
		return approvalGate(f, h, t, point), true
	}
	return Action{Kind: ActToolCall}, true
}

// decideIntent settles a call whose intent is journalled but not its
// result: a read or idempotent call (or one whose step never started) is
// made again; a write that may or may not have happened is never retried
// without a person's decision.
func decideIntent(f Facts, in *journal.Entry, point string) Action {
	if in.Effect == blueprint.EffectRead || in.Effect == blueprint.EffectIdempotent || f.IntentUnstarted {
		switch t := f.Tool; {
		case t != nil && t.Pending:
			return Action{Kind: ActWaitCatalog}
		case t != nil && t.Setup != nil:
			return Action{Kind: ActPark, Markers: Markers{Setup: t.Setup}, RetryAt: t.SetupRetryAt}
		case t != nil && !t.Known:
			return completed(fmt.Sprintf("The call was not made again: no MCP server of the blueprint offers %s any more.", in.Tool), true)
		}
		return Action{Kind: ActToolCall, Reissue: true}
	}
	if a := f.Answer; a != nil {
		switch a.Decision {
		case DecisionDone:
			return Action{Kind: ActToolComplete, Completion: &ToolCompletion{Result: a.Input, By: a.By, Answer: a.Name}}
		case DecisionRetry:
			return Action{Kind: ActToolRetry, Answer: a}
		case DecisionAbandon:
			return Action{Kind: ActAbandon, Answer: a}
		}
	}
	return Action{Kind: ActPark, Markers: Markers{
		NeedsReconciliation: &DanglingWrite{Seq: in.Seq, Tool: in.Tool},
		Ask: &Question{Point: fmt.Sprintf("%s-w%d", point, in.Seq), Prompt: fmt.Sprintf(
			"Did the write %s (seq %d) with arguments %s happen? Answer Done with its output, Retry if it did not, or Abandon the run.",
			in.Tool, in.Seq, in.Input)},
	}}
}

// taintGate holds a call that changes the world after the run read
// tainted input: waived unattended, else a person's answer.
func taintGate(f Facts, h *journal.CallState, t *ToolFact, point string) Action {
	if f.unattended().WaiveTaint {
		return decided(journal.GateTaint, true, true, false, "policy: "+f.unattendedName(), "")
	}
	expired, expiry := f.questionExpiry(point + "-taint")
	if a, done := gateAnswer(f, journal.GateTaint, expired); done {
		return a
	}
	return Action{Kind: ActPark, RetryAt: expiry, Markers: Markers{TaintGate: true, Ask: &Question{Point: point + "-taint", Subject: h.Name, Prompt: Clip(fmt.Sprintf(
		"The run read %s, which is above its clearance. Allow the write %s (server %s) with arguments %s?",
		f.State.TaintSource, h.Name, t.Server, h.Arguments), 2048)}}}
}

// policyStep applies the tool policies to the head call: a fresh decision
// (Facts.Policy) is journaled first, so a restart applies it as made; a
// journaled RequireApproval then holds the call until a person answers,
// whatever the blueprint's permission, a yolo profile or spec.yolo say.
// A denial needs nothing here: folding it settled the call.
func policyStep(f Facts, h *journal.CallState, point string) (Action, bool) {
	d := h.Policy
	if d == nil {
		if f.Policy != nil {
			return Action{Kind: ActToolPolicy, Policy: f.Policy}, true
		}
		return Action{}, false
	}
	if d.Action != journal.PolicyRequireApproval || h.PolicyApproved {
		return Action{}, false
	}
	q := point + PolicyPointSuffix
	expired, expiry := f.questionExpiry(q)
	if a, done := gateAnswer(f, journal.GatePolicy, expired); done {
		return a, true
	}
	effect, server := blueprint.EffectRead, ""
	if t := f.Tool; t != nil {
		effect, server = t.Effect, t.Server
	}
	prompt := fmt.Sprintf("%s requires approval of tool call %s (effect %s, server %s) with arguments %s", d.Cause(), h.Name, effect, orDash(server), h.Arguments)
	if d.Message != "" {
		prompt += ": " + d.Message
	}
	if d.RequireReason {
		prompt += " (answer with a reason)"
	}
	return Action{Kind: ActPark, RetryAt: expiry, Markers: Markers{HubRequest: arv1.WaitToolApproval, Ask: &Question{Point: q, Subject: h.Name, Prompt: Clip(prompt, 2048)}}}, true
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// approvalGate holds a call whose permission is ask: approved unattended
// when the profile allows it, else a person's answer.
func approvalGate(f Facts, h *journal.CallState, t *ToolFact, point string) Action {
	if slices.Contains(f.unattended().Approve, h.Name) || f.unattended().All {
		return decided(journal.GateApproval, true, true, false, "policy: "+f.unattendedName(), "")
	}
	expired, expiry := f.questionExpiry(point + approvalSuffix)
	if a, done := gateAnswer(f, journal.GateApproval, expired); done {
		return a
	}
	return Action{Kind: ActPark, RetryAt: expiry, Markers: Markers{HubRequest: arv1.WaitToolApproval, Ask: &Question{Point: point + approvalSuffix, Subject: h.Name, Prompt: Clip(fmt.Sprintf(
		"Approve tool call %s (effect %s, server %s) with arguments %s?", h.Name, t.Effect, t.Server, h.Arguments), 2048)}}}
}

// decideBuiltin settles the built-in tools: questions and reviews park on
// UserPrompt, signals on Signal, and check_agent runs at once.
func decideBuiltin(f Facts, h *journal.CallState, point string) (Action, bool) {
	switch h.Name {
	case builtin.CheckAgent, builtin.WaitForAgent, builtin.SendToAgent, builtin.KillAgent:
		return decideAgentTool(f, h), true
	case builtin.WriteRegion:
		return Action{Kind: ActToolCall}, true
	case builtin.AskUser, builtin.PresentForReview:
		if f.Unattended() && !f.requiredHere(h.Name) {
			// Nobody attends a yolo run: the model is told so rather than
			// the run parking on a question nobody will see.
			return completed("Nobody is attending this run (it runs unattended); decide without asking.", true), true
		}
		if a := f.Answer; a != nil {
			if h.Name == builtin.PresentForReview {
				res, _ := json.Marshal(map[string]any{"approved": a.Approved, "by": a.By, "feedback": a.Input})
				return Action{Kind: ActToolComplete, Completion: &ToolCompletion{Result: string(res), By: a.By, Answer: a.Name}}, true
			}
			return Action{Kind: ActToolComplete, Completion: &ToolCompletion{Result: a.Input, By: a.By, Answer: a.Name}}, true
		}
		expired, expiry := f.questionExpiry(point)
		if expired {
			return completed("Nobody answered in time.", true), true
		}
		subject := "question"
		if h.Name == builtin.PresentForReview {
			subject = "review"
		}
		q := &Question{Point: point, Subject: subject, Prompt: Clip(promptOf(h), 2048)}
		if h.Name == builtin.AskUser {
			var args AskArgs
			_ = json.Unmarshal([]byte(h.Arguments), &args)
			q.InputSchema = askSchema(args)
		}
		return Action{Kind: ActPark, RetryAt: expiry, Markers: Markers{HubRequest: arv1.WaitUserPrompt, Ask: q}}, true
	case builtin.WaitForSignal:
		if a := f.Answer; a != nil {
			return Action{Kind: ActToolComplete, Completion: &ToolCompletion{Result: a.Input, By: a.By, Answer: a.Name}}, true
		}
		var args SignalArgs
		_ = json.Unmarshal([]byte(h.Arguments), &args)
		reason := args.Reason
		if reason == "" {
			reason = "a signal"
		}
		q := &Question{Point: point}
		if len(args.InputSchema) > 0 && string(args.InputSchema) != "null" {
			q.InputSchema = string(args.InputSchema)
		}
		return Action{Kind: ActPark, Markers: Markers{Signal: Clip(reason, 1024), Ask: q}}, true
	}
	return Action{}, false
}

// requiredHere: the tool is one of the current stage's required_tools,
// which hold under yolo (a required question still waits for a person).
func (f Facts) requiredHere(tool string) bool {
	if f.Blueprint == nil {
		return false
	}
	stage, _, _ := f.Blueprint.Stage(f.State.Stage)
	return stage.Requires(tool)
}

// askSchema is the JSON Schema an answer to ask_user must satisfy: its own
// input_schema, else what its style and choices imply.
func askSchema(a AskArgs) string {
	switch {
	case len(a.InputSchema) > 0 && string(a.InputSchema) != "null":
		return string(a.InputSchema)
	case a.Style == StyleConfirm:
		return `{"type":"boolean"}`
	case len(a.Options) > 0:
		b, _ := json.Marshal(map[string]any{"type": "string", "enum": a.Options})
		return string(b)
	}
	return `{"type":"string"}`
}

// promptOf is the question a person sees for ask_user or a review.
func promptOf(h *journal.CallState) string {
	if h.Name == builtin.PresentForReview {
		var r ReviewArgs
		_ = json.Unmarshal([]byte(h.Arguments), &r)
		if r.Summary != "" {
			return "Review: " + r.Summary + "\n\n" + r.Content
		}
		return "Review:\n\n" + r.Content
	}
	var a AskArgs
	_ = json.Unmarshal([]byte(h.Arguments), &a)
	q := a.Question
	switch {
	case a.Style == StyleConfirm:
		q += " (yes/no)"
	case len(a.Options) > 0:
		q += fmt.Sprintf(" (one of: %s)", joinQuoted(a.Options))
	}
	return q
}

func joinQuoted(opts []string) string {
	b, _ := json.Marshal(opts)
	return string(b)
}

// gateAnswer turns a person's answer (or the question's expiry) into the
// gate's decision. An expired gate is denied: a timeout is never consent.
func gateAnswer(f Facts, gate string, expired bool) (Action, bool) {
	if a := f.Answer; a != nil {
		d := decided(gate, a.Approved, false, false, a.By, a.Name)
		// The reason is on record either way, and a denial's is told to
		// the model.
		d.Decision.Reason = a.Input
		if d.Decision.Reason == "" {
			d.Decision.Reason = a.Reason
		}
		if a.Approved && (gate == journal.GateApproval || gate == journal.GatePolicy) {
			d.Decision.Args = a.Args
		}
		return d, true
	}
	if expired {
		return decided(gate, false, true, true, "policy: interaction timeout", ""), true
	}
	return Action{}, false
}

func decided(gate string, approved, auto, expired bool, by, answer string) Action {
	return Action{Kind: ActToolDecide, Decision: &ToolDecision{Gate: gate, Approved: approved, Auto: auto, Expired: expired, By: by, Answer: answer}}
}

func completed(result string, isError bool) Action {
	return Action{Kind: ActToolComplete, Completion: &ToolCompletion{Result: result, IsError: isError, By: "policy"}}
}

// questionExpiry says whether the question at point has expired, and when
// it will (nil: never, or not shown to anyone yet).
func (f Facts) questionExpiry(point string) (bool, *time.Time) {
	asked, ok := f.State.AskedAt(point)
	if f.Blueprint == nil || f.Blueprint.Limits.InteractionTimeoutSeconds <= 0 || !ok {
		return false, nil
	}
	at := asked.Add(time.Duration(f.Blueprint.Limits.InteractionTimeoutSeconds) * time.Second)
	return !f.Now.Before(at), &at
}

// askFirst turns a first park on a question that expires into ActAsk, so
// the question is journaled as shown before the run waits on it.
func askFirst(f Facts, a Action) Action {
	if a.Kind != ActPark {
		return a
	}
	point := ""
	switch m := a.Markers; {
	case m.Setup != nil || m.Budget != nil || m.NeedsReconciliation != nil || m.Signal != "":
		return a // not a question that expires
	case m.InteractionPoint != nil:
		point = m.InteractionPoint.Point
	case m.Ask != nil && (m.TaintGate || m.HubRequest != ""):
		point = m.Ask.Point
	}
	if _, asked := f.State.AskedAt(point); point == "" || asked {
		return a
	}
	return Action{Kind: ActAsk, Ask: point}
}

// Unattended is what a yolo run may do without a person.
type Unattended struct {
	// All: bare yolo approves every "ask" tool.
	All        bool
	Approve    []string
	WaiveTaint bool
}

// unattended resolves spec.yolo and spec.yoloProfile against the
// blueprint. An unknown profile means attended, never bare yolo.
func (f Facts) unattended() Unattended {
	if !f.Unattended() {
		return Unattended{}
	}
	if f.YoloProfile == "" {
		return Unattended{All: true, WaiveTaint: true}
	}
	p := f.Blueprint.YoloProfiles[f.YoloProfile]
	return Unattended{Approve: p.Approve, WaiveTaint: p.WaiveTaint}
}

// Unattended reports whether nobody attends the run: spec.yolo, with no
// profile or one the blueprint declares. An unknown profile means attended.
func (f Facts) Unattended() bool {
	return IsUnattended(f.Yolo, f.YoloProfile, f.Blueprint)
}

// IsUnattended is Unattended for callers outside Decide (which tools to
// offer the model).
func IsUnattended(yolo bool, profile string, bp *blueprint.Blueprint) bool {
	if !yolo {
		return false
	}
	if profile == "" {
		return true
	}
	if bp == nil {
		return false
	}
	_, ok := bp.YoloProfiles[profile]
	return ok
}

func (f Facts) unattendedName() string {
	if f.YoloProfile != "" {
		return "yolo profile " + f.YoloProfile
	}
	return "spec.yolo"
}
