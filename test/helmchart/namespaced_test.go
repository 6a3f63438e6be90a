package helmchart_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// grants flattens rules into "group resource verb [names]" strings, so
// rules split or ordered differently compare equal.
func grants(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out = append(out, fmt.Sprintf("%s %s %s %v", g, res, v, r.ResourceNames))
				}
			}
		}
		for _, u := range r.NonResourceURLs {
			for _, v := range r.Verbs {
				out = append(out, fmt.Sprintf("%s %s", u, v))
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestNamespacedModeHoldsOnlyRoles: with watchNamespaces, the manager is
// passed --namespaces and granted, in each watched namespace, exactly what
// config/namespaced's tenant Role grants, in the release namespace what
// its egress reader and the webhook certificate's Role grant, and in
// default the API server EndpointSlice; nothing cluster-wide grants it
// anything but creating TokenReviews and SubjectAccessReviews (not with
// plain metrics) and updating its own webhook configuration by name, so
// no ClusterRole it holds reads Secrets.
func TestNamespacedModeHoldsOnlyRoles(t *testing.T) {
	k := kustomize(t, "namespaced")
	tenant := grants(one[rbacv1.Role](t, inNamespace(k, "team-a"), "Role", "-manager-role").Rules)
	egress := grants(one[rbacv1.Role](t, k, "Role", "-egress-reader").Rules)
	endpoints := grants(one[rbacv1.Role](t, k, "Role", "-apiserver-endpoints").Rules)
	reviews := grants(one[rbacv1.ClusterRole](t, k, "ClusterRole", "-metrics-auth").Rules)

	for _, secure := range []bool{true, false} {
		objs := renderChart(t, map[string]any{"watchNamespaces": []any{"team-a", "team-b"}, "metrics": map[string]any{"secure": secure}}).objs
		sa := one[appsv1.Deployment](t, objs, "Deployment", "").Spec.Template.Spec.ServiceAccountName
		if args := one[appsv1.Deployment](t, objs, "Deployment", "").Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--namespaces=team-a,team-b") {
			t.Errorf("args %v lack --namespaces=team-a,team-b", args)
		}
		roles := map[string]*rbacv1.Role{} // by namespace/name
		clusterRoles := map[string]*rbacv1.ClusterRole{}
		for _, u := range objs {
			switch u.GetKind() {
			case "Role":
				roles[u.GetNamespace()+"/"+u.GetName()] = convert[rbacv1.Role](t, u)
			case "ClusterRole":
				clusterRoles[u.GetName()] = convert[rbacv1.ClusterRole](t, u)
			}
		}
		boundRoles := map[string][]string{} // namespace ("" cluster-wide) -> grants
		for _, u := range objs {
			var ref rbacv1.RoleRef
			var subjects []rbacv1.Subject
			switch u.GetKind() {
			case "RoleBinding":
				b := convert[rbacv1.RoleBinding](t, u)
				ref, subjects = b.RoleRef, b.Subjects
			case "ClusterRoleBinding":
				b := convert[rbacv1.ClusterRoleBinding](t, u)
				ref, subjects = b.RoleRef, b.Subjects
			default:
				continue
			}
			if !slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool { return s.Kind == "ServiceAccount" && s.Name == sa }) {
				continue
			}
			var rules []rbacv1.PolicyRule
			switch {
			case ref.Kind == "Role" && roles[u.GetNamespace()+"/"+ref.Name] != nil:
				rules = roles[u.GetNamespace()+"/"+ref.Name].Rules
			case ref.Kind == "ClusterRole" && clusterRoles[ref.Name] != nil:
				rules = clusterRoles[ref.Name].Rules
			default:
				t.Errorf("%s %s binds %s %s, which the chart does not render", u.GetKind(), u.GetName(), ref.Kind, ref.Name)
			}
			boundRoles[u.GetNamespace()] = append(boundRoles[u.GetNamespace()], grants(rules)...)
		}
		for ns := range boundRoles {
			sort.Strings(boundRoles[ns])
		}
		// The webhook certificate's grants, by name (their names follow
		// the release; TestChartWebhooksAreConfigWebhooks checks them).
		// The priority-class policy's grant, by name, likewise
		// (TestPriorityClassesShipWithThePolicy).
		webhookConfig := grants(one[rbacv1.ClusterRole](t, objs, "ClusterRole", "-webhook-configuration").Rules)
		priorityPolicy := grants(one[rbacv1.ClusterRole](t, objs, "ClusterRole", "-priority-policy").Rules)
		// The quota-store policy's grant, by name, likewise.
		quotaPolicy := grants(one[rbacv1.ClusterRole](t, objs, "ClusterRole", "-quota-policy").Rules)
		wantCluster := sorted(append(append(append(slices.Clone(reviews), webhookConfig...), priorityPolicy...), quotaPolicy...))
		if !secure {
			wantCluster = sorted(append(append(slices.Clone(webhookConfig), priorityPolicy...), quotaPolicy...))
		}
		want := map[string][]string{"team-a": tenant, "team-b": tenant, "default": endpoints, "": wantCluster,
			releaseNS: sorted(append(append(slices.Clone(egress), grants(one[rbacv1.Role](t, objs, "Role", "-leader-election").Rules)...),
				grants(one[rbacv1.Role](t, objs, "Role", "-webhook-cert").Rules)...))}
		for ns, w := range want {
			if got := boundRoles[ns]; !slices.Equal(got, w) {
				t.Errorf("secure metrics %v: the manager is granted in %q\n%v\nwant (config/namespaced)\n%v", secure, ns, got, w)
			}
		}
		for ns := range boundRoles {
			if _, ok := want[ns]; !ok {
				t.Errorf("the manager is granted %v in %q, which it does not watch", boundRoles[ns], ns)
			}
		}
		for _, g := range boundRoles[""] {
			if strings.Contains(g, "secrets") {
				t.Errorf("a cluster-wide grant reads Secrets: %s", g)
			}
		}
		for _, g := range webhookConfig {
			if !strings.HasSuffix(g, "[agentrun-operator-webhook]") {
				t.Errorf("the webhook configuration grant %s is not for the release's configuration only", g)
			}
		}
		for _, g := range priorityPolicy {
			if !strings.HasSuffix(g, "[agentrun-operator-priority-class]") {
				t.Errorf("the priority policy grant %s is not for the release's priority-class policy only", g)
			}
		}
	}
	if n := count(renderChart(t, map[string]any{"watchNamespaces": []any{"team-a"}, "rbac": map[string]any{"create": false}}).objs, "Role"); n != 0 {
		t.Errorf("rbac.create false with watchNamespaces renders %d Roles", n)
	}
}

func inNamespace(objs []*unstructured.Unstructured, ns string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, u := range objs {
		if u.GetNamespace() == ns {
			out = append(out, u)
		}
	}
	return out
}

func sorted(s []string) []string {
	sort.Strings(s)
	return s
}
