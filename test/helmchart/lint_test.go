package helmchart_test

import (
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"

	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// acceptedInfo is the only INFO `helm lint` may report: the project has no
// icon to point Chart.yaml at, and a made-up URL would be worse than none.
const acceptedInfo = "[INFO] Chart.yaml: icon is recommended"

// TestChartLintsClean: `helm lint` (the SDK's lint package, what the CLI
// runs) reports no error and no warning with the default values and with
// every optional object switched on, and no INFO but the missing icon.
func TestChartLintsClean(t *testing.T) {
	kv, err := chartutil.ParseKubeVersion(testenv.KubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	for name, vals := range map[string]map[string]any{
		"defaults": nil,
		"everything on": mustYAML(t, `
replicas: 3
shards: 6
serviceMonitor: {enabled: true, labels: {release: prometheus}}
extraArgs: [--max-concurrent-steps=64]
env: [{name: GOGC, value: "75"}]
podAnnotations: {a: b}
imagePullSecrets: [{name: regcred}]
`),
	} {
		result := lint.AllWithKubeVersion(chartDir(), vals, releaseNS, kv)
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
}
