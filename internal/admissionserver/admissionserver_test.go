package admissionserver

import (
	"context"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

type widgetSpec struct {
	Size int `json:"size"`
}

func validateWidget(s *widgetSpec) field.ErrorList {
	if s.Size < 1 {
		return field.ErrorList{field.Invalid(field.NewPath("spec", "size"), s.Size, "must be at least 1")}
	}
	return nil
}

// TestForSpecRefusesAsTheAPIServerDoes: a spec validator mounted through
// ForSpec admits a valid object, refuses an invalid one with an Invalid
// status naming the field, and refuses another kind or a body that does
// not decode as a bad request.
func TestForSpecRefusesAsTheAPIServerDoes(t *testing.T) {
	kind := schema.GroupKind{Group: "agentrun.dev", Kind: "Widget"}
	h := ForSpec(kind, validateWidget)
	req := func(k, body string) admission.Request {
		return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Name: "w", Kind: metav1.GroupVersionKind{Group: "agentrun.dev", Version: "v1alpha1", Kind: k},
			Object: runtime.RawExtension{Raw: []byte(body)},
		}}
	}
	if r := h.Handle(context.Background(), req("Widget", `{"spec":{"size":2}}`)); !r.Allowed {
		t.Errorf("a valid widget refused: %+v", r.Result)
	}
	r := h.Handle(context.Background(), req("Widget", `{"spec":{"size":0}}`))
	if r.Allowed || r.Result == nil || r.Result.Reason != metav1.StatusReasonInvalid || r.Result.Details == nil ||
		len(r.Result.Details.Causes) != 1 || r.Result.Details.Causes[0].Field != "spec.size" || r.Result.Code != 422 {
		t.Errorf("an invalid widget: allowed %v, %+v", r.Allowed, r.Result)
	}
	for name, rq := range map[string]admission.Request{"another kind": req("Gadget", `{"spec":{}}`), "bad body": req("Widget", `{"spec":`)} {
		if r := h.Handle(context.Background(), rq); r.Allowed || r.Result == nil || r.Result.Code != 400 {
			t.Errorf("%s: allowed %v, %+v", name, r.Allowed, r.Result)
		}
	}
}

// TestServerRefusesBadAddresses: the address must be host:port with a
// port above 0 (0 means off, which the caller decides before).
func TestServerRefusesBadAddresses(t *testing.T) {
	for _, addr := range []string{"9443", ":0", ":https", ""} {
		if _, err := Server(Options{Addr: addr}, Registry{}); err == nil {
			t.Errorf("address %q accepted", addr)
		}
	}
	if _, err := Server(Options{Addr: "127.0.0.1:9443"}, Registry{"/x": ForSpec(schema.GroupKind{Kind: "Widget"}, validateWidget)}); err != nil {
		t.Error(err)
	}
}
