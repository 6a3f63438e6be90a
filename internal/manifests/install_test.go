package manifests_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun-operator/internal/manifests"
	"github.com/agentrun-dev/agentrun-operator/internal/priority"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// render builds a kustomization under config/ with the real kubectl.
func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	out, err := exec.Command(testenv.KubectlPath(), "kustomize", filepath.Join(testenv.RepoRoot(), "config", dir)).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize config/%s: %v\n%s", dir, err, out)
	}
	var objs []*unstructured.Unstructured
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

func convert[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// grants flattens rules into "group resource verb [names]" strings.
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
	}
	sort.Strings(out)
	return out
}

// dryRun creates every object server-side without storing it: the API
// server's own validation of the install, CRDs' and policies' schemas
// included. Namespaces the objects need are created for real first.
func dryRun(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, u := range objs {
		if ns := u.GetNamespace(); ns != "" {
			err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
	}
	for _, u := range objs {
		if err := c.Create(ctx, u.DeepCopy(), client.DryRunAll); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Errorf("%s %s/%s is refused by the API server: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
	}
}

// TestNamespacedOverlayHoldsOnlyRoles: config/namespaced renders, the API
// server accepts it, nothing in it grants the manager's ServiceAccount
// anything cluster-wide but creating TokenReviews and SubjectAccessReviews
// (its HTTPS metrics endpoint's checks, which read nothing) and updating
// its own webhook configuration by name (the caBundle), its
// Deployment passes --namespaces, and every
// Role it gives the manager in a watched namespace holds exactly the
// namespaced rules of the cluster-wide ClusterRole (generated from the
// RBAC markers), so the two installs cannot drift apart.
func TestNamespacedOverlayHoldsOnlyRoles(t *testing.T) {
	var clusterRole *rbacv1.ClusterRole
	for _, u := range render(t, "default") {
		if u.GetKind() == "ClusterRole" && u.GetName() == "agentrun-manager-role" {
			clusterRole = convert[rbacv1.ClusterRole](t, u)
		}
	}
	if clusterRole == nil {
		t.Fatal("config/default has no agentrun-manager-role ClusterRole")
	}
	var want []rbacv1.PolicyRule
	for _, r := range clusterRole.Rules {
		var res []string
		for _, x := range r.Resources {
			// Cluster-scoped, or only ever read in the default namespace.
			// ClusterAgentToolPolicies are the cluster admin's: a
			// namespace-scoped install cannot read them, and its runs are
			// governed by their namespaces' AgentToolPolicies alone;
			// ClusterAgentRunQuotas likewise (AgentRunQuotas apply).
			if !slices.Contains(clusterScoped, x) && x != "endpointslices" && !strings.HasPrefix(x, "clusteragenttoolpolicies") && !strings.HasPrefix(x, "clusteragentrunquotas") {
				res = append(res, x)
			}
		}
		if len(res) > 0 {
			r.Resources = res
			want = append(want, r)
		}
	}

	objs := render(t, "namespaced")
	dryRun(t, objs)
	clusterRoles := map[string]*rbacv1.ClusterRole{}
	for _, u := range objs {
		if u.GetKind() == "ClusterRole" {
			clusterRoles[u.GetName()] = convert[rbacv1.ClusterRole](t, u)
		}
	}
	reviewsOnly := []string{"authentication.k8s.io tokenreviews create []", "authorization.k8s.io subjectaccessreviews create []"}
	// The webhook certificate's caBundle: its own webhook configuration,
	// by name.
	var ownWebhookConfig []string
	for _, v := range []string{"get", "list", "update", "watch"} {
		ownWebhookConfig = append(ownWebhookConfig, "admissionregistration.k8s.io validatingwebhookconfigurations "+v+" [agentrun-validating-webhook-configuration]")
	}
	// The classes in force: its own priority-class policy, by name.
	var ownPriorityPolicy []string
	for _, v := range []string{"get", "list", "update", "watch"} {
		ownPriorityPolicy = append(ownPriorityPolicy, "admissionregistration.k8s.io validatingadmissionpolicies "+v+" [agentrun-priority-class]")
	}
	// Whether it has a database store: its own quota-store policy, by name.
	var ownQuotaPolicy []string
	for _, v := range []string{"get", "list", "update", "watch"} {
		ownQuotaPolicy = append(ownQuotaPolicy, "admissionregistration.k8s.io validatingadmissionpolicies "+v+" [agentrun-quota-store]")
	}
	tenants := 0
	for _, u := range objs {
		switch u.GetKind() {
		case "ClusterRoleBinding":
			b := convert[rbacv1.ClusterRoleBinding](t, u)
			cr := clusterRoles[b.RoleRef.Name]
			if cr == nil || !slices.ContainsFunc([][]string{reviewsOnly, ownWebhookConfig, ownPriorityPolicy, ownQuotaPolicy}, func(allowed []string) bool { return slices.Equal(grants(cr.Rules), allowed) }) {
				t.Errorf("the namespaced overlay's ClusterRoleBinding %s grants more than %v, %v, %v or %v: %v", b.Name, reviewsOnly, ownWebhookConfig, ownPriorityPolicy, ownQuotaPolicy, cr)
			}
		case "Deployment":
			d := convert[struct {
				Spec struct {
					Template corev1.PodTemplateSpec `json:"template"`
				} `json:"spec"`
			}](t, u)
			if a := d.Spec.Template.Spec.Containers[0].Args; !slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, "--namespaces=") }) {
				t.Errorf("the namespaced Deployment's args %v lack --namespaces", a)
			}
		case "Role":
			if u.GetName() != "agentrun-manager-role" {
				continue
			}
			tenants++
			role := convert[rbacv1.Role](t, u)
			if got, w := grants(role.Rules), grants(want); !slices.Equal(got, w) {
				t.Errorf("Role %s/%s grants\n%v\nthe ClusterRole's namespaced rules are\n%v", role.Namespace, role.Name, got, w)
			}
		}
	}
	if tenants < 2 {
		t.Errorf("config/namespaced has %d tenant Roles, want one per example namespace (2)", tenants)
	}
}

// clusterScoped are the resources of the manager's ClusterRole that no Role
// can grant.
var clusterScoped = []string{"namespaces", "tokenreviews", "subjectaccessreviews"}

// TestClusterRoleSecretVerbsAreDocumented: docs/security.md states exactly
// the verbs the cluster-wide install holds on Secrets.
func TestClusterRoleSecretVerbsAreDocumented(t *testing.T) {
	var verbs []string
	for _, u := range render(t, "default") {
		if u.GetKind() != "ClusterRole" || u.GetName() != "agentrun-manager-role" {
			continue
		}
		for _, r := range convert[rbacv1.ClusterRole](t, u).Rules {
			if slices.Contains(r.Resources, "secrets") {
				verbs = append(verbs, r.Verbs...)
			}
		}
	}
	sort.Strings(verbs)
	doc, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	quoted := make([]string, len(verbs))
	for i, v := range verbs {
		quoted[i] = "`" + v + "`"
	}
	want := "Secrets, cluster-wide: " + strings.Join(quoted, ", ") + "."
	if len(verbs) == 0 || !strings.Contains(string(doc), want) {
		t.Errorf("docs/security.md does not say %q (the ClusterRole's Secret verbs are %v)", want, verbs)
	}
}

// TestNetworkPolicySelectsTheManager: config/networkpolicy renders, the API
// server accepts it, it selects the manager's pods (the Deployment's
// template labels) in the manager's namespace, restricts both directions,
// and allows DNS and the API server.
func TestNetworkPolicySelectsTheManager(t *testing.T) {
	objs := render(t, "networkpolicy")
	dryRun(t, objs)
	var pod map[string]string
	var podNS string
	for _, u := range render(t, "default") {
		if u.GetKind() == "Deployment" {
			d := convert[struct {
				Spec struct {
					Template corev1.PodTemplateSpec `json:"template"`
				} `json:"spec"`
			}](t, u)
			pod, podNS = d.Spec.Template.Labels, u.GetNamespace()
		}
	}
	if len(objs) != 1 || objs[0].GetKind() != "NetworkPolicy" {
		t.Fatalf("config/networkpolicy renders %d objects, want one NetworkPolicy", len(objs))
	}
	np := convert[networkingv1.NetworkPolicy](t, objs[0])
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	if np.Namespace != podNS || !sel.Matches(labels.Set(pod)) {
		t.Errorf("the NetworkPolicy %s/%s (selector %s) does not select the manager's pods %s/%v", np.Namespace, np.Name, sel, podNS, pod)
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		t.Errorf("policy types %v, want Ingress and Egress", np.Spec.PolicyTypes)
	}
	var dns, api bool
	for _, e := range np.Spec.Egress {
		for _, p := range e.Ports {
			dns = dns || p.Port != nil && p.Port.IntValue() == 53
			api = api || p.Port != nil && p.Port.IntValue() == 6443
		}
	}
	if !dns || !api {
		t.Errorf("egress rules allow DNS %v, the API server %v; want both", dns, api)
	}
}

// TestMonitoringScrapesWithAMetricsReaderToken: config/monitoring's
// PodMonitor scrapes over HTTPS with the token Secret of its scraper
// ServiceAccount, and the API server (SubjectAccessReview, through the real
// kubectl auth can-i) lets that ServiceAccount get /metrics once
// config/default's metrics-reader ClusterRole and config/monitoring's
// binding are in place, while a ServiceAccount bound to nothing may not.
func TestMonitoringScrapesWithAMetricsReaderToken(t *testing.T) {
	var reader []*unstructured.Unstructured
	for _, u := range render(t, "default") {
		if u.GetKind() == "ClusterRole" && u.GetName() == "agentrun-metrics-reader" {
			reader = append(reader, u)
		}
	}
	if len(reader) != 1 {
		t.Fatal("config/default has no agentrun-metrics-reader ClusterRole")
	}
	var apply []*unstructured.Unstructured
	var monitor *unstructured.Unstructured
	secrets := map[string]string{}
	for _, u := range render(t, "monitoring") {
		switch u.GetKind() {
		case "PodMonitor":
			monitor = u
		case "Secret":
			secrets[u.GetName()] = u.GetAnnotations()["kubernetes.io/service-account.name"]
		case "ServiceAccount", "ClusterRoleBinding":
			apply = append(apply, u)
		}
	}
	if monitor == nil {
		t.Fatal("config/monitoring has no PodMonitor")
	}
	eps, _, _ := unstructured.NestedSlice(monitor.Object, "spec", "podMetricsEndpoints")
	if len(eps) != 1 {
		t.Fatalf("PodMonitor endpoints %v", eps)
	}
	ep := eps[0].(map[string]any)
	secret, _, _ := unstructured.NestedString(ep, "authorization", "credentials", "name")
	if ep["scheme"] != "https" || secrets[secret] == "" {
		t.Fatalf("the PodMonitor scrapes %v with credentials %q, want https with a ServiceAccount token Secret of config/monitoring (%v)", ep["scheme"], secret, secrets)
	}
	sa := "system:serviceaccount:" + monitor.GetNamespace() + ":" + secrets[secret]

	kubeconfig, err := env.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	canI := func(as string) string {
		out, _ := testenv.Kubectl(kubeconfig, "auth", "can-i", "get", "/metrics", "--as="+as)
		return strings.TrimSpace(out)
	}
	if got := canI(sa); got != "no" {
		t.Fatalf("%s may get /metrics before anything is applied: %q", sa, got)
	}
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range append(reader, apply...) {
		if ns := u.GetNamespace(); ns != "" {
			if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
		if err := c.Create(context.Background(), u); err != nil {
			t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	if got := canI(sa); got != "yes" {
		t.Errorf("kubectl auth can-i get /metrics --as=%s: %q, want yes", sa, got)
	}
	if got := canI("system:serviceaccount:" + monitor.GetNamespace() + ":default"); got != "no" {
		t.Errorf("a ServiceAccount bound to nothing may get /metrics: %q", got)
	}
}

// TestPriorityClassesAsInstalled: CreatePriorityClasses (the test control
// plane, and hack/run-local against a cluster) makes the ConfigMap an
// install ships, by name and namespace, and never replaces one a cluster
// admin filled in.
func TestPriorityClassesAsInstalled(t *testing.T) {
	shipped := false
	for _, u := range render(t, "default") {
		if u.GetKind() == "ConfigMap" && u.GetName() == priority.DefaultConfigMapName && u.GetNamespace() == testenv.SystemNamespace {
			shipped = true
		}
	}
	if !shipped {
		t.Fatalf("config/default ships no ConfigMap %s/%s: CreatePriorityClasses makes one an install does not", testenv.SystemNamespace, priority.DefaultConfigMapName)
	}

	ctx := context.Background()
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: testenv.SystemNamespace, Name: priority.DefaultConfigMapName}
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, key, cm); err != nil {
		t.Fatalf("the test control plane has no priority classes ConfigMap: %v", err)
	}
	before := cm.DeepCopy()
	cm.Data = map[string]string{"high": "100"}
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		now := &corev1.ConfigMap{}
		if err := c.Get(ctx, key, now); err == nil {
			now.Data = before.Data
			_ = c.Update(ctx, now)
		}
	})
	if err := manifests.CreatePriorityClasses(ctx, env.Config); err != nil {
		t.Fatal(err)
	}
	after := &corev1.ConfigMap{}
	if err := c.Get(ctx, key, after); err != nil {
		t.Fatal(err)
	}
	if after.Data["high"] != "100" || len(after.Data) != 1 {
		t.Errorf("CreatePriorityClasses replaced the admin's classes: data %v, want {high: 100}", after.Data)
	}
}
