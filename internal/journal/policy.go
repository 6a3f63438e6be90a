package journal

import (
	"fmt"
	"strings"

	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
)

// Tool policy actions as the journal records them (the API's
// ToolPolicyAction values; the journal does not import the API).
const (
	PolicyDeny            = "Deny"
	PolicyRequireApproval = "RequireApproval"
	PolicyAudit           = "Audit"
)

// PolicyDecision is what the tool policies decided about one call: the
// strictest matching rule (the one that decided) and every rule that
// matched. It is self-contained, so a restart applies it as it was made,
// whatever the policies say now.
type PolicyDecision struct {
	// Action is the strictest matched rule's action: Deny,
	// RequireApproval or Audit.
	Action string `json:"action"`
	// PolicyKind, PolicyNamespace (empty for a cluster policy), Policy and
	// Rule name the rule that decided.
	PolicyKind      string `json:"policyKind"`
	PolicyNamespace string `json:"policyNamespace,omitempty"`
	Policy          string `json:"policy"`
	Rule            string `json:"rule"`
	// Message is what the model is told of a denial, and what the approver
	// is shown under RequireApproval.
	Message string `json:"message,omitempty"`
	// RequireReason: an answer to the call must carry a reason.
	RequireReason bool `json:"requireReason,omitempty"`
	// ArgsSHA256 is the hex SHA-256 of the arguments evaluated.
	ArgsSHA256 string `json:"argsSHA256,omitempty"`
	// Matches are every rule that matched, in evaluation order.
	Matches []PolicyMatch `json:"matches,omitempty"`
}

// PolicyMatch is one rule that matched a call.
type PolicyMatch struct {
	PolicyKind      string `json:"policyKind"`
	PolicyNamespace string `json:"policyNamespace,omitempty"`
	Policy          string `json:"policy"`
	Rule            string `json:"rule"`
	Action          string `json:"action"`
	// Error says why the rule counted as matched without its match being
	// true (policies fail closed).
	Error string `json:"error,omitempty"`
}

// Names is "Kind name, rule rule" (the namespace before a namespaced
// policy's name), how events, the transcript and the model name the rule.
func (d *PolicyDecision) Names() string {
	where := d.Policy
	if d.PolicyNamespace != "" {
		where = d.PolicyNamespace + "/" + d.Policy
	}
	return fmt.Sprintf("%s %s, rule %s", d.PolicyKind, where, d.Rule)
}

// FailedMatch is the error of the deciding rule's match when the rule
// applied without its match being true (it could not be evaluated, and
// policies fail closed); "" when its match was true.
func (d *PolicyDecision) FailedMatch() string {
	for _, m := range d.Matches {
		if m.PolicyKind == d.PolicyKind && m.PolicyNamespace == d.PolicyNamespace && m.Policy == d.Policy && m.Rule == d.Rule {
			return m.Error
		}
	}
	return ""
}

// Cause is Names followed, when the deciding rule applied by failing
// closed, by its match's error: "ClusterAgentToolPolicy tickets, rule
// sev (its match could not be evaluated: no such key: severity; policies
// fail closed)". The model, the Event, the approver and the transcript
// name the rule this way, so the error is shown next to the rule's own
// message, not only in the journal. A message that already states the
// error (decisions journaled before it was shown here put it in the
// message of a rule without one) is not repeated.
func (d *PolicyDecision) Cause() string {
	err := d.FailedMatch()
	if err == "" || strings.Contains(d.Message, err) {
		return d.Names()
	}
	return fmt.Sprintf("%s (its match could not be evaluated: %s; policies fail closed)", d.Names(), err)
}

// applyPolicy folds a ToolPolicyDecided: the decision is kept on the call,
// and a denial settles it with the policy's message as its result.
func (st *State) applyPolicy(bp *blueprint.Blueprint, h *CallState, e *Entry) {
	if h.Policy != nil || h.Intent != nil || e.Policy == nil {
		return // decided once per call, before it starts
	}
	d := *e.Policy
	h.Policy = &d
	if d.Action == PolicyRequireApproval && d.RequireReason {
		h.ReasonRequired = d.Names()
	}
	if d.Action == PolicyDeny {
		msg := fmt.Sprintf("The call was not made: denied by %s.", d.Cause())
		if d.Message != "" {
			msg += " " + d.Message
		}
		st.finishCall(bp, h, msg, true)
	}
}
