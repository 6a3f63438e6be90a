package helmchart_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// historyValues turn the history server on with a database store.
func historyValues(extra map[string]any) map[string]any {
	h := map[string]any{"enabled": true}
	for k, v := range extra {
		h[k] = v
	}
	return map[string]any{"history": h,
		"store": map[string]any{"dsn": "postgres://agentrun@db.example:5432/agentrun?sslmode=verify-full", "existingSecret": "db-password"}}
}

// configHistory reads config/history's objects (what kubectl apply -k
// config/history installs), by kind and name.
func configHistory(t *testing.T) map[string]*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "history", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*unstructured.Unstructured{}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeAll(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, u := range objs {
			out[u.GetKind()+"/"+u.GetName()] = u
		}
	}
	return out
}

// TestHistoryServerRenders: history.enabled adds the history server as
// config/history has it (the same roles and rules, aggregated alike; the
// server's ServiceAccount bound to auth-delegator, the authentication
// reader, its APIService and its certificate's Secret), its Deployment
// reading the manager's store, a Service selecting only its pods, and the
// APIService pointing at that Service.
func TestHistoryServerRenders(t *testing.T) {
	objs := renderChart(t, historyValues(nil)).objs
	cfg := configHistory(t)
	for _, role := range []string{"viewer", "admin"} {
		got := one[rbacv1.ClusterRole](t, objs, "ClusterRole", "-history-"+role)
		want := convert[rbacv1.ClusterRole](t, cfg["ClusterRole/agentrun-history-"+role])
		if !equality.Semantic.DeepEqual(got.Rules, want.Rules) {
			t.Errorf("the chart's %s rules %+v, config/history's %+v", role, got.Rules, want.Rules)
		}
		for k, v := range want.Labels {
			if got.Labels[k] != v {
				t.Errorf("the chart's %s role lacks label %s=%s", role, k, v)
			}
		}
	}
	sa := one[corev1.ServiceAccount](t, objs, "ServiceAccount", "-history")
	bound := map[string]bool{}
	for _, u := range objs {
		if u.GetKind() != "RoleBinding" && u.GetKind() != "ClusterRoleBinding" {
			continue
		}
		var b rbacv1.RoleBinding
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &b); err != nil {
			t.Fatal(err)
		}
		if len(b.Subjects) == 1 && b.Subjects[0].Name == sa.Name {
			bound[b.RoleRef.Name] = true
		}
	}
	for _, r := range []string{"system:auth-delegator", "extension-apiserver-authentication-reader", "agentrun-operator-history-apiservice", "agentrun-operator-history-cert"} {
		if !bound[r] {
			t.Errorf("the history ServiceAccount is not bound to %s (bound: %v)", r, bound)
		}
	}
	cert := one[rbacv1.Role](t, objs, "Role", "-history-cert")
	if !slices.Contains(cert.Rules[1].ResourceNames, "agentrun-operator-history-cert") {
		t.Errorf("the certificate Role names %v", cert.Rules[1].ResourceNames)
	}

	d := one[appsv1.Deployment](t, objs, "Deployment", "-history")
	c := d.Spec.Template.Spec.Containers[0]
	for _, a := range []string{"history", "--cert-secret=agentrun-operator-history-cert", "--cert-secret-namespace=$(POD_NAMESPACE)",
		"--service=agentrun-operator-history", "--store=postgres://agentrun@db.example:5432/agentrun?sslmode=verify-full", "--continue-ttl=1h"} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("args %v lack %s", c.Args, a)
		}
	}
	if d.Spec.Template.Spec.ServiceAccountName != sa.Name || !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "PGPASSWORD" && e.ValueFrom.SecretKeyRef.Name == "db-password"
	}) {
		t.Errorf("the history server runs as %q with env %+v", d.Spec.Template.Spec.ServiceAccountName, c.Env)
	}
	svc := one[corev1.Service](t, objs, "Service", "-history")
	manager := one[appsv1.Deployment](t, objs, "Deployment", "-operator")
	if !selectsMap(svc.Spec.Selector, d.Spec.Template.Labels) || selectsMap(svc.Spec.Selector, manager.Spec.Template.Labels) {
		t.Errorf("the history Service selector %v does not select exactly the server's pods", svc.Spec.Selector)
	}
	api := one[unstructured.Unstructured](t, objs, "APIService", "v1alpha1.history.agentrun.dev")
	if name, _, _ := unstructured.NestedString(api.Object, "spec", "service", "name"); name != svc.Name {
		t.Errorf("the APIService points at %q, the Service is %q", name, svc.Name)
	}
}

// TestHistoryServerWithItsOwnCertificate: history.certSecret serves with
// that Secret (--cert-dir), writes caBundle and drops the rights to keep a
// certificate and patch the APIService; without a database store the
// chart refuses history.enabled.
func TestHistoryServerWithItsOwnCertificate(t *testing.T) {
	objs := renderChart(t, historyValues(map[string]any{"certSecret": "history-tls", "caBundle": "Q0E="})).objs
	d := one[appsv1.Deployment](t, objs, "Deployment", "-history")
	if c := d.Spec.Template.Spec.Containers[0]; !slices.Contains(c.Args, "--cert-dir=/etc/agentrun/history-tls") || slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--cert-secret") }) {
		t.Errorf("args %v", c.Args)
	}
	if vs := d.Spec.Template.Spec.Volumes; len(vs) != 1 || vs[0].Secret == nil || vs[0].Secret.SecretName != "history-tls" {
		t.Errorf("volumes %+v", vs)
	}
	api := one[unstructured.Unstructured](t, objs, "APIService", "v1alpha1.history.agentrun.dev")
	if ca, _, _ := unstructured.NestedString(api.Object, "spec", "caBundle"); ca != "Q0E=" {
		t.Errorf("caBundle %q", ca)
	}
	for _, u := range objs {
		if strings.HasSuffix(u.GetName(), "-history-apiservice") || strings.HasSuffix(u.GetName(), "-history-cert") {
			t.Errorf("%s %s rendered with history.certSecret", u.GetKind(), u.GetName())
		}
	}
	if _, err := tryRender(loadChart(t), map[string]any{"history": map[string]any{"enabled": true}}); err == nil || !strings.Contains(err.Error(), "set store.dsn") {
		t.Errorf("history without a store: %v", err)
	}
}
