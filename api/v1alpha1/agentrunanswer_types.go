package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// AgentRunAnswer answers what a run waits on: a checkpoint
// (InteractionPoint), a tool call to approve (ToolApproval), a write after
// tainted input (TaintGate), the agent's question or review (UserPrompt), a
// dangling write (NeedsReconciliation), or an external system's signal
// (Signal). A separate resource so RBAC can grant answering
// (create agentrunanswers) without granting edits to runs, and so every
// answer stays as an audit record. Who answered is spec.by, which the
// agentrun-answer-identity ValidatingAdmissionPolicy requires to equal the
// authenticated user creating it: a name nobody can fill in for someone else.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ara,categories=agentrun-all
// +kubebuilder:printcolumn:name="Run",type=string,JSONPath=`.spec.run`
// +kubebuilder:printcolumn:name="Point",type=string,JSONPath=`.spec.point`
// +kubebuilder:printcolumn:name="Decision",type=string,JSONPath=`.spec.decision`
// +kubebuilder:printcolumn:name="By",type=string,JSONPath=`.spec.by`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Text",type=string,JSONPath=`.spec.text`,priority=1
// +kubebuilder:printcolumn:name="Input",type=string,JSONPath=`.spec.input`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.spec.reason`,priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AgentRunAnswer struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata: name, namespace, labels,
	// annotations.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the answer. Immutable: an answer is a record.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="an answer cannot be changed; create another"
	// +kubebuilder:validation:XValidation:rule="has(self.decision) || has(self.text) || has(self.input)",message="an answer needs a decision, text or input"
	// +kubebuilder:validation:XValidation:rule="!(has(self.text) && has(self.input))",message="set text or input, not both"
	// +kubebuilder:validation:XValidation:rule="!has(self.args) || (has(self.decision) && self.decision == 'Approve')",message="args replace a tool call's arguments, so they go with decision Approve"
	// +kubebuilder:validation:XValidation:rule="!has(self.reason) || has(self.decision)",message="a reason explains a decision; set decision too"
	Spec AgentRunAnswerSpec `json:"spec,omitzero"`

	// status says whether the run took the answer.
	// +optional
	Status AgentRunAnswerStatus `json:"status,omitempty,omitzero"`
}

// AgentRunAnswerSpec names the run, the question and the answer.
type AgentRunAnswerSpec struct {
	// run is the AgentRun (in this namespace) the answer is for.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Run string `json:"run,omitempty"`
	// point is the question answered: the run's status.waitingOn.point.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Point string `json:"point,omitempty"`
	// decision approves or denies a checkpoint, tool call, taint gate or
	// review (a denied checkpoint cancels the run; a denied tool call is
	// not made and the agent is told). For a dangling write
	// (NeedsReconciliation): Done (it happened; text or input is its
	// output), Retry (it did not; issue it again) or Abandon (end the run).
	// A checkpoint that offers edit_options also takes Edit (text is the
	// edited draft); one with directives takes Revise (text is the
	// instructions the stage is sent back with).
	// Questions and signals need no decision, only text or input.
	// +optional
	Decision AnswerDecision `json:"decision,omitempty"`
	// text is a plain-text answer: free text, one of the offered choices,
	// yes or no, a review's feedback, or a resolved write's output.
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	Text *string `json:"text,omitempty"`
	// input is the answer as JSON text, checked against the question's
	// input_schema: '{"env":"prod"}', '42', or 'null' (null is an input).
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	Input *string `json:"input,omitempty"`
	// args replace, on an Approve of a tool call (ToolApproval), the
	// arguments the model gave: a JSON object, at most 16 KiB, checked
	// against the tool's input schema. The call is made with them, once;
	// the model is told the call ran with them; the journal records them
	// as edited by this answer's by.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:MaxProperties=256
	Args *runtime.RawExtension `json:"args,omitempty"`
	// reason says why the person decided so. A denied tool call's reason
	// is told to the model; with any decision it is kept in the journal
	// and the transcript. A tool policy rule with requireReason refuses
	// an answer to the approval it asks for without one.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Reason string `json:"reason,omitempty"`
	// by is the authenticated user answering; admission refuses any other
	// name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	By string `json:"by,omitempty"`
}

// MaxAnswerArgsBytes bounds an answer's spec.args, as compact JSON. The
// schema cannot bound the bytes of a free-form object, so the run refuses
// larger ones (and the kubectl plugin refuses to send them).
const MaxAnswerArgsBytes = 16384

// AnswerDecision approves or denies, or settles a dangling write.
// +kubebuilder:validation:Enum=Approve;Deny;Done;Retry;Abandon;Edit;Revise
type AnswerDecision string

// Decisions.
const (
	DecisionApprove AnswerDecision = "Approve"
	DecisionDeny    AnswerDecision = "Deny"
	// DecisionDone: the dangling write happened; the answer's text or input
	// is its output.
	DecisionDone AnswerDecision = "Done"
	// DecisionRetry: the dangling write did not happen; issue it again.
	DecisionRetry AnswerDecision = "Retry"
	// DecisionAbandon: end the run, recording the unresolved write.
	DecisionAbandon AnswerDecision = "Abandon"
	// DecisionEdit passes a checkpoint whose point has edit_options with
	// the person's edit of the draft it shows (text): the edit replaces the
	// draft's region, and the next stage gets it.
	DecisionEdit AnswerDecision = "Edit"
	// DecisionRevise answers a checkpoint whose point has directives: the
	// stage is sent back, with the person's instructions (text).
	DecisionRevise AnswerDecision = "Revise"
)

// AnswerState is what became of an answer.
// +kubebuilder:validation:Enum=Applied;Rejected
type AnswerState string

// Answer states.
const (
	// AnswerApplied: the run took the answer (exactly once).
	AnswerApplied AnswerState = "Applied"
	// AnswerRejected: the run was not waiting on that question, or the
	// answer does not fit it (a choice not offered, input failing the
	// question's schema).
	AnswerRejected AnswerState = "Rejected"
)

// AgentRunAnswerStatus records what the run did with the answer.
type AgentRunAnswerStatus struct {
	// state of the answer; absent while the run has not looked at it.
	// +optional
	State AnswerState `json:"state,omitempty"`
	// message explains the state.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// appliedAt is when the run took it.
	// +optional
	AppliedAt *metav1.Time `json:"appliedAt,omitempty"`
}

// AgentRunAnswerList is a list of AgentRunAnswers.
//
// +kubebuilder:object:root=true
type AgentRunAnswerList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AgentRunAnswer `json:"items"`
}
