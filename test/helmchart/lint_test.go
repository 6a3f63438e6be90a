package helmchart_test

import (
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"

	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// acceptedInfo is the only INFO `helm lint` may report: the project has no
// icon to point Chart.yaml at, and a made-up URL would be worse than none.
const acceptedInfo = "[INFO] Chart.yaml: icon is recommended"

// TestChartLintsClean: `helm lint --strict` (the SDK's lint action, what
// the CLI runs, strict: a warning fails it) reports no error and no warning
// with the default values, with every optional object switched on (a
// database store among them), and in
// the namespace-scoped mode, and no INFO but the missing icon; a value the
// schema refuses fails it.
func TestChartLintsClean(t *testing.T) {
	kv, err := chartutil.ParseKubeVersion(testenv.KubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	lint := func(vals map[string]any) *action.LintResult {
		l := action.NewLint()
		l.Strict, l.Namespace, l.KubeVersion = true, releaseNS, kv
		return l.Run([]string{chartDir()}, vals)
	}
	for name, vals := range map[string]map[string]any{
		"defaults": nil,
		"everything on": mustYAML(t, `
replicas: 3
shards: 6
serviceMonitor: {enabled: true, labels: {release: prometheus}}
prometheusRule: {enabled: true, labels: {release: prometheus}}
grafanaDashboard: {enabled: true}
networkPolicy: {enabled: true, apiServer: {cidrs: [192.0.2.10/32]}, extraEgress: [{to: [{podSelector: {matchLabels: {app: vllm}}}]}]}
metrics: {certSecret: agentrun-metrics-cert}
extraArgs: [--max-concurrent-steps=64]
env: [{name: GOGC, value: "75"}]
podAnnotations: {a: b}
imagePullSecrets: [{name: regcred}]
store: {dsn: "postgres://agentrun@db.example:5432/agentrun?sslmode=verify-full", existingSecret: agentrun-db, caSecret: agentrun-db-ca}
`),
		"namespace-scoped":          mustYAML(t, `{watchNamespaces: [team-a, team-b], serviceMonitor: {enabled: true}}`),
		"plain metrics, no objects": mustYAML(t, `{metrics: {secure: false}, serviceMonitor: {enabled: true}, rbac: {create: false}, serviceAccount: {create: false, name: agentrun}}`),
	} {
		result := lint(vals)
		if result.TotalChartsLinted != 1 {
			t.Errorf("%s: %d charts linted", name, result.TotalChartsLinted)
		}
		for _, err := range result.Errors {
			t.Errorf("%s: helm lint --strict: %v", name, err)
		}
		for _, m := range result.Messages {
			switch {
			case m.Severity >= support.WarningSev:
				t.Errorf("%s: %v", name, m)
			case m.Severity == support.InfoSev && m.Error() != acceptedInfo:
				t.Errorf("%s: unexpected %v", name, m)
			default:
				t.Logf("%s: %v", name, m)
			}
		}
	}
	if r := lint(setValues(t, "replicas=three")); len(r.Errors) == 0 {
		t.Error("helm lint --strict passes replicas=three")
	} else {
		t.Logf("replicas=three: %v", r.Errors)
	}
}
