package v1alpha1

// Condition types. Ready, Reconciling and Stalled carry kstatus semantics, so
// `kubectl wait`, Argo CD and Flux read a run without custom code:
// Reconciling=True means work is in progress, Stalled=True means the run
// cannot progress without a change from outside, Ready=True means it is done.
const (
	// ConditionReady is True once the run completed successfully (on a tool
	// policy: once its rules compiled).
	ConditionReady = "Ready"
	// ConditionReconciling is True while the run is being driven (working,
	// waiting on its own children, paused), absent once terminal.
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True when the run cannot go on by itself: it needs
	// setup, it failed, or it was cancelled.
	ConditionStalled = "Stalled"
	// ConditionWaiting is True while the run is parked; its reason is the
	// waitingOn reason.
	ConditionWaiting = "Waiting"
	// ConditionNeedsAttention is True while the run waits on a person.
	ConditionNeedsAttention = "NeedsAttention"
	// ConditionArchived is True once a finished run's record (spec, final
	// status, journal, output, children, usage and cost) is in the
	// database store's archive; False with the reason while that write
	// fails, during which the run is not deleted. Absent without a
	// database store, and before the run finishes.
	ConditionArchived = "Archived"
)

// Condition reasons. The waitingOn reasons (ToolApproval, NeedsSetup, ...)
// are used verbatim as reasons of Waiting, NeedsAttention and Stalled.
const (
	// ReasonAccepted: the controller has seen the run and is preparing it.
	ReasonAccepted = "Accepted"
	// ReasonProgressing: the run is working through its stages.
	ReasonProgressing = "Progressing"
	// ReasonWaitingForExecutor: a step is ready but every executor slot is
	// busy (backpressure; never a setup problem).
	ReasonWaitingForExecutor = "WaitingForExecutor"
	// ReasonPaused: spec.paused is set.
	ReasonPaused = "Paused"
	// ReasonSucceeded: the run completed.
	ReasonSucceeded = "Succeeded"
	// ReasonFailed: the run ended in Error.
	ReasonFailed = "Failed"
	// ReasonCancelled: the run was cancelled.
	ReasonCancelled = "Cancelled"
	// ReasonNotWaiting: the run is not parked.
	ReasonNotWaiting = "NotWaiting"
	// ReasonNoPersonNeeded: nothing waits on a person.
	ReasonNoPersonNeeded = "NoPersonNeeded"
	// ReasonIncomplete: the run has not completed yet.
	ReasonIncomplete = "Incomplete"
	// ReasonRetryingAfterError: the last reconcile failed on a transient
	// error (the API server refused a write, a read timed out); the message
	// says which, and the controller retries with backoff. Shown on
	// Reconciling.
	ReasonRetryingAfterError = "RetryingAfterError"
	// ReasonReconcileFailed: the controller cannot go on with the run
	// without a change from outside (its journal is corrupt). Shown on
	// Stalled.
	ReasonReconcileFailed = "ReconcileFailed"
	// ReasonWaitingForToolCatalog: the tools the next step needs are being
	// listed from their MCP servers; the run goes on once they are known.
	ReasonWaitingForToolCatalog = "WaitingForToolCatalog"
	// ReasonModelFailover (an Event's reason): a stage's model was passed
	// over for the next in its list; the message names each one skipped and
	// why.
	ReasonModelFailover = "ModelFailover"
	// ReasonSignalTransition (an Event's reason, Warning): the runtime
	// moved the run on an error, stuck or dead_end edge instead of ending
	// it; the message names the edge and why (status.lastTransition).
	ReasonSignalTransition = "SignalTransition"
	// ReasonValidatorNotRun (an Event's reason, Warning): the blueprint
	// declares an output validator, a Leviath Rhai script the operator
	// cannot execute; the output was checked against its format and schema
	// only, and status.flags.brokenScripts is set.
	ReasonValidatorNotRun = "ValidatorNotRun"
	// ReasonStuckThresholdUnmeasured (an Event's reason, Warning): a stuck
	// edge's stuck_after_same_file_edits counts write_file and edit_file
	// calls (there is no workdir to watch), and the stage offers neither,
	// so that threshold cannot fire; the edge's other thresholds still can.
	ReasonStuckThresholdUnmeasured = "StuckThresholdUnmeasured"
	// ReasonArchived: the finished run's record is in the archive
	// (Archived=True).
	ReasonArchived = "Archived"
	// ReasonArchiveFailed: writing the finished run's record failed
	// (Archived=False); the message says why, the controller retries, and
	// the run is not deleted until it succeeds.
	ReasonArchiveFailed = "ArchiveFailed"
	// ReasonQueued: the run waits for one of the manager's active-run slots
	// (--max-active-runs); runs are admitted in creation order.
	ReasonQueued = "Queued"
)

// Tool policy (AgentToolPolicy, ClusterAgentToolPolicy) condition reasons.
// A policy has one condition, ConditionReady: True once every rule compiled
// within the cost budget.
const (
	// ReasonRulesCompiled: every rule compiled (Ready=True).
	ReasonRulesCompiled = "RulesCompiled"
	// ReasonInvalidRule: a rule does not compile or exceeds the cost budget
	// (Ready=False); the message has the CEL errors. Admission refuses such
	// rules, so this shows only for policies stored before it did.
	ReasonInvalidRule = "InvalidRule"
)

// Labels, annotations and finalizers.
const (
	// Finalizer lets the controller stop in-flight work before deletion.
	Finalizer = "agentrun.dev/finalizer"
	// LabelParent names the parent run on a child and on owned objects.
	LabelParent = "agentrun.dev/parent"
	// LabelParentUID is the parent run's UID on a child (names can exceed
	// a label value's 63 characters; UIDs cannot).
	LabelParentUID = "agentrun.dev/parent-uid"
	// LabelItem is a fan-out child's item index.
	LabelItem = "agentrun.dev/item"
	// LabelAttempt is a fan-out child's attempt number (1, 2, ...).
	LabelAttempt = "agentrun.dev/attempt"
	// LabelChildKind says whether a child is a fan-out worker or a spawned
	// sub-agent.
	LabelChildKind = "agentrun.dev/child-kind"
	// LabelComponent says what an owned object is (blueprint-snapshot,
	// journal, output).
	LabelComponent = "agentrun.dev/component"
	// LabelRootCreated is, on a child, when its tree's root run was created
	// (Unix nanoseconds), and LabelRoot the root's name: a child queues for
	// admission with its tree's place in line.
	LabelRootCreated = "agentrun.dev/root-created"
	LabelRoot        = "agentrun.dev/root"
	// LabelRerunOf names, on a rerun, the run it repeats (as a label when
	// the name fits a label value, and always as an annotation of the same
	// key), and AnnotationRerunOfUID that run's UID. kubectl agentrun rerun
	// sets them; status.origin reports them.
	LabelRerunOf         = "agentrun.dev/rerun-of"
	AnnotationRerunOfUID = "agentrun.dev/rerun-of-uid"
	// LabelForkOf names, on a fork the plugin made, the run it forks, so
	// `kubectl get ar -l agentrun.dev/fork-of=NAME` lists a run's forks.
	LabelForkOf = "agentrun.dev/fork-of"
	// AnnotationMaxActiveRuns, on a Namespace, bounds how many of its runs
	// are active at once (a non-negative integer; "0": no bound of its
	// own), overriding the manager's --max-active-runs-per-namespace. It is
	// the cluster admin's: editing a Namespace takes cluster-scoped rights
	// a tenant normally lacks. A value that is not a number is ignored.
	AnnotationMaxActiveRuns = "agentrun.dev/max-active-runs"
	// AnnotationMaxPriority, on a Namespace, caps the priority its runs
	// may ask for (an integer): a run whose spec.priority, or the value of
	// whose spec.priorityClassName, is higher is refused at apply by the
	// agentrun-priority-cap admission policies. Like the bound above it is
	// the cluster admin's. A value that is not an integer refuses every
	// run of the namespace that asks for a priority.
	AnnotationMaxPriority = "agentrun.dev/max-priority"
)
