package toolpolicy

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// maxConditionMessage is metav1.Condition's limit on a message.
const maxConditionMessage = 32768

// ReadyCondition is the Ready condition of a policy whose spec is at
// generation: True (RulesCompiled) with the rules counted by action when
// every rule compiles within the cost budget, False (InvalidRule) with the
// CEL errors otherwise. The reconciler writes it; admission keeps False
// rare (policies stored before it, or a newer CEL environment).
func ReadyCondition(spec *arv1.AgentToolPolicySpec, generation int64) metav1.Condition {
	c := metav1.Condition{Type: arv1.ConditionReady, ObservedGeneration: generation}
	if errs := Validate(spec); len(errs) > 0 {
		c.Status, c.Reason = metav1.ConditionFalse, arv1.ReasonInvalidRule
		c.Message = errs.ToAggregate().Error()
		if len(c.Message) > maxConditionMessage {
			c.Message = c.Message[:maxConditionMessage-3] + "..."
		}
		return c
	}
	n := map[arv1.ToolPolicyAction]int{}
	for _, r := range spec.Rules {
		n[r.Action]++
	}
	var parts []string
	for _, a := range []arv1.ToolPolicyAction{arv1.ToolPolicyDeny, arv1.ToolPolicyRequireApproval, arv1.ToolPolicyAudit} {
		if n[a] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[a], a))
		}
	}
	c.Status, c.Reason = metav1.ConditionTrue, arv1.ReasonRulesCompiled
	c.Message = fmt.Sprintf("%d rules compiled: %s", len(spec.Rules), strings.Join(parts, ", "))
	return c
}
