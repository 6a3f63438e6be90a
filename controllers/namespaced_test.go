package controllers_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/egress"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// decodeYAML reads every object of a multi-document YAML stream.
func decodeYAML(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// namespacedOverlayRoles renders config/namespaced with the real kubectl's
// kustomize and returns its Roles by name (the first of each name).
func namespacedOverlayRoles(t *testing.T) map[string]*rbacv1.Role {
	t.Helper()
	out, err := exec.Command(testenv.KubectlPath(), "kustomize", filepath.Join(testenv.RepoRoot(), "config", "namespaced")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/namespaced: %v", err)
	}
	roles := map[string]*rbacv1.Role{}
	clusterRoles := map[string]*rbacv1.ClusterRole{}
	var bindings []*rbacv1.ClusterRoleBinding
	for _, u := range decodeYAML(t, out) {
		switch u.GetKind() {
		case "ClusterRole":
			r := &rbacv1.ClusterRole{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, r); err != nil {
				t.Fatal(err)
			}
			clusterRoles[r.Name] = r
		case "ClusterRoleBinding":
			b := &rbacv1.ClusterRoleBinding{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, b); err != nil {
				t.Fatal(err)
			}
			bindings = append(bindings, b)
		case "Role":
			if _, seen := roles[u.GetName()]; seen {
				continue
			}
			r := &rbacv1.Role{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, r); err != nil {
				t.Fatal(err)
			}
			roles[r.Name] = r
		}
	}
	// The cluster-wide grants allowed: creating the TokenReviews and
	// SubjectAccessReviews that authenticate and authorize a metrics
	// scraper (they read nothing), the manager's own webhook
	// configuration by name (its caBundle), and its own priority-class
	// admission policy by name (the classes in force).
	for _, b := range bindings {
		cr := clusterRoles[b.RoleRef.Name]
		if cr == nil || !onlyReviews(cr.Rules) && !onlyOwnByName(cr.Rules, "validatingwebhookconfigurations") && !onlyOwnByName(cr.Rules, "validatingadmissionpolicies") {
			t.Errorf("the namespaced overlay binds ClusterRole %s cluster-wide (%s), which grants more than creating token and access reviews, or its webhook configuration or priority-class policy by name", b.RoleRef.Name, b.Name)
		}
	}
	return roles
}

// onlyReviews: rules that only create TokenReviews and SubjectAccessReviews.
func onlyReviews(rules []rbacv1.PolicyRule) bool {
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 || len(r.Verbs) != 1 || r.Verbs[0] != "create" {
			return false
		}
		for _, res := range r.Resources {
			if res != "tokenreviews" && res != "subjectaccessreviews" {
				return false
			}
		}
	}
	return len(rules) > 0
}

// onlyOwnByName: rules on resource only, each restricted to one name.
func onlyOwnByName(rules []rbacv1.PolicyRule, resource string) bool {
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 || len(r.ResourceNames) != 1 || !slices.Equal(r.Resources, []string{resource}) {
			return false
		}
	}
	return len(rules) > 0
}

// serviceAccountConfig creates the ServiceAccount, binds the given rules in
// each namespace, and returns a rest.Config authenticated by a token the
// TokenRequest API issued for it: what the manager's pod would have.
func serviceAccountConfig(t *testing.T, saNS, sa string, grants map[string][]rbacv1.PolicyRule) *rest.Config {
	t.Helper()
	ctx := context.Background()
	acct := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: saNS}}
	if err := k8s.Create(ctx, acct); err != nil {
		t.Fatal(err)
	}
	for ns, rules := range grants {
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}, Rules: rules}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: saNS}}}
		for _, obj := range []client.Object{role, binding} {
			if err := k8s.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
		}
	}
	tr := &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}
	if err := k8s.SubResource("token").Create(ctx, acct, tr); err != nil {
		t.Fatalf("requesting a token for %s/%s: %v", saNS, sa, err)
	}
	return &rest.Config{Host: env.Config.Host, BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData}, QPS: 1000, Burst: 2000}
}

// applyDemoIn creates config/demo's objects in ns instead of agentrun-demo.
func applyDemoIn(t *testing.T, ns string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "demo", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range decodeYAML(t, data) {
			if u.GetKind() == "Namespace" {
				continue
			}
			u.SetNamespace(ns)
			if err := k8s.Create(context.Background(), u); err != nil {
				t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
			}
		}
	}
}

// TestNamespaceScopedManagerRunsTheDemoWithRolesOnly runs the manager
// in-process as a ServiceAccount (a TokenRequest token, not the admin),
// with --namespaces=<tenant> and exactly the Roles of config/namespaced:
// the overlay's manager Role in the tenant namespace and its egress reader
// Role in the manager's own. It drives the demo there (a run completes, a
// run parked on a missing Secret continues once it is created, a fan-out
// creates and finishes its workers, a checkpoint waits), never touches a
// run in another namespace, and the same identity is refused a Secret
// there; the manager's log shows no refused request but the optional
// API-server endpoint read.
func TestNamespaceScopedManagerRunsTheDemoWithRolesOnly(t *testing.T) {
	roles := namespacedOverlayRoles(t)
	tenantRole, egressRole := roles["agentrun-manager-role"], roles["agentrun-egress-reader"]
	if tenantRole == nil || egressRole == nil {
		t.Fatalf("config/namespaced lacks the manager or egress Role: %v", roles)
	}
	ops, tenant, other := newNamespace(t), newNamespace(t), newNamespace(t)
	saCfg := serviceAccountConfig(t, ops, "agentrun-controller-manager", map[string][]rbacv1.PolicyRule{tenant: tenantRole.Rules, ops: egressRole.Rules})
	user := "system:serviceaccount:" + ops + ":agentrun-controller-manager"

	sa, err := client.New(saCfg, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	createSecret(t, other, "neighbours-key", map[string]string{"api-key": "sk-neighbour-canary"})
	if err := sa.Get(context.Background(), keyOf(other, "neighbours-key"), &corev1.Secret{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the manager's identity reading a Secret in another namespace: %v, want Forbidden", err)
	}
	if err := sa.List(context.Background(), &corev1.SecretList{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the manager's identity listing Secrets cluster-wide: %v, want Forbidden", err)
	}

	logStart := len(logSink.String())
	mgr, err := manager.New(saCfg, manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true, Scripted: providers.NewScripted(),
		Namespaces: []string{tenant}, EgressConfigMap: keyOf(ops, egress.DefaultConfigMapName),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	applyDemoIn(t, tenant)
	createConfigMap(t, other, "reviewer", map[string]string{"agent.toml": stages(1)})
	createRun(t, other, "neighbour", "reviewer")

	waitFor(t, tenant, "review-pr", 60*time.Second, "review-pr Complete", phaseIs(arv1.PhaseComplete))
	waitFor(t, tenant, "summarise-notes", 30*time.Second, "summarise-notes on SecretMissing", blockedOn(arv1.BlockerSecretMissing))
	createSecret(t, tenant, "demo-model-key", map[string]string{"api-key": "anything"})
	waitFor(t, tenant, "summarise-notes", 10*time.Second, "summarise-notes Complete after the Secret", phaseIs(arv1.PhaseComplete))
	tri := waitFor(t, tenant, "triage-backlog", 90*time.Second, "triage-backlog Complete", phaseIs(arv1.PhaseComplete))
	if cs := tri.Status.Children; cs == nil || cs.Succeeded != 6 {
		t.Errorf("triage-backlog children = %+v, want 6 succeeded", cs)
	}
	waitFor(t, tenant, "deploy-release", 30*time.Second, "deploy-release at its checkpoint", waitingOn(arv1.WaitInteractionPoint))

	// Untouched: its status is still the CRD's default.
	if r := getRun(t, other, "neighbour"); !equality.Semantic.DeepEqual(r.Status, arv1.AgentRunStatus{ObservedGeneration: -1, Phase: arv1.PhaseQueued}) || len(r.Finalizers) > 0 {
		t.Errorf("a run outside --namespaces was touched: status %+v finalizers %v", r.Status, r.Finalizers)
	}
	for _, line := range strings.Split(logSink.String()[logStart:], "\n") {
		if strings.Contains(line, "forbidden") && strings.Contains(line, user) && !strings.Contains(line, "API server's endpoints") {
			t.Errorf("the namespace-scoped manager was refused something: %s", line)
		}
	}
}
