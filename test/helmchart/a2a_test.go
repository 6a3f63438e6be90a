package helmchart_test

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestA2AEndpointRendersWithNoPrivilege: a2a.enabled adds the endpoint's
// ServiceAccount (no token mounted, bound to nothing), its Deployment of
// the manager image running `manager a2a` for the namespace asked, and a
// Service that selects its pods and no manager pod (nor does the metrics
// Service select the endpoint's).
func TestA2AEndpointRendersWithNoPrivilege(t *testing.T) {
	base := renderChart(t, nil).objs
	objs := renderChart(t, map[string]any{"a2a": map[string]any{"enabled": true, "namespace": "team-a", "tlsSecret": "a2a-tls"}}).objs
	if d := count(objs, "Deployment") - count(base, "Deployment"); d != 1 {
		t.Errorf("a2a.enabled adds %d Deployments, want 1", d)
	}
	for _, k := range []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
		if count(objs, k) != count(base, k) {
			t.Errorf("a2a.enabled changes the %s count (%d -> %d)", k, count(base, k), count(objs, k))
		}
	}
	sa := one[corev1.ServiceAccount](t, objs, "ServiceAccount", "-a2a")
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Error("the endpoint's ServiceAccount mounts a token")
	}
	for _, u := range objs {
		if u.GetKind() != "RoleBinding" && u.GetKind() != "ClusterRoleBinding" {
			continue
		}
		var b rbacv1.RoleBinding
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &b); err != nil {
			t.Fatal(err)
		}
		for _, s := range b.Subjects {
			if s.Name == sa.Name {
				t.Errorf("%s %s grants the endpoint's ServiceAccount %s", u.GetKind(), u.GetName(), b.RoleRef.Name)
			}
		}
	}
	d := one[appsv1.Deployment](t, objs, "Deployment", "-a2a")
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	if pod.ServiceAccountName != sa.Name || pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("the endpoint runs as %q, automount %v", pod.ServiceAccountName, pod.AutomountServiceAccountToken)
	}
	for _, a := range []string{"a2a", "--namespace=team-a", "--bind-address=:8080", "--tls-cert-file=/etc/agentrun/a2a-tls/tls.crt",
		"--public-url=https://agentrun-operator-a2a.agentrun-system.svc:8080"} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("args %v lack %s", c.Args, a)
		}
	}
	manager := one[appsv1.Deployment](t, base, "Deployment", "")
	svc := one[corev1.Service](t, objs, "Service", "-a2a")
	metricsSvc := one[corev1.Service](t, objs, "Service", "-metrics")
	if !selectsMap(svc.Spec.Selector, d.Spec.Template.Labels) || selectsMap(svc.Spec.Selector, manager.Spec.Template.Labels) {
		t.Errorf("the a2a Service selector %v does not select exactly the endpoint's pods", svc.Spec.Selector)
	}
	if selectsMap(metricsSvc.Spec.Selector, d.Spec.Template.Labels) || selectsMap(manager.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Error("the manager's Deployment or metrics Service selects the endpoint's pods")
	}
}
