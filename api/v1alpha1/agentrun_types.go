package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AgentRunSpec is what was asked for: the task, the blueprint, and the knobs a
// person or a GitOps commit may turn while the run is in flight.
//
// Leviath's RunMeta fields that have no meaning on Kubernetes are replaced, not
// copied: `run_id` is the object's namespace/name (and UID, never reused);
// `agent_path` is the blueprint ConfigMap named by agent; `workdir` has no
// counterpart because the operator never runs tools in its own filesystem (tools
// are MCP servers reached over HTTP); `pid` has none because no process or pod
// exists per run (liveness is read from status.lastProgressAt and conditions);
// `callback_secret` is a Secret reference in callback.signingKeySecretRef, so the
// key itself is never stored in the object.
//
// +kubebuilder:validation:XValidation:rule="!has(self.yoloProfile) || (has(self.yolo) && self.yolo)",message="yoloProfile requires yolo: true"
// +kubebuilder:validation:XValidation:rule="!(has(self.priority) && has(self.priorityClassName))",message="set priority or priorityClassName, not both"
//
// The spec's transition rules are one rule behind a whole-spec equality: the
// API server evaluates them on every write of a run, status writes
// included, and each field they read costs it a copy of the spec's schema;
// the equality reads only the fields set, and a write that leaves the spec
// as it was (a status write) stops there. The message names the first
// rule broken.
// +kubebuilder:validation:XValidation:rule="self == oldSelf || ((!has(oldSelf.cancel) || !oldSelf.cancel || (has(self.cancel) && self.cancel)) && ((has(self.yolo) && self.yolo) == (has(oldSelf.yolo) && oldSelf.yolo)) && ((has(self.depth) ? self.depth : 0) == (has(oldSelf.depth) ? oldSelf.depth : 0)) && (has(self.yoloProfile) == has(oldSelf.yoloProfile) && (!has(self.yoloProfile) || self.yoloProfile == oldSelf.yoloProfile)) && (has(self.model) == has(oldSelf.model) && (!has(self.model) || self.model == oldSelf.model)) && (has(self.budgets) || !has(oldSelf.budgets)) && (has(self.entryStage) == has(oldSelf.entryStage)) && (has(self.blueprintSnapshot) == has(oldSelf.blueprintSnapshot)) && (has(self.regions) == has(oldSelf.regions)) && (has(self.priority) == has(oldSelf.priority) && has(self.priorityClassName) == has(oldSelf.priorityClassName)) && (has(self.forkOf) == has(oldSelf.forkOf) && (!has(self.forkOf) || self.forkOf == oldSelf.forkOf)))",messageExpression="!(!has(oldSelf.cancel) || !oldSelf.cancel || (has(self.cancel) && self.cancel)) ? 'cancel cannot be withdrawn once requested' : !((has(self.yolo) && self.yolo) == (has(oldSelf.yolo) && oldSelf.yolo)) ? 'yolo is fixed at creation' : !((has(self.depth) ? self.depth : 0) == (has(oldSelf.depth) ? oldSelf.depth : 0)) ? 'depth is immutable' : !(has(self.yoloProfile) == has(oldSelf.yoloProfile) && (!has(self.yoloProfile) || self.yoloProfile == oldSelf.yoloProfile)) ? 'yoloProfile is fixed at creation' : !(has(self.model) == has(oldSelf.model) && (!has(self.model) || self.model == oldSelf.model)) ? 'model is fixed at creation' : !(has(self.budgets) || !has(oldSelf.budgets)) ? 'budgets cannot be removed once set; raise them instead' : !(has(self.entryStage) == has(oldSelf.entryStage)) ? 'entryStage is immutable' : !(has(self.blueprintSnapshot) == has(oldSelf.blueprintSnapshot)) ? 'blueprintSnapshot is immutable' : !(has(self.regions) == has(oldSelf.regions)) ? 'regions are fixed at creation' : !(has(self.priority) == has(oldSelf.priority) && has(self.priorityClassName) == has(oldSelf.priorityClassName)) ? 'priority and priorityClassName are fixed at creation' : !(has(self.forkOf) == has(oldSelf.forkOf) && (!has(self.forkOf) || self.forkOf == oldSelf.forkOf)) ? 'forkOf is fixed at creation: create a new AgentRun to fork from elsewhere' : 'spec may not change so'"
type AgentRunSpec struct {
	// agent names the ConfigMap in this namespace that holds the blueprint
	// (agent.toml plus any prompt files, one key per file). It replaces
	// Leviath's agent_path. The blueprint is read once when the run spawns and
	// snapshotted, so editing or deleting the ConfigMap later cannot change a
	// run in flight. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="agent is immutable: create a new AgentRun to use another blueprint"
	Agent string `json:"agent,omitempty"`

	// task is the instruction the run was started with, verbatim. Immutable,
	// because every recorded step was taken in answer to it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=65536
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="task is immutable: create a new AgentRun for a new task"
	Task string `json:"task,omitempty"`

	// model overrides model resolution for every stage, as
	// "provider/model" or a bare model name, exactly as given (Leviath's
	// model_override). Left empty, each stage resolves its own ordered
	// failover list afresh, also after a manager restart. The controller never
	// writes the resolved model here; that goes to status.model.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Model string `json:"model,omitempty"`

	// providerConfig names the ConfigMap in this namespace that declares model
	// providers (type, base URL, credentials Secret and key, models, rates).
	// Read whenever a step needs it, so fixing it unblocks a parked run.
	// +optional
	// +default="agentrun-providers"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ProviderConfig string `json:"providerConfig,omitempty"`

	// metadata carries caller-defined key/value pairs (Leviath's spawn
	// metadata). They are echoed in webhook deliveries, so a caller can
	// correlate a delivery with its own records.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	Metadata map[string]string `json:"metadata,omitempty"`

	// callback asks for one signed webhook delivery when the run reaches a
	// terminal phase.
	// +optional
	Callback *CallbackSpec `json:"callback,omitempty"`

	// depth is this run's depth in the sub-agent tree: 0 for a top-level run,
	// parent + 1 for a child. Set by the parent at creation and immutable, so
	// a child enforces its remaining spawn-depth budget after any restart.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16
	Depth int32 `json:"depth,omitempty"`

	// entryStage starts the run at this stage of its blueprint instead of
	// the blueprint's entry stage. A fan-out parent sets it on workers that
	// run one of its own stages (worker_stage). Immutable.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="entryStage is immutable"
	EntryStage string `json:"entryStage,omitempty"`

	// blueprintSnapshot runs the agent from this blueprint snapshot (an
	// immutable ConfigMap the operator made) instead of the ConfigMap agent
	// names; agent still names the agent. A fan-out parent sets it on workers
	// that run one of its own stages, so they run exactly the blueprint it
	// runs. Immutable.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="blueprintSnapshot is immutable"
	BlueprintSnapshot string `json:"blueprintSnapshot,omitempty"`

	// maxChildDepth caps how deep this run's own sub-agent tree may grow
	// (0: no sub-agents). When unset the blueprint's max_child_depth applies.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16
	MaxChildDepth *int32 `json:"maxChildDepth,omitempty"`

	// yolo launches the run unattended: tools whose permission is "ask" are
	// approved without a person. It never lifts a "deny". Fixed at creation,
	// so a restart resumes the run exactly the way it was started, never
	// parked on a prompt nobody is watching. A child's level is at most its
	// parent's.
	// +optional
	Yolo bool `json:"yolo,omitempty"`

	// yoloProfile narrows yolo to a named profile from the blueprint. Fixed
	// at creation for the same reason as yolo: dropping the name would
	// resume a carefully scoped run under bare yolo. An unknown profile means
	// attended.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	YoloProfile string `json:"yoloProfile,omitempty"`

	// output overrides the blueprint's output spec for this run (Leviath's
	// output_request). Kept in the spec so a restart never reverts the run to
	// the blueprint's shape partway through.
	// +optional
	Output *OutputSpec `json:"output,omitempty"`

	// budgets bound what the run may spend. Checked before each model call,
	// in the order steps, tokens, cost, wall time, firing at observed >=
	// limit; a crossed budget parks the run on BudgetExceeded. Budgets may be
	// raised (a commit in Git resumes the run) but never lowered or removed.
	// +optional
	Budgets *Budgets `json:"budgets,omitempty"`

	// paused stops the run from starting new steps; a step already in flight
	// finishes and its result is held until the run is resumed (paused set
	// back to false). A field rather than an imperative call, so a run's
	// pause state can live in Git.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// cancel stops the run for good: in-flight work is abandoned, children
	// are cancelled, and the phase becomes Cancelled (distinct from Error:
	// nothing went wrong, somebody decided). Cannot be withdrawn.
	// +optional
	Cancel bool `json:"cancel,omitempty"`

	// ttlSecondsAfterFinished limits how long a finished run (Complete,
	// Error or Cancelled) is kept, as for a Job: once that many seconds have
	// passed since it finished, the run is deleted with everything it owns
	// (its journal, output and children), never before its webhook is
	// settled. 0 deletes it as soon as it finishes. Unset, the manager's
	// --ttl-seconds-after-finished default applies (see docs/retention.md).
	// +optional
	// +kubebuilder:validation:Minimum=0
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`

	// regions seed the run's named documents (Leviath's `lev run
	// --<region> @file`): the draft a stage works on, notes, a results
	// document. Each is inline text or a key of a ConfigMap or Secret in
	// this namespace. A reference to an object or key that does not exist
	// parks the run on NeedsSetup (RegionMissing) until it is created. The
	// content is read once, when the run starts, and journaled with the
	// run, never copied here: later edits of the ConfigMap or Secret do not
	// change a run in flight (kubectl agentrun regions shows what the run
	// holds). Fixed at creation.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="regions are fixed at creation"
	// +kubebuilder:validation:XValidation:rule="self.map(r, has(r.text) ? size(r.text) : 0).sum() <= 65536",message="inline region text may total at most 64 KiB; put larger documents in a ConfigMap (configMapKeyRef)"
	Regions []RegionSource `json:"regions,omitempty"`

	// priority orders admission: while runs wait for an active-run slot, a
	// namespace's next slot goes to its waiting run of highest priority,
	// then the earliest created. Slots are still shared fairly across
	// namespaces first. Higher is sooner; unset, priorityClassName (or the
	// cluster's default class, or 0) applies. A Namespace's
	// agentrun.dev/max-priority annotation caps it, checked at apply.
	// A child run queues with its tree root's priority. Fixed at creation.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="priority is fixed at creation"
	Priority *int32 `json:"priority,omitempty"`

	// priorityClassName names a priority class of the cluster's
	// agentrun-priority-classes ConfigMap (class name to integer value),
	// as a Pod names a PriorityClass. A name the ConfigMap does not hold is
	// refused at apply (while it holds any class). Fixed at creation.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="priorityClassName is fixed at creation"
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// forkOf starts the run from another run's journal instead of from
	// nothing: the source's recorded calls up to the start of a stage (or
	// up to an entry) are copied into this run's own journal, so they are
	// neither made nor billed again, and the run goes on from there with its
	// own blueprint (agent is snapshotted afresh, so a fixed blueprint
	// applies) and model. The source is only read, never changed. Fixed at
	// creation (see docs/kubectl-plugin.md, "Rerun and fork").
	// +optional
	ForkOf *ForkSource `json:"forkOf,omitempty"`
}

// ForkSource names the run a fork starts from and where it cuts the
// source's journal: exactly one of stage and entry.
//
// +kubebuilder:validation:XValidation:rule="(has(self.stage) ? 1 : 0) + (has(self.entry) ? 1 : 0) == 1",message="forkOf needs exactly one of stage and entry"
type ForkSource struct {
	// run is the source AgentRun's name, in this namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Run string `json:"run,omitempty"`
	// stage cuts the source's journal where the source first entered this
	// stage: everything before it is inherited, and the fork starts the
	// stage afresh. It must be a stage of the source's blueprint that the
	// source has entered.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Stage string `json:"stage,omitempty"`
	// entry cuts the source's journal before this entry (its seq): entries
	// 0 to entry-1 are inherited. 0 inherits nothing. At most the number of
	// entries the source's journal holds.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Entry *int64 `json:"entry,omitempty"`
}

// OriginKind says how a run came from another.
// +kubebuilder:validation:Enum=Rerun;Fork
type OriginKind string

// Origin kinds.
const (
	// OriginRerun: created with the same spec as another run
	// (kubectl agentrun rerun), label agentrun.dev/rerun-of.
	OriginRerun OriginKind = "Rerun"
	// OriginFork: started from another run's journal (spec.forkOf).
	OriginFork OriginKind = "Fork"
)

// Origin links a rerun or a fork to the run it came from.
type Origin struct {
	// kind says whether the run is a rerun or a fork.
	// +required
	Kind OriginKind `json:"kind,omitempty"`
	// run is the name of the run it came from.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Run string `json:"run,omitempty"`
	// uid of the run it came from, so a later run of the same name is not
	// mistaken for it. Absent when it was not known.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	UID string `json:"uid,omitempty"`
	// stage the fork started at (the source's journal was cut where the
	// source entered it). Forks only.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Stage string `json:"stage,omitempty"`
	// entries is how many of the source's journal entries the fork
	// inherited. Forks only.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Entries int64 `json:"entries,omitempty"`
}

// RegionSource is where one region's first content comes from: exactly
// one of text, configMapKeyRef and secretKeyRef.
//
// +kubebuilder:validation:XValidation:rule="(has(self.text) ? 1 : 0) + (has(self.configMapKeyRef) ? 1 : 0) + (has(self.secretKeyRef) ? 1 : 0) == 1",message="a region needs exactly one of text, configMapKeyRef and secretKeyRef"
type RegionSource struct {
	// name of the region, as the blueprint names it (document_region,
	// results_region, require_regions).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9_-]{0,62}$`
	Name string `json:"name,omitempty"`
	// text is the content, inline (at most 16 KiB; 64 KiB over all
	// regions). An empty string is an empty region.
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	Text *string `json:"text,omitempty"`
	// configMapKeyRef reads the content from a ConfigMap key (up to the
	// region cap of 128 KiB).
	// +optional
	ConfigMapKeyRef *ConfigMapKeyRef `json:"configMapKeyRef,omitempty"`
	// secretKeyRef reads the content from a Secret key, for documents that
	// must not sit in a ConfigMap. The content is journaled with the run,
	// so it is readable wherever the run's journal is.
	// +optional
	SecretKeyRef *SecretKeyRef `json:"secretKeyRef,omitempty"`
}

// ConfigMapKeyRef names one key of a ConfigMap in the run's namespace.
type ConfigMapKeyRef struct {
	// name of the ConfigMap.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
	// key within the ConfigMap's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// CallbackSpec is the webhook a run notifies on its terminal transition.
type CallbackSpec struct {
	// url receives one POST per terminal transition.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// It must not name a loopback, link-local or unspecified IP address or
	// localhost: this admission check is a cheap first line and sees only
	// what is written. The manager's egress policy, checked on the address
	// actually dialed, is the enforcement (docs/egress.md).
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') || self.startsWith('http://')",message="url must be an http:// or https:// URL"
	// +kubebuilder:validation:XValidation:rule=`!self.matches(r'(?i)^https?://([^/?#@]*@)?(127[.][0-9]{1,3}[.][0-9]{1,3}[.][0-9]{1,3}|169[.]254[.][0-9]{1,3}[.][0-9]{1,3}|0[.]0[.]0[.]0|\[[0:]*:[0:]*1?\]|\[fe[89ab][0-9a-f]:[^\]]*\])(:[0-9]*)?([/?#].*)?$')`,message="url must not point at a loopback, link-local (cloud metadata) or unspecified address: the manager refuses to call them"
	// +kubebuilder:validation:XValidation:rule=`!self.matches(r'(?i)^https?://([^/?#@]*@)?([^/?#@:\[]*[.])?localhost[.]?(:[0-9]*)?([/?#].*)?$')`,message="url must not point at localhost: the manager refuses to call loopback addresses"
	URL string `json:"url,omitempty"`

	// signingKeySecretRef names the Secret key holding the HMAC-SHA256
	// signing key. Replaces Leviath's persisted callback_secret: the
	// operator reads the key when it signs and never copies it into the run.
	// +optional
	SigningKeySecretRef *SecretKeyRef `json:"signingKeySecretRef,omitempty"`
}

// CallbackState is where a webhook delivery stands.
// +kubebuilder:validation:Enum=Pending;Delivered;Failed
type CallbackState string

// Callback states.
const (
	// CallbackPending: the run ended; the delivery is due or being retried.
	CallbackPending CallbackState = "Pending"
	// CallbackDelivered: the receiver answered 2xx.
	CallbackDelivered CallbackState = "Delivered"
	// CallbackFailed: retries ran out, or the receiver refused (4xx).
	CallbackFailed CallbackState = "Failed"
)

// CallbackStatus records the one delivery a terminal run makes.
type CallbackStatus struct {
	// deliveryID is sent with every attempt (X-AgentRun-Delivery) and never
	// changes, so receivers can drop duplicates.
	// +required
	// +kubebuilder:validation:MaxLength=128
	DeliveryID string `json:"deliveryID"`
	// state of the delivery.
	// +required
	State CallbackState `json:"state,omitempty"`
	// attempts made so far.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
	// lastAttemptAt is when the last attempt ended.
	// +optional
	LastAttemptAt *metav1.Time `json:"lastAttemptAt,omitempty"`
	// deliveredAt is when the receiver accepted it.
	// +optional
	DeliveredAt *metav1.Time `json:"deliveredAt,omitempty"`
	// lastError says why the last attempt failed. Never holds the key.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	LastError string `json:"lastError,omitempty"`
}

// SecretKeyRef names one key of a Secret in the run's namespace.
type SecretKeyRef struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
	// key within the Secret's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// OutputFormat is the shape a run's final output must take.
// +kubebuilder:validation:Enum=text;markdown;json
type OutputFormat string

// Output formats.
const (
	OutputFormatText     OutputFormat = "text"
	OutputFormatMarkdown OutputFormat = "markdown"
	OutputFormatJSON     OutputFormat = "json"
)

// OutputSpec describes the output a run must submit.
type OutputSpec struct {
	// format of the submitted output.
	// +optional
	Format OutputFormat `json:"format,omitempty"`
	// instructions tell the model what to hand back.
	// +optional
	// +kubebuilder:validation:MaxLength=8192
	Instructions string `json:"instructions,omitempty"`
	// example is a sample of acceptable output, shown to the model.
	// +optional
	// +kubebuilder:validation:MaxLength=8192
	Example string `json:"example,omitempty"`
	// schema is a JSON Schema (as a JSON string) that json output must match.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Schema string `json:"schema,omitempty"`
	// validator names a validator declared by the blueprint.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Validator string `json:"validator,omitempty"`
}

// Budgets bound a run's spending. Unset fields are unlimited.
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.steps) || (has(self.steps) && self.steps >= oldSelf.steps)",message="budgets.steps may only be raised",fieldPath=".steps"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.tokens) || (has(self.tokens) && self.tokens >= oldSelf.tokens)",message="budgets.tokens may only be raised",fieldPath=".tokens"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.toolCalls) || (has(self.toolCalls) && self.toolCalls >= oldSelf.toolCalls)",message="budgets.toolCalls may only be raised",fieldPath=".toolCalls"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.costUSD) || (has(self.costUSD) && quantity(self.costUSD).compareTo(quantity(oldSelf.costUSD)) >= 0)",message="budgets.costUSD may only be raised",fieldPath=".costUSD"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.wallTime) || (has(self.wallTime) && duration(self.wallTime) >= duration(oldSelf.wallTime))",message="budgets.wallTime may only be raised",fieldPath=".wallTime"
type Budgets struct {
	// steps caps model calls.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Steps *int64 `json:"steps,omitempty"`
	// tokens caps prompt plus completion tokens.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Tokens *int64 `json:"tokens,omitempty"`
	// toolCalls caps tool calls.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ToolCalls *int64 `json:"toolCalls,omitempty"`
	// costUSD caps the priced cost in US dollars, as a decimal string such as
	// "2.50". A string rather than a float so the value is exact.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]{1,9}(\.[0-9]{1,9})?$`
	CostUSD string `json:"costUSD,omitempty"`
	// wallTime caps working time (the active clock, not age), as a Go
	// duration such as "30m".
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="wallTime must be a duration of at most 2562047h"
	WallTime string `json:"wallTime,omitempty"`
}

// AgentRunStatus is the run record: where the run stands, what it has spent,
// and, while parked, exactly why. Written only by the controller.
// +structType=atomic
type AgentRunStatus struct {
	// observedGeneration is the spec generation this status describes.
	// -1 until the controller has seen the run, so a fresh object never
	// reads as current (and phase reads Queued).
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase is where the run stands, in Leviath's eight statuses, or Queued
	// while the run waits in line to be taken up.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// waitingOn says why the run is parked. Present only while it is; derived
	// by one function from markers the controller keeps, so it cannot drift
	// from the phase it explains.
	// +optional
	WaitingOn *WaitingOn `json:"waitingOn,omitempty"`

	// agentName is the blueprint's [agent] name (not the ConfigMap's): two
	// runs of the same agent from different ConfigMaps share it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	AgentName string `json:"agentName,omitempty"`

	// blueprintSnapshot names the owned ConfigMap holding the blueprint as it
	// was read at spawn. Every later step reads this copy.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	BlueprintSnapshot string `json:"blueprintSnapshot,omitempty"`

	// journalStore says where the run's journal and final output are kept:
	// ConfigMaps the run owns, or the operator's Database (--store), read
	// through the console, the kubectl plugin and, once the run is gone,
	// its archived record. A run keeps its journal where it began it.
	// +optional
	JournalStore JournalStore `json:"journalStore,omitempty"`

	// model is the provider/model the entry stage resolved to. Later stages
	// may use another; this is not rewritten to follow them, and it is never
	// fed back as an override on restart.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Model string `json:"model,omitempty"`

	// currentStage is the name of the stage the run is in.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	CurrentStage string `json:"currentStage,omitempty"`
	// stageIndex is the zero-based position of currentStage in the
	// blueprint's stage list. Not a progress measure: stages may loop.
	// +optional
	StageIndex int32 `json:"stageIndex,omitempty"`
	// numStages is how many stages the blueprint declares, so a reader can
	// render "2/5" without loading the blueprint.
	// +optional
	NumStages int32 `json:"numStages,omitempty"`
	// stage is currentStage rendered as "name i/n" for listings.
	// +optional
	// +kubebuilder:validation:MaxLength=160
	Stage string `json:"stage,omitempty"`
	// iteration counts model turns in the current stage, reset on stage
	// entry and compared with the stage's max_iterations.
	// +optional
	Iteration int32 `json:"iteration,omitempty"`
	// stages is every stage of the blueprint, in its order, with what the
	// run has done there: the seeds' per-stage run status. Folded from the
	// journal, so it survives restarts and takeovers. Atomic: the
	// controller is its only writer and rewrites it whole, so the API
	// server need not track an owner per stage in managedFields.
	// +optional
	// +listType=atomic
	Stages []StageStatus `json:"stages,omitempty"`
	// lastTransition is the run's last stage change: the edge taken and,
	// when the runtime took it on a signal (error, stuck, dead_end,
	// max_iterations) rather than the model's choice, why. The same reason
	// is told to the stage entered.
	// +optional
	LastTransition *StageTransition `json:"lastTransition,omitempty"`

	// usage is what this run itself has consumed (not its children).
	// +optional
	Usage Usage `json:"usage,omitempty,omitzero"`

	// inheritedUsage is what the calls a fork inherited from its source
	// consumed (spec.forkOf): they were made and billed once, by the source,
	// and are not counted in usage, treeUsage or this run's budgets. Absent
	// for a run that inherited no calls.
	// +optional
	InheritedUsage *Usage `json:"inheritedUsage,omitempty"`

	// origin links a rerun or a fork to the run it came from.
	// +optional
	Origin *Origin `json:"origin,omitempty"`

	// treeUsage is this run's usage plus every descendant's. Cost is unknown
	// if any descendant's is.
	// +optional
	TreeUsage *Usage `json:"treeUsage,omitempty"`

	// startedAt is when the controller accepted the run.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// updatedAt is the last time the controller wrote this record. Evidence
	// that the controller is alive, and no evidence that the run moved.
	// +optional
	UpdatedAt *metav1.Time `json:"updatedAt,omitempty"`
	// observedAt is when stage, stageIndex, iteration, stages, usage,
	// treeUsage and lastProgressAt were last read from the run's journal.
	// While a run only moves from one model call to the next they are
	// written at most every --status-interval (10 s by default), so they
	// may lag the run by that long; phase, waitingOn, conditions, errors
	// and the end are written within a second of changing.
	// +optional
	ObservedAt *metav1.Time `json:"observedAt,omitempty"`
	// lastProgressAt is when the run last actually moved: a new iteration, a
	// new stage or a new phase. Anything that ages a run reads this, never
	// updatedAt.
	// +optional
	LastProgressAt *metav1.Time `json:"lastProgressAt,omitempty"`
	// driver names the manager replica that drives the run while it is not
	// finished (the seeds' driver: attached); absent once it has finished.
	// Evidence, not a verdict: `kubectl agentrun ps` checks the replica's
	// shard Lease to say whether it is still alive.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Driver string `json:"driver,omitempty"`
	// finishedAt is when the run reached its terminal phase; retention
	// (ttlSecondsAfterFinished) counts from it.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// active measures working time, as against age. Absent means no clock
	// was kept; a present clock with zero seconds is a genuine zero.
	// +optional
	Active *ActiveClock `json:"active,omitempty"`

	// error says what went wrong. Set only with phase Error.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Error string `json:"error,omitempty"`

	// title is a short human title generated from the task; empty until
	// generated.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Title string `json:"title,omitempty"`
	// titleError says why title is still empty once titling gave up. Empty
	// is the ordinary state (pending, or never asked for).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	TitleError string `json:"titleError,omitempty"`

	// parentRun is the name of the run that owns this one (its controller
	// owner reference), empty for a top-level run. Replaces parent_run_id.
	// Children are found by the label agentrun.dev/parent=<name> and the
	// owner reference, replacing Leviath's persisted children list.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ParentRun string `json:"parentRun,omitempty"`
	// children summarises the run's owned child runs, derived from their
	// status on every reconcile.
	// +optional
	Children *ChildrenSummary `json:"children,omitempty"`

	// flags say why a run may have produced nothing useful.
	// +optional
	Flags RunFlags `json:"flags,omitempty,omitzero"`

	// readPaths is how much of the blueprint's [read_paths] was granted at
	// spawn. The operator reads no files of its own pod, so nothing is ever
	// granted; the counts make that visible for blueprints that declare paths.
	// Absent when the blueprint declares none.
	// +optional
	ReadPaths *ReadPathGrantCounts `json:"readPaths,omitempty"`

	// finalOutput describes what the run handed back: everything about the
	// answer except the bytes, which live in the owned object it names.
	// +optional
	FinalOutput *FinalOutputDescriptor `json:"finalOutput,omitempty"`

	// pendingCall is the one call whose intent is journaled and whose
	// completion is not, if any. While a running run only moves from one
	// model call to the next, it may lag the journal by up to the
	// manager's --status-interval (10s by default).
	// +optional
	PendingCall *PendingCall `json:"pendingCall,omitempty"`

	// callback is the state of the terminal webhook delivery, recorded so a
	// manager restart neither loses nor repeats it.
	// +optional
	Callback *CallbackStatus `json:"callback,omitempty"`

	// setupRefs are the objects a NeedsSetup park waits on, as
	// "Kind/name". The controller indexes them, so creating or fixing one
	// re-queues exactly the runs waiting on it.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=300
	SetupRefs []string `json:"setupRefs,omitempty"`

	// conditions follow Kubernetes API conventions and kstatus: Ready,
	// Reconciling and Stalled, plus Waiting and NeedsAttention.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// StageStatus is one blueprint stage as the run has met it.
type StageStatus struct {
	// name is the stage's name in the blueprint.
	// +required
	// +kubebuilder:validation:MaxLength=128
	Name string `json:"name"`
	// state is where the run stands with the stage.
	// +required
	State StageState `json:"state,omitempty"`
	// entered is when the run first entered the stage.
	// +optional
	Entered *metav1.Time `json:"entered,omitempty"`
	// visits counts the times the run entered the stage.
	// +optional
	Visits int32 `json:"visits,omitempty"`
	// iterations counts the stage's completed model turns over all visits.
	// +optional
	Iterations int32 `json:"iterations,omitempty"`
	// timeInStage is the wall-clock time of the visits that have ended
	// (waits included); the visit in progress adds to it when it ends.
	// +optional
	TimeInStage *metav1.Duration `json:"timeInStage,omitempty"`
}

// StageTransition is one stage change of a run.
type StageTransition struct {
	// from is the stage the run left.
	// +required
	// +kubebuilder:validation:MaxLength=128
	From string `json:"from"`
	// to is the stage the run entered.
	// +required
	// +kubebuilder:validation:MaxLength=128
	To string `json:"to"`
	// condition is the edge's condition: always, llm_choice, error,
	// max_iterations, stuck or dead_end; empty for a fan-out stage's move
	// to its merge stage, which needs no edge.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Condition string `json:"condition,omitempty"`
	// reason says why a runtime signal took the edge: the failure message
	// (error), the threshold reached (stuck), the spent revisits
	// (dead_end), the iteration cap (max_iterations).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Reason string `json:"reason,omitempty"`
}

// StageState is where a run stands with one stage.
// +kubebuilder:validation:Enum=Pending;Active;WaitingInput;Complete;Error;Cancelled;Skipped
type StageState string

// Stage states: Leviath's StageRunStatus, plus Cancelled.
const (
	// StagePending: not entered yet; the run may still get there.
	StagePending StageState = "Pending"
	// StageActive: the run is in the stage and working (or paused).
	StageActive StageState = "Active"
	// StageWaitingInput: the run is in the stage and parked.
	StageWaitingInput StageState = "WaitingInput"
	// StageComplete: the run left the stage, or completed in it.
	StageComplete StageState = "Complete"
	// StageError: the run ended in Error in this stage, or left the stage
	// on its error edge (a failure the edge recovered from).
	StageError StageState = "Error"
	// StageCancelled: the run was cancelled in this stage.
	StageCancelled StageState = "Cancelled"
	// StageSkipped: the run ended without entering the stage.
	StageSkipped StageState = "Skipped"
)

// Phase is the run's status, in Leviath's eight words (CamelCase per API
// conventions), plus Queued for a run not yet taken up.
// +kubebuilder:validation:Enum=Queued;Starting;Running;WaitingInput;Paused;Complete;CompleteInteractive;Error;Cancelled
type Phase string

// Phases.
const (
	// PhaseQueued: created, not yet taken up; it waits in line for an
	// active-run slot. The API server fills it in (the status default) for
	// a run the controller has not written yet, so showing a burst's waiting
	// runs as queued costs no write.
	PhaseQueued Phase = "Queued"
	// PhaseStarting: accepted, no model call made yet.
	PhaseStarting Phase = "Starting"
	// PhaseRunning: calling a model or tool, or changing stage.
	PhaseRunning Phase = "Running"
	// PhaseWaitingInput: parked; waitingOn says on what.
	PhaseWaitingInput Phase = "WaitingInput"
	// PhasePaused: paused by spec.paused.
	PhasePaused Phase = "Paused"
	// PhaseComplete: finished. Terminal.
	PhaseComplete Phase = "Complete"
	// PhaseCompleteInteractive: required stages done, follow-up input still
	// taken; reads as complete.
	PhaseCompleteInteractive Phase = "CompleteInteractive"
	// PhaseError: failed; status.error says why. Terminal.
	PhaseError Phase = "Error"
	// PhaseCancelled: stopped from outside. Terminal; nothing went wrong.
	PhaseCancelled Phase = "Cancelled"
)

// IsTerminal reports whether no further transition can happen.
func (p Phase) IsTerminal() bool {
	return p == PhaseComplete || p == PhaseError || p == PhaseCancelled
}

// IsUnstarted reports whether the controller has not taken the run up yet:
// Queued, or empty where no API server defaulted it (a fake client).
func (p Phase) IsUnstarted() bool { return p == "" || p == PhaseQueued }

// WaitReason names why a parked run waits.
// +kubebuilder:validation:Enum=ToolApproval;UserPrompt;TaintGate;InteractionPoint;FanOutWorkers;Children;NeedsSetup;Sleeping;BudgetExceeded;NeedsReconciliation;Signal;RateLimited;StoreUnavailable;QuotaExceeded
type WaitReason string

// Wait reasons: Leviath's seven, then Salvor's parks.
const (
	// WaitToolApproval: a tool call waits for approval. Needs a person.
	WaitToolApproval WaitReason = "ToolApproval"
	// WaitUserPrompt: the agent asked a question (ask the user, present for
	// review). Needs a person.
	WaitUserPrompt WaitReason = "UserPrompt"
	// WaitTaintGate: a write after tainted input waits for clearance. Needs
	// a person.
	WaitTaintGate WaitReason = "TaintGate"
	// WaitInteractionPoint: a blueprint checkpoint at a stage boundary.
	// Needs a person.
	WaitInteractionPoint WaitReason = "InteractionPoint"
	// WaitFanOutWorkers: fan-out workers are running. Healthy.
	WaitFanOutWorkers WaitReason = "FanOutWorkers"
	// WaitChildren: spawned sub-agents are running. Healthy.
	WaitChildren WaitReason = "Children"
	// WaitNeedsSetup: the cluster must change (a Secret, a ConfigMap, a
	// provider account) before the run can go on. Needs a person.
	WaitNeedsSetup WaitReason = "NeedsSetup"
	// WaitSleeping: a durable timer until wakeAt. Healthy.
	WaitSleeping WaitReason = "Sleeping"
	// WaitBudgetExceeded: a budget was reached; raise it to resume. Needs a
	// person.
	WaitBudgetExceeded WaitReason = "BudgetExceeded"
	// WaitNeedsReconciliation: a write tool call started and its outcome is
	// unknown; a person must resolve or abandon it.
	WaitNeedsReconciliation WaitReason = "NeedsReconciliation"
	// WaitSignal: waiting on an external system's signal. Healthy.
	WaitSignal WaitReason = "Signal"
	// WaitRateLimited: the run's model call is held by a provider's limit
	// (the limits providers.toml declares, or the provider's own 429/529
	// and the time it said to retry at). Healthy: it goes on by itself.
	WaitRateLimited WaitReason = "RateLimited"
	// WaitStoreUnavailable: the database the run's journal is kept in
	// (--store) cannot be used now, so no call starts (its intent could not
	// be recorded). storeError says why; it goes on by itself when the
	// database is back. A person is needed only when remedy is set (wrong
	// password, unknown host, missing permission).
	WaitStoreUnavailable WaitReason = "StoreUnavailable"
	// WaitQuotaExceeded: an AgentRunQuota or ClusterAgentRunQuota has no
	// room for the run (a Queued run not started) or for its next model
	// call (quota, resource, used, hard, resetAt). It goes on by itself
	// when the period resets (resetAt) or a run holding an activeRuns slot
	// finishes; needsAPerson is true only when nothing but raising the
	// quota can lift it (a running total used up).
	WaitQuotaExceeded WaitReason = "QuotaExceeded"
)

// WaitReasons lists every wait reason, in the order of the CRD's enum.
var WaitReasons = []WaitReason{
	WaitToolApproval, WaitUserPrompt, WaitTaintGate, WaitInteractionPoint, WaitFanOutWorkers, WaitChildren,
	WaitNeedsSetup, WaitSleeping, WaitBudgetExceeded, WaitNeedsReconciliation, WaitSignal, WaitRateLimited,
	WaitStoreUnavailable, WaitQuotaExceeded,
}

// NeedsAPerson reports whether clearing this wait needs a person. False only
// for waits that resolve by themselves: workers, children, sleeping,
// signal, rate limits.
func (r WaitReason) NeedsAPerson() bool {
	switch r {
	case WaitFanOutWorkers, WaitChildren, WaitSleeping, WaitSignal, WaitRateLimited, WaitStoreUnavailable:
		return false
	case "":
		return false
	default:
		return true
	}
}

// SetupBlocker names which kind of setup problem parks a run, one value per
// remedy, so a client can offer the right fix without parsing the sentence.
// +kubebuilder:validation:Enum=ProviderMissing;CreditsExhausted;AuthFailed;Forbidden;ProvidersUnavailable;ProviderUnreachable;ProviderTimedOut;ProviderFailed;ProviderOverloaded;ProviderConfigMissing;ProviderConfigInvalid;SecretMissing;SecretKeyMissing;BlueprintMissing;ToolServerUnavailable;EgressRefused;RegionMissing;RegionTooLarge;ForkSourceMissing
type SetupBlocker string

// Setup blockers: the seeds' provider-side ones, then the Kubernetes ones.
const (
	// BlockerProviderMissing: no provider in the provider config serves the
	// model the stage needs.
	BlockerProviderMissing SetupBlocker = "ProviderMissing"
	// BlockerCreditsExhausted: the provider account is out of credits or quota.
	BlockerCreditsExhausted SetupBlocker = "CreditsExhausted"
	// BlockerAuthFailed: the provider rejected the API key (401).
	BlockerAuthFailed SetupBlocker = "AuthFailed"
	// BlockerForbidden: the key is valid but not allowed this model (403).
	BlockerForbidden SetupBlocker = "Forbidden"
	// BlockerProvidersUnavailable: every candidate provider is out of service
	// for mixed or unknown reasons.
	BlockerProvidersUnavailable SetupBlocker = "ProvidersUnavailable"
	// BlockerProviderUnreachable: the provider was never reached (connection
	// refused, DNS).
	BlockerProviderUnreachable SetupBlocker = "ProviderUnreachable"
	// BlockerProviderTimedOut: the provider was reached but too slow.
	BlockerProviderTimedOut SetupBlocker = "ProviderTimedOut"
	// BlockerProviderFailed: the provider failed part-way, after retries.
	BlockerProviderFailed SetupBlocker = "ProviderFailed"
	// BlockerProviderOverloaded: the model answered overloaded (HTTP 529,
	// or 503 with Retry-After) for longer than its provider's
	// overload_failover_seconds, and no other model of the stage was left
	// to fail over to.
	BlockerProviderOverloaded SetupBlocker = "ProviderOverloaded"
	// BlockerProviderConfigMissing: the provider ConfigMap does not exist.
	BlockerProviderConfigMissing SetupBlocker = "ProviderConfigMissing"
	// BlockerProviderConfigInvalid: the provider ConfigMap does not parse.
	BlockerProviderConfigInvalid SetupBlocker = "ProviderConfigInvalid"
	// BlockerSecretMissing: a Secret the provider config names does not exist.
	BlockerSecretMissing SetupBlocker = "SecretMissing"
	// BlockerSecretKeyMissing: the Secret exists but the key is absent or empty.
	BlockerSecretKeyMissing SetupBlocker = "SecretKeyMissing"
	// BlockerBlueprintMissing: the blueprint ConfigMap does not exist yet
	// (GitOps may apply the run before its blueprint).
	BlockerBlueprintMissing SetupBlocker = "BlueprintMissing"
	// BlockerToolServerUnavailable: an MCP server the blueprint names could
	// not be reached or refused its token; the remedy says which.
	BlockerToolServerUnavailable SetupBlocker = "ToolServerUnavailable"
	// BlockerEgressRefused: the manager's egress policy refuses the address
	// a provider base URL or MCP server URL leads to (loopback, link-local,
	// cloud metadata, the API server, the manager pod, a denied range or a
	// host off the allowlist); the remedy names the rule and the setting
	// that would allow it. Retried every 30 seconds, so an edit to the
	// policy takes effect by itself.
	BlockerEgressRefused SetupBlocker = "EgressRefused"
	// BlockerRegionMissing: a ConfigMap or Secret (or its key) that
	// spec.regions reads a region from does not exist yet; creating it
	// wakes the run.
	BlockerRegionMissing SetupBlocker = "RegionMissing"
	// BlockerRegionTooLarge: a region's ConfigMap or Secret key holds more
	// than a region may (128 KiB); shrinking it wakes the run.
	BlockerRegionTooLarge SetupBlocker = "RegionTooLarge"
	// BlockerForkSourceMissing: the run spec.forkOf names does not exist
	// (yet: GitOps may apply the fork first); creating it wakes the fork.
	BlockerForkSourceMissing SetupBlocker = "ForkSourceMissing"
)

// JournalStore is where a run's journal is kept.
// +kubebuilder:validation:Enum=ConfigMaps;Database
type JournalStore string

// Journal stores.
const (
	// JournalConfigMaps: ConfigMaps the run owns (the default store).
	JournalConfigMaps JournalStore = "ConfigMaps"
	// JournalDatabase: the operator's database, PostgreSQL or SQLite.
	JournalDatabase JournalStore = "Database"
)

// BudgetKind names a budget.
// +kubebuilder:validation:Enum=Steps;Tokens;CostUSD;WallTime;ToolCalls
type BudgetKind string

// Budget kinds, in the order they are checked.
const (
	BudgetSteps     BudgetKind = "Steps"
	BudgetTokens    BudgetKind = "Tokens"
	BudgetCostUSD   BudgetKind = "CostUSD"
	BudgetWallTime  BudgetKind = "WallTime"
	BudgetToolCalls BudgetKind = "ToolCalls"
)

// WaitingOn is a tagged union: reason says which variant, and only that
// variant's fields are set (the schema enforces it).
//
// +kubebuilder:validation:XValidation:rule="(self.reason == 'FanOutWorkers' || self.reason == 'Children') == has(self.outstanding)",message="outstanding is set exactly for FanOutWorkers and Children"
// +kubebuilder:validation:XValidation:rule="self.reason == 'NeedsSetup' ? (has(self.blocker) && has(self.remedy)) : (!has(self.blocker) && (!has(self.remedy) || self.reason == 'StoreUnavailable'))",message="blocker and remedy are set exactly for NeedsSetup (remedy also for StoreUnavailable)"
// +kubebuilder:validation:XValidation:rule="(self.reason == 'StoreUnavailable') == has(self.storeError)",message="storeError is set exactly for StoreUnavailable"
// +kubebuilder:validation:XValidation:rule="(self.reason == 'Sleeping') == has(self.wakeAt)",message="wakeAt is set exactly for Sleeping"
// +kubebuilder:validation:XValidation:rule="self.reason == 'BudgetExceeded' ? (has(self.budget) && has(self.observed)) : (!has(self.budget) && !has(self.observed))",message="budget and observed are set exactly for BudgetExceeded"
// +kubebuilder:validation:XValidation:rule="self.reason == 'NeedsReconciliation' ? (has(self.seq) && has(self.tool)) : (!has(self.seq) && !has(self.tool))",message="seq and tool are set exactly for NeedsReconciliation"
// +kubebuilder:validation:XValidation:rule="(self.reason == 'Signal') == has(self.signal)",message="signal is set exactly for Signal"
// +kubebuilder:validation:XValidation:rule="!has(self.inputSchema) || self.reason == 'UserPrompt' || self.reason == 'Signal'",message="inputSchema is set only for UserPrompt and Signal"
// +kubebuilder:validation:XValidation:rule="self.reason == 'RateLimited' ? (has(self.provider) && has(self.model)) : (!has(self.provider) && !has(self.model) && !has(self.retryAt))",message="provider and model are set exactly for RateLimited, retryAt only for it"
// +kubebuilder:validation:XValidation:rule="self.reason == 'QuotaExceeded' ? (has(self.quota) && has(self.resource) && has(self.used) && has(self.hard)) : (!has(self.quota) && !has(self.resource) && !has(self.used) && !has(self.hard) && !has(self.resetAt))",message="quota, resource, used and hard are set exactly for QuotaExceeded, resetAt only for it"
type WaitingOn struct {
	// reason is the variant.
	// +required
	Reason WaitReason `json:"reason,omitempty"`
	// needsAPerson is false only for waits that clear by themselves
	// (workers, children, sleeping, signal). Alerts key on it. Always
	// present, true or false, so a jsonpath read never comes back empty.
	// +required
	NeedsAPerson bool `json:"needsAPerson"`
	// summary renders the wait for listings, e.g. "FanOutWorkers(3)" or
	// "NeedsSetup: SecretMissing".
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Summary string `json:"summary,omitempty"`
	// since is when the run parked on this reason.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// question is what the run asks the person it waits on: the
	// checkpoint's or the agent's prompt, or the tool call to approve.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Question string `json:"question,omitempty"`
	// point names the checkpoint (InteractionPoint) or question being
	// asked, so an answer can say what it answers.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Point string `json:"point,omitempty"`

	// outstanding counts workers or children not yet terminal (running
	// plus queued). FanOutWorkers and Children only.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Outstanding *int32 `json:"outstanding,omitempty"`

	// blocker is which setup problem it is. NeedsSetup only.
	// +optional
	Blocker SetupBlocker `json:"blocker,omitempty"`
	// remedy is one sentence a cluster operator can act on, naming the
	// namespace, object and key (or the flag). Never contains a secret
	// value. NeedsSetup, and StoreUnavailable when a person must act.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Remedy string `json:"remedy,omitempty"`

	// wakeAt is when a sleeping run wakes. Sleeping only.
	// +optional
	WakeAt *metav1.Time `json:"wakeAt,omitempty"`

	// budget is the budget that was reached. BudgetExceeded only.
	// +optional
	Budget *BudgetLimit `json:"budget,omitempty"`
	// observed is the value that reached it, as a decimal string.
	// BudgetExceeded only.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Observed string `json:"observed,omitempty"`

	// seq is the journal sequence of the dangling write. NeedsReconciliation
	// only.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Seq *int64 `json:"seq,omitempty"`
	// tool is the dangling write's tool. NeedsReconciliation only.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Tool string `json:"tool,omitempty"`

	// signal is the reason the run gave for waiting on an external system.
	// Signal only.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Signal string `json:"signal,omitempty"`

	// provider is the provider whose limit holds the call. RateLimited
	// only.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Provider string `json:"provider,omitempty"`
	// model is the model whose limit holds the call. RateLimited only.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Model string `json:"model,omitempty"`
	// retryAt is when the call was expected to be sent, as of when the
	// wait was shown: the time the provider said to retry at, or the
	// limit's next free slot. Absent when only a concurrency bound holds
	// it (nobody knows when a slot frees). RateLimited only.
	// +optional
	RetryAt *metav1.Time `json:"retryAt,omitempty"`

	// storeError is why the run's store cannot be used, as the database
	// driver said it, without credentials. StoreUnavailable only.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	StoreError string `json:"storeError,omitempty"`

	// inputSchema is the JSON Schema (as JSON text) an answer must satisfy:
	// the agent's own input_schema, or the one its choices or confirmation
	// imply. UserPrompt questions and Signal only.
	// +optional
	// +kubebuilder:validation:MaxLength=8192
	InputSchema string `json:"inputSchema,omitempty"`

	// quota names the quota with no room: AgentRunQuota/<namespace>/<name>
	// or ClusterAgentRunQuota/<name>. QuotaExceeded only.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Quota string `json:"quota,omitempty"`
	// resource is the quota's limit that has no room. QuotaExceeded only.
	// +optional
	Resource QuotaResource `json:"resource,omitempty"`
	// used is what the quota's runs have used of resource (cost in US
	// dollars, with the calls in flight at their worst case), as a decimal
	// string. QuotaExceeded only.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Used string `json:"used,omitempty"`
	// hard is the quota's limit of resource, as a decimal string.
	// QuotaExceeded only.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Hard string `json:"hard,omitempty"`
	// resetAt is when the quota's period resets and the run goes on by
	// itself; absent when no reset lifts the wait (a running total, or
	// activeRuns, which frees as runs finish). QuotaExceeded only.
	// +optional
	ResetAt *metav1.Time `json:"resetAt,omitempty"`
}

// BudgetLimit is a budget and its limit.
type BudgetLimit struct {
	// kind of budget.
	// +required
	Kind BudgetKind `json:"kind,omitempty"`
	// limit in force when it fired, as a decimal string.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Limit string `json:"limit"`
}

// Usage counts what a run consumed, from completed model calls (a failed
// attempt reports no usage, so it adds none).
type Usage struct {
	// promptTokens billed across every model call.
	// +optional
	PromptTokens int64 `json:"promptTokens,omitempty"`
	// completionTokens billed across every model call.
	// +optional
	CompletionTokens int64 `json:"completionTokens,omitempty"`
	// cachedTokens read from provider caches.
	// +optional
	CachedTokens int64 `json:"cachedTokens,omitempty"`
	// cacheWriteTokens written to provider caches.
	// +optional
	CacheWriteTokens int64 `json:"cacheWriteTokens,omitempty"`
	// totalTokens is promptTokens + completionTokens, for listings.
	// +optional
	TotalTokens int64 `json:"totalTokens,omitempty"`
	// modelCalls made (steps).
	// +optional
	ModelCalls int64 `json:"modelCalls,omitempty"`
	// toolCalls made across all iterations.
	// +optional
	ToolCalls int64 `json:"toolCalls,omitempty"`
	// costUSD is what the run spent, as a decimal string, or "unknown" when
	// any call could not be priced: unknown is never free, so a total that
	// would understate by an unknown amount is not given. Decimal strings
	// rather than floats keep the figures exact.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^(unknown|[0-9]+(\.[0-9]+)?)$`
	CostUSD string `json:"costUSD,omitempty"`
	// costPricedUSD is the priced subtotal, kept even when costUSD is
	// unknown so accounting never restarts from zero.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	CostPricedUSD string `json:"costPricedUSD,omitempty"`
	// unpricedCalls could not be priced at all; non-zero makes costUSD
	// unknown.
	// +optional
	UnpricedCalls int64 `json:"unpricedCalls,omitempty"`
	// lostCalls are model calls that may have reached the provider (and so
	// may be billed) but whose answer was lost when a manager died; each
	// was made again. Non-zero makes costUSD unknown and costIsExact false.
	// +optional
	LostCalls int64 `json:"lostCalls,omitempty"`
	// costIsExact is true when every priced call carried the provider's own
	// cost figure, false when any was reconstructed from rate cards.
	// +optional
	CostIsExact bool `json:"costIsExact,omitempty"`
}

// ActiveClock measures working time: banked seconds plus the open span since
// `since`, which is set only while the clock runs.
type ActiveClock struct {
	// bankedSeconds from closed spans.
	// +optional
	// +kubebuilder:validation:Minimum=0
	BankedSeconds int64 `json:"bankedSeconds,omitempty"`
	// since is when the open span began; absent while stopped.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
}

// ChildrenSummary counts a run's owned child runs by state.
type ChildrenSummary struct {
	// total children created.
	// +optional
	Total int32 `json:"total,omitempty"`
	// running children (not terminal).
	// +optional
	Running int32 `json:"running,omitempty"`
	// queued items not yet given a child.
	// +optional
	Queued int32 `json:"queued,omitempty"`
	// succeeded children.
	// +optional
	Succeeded int32 `json:"succeeded,omitempty"`
	// failed children (Error or Cancelled), counting every attempt.
	// +optional
	Failed int32 `json:"failed,omitempty"`
	// retried items: failed attempts that were given another attempt.
	// +optional
	Retried int32 `json:"retried,omitempty"`
}

// RunFlags say why a run may have produced nothing useful.
type RunFlags struct {
	// modifiedFiles are the files write tools reported changing,
	// deduplicated and capped at 200.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=200
	// +kubebuilder:validation:items:MaxLength=1024
	ModifiedFiles []string `json:"modifiedFiles,omitempty"`
	// modifiedFileCount counts modifying tool calls.
	// +optional
	ModifiedFileCount int32 `json:"modifiedFileCount,omitempty"`
	// emptyOutput means the run is terminal with no modifications and no
	// output produced, although it had output tools.
	// +optional
	EmptyOutput bool `json:"emptyOutput,omitempty"`
	// noOutputTools means the run had no way to produce output (routers,
	// researchers), so emptyOutput is not raised against it.
	// +optional
	NoOutputTools bool `json:"noOutputTools,omitempty"`
	// searchesRun counts search tool calls.
	// +optional
	SearchesRun int32 `json:"searchesRun,omitempty"`
	// searchesEmpty counts searches that found nothing; equal to
	// searchesRun and non-zero means the report rests on nothing.
	// +optional
	SearchesEmpty int32 `json:"searchesEmpty,omitempty"`
	// maxIterationsHit means a stage ran out of iterations.
	// +optional
	MaxIterationsHit bool `json:"maxIterationsHit,omitempty"`
	// gatesForced means an interaction point was passed without a person.
	// +optional
	GatesForced bool `json:"gatesForced,omitempty"`
	// outputForced means output was accepted without passing validation.
	// +optional
	OutputForced bool `json:"outputForced,omitempty"`
	// workspaceLost means state the run depended on disappeared.
	// +optional
	WorkspaceLost bool `json:"workspaceLost,omitempty"`
	// producedOutput means the run submitted output.
	// +optional
	ProducedOutput bool `json:"producedOutput,omitempty"`
	// brokenScripts means a declared validator could not run.
	// +optional
	BrokenScripts bool `json:"brokenScripts,omitempty"`
	// requiredRegionsAbandoned means required regions were still empty at
	// the end.
	// +optional
	RequiredRegionsAbandoned bool `json:"requiredRegionsAbandoned,omitempty"`
	// splitsDegraded means a fan-out lost items.
	// +optional
	SplitsDegraded bool `json:"splitsDegraded,omitempty"`
}

// ReadPathGrantCounts says how much of a blueprint's declared read paths was
// granted at spawn.
type ReadPathGrantCounts struct {
	// declared read paths.
	// +optional
	Declared int32 `json:"declared,omitempty"`
	// granted read paths.
	// +optional
	Granted int32 `json:"granted,omitempty"`
}

// FinalOutputDescriptor is everything about a run's answer except the bytes.
type FinalOutputDescriptor struct {
	// format of the output.
	// +optional
	Format OutputFormat `json:"format,omitempty"`
	// stage that submitted it.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Stage string `json:"stage,omitempty"`
	// submittedAt is when it was submitted.
	// +optional
	SubmittedAt *metav1.Time `json:"submittedAt,omitempty"`
	// bytes is the size as submitted, before any truncation.
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// truncated means the stored copy was cut at the 256 KiB cap.
	// +optional
	Truncated bool `json:"truncated,omitempty"`
	// objectName is the owned ConfigMap holding the bytes (key "output").
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ObjectName string `json:"objectName,omitempty"`
	// artifacts the run named alongside its answer.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=1024
	Artifacts []string `json:"artifacts,omitempty"`
}

// CallKind says whether a pending call is a model or a tool call.
// +kubebuilder:validation:Enum=model;tool
type CallKind string

// Call kinds.
const (
	CallKindModel CallKind = "model"
	CallKindTool  CallKind = "tool"
)

// ToolEffect is what a tool call does to the world, which decides what
// happens to a call interrupted by a restart.
// +kubebuilder:validation:Enum=read;idempotent;write
type ToolEffect string

// Tool effects.
const (
	// EffectRead: re-executed on recovery.
	EffectRead ToolEffect = "read"
	// EffectIdempotent: re-executed with the same recorded idempotency key.
	EffectIdempotent ToolEffect = "idempotent"
	// EffectWrite: never retried without a person's decision.
	EffectWrite ToolEffect = "write"
)

// PendingCall is a journaled call intent with no recorded completion (seed
// 002's pending object).
type PendingCall struct {
	// kind of call.
	// +required
	Kind CallKind `json:"kind,omitempty"`
	// seq is the call's journal sequence.
	// +required
	// +kubebuilder:validation:Minimum=0
	Seq int64 `json:"seq"`
	// requestHash identifies a model request. Model calls only.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	RequestHash string `json:"requestHash,omitempty"`
	// tool called. Tool calls only.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Tool string `json:"tool,omitempty"`
	// input is the tool call's arguments as JSON. Tool calls only.
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	Input string `json:"input,omitempty"`
	// effect of the tool. Tool calls only.
	// +optional
	Effect ToolEffect `json:"effect,omitempty"`
	// idempotencyKey recorded with the intent. Tool calls only.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	// stage the call belongs to.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Stage string `json:"stage,omitempty"`
	// iteration of the stage the call is made in (model calls).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Iteration int32 `json:"iteration,omitempty"`
	// provider is the provider the call goes to (model calls).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Provider string `json:"provider,omitempty"`
	// model is the model the call goes to (model calls).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Model string `json:"model,omitempty"`
	// purpose is "title" for the call that names the run (model calls).
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Purpose string `json:"purpose,omitempty"`
	// index is the tool call's position in the model answer's calls.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Index int32 `json:"index,omitempty"`
	// server is the MCP server the tool is called on (tool calls).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Server string `json:"server,omitempty"`
	// lost counts earlier dispatches of this intent whose outcome never
	// came back (a manager died meanwhile): each may have been billed.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Lost int32 `json:"lost,omitempty"`
}

// AgentRun is one AI-agent task: a blueprint, a task, and the record of the
// run as it moves through its stages.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ar,categories=agentrun-all
// +kubebuilder:printcolumn:name="Agent",type=string,JSONPath=`.spec.agent`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Waiting",type=string,JSONPath=`.status.waitingOn.summary`
// +kubebuilder:printcolumn:name="Stage",type=string,JSONPath=`.status.stage`
// +kubebuilder:printcolumn:name="Tokens",type=integer,JSONPath=`.status.usage.totalTokens`
// +kubebuilder:printcolumn:name="Cost",type=string,JSONPath=`.status.usage.costUSD`
// +kubebuilder:printcolumn:name="Last Moved",type=date,JSONPath=`.status.lastProgressAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Title",type=string,JSONPath=`.status.title`,priority=10
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.status.model`,priority=10
// +kubebuilder:printcolumn:name="Parent",type=string,JSONPath=`.status.parentRun`,priority=10
// +kubebuilder:printcolumn:name="Priority",type=integer,JSONPath=`.spec.priority`,priority=10
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.priorityClassName`,priority=10
type AgentRun struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata: name, namespace, labels,
	// annotations.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what was asked for.
	// +required
	Spec AgentRunSpec `json:"spec,omitzero"`

	// status is the run record, written by the controller.
	// +optional
	// +default={"observedGeneration":-1,"phase":"Queued"}
	Status AgentRunStatus `json:"status,omitempty,omitzero"`
}

// AgentRunList is a list of AgentRuns.
//
// +kubebuilder:object:root=true
type AgentRunList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AgentRun `json:"items"`
}
