package helmchart_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/strvals"
	"sigs.k8s.io/yaml"
)

// setValues parses `helm --set` arguments as the helm CLI does.
func setValues(t *testing.T, sets ...string) map[string]any {
	t.Helper()
	vals := map[string]any{}
	for _, s := range sets {
		if err := strvals.ParseInto(s, vals); err != nil {
			t.Fatalf("--set %s: %v", s, err)
		}
	}
	return vals
}

// TestSchemaRefusesBadValuesNamingTheField: values.schema.json refuses a
// value of the wrong type, outside its enum or range, not matching its
// format, or a key that does not exist (a typo), at render time, and the
// error names the field.
func TestSchemaRefusesBadValuesNamingTheField(t *testing.T) {
	c := loadChart(t)
	for _, tc := range []struct {
		vals map[string]any
		want string
	}{
		{setValues(t, "replicas=three"), "at '/replicas'"},
		{setValues(t, "replicas=-1"), "at '/replicas'"},
		{setValues(t, "replica=3"), "'replica'"},
		{setValues(t, "image.pullPolicy=Sometimes"), "at '/image/pullPolicy'"},
		{setValues(t, "webhook.failurePolicy=Sometimes"), "at '/webhook/failurePolicy'"},
		{setValues(t, "webhook.port=0"), "at '/webhook/port'"},
		{setValues(t, "image.tags=v1"), "'tags'"},
		{setValues(t, "image.digest=v0.1.0"), "at '/image/digest'"},
		{setValues(t, "leases.duration=15 seconds"), "at '/leases/duration'"},
		{setValues(t, "metrics.port=70000"), "at '/metrics/port'"},
		{setValues(t, "metrics.secure=yes"), "at '/metrics/secure'"},
		{setValues(t, "metrics.service.type=Ingress"), "at '/metrics/service/type'"},
		{setValues(t, "serviceMonitor.interval=30"), "at '/serviceMonitor/interval'"},
		{setValues(t, "serviceMonitor.enable=true"), "'enable'"},
		{setValues(t, "prometheusRule.enabled=maybe"), "at '/prometheusRule/enabled'"},
		{setValues(t, "watchNamespaces={Team_A}"), "at '/watchNamespaces/0'"},
		{setValues(t, "watchNamespaces=team-a"), "at '/watchNamespaces'"},
		{setValues(t, "networkPolicy.apiServer.cidrs={10.0.0.1}"), "at '/networkPolicy/apiServer/cidrs/0'"},
		{setValues(t, "networkPolicy.apiServer.ports={0}"), "at '/networkPolicy/apiServer/ports/0'"},
		{setValues(t, "extraArgs={max-concurrent-steps=64}"), "at '/extraArgs/0'"},
		{setValues(t, "podDisruptionBudget.minAvailable=half"), "at '/podDisruptionBudget/minAvailable'"},
		{setValues(t, "terminationGracePeriodSeconds=-5"), "at '/terminationGracePeriodSeconds'"},
		{setValues(t, "podAnnotations.a=1"), "at '/podAnnotations/a'"},
		{setValues(t, "resources.request.cpu=1"), "'request'"},
		{map[string]any{"imagePullSecrets": []any{map[string]any{"secret": "regcred"}}}, "at '/imagePullSecrets/0'"},
		{map[string]any{"env": []any{map[string]any{"value": "75"}}}, "at '/env/0'"},
	} {
		_, err := tryRender(c, tc.vals)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("values %v: %v, want an error naming %s", tc.vals, err, tc.want)
		} else {
			t.Logf("%v: %s", tc.vals, strings.Join(strings.Fields(err.Error()), " "))
		}
	}
}

// TestSchemaAcceptsDefaultsAndDocumentedExamples: the defaults, and every
// example values.yaml and README.md give, render.
func TestSchemaAcceptsDefaultsAndDocumentedExamples(t *testing.T) {
	c := loadChart(t)
	for name, vals := range map[string]map[string]any{
		"defaults":                 nil,
		"--set replicas=3":         setValues(t, "replicas=3"),
		"extraArgs":                mustYAML(t, `extraArgs: ["--max-concurrent-steps=64", "--max-active-runs-per-namespace=10", "--egress-allow-cidr=10.1.0.0/16"]`),
		"env":                      mustYAML(t, `env: [{name: GOGC, value: "75"}]`),
		"imagePullSecrets":         mustYAML(t, `imagePullSecrets: [{name: regcred}]`),
		"serviceMonitor":           mustYAML(t, `serviceMonitor: {enabled: true, labels: {release: prometheus}}`),
		"serviceMonitor with a CA": mustYAML(t, `{metrics: {certSecret: agentrun-metrics-cert}, serviceMonitor: {enabled: true, tlsConfig: {ca: {secret: {name: agentrun-metrics-cert, key: ca.crt}}, serverName: agentrun-operator-metrics.agentrun-system.svc}}}`),
		"plain metrics":            setValues(t, "metrics.secure=false"),
		"prometheusRule":           mustYAML(t, `prometheusRule: {enabled: true, labels: {release: prometheus}}`),
		"grafanaDashboard":         mustYAML(t, `grafanaDashboard: {enabled: true, namespace: monitoring, annotations: {grafana_folder: Agents}}`),
		"networkPolicy":            mustYAML(t, `networkPolicy: {enabled: true, apiServer: {cidrs: [192.0.2.10/32, "2001:db8::1/128"]}, extraEgress: [{to: [{podSelector: {matchLabels: {app: vllm}}}], ports: [{protocol: TCP, port: 8000}]}]}`),
		"watchNamespaces":          setValues(t, "watchNamespaces={team-a,team-b}"),
		"minAvailable percent":     setValues(t, "podDisruptionBudget.minAvailable=50%"),
		"serviceAccount":           mustYAML(t, `serviceAccount: {create: false, name: platform-agentrun, annotations: {iam.example/role: agentrun}}`),
		"store":                    setValues(t, "store.dsn=postgres://agentrun@db.example:5432/agentrun?sslmode=verify-full", "store.existingSecret=agentrun-db", "store.caSecret=agentrun-db-ca"),
		"store.dsnSecret":          mustYAML(t, `store: {dsnSecret: agentrun-dsn, dsnKey: uri, caSecret: agentrun-db-ca, maxConns: 8, archiveRetention: 720h}`),
	} {
		if _, err := tryRender(c, vals); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestSchemaCoversEveryValue: every key of values.yaml is a property of
// values.schema.json with a type and a description, every property of the
// schema is in values.yaml (but global, which a parent chart may pass),
// and every object the chart defines itself (not a Kubernetes type passed
// through) refuses unknown keys.
func TestSchemaCoversEveryValue(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir(), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]any
	if err := yaml.Unmarshal(data, &vals); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(chartDir(), "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema schemaNode
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, v map[string]any, s *schemaNode)
	walk = func(path string, v map[string]any, s *schemaNode) {
		if s.AdditionalProperties == nil || *s.AdditionalProperties {
			t.Errorf("schema %s accepts unknown keys; want additionalProperties: false", path)
		}
		var keys []string
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p, ok := s.Properties[k]
			if !ok {
				t.Errorf("values.yaml has %s%s, the schema does not", path, k)
				continue
			}
			if p.Type == nil && len(p.OneOf) == 0 || p.Description == "" {
				t.Errorf("schema %s%s has type %q and description %q", path, k, p.Type, p.Description)
			}
			// A non-empty map is one the chart defines; an empty one
			// (labels, annotations, affinity) is passed through.
			if sub, ok := v[k].(map[string]any); ok && len(sub) > 0 && !objectValues[path+k] {
				walk(path+k+".", sub, p)
			}
		}
		for k := range s.Properties {
			if _, ok := v[k]; !ok && (path != "" || k != "global") {
				t.Errorf("the schema has %s%s, values.yaml does not", path, k)
			}
		}
	}
	walk("", vals, &schema)
}

// schemaNode is the part of a JSON schema the coverage test reads.
type schemaNode struct {
	Type                 any                    `json:"type"`
	Description          string                 `json:"description"`
	Properties           map[string]*schemaNode `json:"properties"`
	AdditionalProperties *bool                  `json:"-"`
	OneOf                []any                  `json:"oneOf"`
}

func (n *schemaNode) UnmarshalJSON(b []byte) error {
	type plain schemaNode
	var aux struct {
		plain
		AP json.RawMessage `json:"additionalProperties"`
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	*n = schemaNode(aux.plain)
	if string(aux.AP) == "false" || string(aux.AP) == "true" {
		v := string(aux.AP) == "true"
		n.AdditionalProperties = &v
	}
	return nil
}
