package prioritypolicy

import (
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"

	"github.com/agentrun-dev/agentrun-operator/internal/priority"
)

func TestExpressionsRenderTheClassesSorted(t *testing.T) {
	c, err := priority.Parse(map[string]string{"urgent": " 1000 ", "low": "-5", "team": "10", priority.DefaultKey: "team"})
	if err != nil {
		t.Fatal(err)
	}
	got := Expressions(c, "agentrun-system/agentrun-priority-classes")
	want := map[string]string{
		VarClasses:    `{"low": -5, "team": 10, "urgent": 1000}`,
		VarClassNames: `"low, team, urgent"`,
		VarSource:     `"agentrun-system/agentrun-priority-classes"`,
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %s, want %s", k, got[k], w)
		}
	}
	none := Expressions(priority.Classes{}, "ns/cm")
	if none[VarClasses] != "{}" || none[VarClassNames] != `""` {
		t.Errorf("no classes render as %v", none)
	}
}

func TestApplyWritesOnlyTheManagersVariables(t *testing.T) {
	p := &admissionv1.ValidatingAdmissionPolicy{Spec: admissionv1.ValidatingAdmissionPolicySpec{Variables: []admissionv1.Variable{
		{Name: "class", Expression: "object.spec.priorityClassName"},
		{Name: VarClasses, Expression: "{}"}, {Name: VarClassNames, Expression: "''"}, {Name: VarSource, Expression: "''"},
	}}}
	exprs := map[string]string{VarClasses: `{"a": 1}`, VarClassNames: `"a"`, VarSource: `"ns/cm"`}
	changed, err := Apply(p, exprs)
	if err != nil || !changed {
		t.Fatalf("first Apply: changed %v, %v", changed, err)
	}
	if p.Spec.Variables[0].Expression != "object.spec.priorityClassName" || p.Spec.Variables[1].Expression != `{"a": 1}` {
		t.Errorf("variables after Apply: %v", p.Spec.Variables)
	}
	if changed, err := Apply(p, exprs); err != nil || changed {
		t.Errorf("second Apply: changed %v, %v; want no change", changed, err)
	}
	p.Spec.Variables = p.Spec.Variables[:2]
	if _, err := Apply(p, exprs); err == nil || !strings.Contains(err.Error(), "does not declare") {
		t.Errorf("a policy without the variables: %v", err)
	}
}
