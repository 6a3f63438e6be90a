package helmchart_test

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// TestChartMonitoringIsConfigMonitoring: files/ holds config/monitoring's
// alerts and dashboard byte for byte (`make chart` copies them, `make
// verify-generated` fails when they are stale), and with prometheusRule and
// grafanaDashboard on, the chart's PrometheusRule has the spec of `kubectl
// kustomize config/monitoring`'s and its dashboard ConfigMap holds the same
// dashboard, labelled for Grafana's sidecar; both are off by default.
func TestChartMonitoringIsConfigMonitoring(t *testing.T) {
	for src, cp := range map[string]string{"prometheusrule.yaml": "prometheusrule.yaml", "grafana-dashboard.json": "grafana-dashboard.json"} {
		a, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "monitoring", src))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(chartDir(), "files", cp))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("files/%s differs from config/monitoring/%s (%v): run `make chart`", cp, src, err)
		}
	}
	for _, u := range renderChart(t, nil).objs {
		if u.GetKind() == "PrometheusRule" || u.GetKind() == "ConfigMap" && strings.HasSuffix(u.GetName(), "-grafana-dashboard") {
			t.Errorf("the default install renders %s %s", u.GetKind(), u.GetName())
		}
	}

	k := kustomize(t, "monitoring")
	c := renderChart(t, mustYAML(t, `{prometheusRule: {enabled: true, labels: {release: prometheus}}, grafanaDashboard: {enabled: true, namespace: grafana, annotations: {grafana_folder: Agents}}}`)).objs
	kr, cr := one[unstructured.Unstructured](t, k, "PrometheusRule", ""), one[unstructured.Unstructured](t, c, "PrometheusRule", "")
	if !reflect.DeepEqual(kr.Object["spec"], cr.Object["spec"]) {
		t.Errorf("the chart's PrometheusRule spec differs from config/monitoring's:\n%v\n%v", cr.Object["spec"], kr.Object["spec"])
	}
	if !strings.Contains(toString(t, cr.Object["spec"]), "{{ $labels.namespace }}") {
		t.Error("the chart's alerts lost Prometheus's $labels templates")
	}
	if cr.GetNamespace() != releaseNS || cr.GetLabels()["release"] != "prometheus" {
		t.Errorf("PrometheusRule %s/%s labels %v", cr.GetNamespace(), cr.GetName(), cr.GetLabels())
	}
	kd, cd := one[corev1.ConfigMap](t, k, "ConfigMap", "-grafana-dashboard"), one[corev1.ConfigMap](t, c, "ConfigMap", "-grafana-dashboard")
	if !reflect.DeepEqual(kd.Data, cd.Data) {
		t.Errorf("the chart's dashboard ConfigMap holds keys %v, config/monitoring's %v, with different content", keysOf(cd.Data), keysOf(kd.Data))
	}
	if cd.Namespace != "grafana" || cd.Labels["grafana_dashboard"] != "1" || cd.Annotations["grafana_folder"] != "Agents" {
		t.Errorf("dashboard ConfigMap %s/%s labels %v annotations %v", cd.Namespace, cd.Name, cd.Labels, cd.Annotations)
	}
}

func toString(t *testing.T, v any) string {
	t.Helper()
	var b strings.Builder
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		case string:
			b.WriteString(x + "\n")
		}
	}
	walk(v)
	return b.String()
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestChartNetworkPolicyIsConfigNetworkPolicy: with networkPolicy on and
// the API server address and metrics peer config/networkpolicy uses, the
// chart's NetworkPolicy has exactly config/networkpolicy's policy types,
// ingress and egress rules, and selects the chart's pods (and no other
// release's); extraEgress is appended; it is off by default and refused
// without the API servers' addresses.
func TestChartNetworkPolicyIsConfigNetworkPolicy(t *testing.T) {
	if n := count(renderChart(t, nil).objs, "NetworkPolicy"); n != 0 {
		t.Errorf("the default install renders %d NetworkPolicies", n)
	}
	if _, err := tryRender(loadChart(t), mustYAML(t, `networkPolicy: {enabled: true}`)); err == nil || !strings.Contains(err.Error(), "networkPolicy.apiServer.cidrs") {
		t.Errorf("networkPolicy without the API servers' addresses: %v, want it refused naming networkPolicy.apiServer.cidrs", err)
	}
	k := one[networkingv1.NetworkPolicy](t, kustomize(t, "networkpolicy"), "NetworkPolicy", "")
	objs := renderChart(t, mustYAML(t, `networkPolicy: {enabled: true, apiServer: {cidrs: [192.0.2.10/32]}}`)).objs
	c := one[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", "")
	if !equality.Semantic.DeepEqual(k.Spec.PolicyTypes, c.Spec.PolicyTypes) || !equality.Semantic.DeepEqual(k.Spec.Ingress, c.Spec.Ingress) || !equality.Semantic.DeepEqual(k.Spec.Egress, c.Spec.Egress) {
		t.Errorf("the chart's NetworkPolicy\n%+v\nconfig/networkpolicy's\n%+v", c.Spec, k.Spec)
	}
	pods := renderChart(t, nil).objs
	d := one[unstructured.Unstructured](t, pods, "Deployment", "")
	podLabels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
	other := map[string]string{}
	for key, v := range podLabels {
		other[key] = v
	}
	other["app.kubernetes.io/instance"] = "another-release"
	if c.Namespace != releaseNS || !selects(t, &c.Spec.PodSelector, podLabels) || selects(t, &c.Spec.PodSelector, other) {
		t.Errorf("NetworkPolicy %s/%s selector %v: want the chart's pods %v only", c.Namespace, c.Name, c.Spec.PodSelector, podLabels)
	}

	extra := renderChart(t, mustYAML(t, `{metrics: {port: 9443}, networkPolicy: {enabled: true, metricsFrom: [{podSelector: {matchLabels: {app: prometheus}}}], apiServer: {cidrs: [10.0.0.1/32, 10.0.0.2/32], ports: [443]}, extraEgress: [{to: [{podSelector: {matchLabels: {app: vllm}}}]}]}}`)).objs
	e := one[networkingv1.NetworkPolicy](t, extra, "NetworkPolicy", "")
	last := e.Spec.Egress[len(e.Spec.Egress)-1]
	if len(e.Spec.Egress) != len(k.Spec.Egress)+1 || len(last.To) != 1 || last.To[0].PodSelector.MatchLabels["app"] != "vllm" {
		t.Errorf("extraEgress is not appended: %+v", e.Spec.Egress)
	}
	api := e.Spec.Egress[1]
	if len(api.To) != 2 || api.To[1].IPBlock.CIDR != "10.0.0.2/32" || len(api.Ports) != 1 || api.Ports[0].Port.IntValue() != 443 {
		t.Errorf("API server rule %+v, want both addresses on 443", api)
	}
	in := e.Spec.Ingress[0]
	if in.Ports[0].Port.IntValue() != 9443 || !reflect.DeepEqual(in.From[0].PodSelector, &metav1.LabelSelector{MatchLabels: map[string]string{"app": "prometheus"}}) {
		t.Errorf("metrics ingress %+v, want port 9443 from app=prometheus", in)
	}
}

// TestMetricsValues: by default the manager serves its metrics securely
// (the binary's default, so no flag) with a self-signed certificate;
// metrics.certSecret mounts a Secret read-only and points
// --metrics-cert-dir at it; metrics.secure false passes
// --metrics-secure=false and the ServiceMonitor then scrapes plain HTTP
// with no scraper identity; with rbac.create false the scraper is not
// bound.
func TestMetricsValues(t *testing.T) {
	args := func(objs []*unstructured.Unstructured) []string {
		return one[appsv1.Deployment](t, objs, "Deployment", "").Spec.Template.Spec.Containers[0].Args
	}
	def := renderChart(t, nil).objs
	if a := args(def); slices.ContainsFunc(a, func(s string) bool {
		return strings.HasPrefix(s, "--metrics-secure") || strings.HasPrefix(s, "--metrics-cert-dir")
	}) {
		t.Errorf("default args %v set the metrics' security", a)
	}

	withCert := renderChart(t, mustYAML(t, `metrics: {certSecret: agentrun-metrics-cert}`)).objs
	d := one[appsv1.Deployment](t, withCert, "Deployment", "")
	c := d.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--metrics-cert-dir=/etc/agentrun/metrics-certs") || len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/etc/agentrun/metrics-certs" || !c.VolumeMounts[0].ReadOnly ||
		len(d.Spec.Template.Spec.Volumes) != 1 || d.Spec.Template.Spec.Volumes[0].Secret == nil || d.Spec.Template.Spec.Volumes[0].Secret.SecretName != "agentrun-metrics-cert" ||
		d.Spec.Template.Spec.Volumes[0].Name != c.VolumeMounts[0].Name {
		t.Errorf("certSecret: args %v mounts %+v volumes %+v", c.Args, c.VolumeMounts, d.Spec.Template.Spec.Volumes)
	}

	plain := renderChart(t, mustYAML(t, `{metrics: {secure: false}, serviceMonitor: {enabled: true}}`)).objs
	if a := args(plain); !slices.Contains(a, "--metrics-secure=false") {
		t.Errorf("metrics.secure false: args %v", a)
	}
	sm := one[serviceMonitor](t, plain, "ServiceMonitor", "")
	if ep := sm.Spec.Endpoints[0]; ep.Scheme != "http" || ep.Authorization.Type != "" || ep.TLSConfig != nil {
		t.Errorf("plain metrics: ServiceMonitor endpoint %+v", ep)
	}
	for _, u := range plain {
		if u.GetKind() == "Secret" || strings.HasSuffix(u.GetName(), "-metrics-scraper") {
			t.Errorf("plain metrics render a scraper identity (%s %s) among %v", u.GetKind(), u.GetName(), kinds(plain))
		}
	}

	secure := renderChart(t, mustYAML(t, `serviceMonitor: {enabled: true}`)).objs
	checkScraper(t, secure, one[serviceMonitor](t, secure, "ServiceMonitor", ""))
	unbound := renderChart(t, mustYAML(t, `{serviceMonitor: {enabled: true}, rbac: {create: false}}`)).objs
	if n := count(unbound, "ClusterRoleBinding"); n != 0 || count(unbound, "Secret") != 1 {
		t.Errorf("rbac.create false renders %v", kinds(unbound))
	}
}
