package v1alpha1_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/toolpolicy"
)

// isToolPolicy says whether a sample manifest is a tool policy.
func isToolPolicy(t *testing.T, data []byte) bool {
	t.Helper()
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(data, &tm); err != nil {
		t.Fatal(err)
	}
	return tm.Kind == "AgentToolPolicy" || tm.Kind == "ClusterAgentToolPolicy"
}

// TestToolPolicySamplesApply: the policy samples apply with the real
// kubectl, their rules compile (toolpolicy.ReadyCondition), and `kubectl
// get` shows the Ready condition.
func TestToolPolicySamplesApply(t *testing.T) {
	dir, _ := sampleFiles(t)
	ns := newNamespace(t)
	for _, c := range []struct {
		file, resource string
		obj            client.Object
		summary        string
	}{
		{"agentrun_v1alpha1_clusteragenttoolpolicy.yaml", "clusteragenttoolpolicies", &arv1.ClusterAgentToolPolicy{},
			"3 rules compiled: 1 Deny, 1 RequireApproval, 1 Audit"},
		{"agentrun_v1alpha1_agenttoolpolicy.yaml", "agenttoolpolicies", &arv1.AgentToolPolicy{},
			"2 rules compiled: 1 Deny, 1 RequireApproval"},
	} {
		t.Run(c.file, func(t *testing.T) {
			path := filepath.Join(dir, c.file)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.UnmarshalStrict(data, c.obj); err != nil {
				t.Fatalf("not a %T with only known fields: %v", c.obj, err)
			}
			name := c.obj.GetName()
			out := kubectl(t, "apply", "-f", path, "-n", ns)
			if !strings.Contains(out, "/"+name+" created") {
				t.Fatalf("apply said %q", out)
			}
			if _, cluster := c.obj.(*arv1.ClusterAgentToolPolicy); cluster {
				t.Cleanup(func() { kubectl(t, "delete", c.resource, name) })
			} else {
				c.obj.SetNamespace(ns)
			}

			head := []string{"NAME", "READY", "REASON", "AGE"}
			row := parseTable(t, kubectl(t, "get", c.resource, name, "-n", ns), head)[name]
			if row["READY"] != "" || row["REASON"] != "" {
				t.Fatalf("row %v, want no Ready before the manager has seen it", row)
			}

			// The manager's Ready condition shows in READY and REASON, its
			// message (the rules counted by action) under -o wide.
			if err := k8sClient.Get(testCtx(t), client.ObjectKeyFromObject(c.obj), c.obj); err != nil {
				t.Fatal(err)
			}
			switch o := c.obj.(type) {
			case *arv1.ClusterAgentToolPolicy:
				meta.SetStatusCondition(&o.Status.Conditions, toolpolicy.ReadyCondition(&o.Spec, o.Generation))
			case *arv1.AgentToolPolicy:
				meta.SetStatusCondition(&o.Status.Conditions, toolpolicy.ReadyCondition(&o.Spec, o.Generation))
			}
			if err := k8sClient.Status().Update(testCtx(t), c.obj); err != nil {
				t.Fatal(err)
			}
			wide := []string{"NAME", "READY", "REASON", "MESSAGE", "AGE"}
			row = parseTable(t, kubectl(t, "get", c.resource, name, "-n", ns, "-o", "wide"), wide)[name]
			if row["READY"] != "True" || row["REASON"] != arv1.ReasonRulesCompiled || row["MESSAGE"] != c.summary {
				t.Fatalf("row %v, want Ready True, %s, %q", row, arv1.ReasonRulesCompiled, c.summary)
			}
			// The short name finds it too; the agentrun category holds
			// runs only (`kubectl get agentrun` lists runs).
			short := map[string]string{"clusteragenttoolpolicies": "catp", "agenttoolpolicies": "atp"}[c.resource]
			if out := kubectl(t, "get", short, "-n", ns, "-o", "name"); !strings.Contains(out, "/"+name) {
				t.Errorf("kubectl get %s: %q", short, out)
			}
		})
	}
}

// TestToolPolicySchema: what the CRD schema refuses by itself, without the
// webhook that compiles the rules.
func TestToolPolicySchema(t *testing.T) {
	ns := newNamespace(t)
	ok := arv1.ToolPolicyRule{Name: "r", Match: "true", Action: arv1.ToolPolicyAudit}
	for _, c := range []struct {
		name       string
		rules      []arv1.ToolPolicyRule
		field, msg string
	}{
		{"no rules", nil, "spec", "Required value"},
		{"empty rules", []arv1.ToolPolicyRule{}, "spec.rules", "Required value"},
		{"unknown action", []arv1.ToolPolicyRule{{Name: "r", Match: "true", Action: "Allow"}}, "spec.rules[0].action", `supported values: "Deny", "RequireApproval", "Audit"`},
		{"empty match", []arv1.ToolPolicyRule{{Name: "r", Action: arv1.ToolPolicyDeny}}, "spec.rules[0].match", "Required value"},
		{"bad name", []arv1.ToolPolicyRule{{Name: "Not_A_Label", Match: "true", Action: arv1.ToolPolicyDeny}}, "spec.rules[0].name", "should match"},
		{"duplicate names", []arv1.ToolPolicyRule{ok, ok}, "spec.rules[1]", "Duplicate value"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &arv1.AgentToolPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}, Spec: arv1.AgentToolPolicySpec{Rules: c.rules}}
			requireInvalid(t, k8sClient.Create(testCtx(t), p), c.field, c.msg)
		})
	}
}
