// Package journal is a run's durable, append-only record of model and tool
// calls: each call is written as an intent, then as a completion or failure.
// The run's position (stage, iteration, counters, pending call, terminal
// outcome) is a pure fold of these entries over the blueprint, so after a
// manager restart the run is re-derived exactly and no completed call is
// issued again.
package journal

import (
	"time"
)

// Kind names what an entry records.
type Kind string

// Entry kinds.
const (
	// ModelCallRequested is the intent of a model call, written before the call.
	ModelCallRequested Kind = "ModelCallRequested"
	// ModelCallCompleted records the model's answer and its usage.
	ModelCallCompleted Kind = "ModelCallCompleted"
	// ModelCallFailed records a call that failed in a way that parks or ends
	// the run (a rejected key, a malformed request). Retried failures are not
	// journaled, only the final classification.
	ModelCallFailed Kind = "ModelCallFailed"
	// InteractionAnswered records the answer to a stage-boundary checkpoint.
	InteractionAnswered Kind = "InteractionAnswered"
	// RunCancelled records that the run was cancelled.
	RunCancelled Kind = "RunCancelled"
	// FanOutResolved records that every fan-out item reached a final state
	// (its workers' results are read from the children, not copied here).
	FanOutResolved Kind = "FanOutResolved"
	// ChildrenResolved records that every sub-agent a requires_children
	// stage waited on has finished.
	ChildrenResolved Kind = "ChildrenResolved"
	// SpawnRefused records a child the controller refused to create (the
	// depth cap), which ends the run with the reason.
	SpawnRefused Kind = "SpawnRefused"
	// SleepCompleted records that a sleep's wake time passed and the run
	// was woken (never before it).
	SleepCompleted Kind = "SleepCompleted"
	// ToolCallDecided records a gate's decision on the next tool call: an
	// approval (ToolApproval) or a taint clearance (TaintGate), given by a
	// person, by policy (yolo, deny, unknown tool) or by expiry.
	ToolCallDecided Kind = "ToolCallDecided"
	// ToolCallRequested is the intent of a tool call, written before the
	// call with its effect and idempotency key.
	ToolCallRequested Kind = "ToolCallRequested"
	// ToolCallCompleted records a tool call's result: from the tool, from
	// a person (an answered question, a resolved dangling write), or the
	// refusal of a denied call.
	ToolCallCompleted Kind = "ToolCallCompleted"
	// ToolCallRetried records a person's word that a dangling write did
	// not happen, so it is issued again.
	ToolCallRetried Kind = "ToolCallRetried"
	// RunAbandoned records a person abandoning the run over a dangling
	// write; the unresolved write stays on record.
	RunAbandoned Kind = "RunAbandoned"
	// QuestionAsked records when the run first showed a question to a
	// person (Point), so the question's expiry counts from then: time spent
	// on anything else before it (a setup problem, a pause) is not the
	// person's time.
	QuestionAsked Kind = "QuestionAsked"
	// MessageReceived records a message the run's parent sent it
	// (send_to_agent), taken in where the run was about to call its model
	// in a stage that accepts_messages; that call and the stage's later
	// ones show it.
	MessageReceived Kind = "MessageReceived"
	// RegionWritten records a region's new content: seeded from the run's
	// spec.regions, written by the model (write_region), by a fan-out's
	// merge (results_region) or by a person's edit at a checkpoint.
	RegionWritten Kind = "RegionWritten"
	// ToolPolicyDecided records what the tool policies decided about the
	// next tool call (Policy), evaluated immediately before it would start:
	// a Deny settles the call with the policy's message, RequireApproval
	// holds it for a person, Audit lets it through on record. A restart
	// applies the journaled decision instead of evaluating again.
	ToolPolicyDecided Kind = "ToolPolicyDecided"
)

// Gates a ToolCallDecided answers.
const (
	GateApproval = "approval"
	GateTaint    = "taint"
	// GatePolicy is a person's answer to a tool policy's RequireApproval,
	// which no blueprint permission, profile or spec.yolo can give.
	GatePolicy = "policy"
)

// Entry is one journal record. Only the fields of its kind are set.
type Entry struct {
	Seq  int64     `json:"seq"`
	Kind Kind      `json:"kind"`
	At   time.Time `json:"at"`
	// Snapshot names, on a run's first entry when it was journaled before
	// the run's status recorded it, the blueprint snapshot the run started
	// from: the journal then binds the run to its blueprint, so a manager
	// that takes the run up before its first status write uses the same.
	Snapshot string `json:"snapshot,omitempty"`
	// Inherited marks an entry a fork copied from its source's journal
	// (spec.forkOf): its call was made and billed by the source, so its
	// usage folds into State.Inherited, not the run's own.
	Inherited bool `json:"inherited,omitempty"`

	// Stage and Iteration locate a model call (iteration is 0-based within
	// the stage).
	Stage     string `json:"stage,omitempty"`
	Iteration int    `json:"iteration,omitempty"`
	// Call links a completion or failure to its intent's seq.
	Call int64 `json:"call,omitempty"`

	Provider    string `json:"provider,omitempty"`
	Model       string `json:"model,omitempty"`
	RequestHash string `json:"requestHash,omitempty"`
	// Purpose is "title" for the one call that names the run; empty for
	// the stages' turns.
	Purpose string `json:"purpose,omitempty"`
	// Lost counts, on a model call's intent, earlier dispatches of it whose
	// answer never came back because a manager died: each may have been
	// served, and billed, by the provider.
	Lost int `json:"lost,omitempty"`

	Response *Response `json:"response,omitempty"`
	Usage    *Usage    `json:"usage,omitempty"`
	// CostNanoUSD is the call's cost in billionths of a dollar, absent when
	// the call could not be priced.
	CostNanoUSD *int64 `json:"costNanoUSD,omitempty"`
	// CostExact: the cost is the provider's own figure, not a rate-card
	// reconstruction.
	CostExact bool `json:"costExact,omitempty"`

	Failure *Failure `json:"failure,omitempty"`

	// Point and Approved answer an interaction point; Auto marks an answer
	// given by policy (unattended run) rather than by a person.
	Point    string `json:"point,omitempty"`
	Approved bool   `json:"approved,omitempty"`
	Auto     bool   `json:"auto,omitempty"`
	By       string `json:"by,omitempty"`

	// FailedItems counts fan-out items that failed every attempt; FailAll
	// says on_worker_failure = fail_all fired. Message explains a refusal,
	// or names the AgentRunAnswer an InteractionAnswered applied.
	FailedItems int    `json:"failedItems,omitempty"`
	FailAll     bool   `json:"failAll,omitempty"`
	Message     string `json:"message,omitempty"`

	// Index is the tool call's position in the model answer's calls.
	Index int `json:"index,omitempty"`
	// Tool, Input, Effect, Server and IdempotencyKey describe a tool call's
	// intent. The key is recorded so a re-executed idempotent call carries
	// the same one. On an approving ToolCallDecided, Input is the arguments
	// a person approved in place of the model's (By edited them): the call
	// is made with them and the model is told it ran with them.
	Tool           string `json:"tool,omitempty"`
	Input          string `json:"input,omitempty"`
	Effect         string `json:"effect,omitempty"`
	Server         string `json:"server,omitempty"`
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	// Gate says which gate a ToolCallDecided answers.
	Gate string `json:"gate,omitempty"`
	// Expired marks a decision made because nobody answered in time.
	Expired bool `json:"expired,omitempty"`
	// Result and IsError are a tool call's result. On a ToolCallDecided or
	// an InteractionAnswered, Result is the person's reason (a denied
	// call's is told to the model).
	Result  string `json:"result,omitempty"`
	IsError bool   `json:"isError,omitempty"`
	// Child names the sub-agent whose result a wait_for_agent completion
	// delivered, so it is never delivered again.
	Child string `json:"child,omitempty"`
	// MessageID and Text are a MessageReceived's message: its id (unique
	// per sender) and what it says.
	MessageID string `json:"messageID,omitempty"`
	Text      string `json:"text,omitempty"`

	// Region and Content are a RegionWritten's region and its new content
	// (at most MaxRegionBytes); Seeded marks content the run's spec gave.
	// On an InteractionAnswered, Region names the draft the person edited.
	Region  string `json:"region,omitempty"`
	Content string `json:"content,omitempty"`
	Seeded  bool   `json:"seeded,omitempty"`
	// Directive is, on an InteractionAnswered, the person's instructions
	// sending the stage back (a directives choice).
	Directive string `json:"directive,omitempty"`
	// Choice is, on an InteractionAnswered, what a person answered a
	// multiple_choice point (the option) or a free_text one (the text),
	// which the next stage is told; Abort the abort option a person chose,
	// which cancelled the run.
	Choice string `json:"choice,omitempty"`
	Abort  string `json:"abort,omitempty"`
	// Policy is a ToolPolicyDecided's decision.
	Policy *PolicyDecision `json:"policy,omitempty"`
}

// StartedFrom is the snapshot the first entry of es binds the run to, if
// any (see Entry.Snapshot).
func StartedFrom(es []Entry) string {
	if len(es) == 0 {
		return ""
	}
	return es[0].Snapshot
}

// PurposeTitle marks the titling call.
const PurposeTitle = "title"

// Response is what a model answered.
type Response struct {
	Text string `json:"text,omitempty"`
	// Next is the transition target the model chose.
	Next string `json:"next,omitempty"`
	// Complete: the model finished the run.
	Complete bool   `json:"complete,omitempty"`
	Output   string `json:"output,omitempty"`
	// OutputBytes is the submitted output's length when Output was cut to
	// the stored output's cap (output.MaxBytes) to fit the journal; zero
	// when Output is whole.
	OutputBytes int `json:"outputBytes,omitempty"`
	// Items are fan-out items (fan_out stages).
	Items []string `json:"items,omitempty"`
	// Spawns are sub-agents the model started.
	Spawns []Spawn `json:"spawns,omitempty"`
	// ToolCalls counts the tool calls in the answer.
	ToolCalls int `json:"toolCalls,omitempty"`
	// SleepSeconds is the sleep tool's duration, when the model called it.
	SleepSeconds int `json:"sleepSeconds,omitempty"`
	// OutputRejected says why submitted output was refused (it failed the
	// output spec); the model is told on its next turn.
	OutputRejected string `json:"outputRejected,omitempty"`
	// Calls are the tool calls the run executes (MCP and built-in tools)
	// before the model is called again; the answer's own move (transition,
	// completion, sleep) waits for them.
	Calls []ToolCall `json:"calls,omitempty"`
	// Moves are the answer's other tool calls, as the model made them: its
	// calls to the operator's own moves (transition, complete, spawn_agent,
	// fan_out, sleep), which the fields above record the effect of, and the
	// calls nothing acted on. Later calls show the model each with what
	// came of it, so it sees what it did.
	Moves []Move `json:"moves,omitempty"`
}

// Move is one of an answer's calls the run does not execute as a tool.
type Move struct {
	ToolCall
	// Ignored says why nothing acted on the call (a tool nobody offered,
	// arguments that do not fit, a second transition), "" when it was
	// taken up.
	Ignored string `json:"ignored,omitempty"`
}

// ToolCall is one tool call in a model's answer.
type ToolCall struct {
	// ID is the provider's id for the call, echoed with its result.
	ID   string `json:"id,omitempty"`
	Name string `json:"name"`
	// Arguments is the call's JSON object.
	Arguments string `json:"arguments,omitempty"`
}

// Spawn is a sub-agent request: a blueprint ConfigMap and a task.
type Spawn struct {
	Agent string `json:"agent"`
	Task  string `json:"task"`
}

// Usage is one call's token counts.
type Usage struct {
	Prompt     int64 `json:"prompt,omitempty"`
	Completion int64 `json:"completion,omitempty"`
	Cached     int64 `json:"cached,omitempty"`
	CacheWrite int64 `json:"cacheWrite,omitempty"`
}

// FailureClass classifies a failed call by what it takes to get past it.
type FailureClass string

// Failure classes. Every class but Fatal is a setup problem: the run parks
// and continues once the cause is fixed.
const (
	FailAuth        FailureClass = "AuthFailed"
	FailForbidden   FailureClass = "Forbidden"
	FailCredits     FailureClass = "CreditsExhausted"
	FailUnreachable FailureClass = "ProviderUnreachable"
	FailTimedOut    FailureClass = "ProviderTimedOut"
	FailFailed      FailureClass = "ProviderFailed"
	// FailOverloaded: the model kept answering that it is overloaded
	// (HTTP 529, or 503 with Retry-After) past its provider's
	// overload_failover_seconds, so the stage fails over to its next
	// model. Never journaled when no other model was left to try: the call
	// then waits as long as the provider asks, like a rate limit.
	FailOverloaded FailureClass = "ProviderOverloaded"
	// FailEgressRefused: the manager's egress policy refused the provider's
	// address before any connection (internal/egress); nothing was sent.
	// Message holds the refusal and its remedy.
	FailEgressRefused FailureClass = "EgressRefused"
	// FailFatal is a failure no setup change fixes (a malformed request):
	// the run ends in Error.
	FailFatal FailureClass = "Fatal"
)

// Failure says why a call failed.
type Failure struct {
	Class   FailureClass `json:"class"`
	Status  int          `json:"status,omitempty"`
	Message string       `json:"message,omitempty"`
	// SecretVersion is the resourceVersion of the credentials Secret the
	// call used, so a rejected key is not retried until the Secret changes.
	SecretVersion string `json:"secretVersion,omitempty"`
	// ConfigVersion is the resourceVersion of the provider ConfigMap the
	// call was resolved with: a changed config is a fix worth trying, so
	// the failure stops counting once it changes.
	ConfigVersion string `json:"configVersion,omitempty"`
}
