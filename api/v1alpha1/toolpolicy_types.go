package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterAgentToolPolicy holds a cluster admin's rules over the tool calls
// of every run in the cluster. It lives outside the blueprints tenants
// write, and the stricter of blueprint and policy wins, so no tenant can
// loosen it. Each rule's match is a CEL expression over the call (tool,
// args, run); the rules are compiled when the policy is applied, and one
// that does not compile or exceeds the cost budget is refused then
// (docs/tool-policy.md).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=catp
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterAgentToolPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec holds the rules.
	// +required
	Spec AgentToolPolicySpec `json:"spec,omitzero"`

	// status says whether the rules compiled.
	// +optional
	Status AgentToolPolicyStatus `json:"status,omitempty,omitzero"`
}

// AgentToolPolicy holds rules over the tool calls of the runs in its own
// namespace (and no other), for a namespace's admin; the cluster admin's
// ClusterAgentToolPolicy applies on top of it. Same rules, same semantics.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=atp
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AgentToolPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec holds the rules.
	// +required
	Spec AgentToolPolicySpec `json:"spec,omitzero"`

	// status says whether the rules compiled.
	// +optional
	Status AgentToolPolicyStatus `json:"status,omitempty,omitzero"`
}

// AgentToolPolicySpec is the rules of a tool policy. Every rule whose match
// is true for a call applies; the strictest action wins (Deny, then
// RequireApproval, then Audit), across all the policies that apply to the
// run.
type AgentToolPolicySpec struct {
	// rules are evaluated immediately before each tool call.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Rules []ToolPolicyRule `json:"rules,omitempty"`
}

// ToolPolicyRule is one CEL match and what happens to a call it matches.
type ToolPolicyRule struct {
	// name identifies the rule in events, metrics, the transcript and the
	// journal.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name,omitempty"`
	// match is a CEL expression yielding a bool, over the variables tool
	// (name, effect, server), args (the call's JSON arguments) and run
	// (namespace, labels, agent, stage); for example
	// `tool.name == "create_ticket" && args.priority == "p0"`.
	// A match that fails when evaluated (a missing key, the runtime cost
	// limit) counts as matched: policies fail closed.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Match string `json:"match,omitempty"`
	// action is what a matched call gets: Deny (not made; the model is told
	// message), RequireApproval (waits for a person, even under yolo or a
	// stage's allow) or Audit (made, and recorded).
	// +required
	Action ToolPolicyAction `json:"action,omitempty"`
	// message explains the rule: told to the model when a call is denied,
	// shown with the approval request under RequireApproval.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// requireReason says that an answer approving or denying a call this
	// rule matched must carry a reason, which the audit record keeps.
	// +optional
	RequireReason bool `json:"requireReason,omitempty"`
}

// ToolPolicyAction is what a rule does to a call it matches.
// +kubebuilder:validation:Enum=Deny;RequireApproval;Audit
type ToolPolicyAction string

// Tool policy actions, strictest first.
const (
	// ToolPolicyDeny: the call is not made; the model is told the rule's
	// message.
	ToolPolicyDeny ToolPolicyAction = "Deny"
	// ToolPolicyRequireApproval: the call waits on a ToolApproval answer,
	// whatever the blueprint or spec.yolo say.
	ToolPolicyRequireApproval ToolPolicyAction = "RequireApproval"
	// ToolPolicyAudit: the call is made and the match recorded.
	ToolPolicyAudit ToolPolicyAction = "Audit"
)

// AgentToolPolicyStatus says whether the manager could compile the rules.
type AgentToolPolicyStatus struct {
	// conditions hold Ready: True when every rule compiled within the cost
	// budget (its message counts the rules by action), False (reason
	// InvalidRule) with the CEL errors otherwise.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ClusterAgentToolPolicyList is a list of ClusterAgentToolPolicies.
//
// +kubebuilder:object:root=true
type ClusterAgentToolPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterAgentToolPolicy `json:"items"`
}

// AgentToolPolicyList is a list of AgentToolPolicies.
//
// +kubebuilder:object:root=true
type AgentToolPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AgentToolPolicy `json:"items"`
}
