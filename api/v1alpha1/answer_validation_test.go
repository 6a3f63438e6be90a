package v1alpha1_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// TestAnswerShapes: the API server takes an answer with a decision, text
// or input (null included), and refuses one with none, one with both text
// and input, an unknown decision, and any change to an answer.
func TestAnswerShapes(t *testing.T) {
	ns := newNamespace(t)
	ctx := testCtx(t)
	base := func(name string, mutate func(*arv1.AgentRunAnswerSpec)) *arv1.AgentRunAnswer {
		a := &arv1.AgentRunAnswer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: arv1.AgentRunAnswerSpec{Run: "r", Point: "call-3-0", By: "admin"}}
		mutate(&a.Spec)
		return a
	}
	for name, m := range map[string]func(*arv1.AgentRunAnswerSpec){
		"decision":   func(s *arv1.AgentRunAnswerSpec) { s.Decision = arv1.DecisionRetry },
		"text":       func(s *arv1.AgentRunAnswerSpec) { s.Text = ptr("prod") },
		"null-input": func(s *arv1.AgentRunAnswerSpec) { s.Input = ptr("null") },
		"done-with-output": func(s *arv1.AgentRunAnswerSpec) {
			s.Decision, s.Text = arv1.DecisionDone, ptr("ticket 7")
		},
		"approve-with-args": func(s *arv1.AgentRunAnswerSpec) {
			s.Decision, s.Args, s.Reason = arv1.DecisionApprove, &runtime.RawExtension{Raw: []byte(`{"title":"x","tags":["a"]}`)}, "safer"
		},
		"deny-with-reason": func(s *arv1.AgentRunAnswerSpec) { s.Decision, s.Reason = arv1.DecisionDeny, "not now" },
	} {
		if err := k8sClient.Create(ctx, base(name, m)); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}
	err := k8sClient.Create(ctx, base("empty", func(*arv1.AgentRunAnswerSpec) {}))
	requireInvalid(t, err, "spec", "an answer needs a decision, text or input")
	err = k8sClient.Create(ctx, base("both", func(s *arv1.AgentRunAnswerSpec) { s.Text, s.Input = ptr("a"), ptr(`"a"`) }))
	requireInvalid(t, err, "spec", "set text or input, not both")
	err = k8sClient.Create(ctx, base("deny-args", func(s *arv1.AgentRunAnswerSpec) {
		s.Decision, s.Args = arv1.DecisionDeny, &runtime.RawExtension{Raw: []byte(`{"title":"x"}`)}
	}))
	requireInvalid(t, err, "spec", "args replace a tool call's arguments, so they go with decision Approve")
	err = k8sClient.Create(ctx, base("list-args", func(s *arv1.AgentRunAnswerSpec) {
		s.Decision, s.Args = arv1.DecisionApprove, &runtime.RawExtension{Raw: []byte(`["x"]`)}
	}))
	requireInvalid(t, err, "spec.args", "must be of type object")
	err = k8sClient.Create(ctx, base("reason-only", func(s *arv1.AgentRunAnswerSpec) { s.Text, s.Reason = ptr("hi"), "because" }))
	requireInvalid(t, err, "spec", "a reason explains a decision; set decision too")
	err = k8sClient.Create(ctx, base("odd", func(s *arv1.AgentRunAnswerSpec) { s.Decision = "Maybe" }))
	requireInvalid(t, err, "spec.decision", `Unsupported value: "Maybe"`)

	a := &arv1.AgentRunAnswer{}
	if err := k8sClient.Get(ctx, keyOf(ns, "text"), a); err != nil {
		t.Fatal(err)
	}
	a.Spec.Text = ptr("staging")
	requireInvalid(t, k8sClient.Update(ctx, a), "spec", "an answer cannot be changed; create another")
}

func keyOf(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }
