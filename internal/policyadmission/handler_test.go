package policyadmission

import (
	"context"
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

func request(t *testing.T, op admissionv1.Operation, obj, old *arv1.ClusterAgentToolPolicy) admission.Request {
	t.Helper()
	raw := func(p *arv1.ClusterAgentToolPolicy) runtime.RawExtension {
		if p == nil {
			return runtime.RawExtension{}
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: op, Name: obj.Name,
		Kind:   metav1.GroupVersionKind{Group: "agentrun.dev", Version: "v1alpha1", Kind: "ClusterAgentToolPolicy"},
		Object: raw(obj), OldObject: raw(old),
	}}
}

// TestUpdateChecksOnlyChangedRules: a stored rule the CEL environment now
// refuses does not block an edit elsewhere in the policy; a changed or new
// bad rule does.
func TestUpdateChecksOnlyChangedRules(t *testing.T) {
	stored := &arv1.ClusterAgentToolPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: arv1.AgentToolPolicySpec{Rules: []arv1.ToolPolicyRule{
		{Name: "old", Match: `tool.gone == "x"`, Action: arv1.ToolPolicyDeny},
	}}}
	edited := stored.DeepCopy()
	edited.Labels = map[string]string{"owner": "platform"}
	edited.Spec.Rules = append(edited.Spec.Rules, arv1.ToolPolicyRule{Name: "new", Match: `tool.name == "y"`, Action: arv1.ToolPolicyAudit})
	if r := (Validator{}).Handle(context.Background(), request(t, admissionv1.Update, edited, stored)); !r.Allowed {
		t.Errorf("edit keeping the stored rule refused: %v", r.Result)
	}
	if r := (Validator{}).Handle(context.Background(), request(t, admissionv1.Create, stored, nil)); r.Allowed {
		t.Error("creating with the bad rule admitted")
	}
	edited.Spec.Rules[1].Match = `tool.nope == "y"`
	r := (Validator{}).Handle(context.Background(), request(t, admissionv1.Update, edited, stored))
	if r.Allowed || r.Result == nil || r.Result.Details == nil || len(r.Result.Details.Causes) != 1 || r.Result.Details.Causes[0].Field != "spec.rules[1].match" {
		t.Errorf("a new bad rule: allowed=%v %+v", r.Allowed, r.Result)
	}
}
