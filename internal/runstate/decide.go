package runstate

import (
	"fmt"
	"strings"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// ActionKind is what the controller does next for a run.
type ActionKind string

// Actions.
const (
	// ActNone: nothing to do now (finished, or a step is in flight).
	ActNone ActionKind = "None"
	// ActSpawn: snapshot the blueprint and start the run.
	ActSpawn ActionKind = "Spawn"
	// ActFail: the run cannot start (the blueprint does not parse).
	ActFail ActionKind = "Fail"
	// ActCancel: record the cancellation and stop in-flight work.
	ActCancel ActionKind = "Cancel"
	// ActHold: paused; start nothing new.
	ActHold ActionKind = "Hold"
	// ActPark: wait; Markers say on what.
	ActPark ActionKind = "Park"
	// ActAnswerInteraction: approve the pending interaction point by policy
	// (an unattended run and an auto_approve point).
	ActAnswerInteraction ActionKind = "AnswerInteraction"
	// ActDispatch: issue the next model call (or re-issue the pending one).
	ActDispatch ActionKind = "Dispatch"
	// ActResolveFanOut: every fan-out item is final; journal it and move on.
	ActResolveFanOut ActionKind = "ResolveFanOut"
	// ActResolveChildren: every awaited sub-agent finished; move on.
	ActResolveChildren ActionKind = "ResolveChildren"
	// ActRefuseSpawn: a child would exceed the depth cap; end the run.
	ActRefuseSpawn ActionKind = "RefuseSpawn"
	// ActWake: a sleep's wake time has passed; journal the wake.
	ActWake ActionKind = "Wake"
	// ActWaitCatalog: the tools the next step needs are being listed from
	// their MCP servers; wait for the listing (which wakes the run).
	ActWaitCatalog ActionKind = "WaitCatalog"
	// ActSeedRegion: journal the next spec.regions content (Facts.SeedRegion)
	// before the run's first step.
	ActSeedRegion ActionKind = "SeedRegion"
)

// Facts are everything Decide looks at. The controller gathers them; Decide
// does no I/O.
type Facts struct {
	// Spawned: the blueprint snapshot exists.
	Spawned bool
	// BlueprintError is a parse error of the blueprint at spawn.
	BlueprintError string
	// Blueprint is the snapshotted blueprint (nil before spawn).
	Blueprint *blueprint.Blueprint
	State     journal.State

	Cancel bool
	Paused bool
	Yolo   bool
	// YoloProfile narrows Yolo to a blueprint profile.
	YoloProfile string
	// Tool is what the controller found out about the next tool call, when
	// one is due.
	Tool *ToolFact
	// Policy is what the tool policies say about the next tool call, when
	// the controller evaluated them (the call is due, its tool known and
	// no decision journaled yet) and some rule matched.
	Policy *journal.PolicyDecision

	// InFlight: the executor is running the pending call.
	InFlight bool
	// RateLimited: the call in flight has been held by a provider's limit
	// long enough to show.
	RateLimited *RateLimit
	// IntentUnstarted: the pending tool intent was journaled but this
	// process never started it (the pool was full), so it is safe to start
	// whatever its effect.
	IntentUnstarted bool
	// Setup is a setup problem found for the next call, if any. Nil when the
	// provider is ready (or when no call is due).
	Setup *SetupBlock
	// SetupRetryAt is when an out-of-service provider may be tried again.
	SetupRetryAt *time.Time
	Now          time.Time

	// Children are the run's child runs as last observed.
	Children []ChildFact
	// Depth is this run's depth; MaxChildDepth the deepest a descendant
	// may be.
	Depth, MaxChildDepth int32

	// Budgets are the spec's budgets; Working is the active clock's total.
	Budgets *arv1.Budgets
	Working time.Duration
	// Answer is a person's answer to the pending interaction point, if one
	// has been given and not yet applied.
	Answer *Answer
	// TitleWanted: the run should be titled (top-level runs whose blueprint
	// does not turn titles off).
	TitleWanted bool
	// ToolsPending: the tools to offer the model are not known yet (their
	// servers are being listed).
	ToolsPending bool
	// RunName is the run's name: a sub-agent may be named without the
	// "<run>-" prefix of its name.
	RunName string
	// Messages are messages from the parent not known to be taken in yet,
	// in the order sent.
	Messages []Message
	// SeedRegion is the next spec.regions content to journal, when some is
	// not journaled yet; SeedBlock is why it cannot be read (its ConfigMap
	// or Secret is gone). Either holds the run before its first step.
	SeedRegion *journal.Entry
	SeedBlock  *SetupBlock
	// Quota is a quota with no room for the run's next model call (the
	// store refused its intent), until the quota is raised or its period
	// resets.
	Quota *QuotaHit
}

// Answer is an AgentRunAnswer as Decide sees it, already checked against
// the question it answers.
type Answer struct {
	Name     string
	Approved bool
	By       string
	// Decision is the answer's decision (Approve, Deny, Done, Retry,
	// Abandon), empty for an answer that is only an input.
	Decision string
	// Input is the answer's value as JSON text: a question's answer, a
	// signal's payload, a review's feedback, or a resolved write's output.
	Input string
	// Expired: no person answered; the question timed out.
	Expired bool
	// Edit is a person's edit of the draft a checkpoint shows (decision
	// Edit); Directive a person's instructions sending the stage back
	// (decision Revise).
	Edit      *string
	Directive string
	// Choice is a person's answer to a multiple_choice or free_text
	// checkpoint (its option or text), which the next stage is told; Abort
	// the abort option a person chose, which cancels the run.
	Choice string
	Abort  string
	// Reason is the person's reason for the decision (spec.reason), kept
	// in the journal; a denied call's is also told to the model (Input).
	Reason string
	// Args are the arguments a person approved a tool call with in place
	// of the model's (compact JSON), "" when the model's stand.
	Args string
}

// Credential names a provider and the Secret key it authenticates with.
type Credential struct {
	Provider  string
	Namespace string
	Secret    string
	Key       string
}

// RetryCooldown is how long a run parked on a provider outage (not on a
// rejected key) waits before trying again by itself: the seeds' circuit
// cooldown. Fixing the Secret retries at once.
const RetryCooldown = 300 * time.Second

// EgressRetry is how soon a call the egress policy refused is tried again:
// a refusal costs no network, and an admin's edit to the policy should
// take effect without waiting out a provider outage's cooldown.
const EgressRetry = 30 * time.Second

// retryAfter is how long a failure of class c parks its candidate.
func retryAfter(c journal.FailureClass) time.Duration {
	if c == journal.FailEgressRefused {
		return EgressRetry
	}
	return RetryCooldown
}

// Action is Decide's answer.
type Action struct {
	Kind    ActionKind
	Markers Markers
	// Reissue: dispatch the pending call again under its seq (it was never
	// completed, e.g. after a restart) instead of writing a new intent.
	Reissue bool
	// Title: the call to dispatch is the one that names the run.
	Title bool
	// Answer is the person's answer ActAnswerInteraction, ActToolRetry and
	// ActAbandon apply (nil: approve by policy).
	Answer *Answer
	// Decision is the gate decision ActToolDecide journals.
	Decision *ToolDecision
	// Completion is the result ActToolComplete journals.
	Completion *ToolCompletion
	// Ask is the point of the question ActAsk journals as shown.
	Ask string
	// Message explains ActFail.
	Message string
	// RetryAt, when set, is when a parked run should be looked at again.
	RetryAt *time.Time
	// CreateChildren are child runs to create, whatever the Kind.
	CreateChildren []ChildRequest
	// FanOut is the fan-out's progress, when one is under way.
	FanOut *FanOutPlan
	// Received is the message ActReceiveMessage journals.
	Received *Message
	// Deliver names the sub-agents whose results ActDeliverResults
	// journals, in spawn order.
	Deliver []string
	// Policy is the tool policies' decision ActToolPolicy journals.
	Policy *journal.PolicyDecision
}

// NeedsProvider reports whether Decide would want to dispatch a call, so the
// controller resolves the provider (and its Secret) only then.
func NeedsProvider(f Facts) bool {
	if !f.Spawned || f.Cancel || f.Paused || f.InFlight {
		return false
	}
	st := f.State
	return f.SeedRegion == nil && f.SeedBlock == nil && st.Outcome == journal.OutcomeNone && st.Interaction == nil && st.FanOut == nil && st.ChildrenGate == nil && st.SleepUntil == nil && st.HeadCall() == nil
}

// Decide picks the run's next action from the recorded facts.
func Decide(f Facts) Action {
	switch {
	case f.State.Outcome != journal.OutcomeNone:
		return Action{Kind: ActNone}
	case f.Cancel:
		return Action{Kind: ActCancel}
	case !f.Spawned:
		if f.BlueprintError != "" {
			return Action{Kind: ActFail, Message: f.BlueprintError}
		}
		if f.Setup != nil {
			return Action{Kind: ActPark, Markers: Markers{Setup: f.Setup}}
		}
		return Action{Kind: ActSpawn}
	case f.Paused:
		return Action{Kind: ActHold}
	case f.SeedBlock != nil:
		return Action{Kind: ActPark, Markers: Markers{Setup: f.SeedBlock}}
	case f.SeedRegion != nil:
		return Action{Kind: ActSeedRegion}
	}
	st := f.State
	if in := st.Interaction; in != nil {
		return decideInteraction(f, in)
	}
	if f.InFlight {
		if f.RateLimited != nil {
			// In flight, held by a provider's limit: a healthy wait, shown.
			return Action{Kind: ActPark, Markers: Markers{RateLimited: f.RateLimited}}
		}
		return Action{Kind: ActNone}
	}
	if a, ok := decideTool(f); ok {
		return askFirst(f, a)
	}
	if w := st.SleepUntil; w != nil {
		if f.Now.Before(*w) {
			// Woken by a requeue at wakeAt, never early.
			return Action{Kind: ActPark, Markers: Markers{SleepUntil: w}, RetryAt: w}
		}
		return Action{Kind: ActWake}
	}
	if a, ok := decideChildren(f); ok {
		return a
	}
	if f.Setup != nil {
		// A setup problem, or every model of the stage out of service
		// (SelectCandidate already failed over where it could).
		return Action{Kind: ActPark, Markers: Markers{Setup: f.Setup}, RetryAt: f.SetupRetryAt}
	}
	if f.ToolsPending {
		// The offer is not known yet; a listing is under way.
		return Action{Kind: ActWaitCatalog}
	}
	return decideCall(f)
}

// decideCall is the run's next model call, or what stops it: a quota with
// no room, a message to take in first, the title, a budget, results of
// finished sub-agents to deliver.
func decideCall(f Facts) Action {
	st := f.State
	if q := f.Quota; q != nil {
		// The store refused the call's reservation: it is not made until
		// the quota has room (woken by the quota's change, or at its reset).
		return Action{Kind: ActPark, Markers: Markers{Quota: q}, RetryAt: q.ResetAt}
	}
	if st.Pending != nil {
		// Already recorded (and so already within budget when issued).
		return withSpawns(f, Action{Kind: ActDispatch, Reissue: true})
	}
	if a, ok := receiveMessage(f); ok {
		// Only between calls, so the call that follows is the one that
		// shows it.
		return a
	}
	if f.TitleWanted && !st.Titled {
		// One cheap call first; whatever it answers, the run goes on.
		return withSpawns(f, Action{Kind: ActDispatch, Title: true})
	}
	if hit := CheckBudgets(f.Budgets, Spent{
		Steps: st.ModelCalls, Tokens: st.Usage.Prompt + st.Usage.Completion,
		CostNano: st.PricedNanoUSD, Working: f.Working, ToolCalls: st.ToolCalls,
	}); hit != nil {
		// Checked before the call: the call that would cross it is never made.
		return Action{Kind: ActPark, Markers: Markers{Budget: hit}}
	}
	if a, ok := drainResults(f); ok {
		// Right before the call, so a result journaled as delivered is in
		// the call that follows.
		return a
	}
	return withSpawns(f, Action{Kind: ActDispatch})
}

// decideInteraction settles the pending interaction point: its answer,
// passed unattended, expired, or a wait for a person.
func decideInteraction(f Facts, in *journal.PendingInteraction) Action {
	if f.Answer != nil {
		return Action{Kind: ActAnswerInteraction, Answer: f.Answer}
	}
	if f.Unattended() && in.Point.Unattended != blueprint.UnattendedAsk && !in.Point.Required {
		return Action{Kind: ActAnswerInteraction}
	}
	expired, expiry := f.questionExpiry(in.Point.Name)
	if in.Point.Required {
		// A required point passes on a person's answer only: a
		// timeout is no answer, so it never expires.
		expired, expiry = false, nil
	}
	if expired {
		// The seeds' rule: an expired checkpoint proceeds, unless it may
		// not be passed unattended, which ends the run in Error.
		return Action{Kind: ActAnswerInteraction, Answer: &Answer{Approved: true, Expired: true, By: "policy: interaction timeout"}}
	}
	return askFirst(f, Action{Kind: ActPark, RetryAt: expiry, Markers: Markers{InteractionPoint: &Question{Point: in.Point.Name, Prompt: pointPrompt(f.Blueprint, in)}}})
}

// withSpawns adds sub-agents due for creation to an action that does not
// wait for them (their stage does not require children).
func withSpawns(f Facts, a Action) Action {
	if c, ok := decideChildren(f); ok {
		return c
	} else if len(c.CreateChildren) > 0 {
		a.CreateChildren = c.CreateChildren
	}
	return a
}

func credentialRefs(c Credential) []string {
	if c.Secret == "" {
		return nil
	}
	return []string{"Secret/" + c.Secret}
}

// ProviderRemedy is the sentence for a run parked on a provider's answer.
// It names the Secret and key, never their value, and stays within the
// status field's bound whatever the provider said.
func ProviderRemedy(fl *journal.Failure, c Credential) string {
	where := fmt.Sprintf("provider %q", c.Provider)
	creds, update := "", ""
	if c.Secret != "" {
		creds = fmt.Sprintf(" (key in Secret %s/%s key %q)", c.Namespace, c.Secret, c.Key)
		update = fmt.Sprintf(" Then update the Secret (kubectl create secret generic %s -n %s --from-literal=%s=<key> --dry-run=client -o yaml | kubectl apply -f -) and the run continues.", c.Secret, c.Namespace, c.Key)
	}
	said := fl.Message
	if len(said) > 300 {
		said = said[:300] + "..."
	}
	retry := fmt.Sprintf(" The run retries every %s", retryAfter(fl.Class))
	if c.Secret != "" {
		retry += ", or at once when the Secret changes"
	}
	retry += "."
	switch fl.Class {
	case journal.FailAuth:
		return fmt.Sprintf("The %s rejected the API key%s (HTTP %d). Put a valid key there.%s", where, creds, fl.Status, update)
	case journal.FailForbidden:
		return fmt.Sprintf("The %s accepted the key%s but refused access to the model (HTTP %d). Grant the key access or choose another model.%s", where, creds, fl.Status, update)
	case journal.FailCredits:
		return fmt.Sprintf("The %s reports the account%s is out of credits or quota. Add credits.%s", where, creds, retry)
	case journal.FailUnreachable:
		return fmt.Sprintf("The %s%s could not be reached (%s). Check its base URL and the network.%s", where, creds, said, retry)
	case journal.FailTimedOut:
		return fmt.Sprintf("The %s%s timed out.%s", where, creds, retry)
	case journal.FailOverloaded:
		return fmt.Sprintf("The %s%s kept answering that the model is overloaded (%s). Wait, or list another model for the stage; overload_failover_seconds in the provider config says how long an overload is waited out before the next model is tried.%s", where, creds, said, retry)
	case journal.FailEgressRefused:
		// The refusal's own remedy names the rule and the setting; keep it
		// whole rather than clipped with the provider's words.
		msg := fl.Message
		if len(msg) > 800 {
			msg = msg[:800] + "..."
		}
		return fmt.Sprintf("The manager's egress policy refused to connect to %s: %s The run retries every %s.", where, msg, EgressRetry)
	default:
		return fmt.Sprintf("The %s%s failed: %s.%s", where, creds, said, retry)
	}
}

// decideChildren handles fan-outs and sub-agents: create the children that
// are due (within the depth cap), park while they run, and move on once they
// are final. ok is false when the run has no children to wait for.
func decideChildren(f Facts) (Action, bool) {
	st := f.State
	sub := PlanSubagents(len(st.Subagents), f.Children)
	create := sub.Create
	var a Action
	switch {
	case st.FanOut != nil:
		spec := blueprint.FanOutSpec{}
		if s, _, ok := f.Blueprint.Stage(st.FanOut.Stage); ok && s.FanOut != nil {
			spec = *s.FanOut
		}
		plan := PlanFanOut(len(st.FanOut.Items), spec, f.Children, f.Paused)
		a.FanOut = &plan
		if plan.Done {
			a.Kind = ActResolveFanOut
			return a, true
		}
		create = append(create, plan.Create...)
		n := int32(plan.Outstanding())
		a.Kind, a.Markers = ActPark, Markers{FanOutOutstanding: &n}
	case st.ChildrenGate != nil:
		if sub.Outstanding == 0 {
			return Action{Kind: ActResolveChildren}, true
		}
		n := int32(sub.Outstanding)
		a.Kind, a.Markers = ActPark, Markers{ChildrenOutstanding: &n}
	default:
		if len(create) == 0 {
			return Action{}, false
		}
		// Sub-agents spawned by a stage that does not wait for them run
		// alongside; create them and carry on deciding.
		a.Kind = ""
	}
	if len(create) > 0 && f.Depth+1 > f.MaxChildDepth {
		return Action{Kind: ActRefuseSpawn, Message: fmt.Sprintf(
			"refused to create a child run at depth %d: this run is at depth %d and maxChildDepth is %d (raise spec.maxChildDepth or the blueprint's max_child_depth)",
			f.Depth+1, f.Depth, f.MaxChildDepth)}, true
	}
	a.CreateChildren = create
	return a, a.Kind != ""
}

// styleHelp says what a checkpoint's style takes, which options abort the
// run, and that a required one waits for a person whatever the policy.
func styleHelp(p blueprint.InteractionPoint) []string {
	var more []string
	switch p.Style {
	case blueprint.StyleMultipleChoice:
		more = append(more, "multiple_choice: answer Approve with one of "+joinQuoted(p.Options))
	case blueprint.StyleFreeText:
		more = append(more, "free_text: answer Approve with your answer as text")
	}
	if len(p.AbortOptions) > 0 {
		more = append(more, joinQuoted(p.AbortOptions)+" cancels the run")
	}
	if p.Required {
		more = append(more, "required: only a person's answer passes it")
	}
	return more
}

// pointPrompt is what a checkpoint asks, followed by what else it takes: a
// person must learn from the question alone that there is a draft to read
// and that it may be edited (decision Edit) or sent back (decision Revise).
func pointPrompt(bp *blueprint.Blueprint, in *journal.PendingInteraction) string {
	var more []string
	doc := in.Point.DocumentRegion
	if bp != nil {
		if s, _, ok := bp.Stage(in.Stage); ok {
			doc = s.PointDocument(in.Point)
		}
	}
	if doc != "" {
		more = append(more, fmt.Sprintf("the draft is region %q", doc))
	}
	more = append(more, styleHelp(in.Point)...)
	if len(in.Point.EditOptions) > 0 {
		more = append(more, "answer Edit with your edit of it")
	}
	if len(in.Point.Directives) > 0 {
		more = append(more, "answer Revise with instructions to send the stage back")
	}
	if len(more) == 0 {
		return in.Point.Prompt
	}
	return strings.TrimSpace(in.Point.Prompt + " [" + strings.Join(more, "; ") + "]")
}
