// Package policyadmission is the validating admission webhook for
// AgentToolPolicy and ClusterAgentToolPolicy: a rule whose CEL match does
// not compile, or whose worst-case cost exceeds the budget, is refused
// when applied, with the CEL error, instead of being found out at the
// first tool call (where it would fail closed and deny). CRD validation
// rules cannot do this: no CEL function compiles CEL.
//
// On UPDATE only the rules whose match changed are compiled: a stored
// rule that a newer operator's CEL environment would refuse does not block
// edits to the policy's other rules or metadata (the reconciler's Ready
// condition shows it instead).
package policyadmission

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/toolpolicy"
)

// Path is where the webhook is served; config/webhook (generated from the
// marker below) points the API server at it.
const Path = "/validate-agentrun-dev-v1alpha1-toolpolicy"

// +kubebuilder:webhook:path=/validate-agentrun-dev-v1alpha1-toolpolicy,mutating=false,failurePolicy=fail,sideEffects=None,groups=agentrun.dev,resources=agenttoolpolicies;clusteragenttoolpolicies,verbs=create;update,versions=v1alpha1,name=toolpolicy.agentrun.dev,admissionReviewVersions=v1,timeoutSeconds=10

// Register serves the webhook on s at Path.
func Register(s webhook.Server) {
	s.Register(Path, &webhook.Admission{Handler: Validator{}})
}

// Validator is the admission handler for both kinds.
type Validator struct{}

// policy is what both kinds share.
type policy struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              arv1.AgentToolPolicySpec `json:"spec"`
}

// Handle admits a policy whose new or changed rules all compile within the
// cost budget, and refuses it otherwise with one field error per rule.
func (Validator) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Kind.Group != arv1.GroupVersion.Group ||
		req.Kind.Kind != toolpolicy.KindCluster && req.Kind.Kind != toolpolicy.KindNamespaced {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("this webhook validates tool policies, not %s", req.Kind))
	}
	var obj, old policy
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the %s: %w", req.Kind.Kind, err))
	}
	unchanged := map[string]bool{}
	if req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the stored %s: %w", req.Kind.Kind, err))
		}
		for _, r := range old.Spec.Rules {
			unchanged[r.Match] = true
		}
	}
	var errs field.ErrorList
	rules := field.NewPath("spec", "rules")
	for i, r := range obj.Spec.Rules {
		if unchanged[r.Match] {
			continue
		}
		if err := toolpolicy.CheckMatch(r.Match); err != nil {
			errs = append(errs, toolpolicy.MatchError(rules.Index(i), r, err))
		}
	}
	if len(errs) == 0 {
		return admission.Allowed("")
	}
	gk := schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}
	status := apierrors.NewInvalid(gk, req.Name, errs).Status()
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &status}}
}
