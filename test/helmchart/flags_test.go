package helmchart_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestChartNamesOnlyRealFlags: every manager flag the chart passes, and
// every one its values.yaml and README mention, is a flag of the built
// manager (`manager --help`), so a renamed flag fails here rather than in a
// crash-looping pod.
func TestChartNamesOnlyRealFlags(t *testing.T) {
	bin, err := buildManager()
	if err != nil {
		t.Fatal(err)
	}
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	known := map[string]bool{"help": true}
	for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`).FindAllStringSubmatch(string(help), -1) {
		known[m[1]] = true
	}
	if !known["shards"] || !known["leader-elect"] {
		t.Fatalf("manager --help lists no --shards or --leader-elect:\n%s", help)
	}
	flag := regexp.MustCompile(`--([a-z][a-z0-9-]*)`)
	check := func(where, text string) {
		for _, m := range flag.FindAllStringSubmatch(text, -1) {
			if !known[m[1]] && !helmOrKubectlFlag[m[1]] {
				t.Errorf("%s names --%s, which the manager does not have", where, m[1])
			}
		}
	}
	for _, f := range []string{"values.yaml", "README.md"} {
		data, err := os.ReadFile(filepath.Join(chartDir(), f))
		if err != nil {
			t.Fatal(err)
		}
		check(f, string(data))
	}
	for _, vals := range []map[string]any{nil, {"replicas": 1, "shards": 1, "leaderElect": false}} {
		d := one[appsv1.Deployment](t, renderChart(t, vals).objs, "Deployment", "")
		check("the Deployment's args", strings.Join(d.Spec.Template.Spec.Containers[0].Args, " "))
	}
}

// helmOrKubectlFlag are the flags of helm and kubectl commands the README
// shows, not the manager's.
var helmOrKubectlFlag = map[string]bool{"create-namespace": true, "server-side": true, "clusterrole": true, "user": true, "force-conflicts": true,
	"set": true, "serviceaccount": true, "strict": true}
