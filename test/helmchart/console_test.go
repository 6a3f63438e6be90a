package helmchart_test

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// TestConsoleIsOffByDefaultAndHoldsNoPrivilege: console.enabled renders
// the console's Deployment, Service and ServiceAccount; the ServiceAccount
// is bound to no role, and the manager's selector does not take its pods.
func TestConsoleIsOffByDefaultAndHoldsNoPrivilege(t *testing.T) {
	if n := count(renderChart(t, nil).objs, "Service") - count(renderChart(t, map[string]any{"console": map[string]any{"enabled": false}}).objs, "Service"); n != 0 {
		t.Errorf("the default renders %d more Services than console.enabled=false", n)
	}
	on := renderChart(t, map[string]any{"console": map[string]any{"enabled": true}}).objs
	d := one[appsv1.Deployment](t, on, "Deployment", "-console")
	c := d.Spec.Template.Spec.Containers[0]
	if !slices.Equal(c.Command, []string{"/kubectl-agentrun"}) || !slices.Contains(c.Args, "--in-cluster") || !slices.Contains(c.Args, "--port=8080") {
		t.Errorf("console container runs %v %v", c.Command, c.Args)
	}
	sa := one[corev1.ServiceAccount](t, on, "ServiceAccount", "-console")
	if d.Spec.Template.Spec.ServiceAccountName != sa.Name {
		t.Errorf("console pods run as %q, want %q", d.Spec.Template.Spec.ServiceAccountName, sa.Name)
	}
	for _, u := range on {
		switch u.GetKind() {
		case "RoleBinding", "ClusterRoleBinding":
			b := convert[rbacv1.RoleBinding](t, u)
			for _, s := range b.Subjects {
				if s.Name == sa.Name {
					t.Errorf("%s %s binds the console's ServiceAccount", u.GetKind(), u.GetName())
				}
			}
		}
	}
	manager := one[appsv1.Deployment](t, on, "Deployment", "operator")
	sel, err := metav1.LabelSelectorAsSelector(manager.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("the manager's selector %v takes the console's pods %v", sel, d.Spec.Template.Labels)
	}
	svc := one[corev1.Service](t, on, "Service", "-console")
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("the console Service selects %v, not the console pods %v", svc.Spec.Selector, d.Spec.Template.Labels)
	}
}
