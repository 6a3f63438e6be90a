package helmchart_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// TestDefaultValuesRender: the default install is the ServiceAccount, the
// manager's ClusterRole and binding, the Lease Role and binding, the three
// people's ClusterRoles, the scrapers' metrics-reader and the three tool
// policy roles (admin, namespace admin, reader), the admission
// policy and binding, the webhook configuration, its Service and the
// webhook certificate's Role and ClusterRole with their bindings, the
// priority-class policy's ClusterRole and binding, the
// Deployment of config/manager's image, its
// PodDisruptionBudget, the metrics Service selecting its pods and the
// priority classes ConfigMap; no
// ServiceMonitor, PrometheusRule, dashboard or NetworkPolicy; every
// namespaced object in the release namespace.
func TestDefaultValuesRender(t *testing.T) {
	objs := renderChart(t, nil).objs
	want := map[string]int{"ServiceAccount": 1, "ClusterRole": 13, "ClusterRoleBinding": 4, "Role": 2, "RoleBinding": 2,
		"ValidatingAdmissionPolicy": 4, "ValidatingAdmissionPolicyBinding": 4, "ValidatingWebhookConfiguration": 1,
		"Deployment": 1, "PodDisruptionBudget": 1, "Service": 2, "ConfigMap": 1}
	got := map[string]int{}
	for _, u := range objs {
		got[u.GetKind()]++
		namespaced := !strings.HasPrefix(u.GetKind(), "Cluster") && !strings.HasPrefix(u.GetKind(), "Validating")
		if namespaced != (u.GetNamespace() == releaseNS) {
			t.Errorf("%s %s is in namespace %q", u.GetKind(), u.GetName(), u.GetNamespace())
		}
		if u.GetLabels()["app.kubernetes.io/instance"] != releaseName {
			t.Errorf("%s %s lacks the release's instance label: %v", u.GetKind(), u.GetName(), u.GetLabels())
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the default install renders %v, want %v", got, want)
	}

	var kust struct {
		Images []struct{ NewName, NewTag string } `json:"images"`
	}
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "manager", "kustomization.yaml"))
	if err != nil || yaml.Unmarshal(data, &kust) != nil || len(kust.Images) != 1 {
		t.Fatalf("config/manager/kustomization.yaml: %v %+v", err, kust)
	}
	d := one[appsv1.Deployment](t, objs, "Deployment", "")
	if img, w := d.Spec.Template.Spec.Containers[0].Image, kust.Images[0].NewName+":"+kust.Images[0].NewTag; img != w {
		t.Errorf("image %s, config/manager's %s", img, w)
	}
	if sa := one[corev1.ServiceAccount](t, objs, "ServiceAccount", ""); d.Spec.Template.Spec.ServiceAccountName != sa.Name || sa.Name != releaseName {
		t.Errorf("the pods run as %q, the chart's ServiceAccount is %q, want %q", d.Spec.Template.Spec.ServiceAccountName, sa.Name, releaseName)
	}
	svc := one[corev1.Service](t, objs, "Service", "-metrics")
	if !selectsMap(svc.Spec.Selector, d.Spec.Template.Labels) || len(svc.Spec.Ports) != 1 ||
		portOf(d.Spec.Template.Spec.Containers[0], svc.Spec.Ports[0].TargetPort.String()) != 8443 || svc.Spec.Ports[0].Name != "metrics" {
		t.Errorf("metrics Service selector %v ports %+v does not reach the pods' metrics port", svc.Spec.Selector, svc.Spec.Ports)
	}
}

func selectsMap(sel, pod map[string]string) bool {
	for k, v := range sel {
		if pod[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// TestNonDefaultValuesRender: replicas, shards, lease timings, image (and
// its digest, pinning every Deployment of it),
// resources, extra arguments and environment, scheduling and the
// ServiceMonitor reach the objects they are for.
func TestNonDefaultValuesRender(t *testing.T) {
	vals := mustYAML(t, `
replicas: 3
shards: 6
leases: {duration: 30s, renewDeadline: 20s, retryPeriod: 4s}
image: {repository: registry.example/agentrun, tag: v9.9.9, pullPolicy: Always}
imagePullSecrets: [{name: regcred}]
resources: {requests: {cpu: 250m, memory: 256Mi}, limits: {memory: 1Gi}}
extraArgs: [--max-concurrent-steps=64, --max-active-runs-per-namespace=10]
env: [{name: GOGC, value: "75"}]
metrics: {port: 9090, service: {port: 8443, annotations: {team: platform}}}
probes: {port: 9091}
serviceMonitor: {enabled: true, interval: 15s, scrapeTimeout: 5s, labels: {release: prometheus}}
podAnnotations: {sidecar.istio.io/inject: "false"}
podLabels: {team: platform}
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: dedicated, operator: Equal, value: agents, effect: NoSchedule}]
affinity: {podAntiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 100, podAffinityTerm: {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app.kubernetes.io/name: agentrun-operator}}}}]}}
priorityClassName: system-cluster-critical
terminationGracePeriodSeconds: 45
serviceAccount: {annotations: {iam.example/role: agentrun}}
`)
	objs := renderChart(t, vals).objs
	d := one[appsv1.Deployment](t, objs, "Deployment", "")
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	if *d.Spec.Replicas != 3 {
		t.Errorf("replicas %d, want 3", *d.Spec.Replicas)
	}
	for _, a := range []string{"--shards=6", "--leader-elect", "--lease-duration=30s", "--lease-renew-deadline=20s", "--lease-retry-period=4s",
		"--metrics-bind-address=:9090", "--health-probe-bind-address=:9091", "--max-concurrent-steps=64", "--max-active-runs-per-namespace=10"} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("args %v lack %s", c.Args, a)
		}
	}
	if c.Image != "registry.example/agentrun:v9.9.9" || c.ImagePullPolicy != corev1.PullAlways || len(pod.ImagePullSecrets) != 1 || pod.ImagePullSecrets[0].Name != "regcred" {
		t.Errorf("image %s %s pull secrets %v", c.Image, c.ImagePullPolicy, pod.ImagePullSecrets)
	}
	digest := "sha256:" + strings.Repeat("0123456789abcdef", 4)
	pinned := renderChart(t, map[string]any{"image": map[string]any{"digest": digest}, "console": map[string]any{"enabled": true}}).objs
	for _, suffix := range []string{"operator", "-console"} {
		if img := one[appsv1.Deployment](t, pinned, "Deployment", suffix).Spec.Template.Spec.Containers[0].Image; img != "ghcr.io/agentrun-dev/agentrun-operator:v0.1.0@"+digest {
			t.Errorf("image.digest: the Deployment%s runs %s", suffix, img)
		}
	}
	if c.Resources.Requests.Cpu().Cmp(resource.MustParse("250m")) != 0 || c.Resources.Limits.Memory().Cmp(resource.MustParse("1Gi")) != 0 {
		t.Errorf("resources %+v", c.Resources)
	}
	if len(c.Env) != 3 || c.Env[0].Name != "POD_NAME" || c.Env[1].Name != "POD_NAMESPACE" || c.Env[2].Name != "GOGC" || c.Env[2].Value != "75" {
		t.Errorf("env %+v, want POD_NAME, POD_NAMESPACE, then GOGC=75", c.Env)
	}
	if portOf(c, "metrics") != 9090 || portOf(c, c.ReadinessProbe.HTTPGet.Port.String()) != 9091 || portOf(c, c.LivenessProbe.HTTPGet.Port.String()) != 9091 {
		t.Errorf("ports %+v, probes on %s", c.Ports, c.ReadinessProbe.HTTPGet.Port.String())
	}
	if pod.NodeSelector["kubernetes.io/os"] != "linux" || len(pod.Tolerations) != 1 || pod.Tolerations[0].Value != "agents" ||
		pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil || pod.PriorityClassName != "system-cluster-critical" || *pod.TerminationGracePeriodSeconds != 45 {
		t.Errorf("scheduling: nodeSelector %v tolerations %v affinity %v priority %q grace %d", pod.NodeSelector, pod.Tolerations, pod.Affinity, pod.PriorityClassName, *pod.TerminationGracePeriodSeconds)
	}
	if d.Spec.Template.Annotations["sidecar.istio.io/inject"] != "false" || d.Spec.Template.Labels["team"] != "platform" {
		t.Errorf("pod metadata %v %v", d.Spec.Template.Annotations, d.Spec.Template.Labels)
	}
	if sa := one[corev1.ServiceAccount](t, objs, "ServiceAccount", "operator"); sa.Annotations["iam.example/role"] != "agentrun" {
		t.Errorf("ServiceAccount annotations %v", sa.Annotations)
	}

	svc := one[corev1.Service](t, objs, "Service", "-metrics")
	if svc.Spec.Ports[0].Port != 8443 || portOf(c, svc.Spec.Ports[0].TargetPort.String()) != 9090 || svc.Annotations["team"] != "platform" {
		t.Errorf("metrics Service ports %+v annotations %v", svc.Spec.Ports, svc.Annotations)
	}
	sm := one[serviceMonitor](t, objs, "ServiceMonitor", "")
	if sm.APIVersion != "monitoring.coreos.com/v1" || sm.Namespace != releaseNS || sm.Labels["release"] != "prometheus" {
		t.Errorf("ServiceMonitor %s %s/%s labels %v", sm.APIVersion, sm.Namespace, sm.Name, sm.Labels)
	}
	if !selectsMap(sm.Spec.Selector.MatchLabels, svc.Labels) || !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{releaseNS}) {
		t.Errorf("ServiceMonitor selects %v in %v, the metrics Service is labelled %v in %s", sm.Spec.Selector.MatchLabels, sm.Spec.NamespaceSelector.MatchNames, svc.Labels, releaseNS)
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name || sm.Spec.Endpoints[0].Path != "/metrics" ||
		sm.Spec.Endpoints[0].Interval != "15s" || sm.Spec.Endpoints[0].ScrapeTimeout != "5s" || !sm.Spec.Endpoints[0].HonorLabels {
		t.Errorf("ServiceMonitor endpoints %+v, want the Service's port %q every 15s, honouring the metrics' namespace label", sm.Spec.Endpoints, svc.Spec.Ports[0].Name)
	}
	checkScraper(t, objs, sm)
}

// checkScraper: the ServiceMonitor scrapes over HTTPS with the token Secret
// of the chart's scraper ServiceAccount, which is bound to the chart's
// metrics-reader ClusterRole, and accepts the self-signed certificate.
func checkScraper(t *testing.T, objs []*unstructured.Unstructured, sm *serviceMonitor) {
	t.Helper()
	ep := sm.Spec.Endpoints[0]
	if ep.Scheme != "https" || ep.Authorization.Type != "Bearer" || ep.Authorization.Credentials.Key != "token" || ep.TLSConfig["insecureSkipVerify"] != true {
		t.Errorf("ServiceMonitor endpoint scheme %q authorization %+v tlsConfig %v, want https with a bearer token", ep.Scheme, ep.Authorization, ep.TLSConfig)
	}
	secret := one[corev1.Secret](t, objs, "Secret", "-metrics-scraper-token")
	sa := one[corev1.ServiceAccount](t, objs, "ServiceAccount", "-metrics-scraper")
	if secret.Name != ep.Authorization.Credentials.Name || secret.Type != corev1.SecretTypeServiceAccountToken || secret.Annotations[corev1.ServiceAccountNameKey] != sa.Name {
		t.Errorf("the ServiceMonitor's credentials %q: Secret %s of type %s for %q, want a token of %s", ep.Authorization.Credentials.Name, secret.Name, secret.Type, secret.Annotations[corev1.ServiceAccountNameKey], sa.Name)
	}
	b := one[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding", "-metrics-scraper")
	reader := one[rbacv1.ClusterRole](t, objs, "ClusterRole", "-metrics-reader")
	if b.RoleRef.Name != reader.Name || len(b.Subjects) != 1 || b.Subjects[0].Name != sa.Name || b.Subjects[0].Namespace != sa.Namespace {
		t.Errorf("ClusterRoleBinding %s binds %s to %v, want %s to %s/%s", b.Name, b.RoleRef.Name, b.Subjects, reader.Name, sa.Namespace, sa.Name)
	}
}

// serviceMonitor is the part of monitoring.coreos.com/v1 ServiceMonitor the
// chart sets.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Scheme        string `json:"scheme"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
			HonorLabels   bool   `json:"honorLabels"`
			Authorization struct {
				Type        string `json:"type"`
				Credentials struct {
					Name string `json:"name"`
					Key  string `json:"key"`
				} `json:"credentials"`
			} `json:"authorization"`
			TLSConfig map[string]any `json:"tlsConfig"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// TestSwitchesLeaveObjectsOut: one replica has no PodDisruptionBudget;
// rbac.create false renders no RBAC; an existing ServiceAccount is used by
// name and bound; webhook.enabled false leaves the webhook objects out and
// turns the webhook server off; admissionPolicy.enabled false leaves the
// policy out.
func TestSwitchesLeaveObjectsOut(t *testing.T) {
	if n := count(renderChart(t, map[string]any{"replicas": 1}).objs, "PodDisruptionBudget"); n != 0 {
		t.Errorf("one replica renders %d PodDisruptionBudgets", n)
	}
	if n := count(renderChart(t, map[string]any{"podDisruptionBudget": map[string]any{"enabled": false}}).objs, "PodDisruptionBudget"); n != 0 {
		t.Errorf("podDisruptionBudget.enabled false renders %d", n)
	}
	noRBAC := renderChart(t, map[string]any{"rbac": map[string]any{"create": false}}).objs
	for _, k := range []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
		if n := count(noRBAC, k); n != 0 {
			t.Errorf("rbac.create false renders %d %s", n, k)
		}
	}
	own := renderChart(t, map[string]any{"serviceAccount": map[string]any{"create": false, "name": "platform-agentrun"}}).objs
	if n := count(own, "ServiceAccount"); n != 0 {
		t.Errorf("serviceAccount.create false renders %d ServiceAccounts", n)
	}
	if d := one[appsv1.Deployment](t, own, "Deployment", ""); d.Spec.Template.Spec.ServiceAccountName != "platform-agentrun" {
		t.Errorf("the pods run as %q, want platform-agentrun", d.Spec.Template.Spec.ServiceAccountName)
	}
	for _, suffix := range []string{"-manager", "-webhook-configuration"} {
		if b := one[rbacv1.ClusterRoleBinding](t, own, "ClusterRoleBinding", suffix); b.Subjects[0].Name != "platform-agentrun" {
			t.Errorf("the manager's ClusterRole %s is bound to %v", b.RoleRef.Name, b.Subjects)
		}
	}
	noWebhook := renderChart(t, map[string]any{"webhook": map[string]any{"enabled": false}}).objs
	if n := count(noWebhook, "ValidatingWebhookConfiguration") + count(noWebhook, "Service") + count(noWebhook, "Role"); n != 2 {
		t.Errorf("webhook.enabled false renders %v; want no webhook configuration, Service or certificate Role", kinds(noWebhook))
	}
	if c := one[appsv1.Deployment](t, noWebhook, "Deployment", "").Spec.Template.Spec.Containers[0]; !slices.Contains(c.Args, "--webhook-bind-address=0") || portOf(c, "webhook") != -1 {
		t.Errorf("webhook.enabled false: args %v ports %v, want --webhook-bind-address=0 and no webhook port", c.Args, c.Ports)
	}
	noPolicy := renderChart(t, map[string]any{"admissionPolicy": map[string]any{"enabled": false}}).objs
	if n := count(noPolicy, "ValidatingAdmissionPolicy") + count(noPolicy, "ValidatingAdmissionPolicyBinding"); n != 0 {
		t.Errorf("admissionPolicy.enabled false renders %d policy objects", n)
	}
	if d := one[appsv1.Deployment](t, renderChart(t, map[string]any{"leaderElect": false, "replicas": 1}).objs, "Deployment", ""); slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--leader-elect") {
		t.Errorf("leaderElect false still passes --leader-elect: %v", d.Spec.Template.Spec.Containers[0].Args)
	}
}

// TestRefusedValues: value combinations the manager would run wrongly with,
// and clusters older than the policy API, are refused at render time with
// the reason.
func TestRefusedValues(t *testing.T) {
	for _, tc := range []struct {
		vals map[string]any
		want string
	}{
		{map[string]any{"shards": 0}, "at '/shards': minimum: got 0, want 1"},
		{map[string]any{"replicas": 2, "shards": 1, "leaderElect": false}, "need leaderElect: true"},
		{map[string]any{"serviceAccount": map[string]any{"create": false}}, "serviceAccount.name is required"},
	} {
		if _, err := tryRender(loadChart(t), tc.vals); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("values %v: %v, want an error saying %q", tc.vals, err, tc.want)
		}
	}
	if _, err := tryRender(loadChart(t), map[string]any{"replicas": 2, "shards": 1}); err != nil {
		t.Errorf("two replicas on one shard with leader election: %v", err)
	}
}

// TestEveryValueIsDocumented: every value of values.yaml has a comment
// right above it and a row in the README's table, and the table lists no
// value that does not exist, with the default values.yaml has.
func TestEveryValueIsDocumented(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir(), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]any
	if err := yaml.Unmarshal(data, &vals); err != nil {
		t.Fatal(err)
	}
	leaves := map[string]any{}
	flatten("", vals, leaves)
	for _, key := range uncommentedLeaves(data) {
		t.Errorf("values.yaml: %s has no comment above it", key)
	}
	readme, err := os.ReadFile(filepath.Join(chartDir(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\| `([^`]*)` \\|").FindAllStringSubmatch(string(readme), -1) {
		rows[m[1]] = m[2]
	}
	var keys []string
	for k := range leaves {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		def, ok := rows[k]
		if !ok {
			t.Errorf("README.md has no row for %s", k)
			continue
		}
		if want := compact(t, leaves[k]); def != want {
			t.Errorf("README.md gives %s the default `%s`, values.yaml `%s`", k, def, want)
		}
	}
	for k := range rows {
		if _, ok := leaves[k]; !ok {
			t.Errorf("README.md documents %s, which values.yaml does not have", k)
		}
	}
	if len(rows) == 0 {
		t.Error("README.md has no values table")
	}
}

// objectValues are values documented as one object (a Kubernetes field
// passed through whole), not key by key.
var objectValues = map[string]bool{"resources": true, "history.resources": true, "podSecurityContext": true, "securityContext": true,
	"serviceMonitor.tlsConfig": true, "grafanaDashboard.labels": true}

// flatten records the dotted path of every leaf: a scalar, a list, an empty
// map or one of objectValues.
func flatten(prefix string, m map[string]any, out map[string]any) {
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok && len(sub) > 0 && !objectValues[prefix+k] {
			flatten(prefix+k+".", sub, out)
			continue
		}
		out[prefix+k] = v
	}
}

// uncommentedLeaves lists the values of values.yaml, by dotted path, that
// have no comment line right above their key (parents whose children are
// commented need none; the inside of objectValues is not looked at).
func uncommentedLeaves(data []byte) []string {
	var missing, path []string
	var indents []int
	prev := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") || strings.HasPrefix(trimmed, "-") || !strings.Contains(trimmed, ":") {
			prev = trimmed
			continue
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		for len(indents) > 0 && indents[len(indents)-1] >= indent {
			indents, path = indents[:len(indents)-1], path[:len(path)-1]
		}
		key := strings.TrimSpace(strings.SplitN(trimmed, ":", 2)[0])
		inside := false
		for i := range path {
			inside = inside || objectValues[strings.Join(path[:i+1], ".")]
		}
		indents, path = append(indents, indent), append(path, key)
		dotted := strings.Join(path, ".")
		leaf := !strings.HasSuffix(trimmed, ":") || objectValues[dotted]
		if !inside && leaf && !strings.HasPrefix(prev, "#") {
			missing = append(missing, dotted)
		}
		prev = trimmed
	}
	return missing
}

// compact writes a default as the README shows it: flow-style YAML on one
// line.
func compact(t *testing.T, v any) string {
	t.Helper()
	switch x := v.(type) {
	case string:
		if x == "" {
			return `""`
		}
		return x
	case nil:
		return "null"
	case map[string]any:
		if len(x) > 0 {
			return oneLine(x)
		}
	}
	out, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimSpace(string(out))
	if s == "[]" || s == "{}" || !strings.Contains(s, "\n") {
		return s
	}
	return oneLine(v)
}

// oneLine renders maps and lists in flow style, keys sorted.
func oneLine(v any) string {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + ": " + oneLine(x[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = oneLine(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case string:
		// Quoted where YAML would read it as another type ("1").
		out, err := yaml.Marshal(x)
		if err != nil {
			return x
		}
		return strings.TrimSpace(string(out))
	default:
		return fmt.Sprint(x)
	}
}

func mustYAML(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}
