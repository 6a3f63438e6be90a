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

// TestChartNamesOnlyRealFlags: every flag a chart Deployment passes is a
// flag of the binary that Deployment runs (`manager --help`, `manager a2a
// --help`, `kubectl-agentrun console --help`), and every flag values.yaml
// and the README mention is a flag of one of them, so a renamed flag fails
// here rather than in a crash-looping pod.
func TestChartNamesOnlyRealFlags(t *testing.T) {
	manager, err := buildManager()
	if err != nil {
		t.Fatal(err)
	}
	plugin, err := buildPlugin()
	if err != nil {
		t.Fatal(err)
	}
	goFlag := regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`)
	cobraFlag := regexp.MustCompile(`(?m)^\s+(?:-[a-z], )?--([a-z][a-z0-9-]*)`)
	flagsOf := func(re *regexp.Regexp, bin string, args ...string) map[string]bool {
		help, _ := exec.Command(bin, append(args, "--help")...).CombinedOutput()
		known := map[string]bool{"help": true}
		for _, m := range re.FindAllStringSubmatch(string(help), -1) {
			known[m[1]] = true
		}
		return known
	}
	managerFlags := flagsOf(goFlag, manager)
	a2aFlags := flagsOf(goFlag, manager, "a2a")
	consoleFlags := flagsOf(cobraFlag, plugin, "console")
	for name, known := range map[string]map[string]bool{"manager": managerFlags, "manager a2a": a2aFlags, "kubectl-agentrun console": consoleFlags} {
		if len(known) < 3 {
			t.Fatalf("%s --help lists almost no flags: %v", name, known)
		}
	}
	if !managerFlags["shards"] || !managerFlags["leader-elect"] || !a2aFlags["public-url"] || !consoleFlags["in-cluster"] {
		t.Fatalf("--help output not understood: manager %v, a2a %v, console %v", managerFlags, a2aFlags, consoleFlags)
	}
	anyBinary := map[string]bool{}
	for _, known := range []map[string]bool{managerFlags, a2aFlags, consoleFlags} {
		for f := range known {
			anyBinary[f] = true
		}
	}
	flag := regexp.MustCompile(`--([a-z][a-z0-9-]*)`)
	check := func(where, text, binary string, known map[string]bool) {
		for _, m := range flag.FindAllStringSubmatch(text, -1) {
			if !known[m[1]] && !helmOrKubectlFlag[m[1]] {
				t.Errorf("%s names --%s, which %s does not have", where, m[1], binary)
			}
		}
	}
	for _, f := range []string{"values.yaml", "README.md"} {
		data, err := os.ReadFile(filepath.Join(chartDir(), f))
		if err != nil {
			t.Fatal(err)
		}
		check(f, string(data), "no binary of the image", anyBinary)
	}
	all := map[string]any{"console": map[string]any{"enabled": true}, "a2a": map[string]any{"enabled": true}}
	database := map[string]any{"store": map[string]any{"dsn": "postgres://agentrun@db.example:5432/agentrun?sslmode=verify-full", "existingSecret": "agentrun-db"}}
	for _, vals := range []map[string]any{nil, {"replicas": 1, "shards": 1, "leaderElect": false}, database, all} {
		objs := renderChart(t, vals).objs
		args := func(suffix string) string {
			return strings.Join(one[appsv1.Deployment](t, objs, "Deployment", suffix).Spec.Template.Spec.Containers[0].Args, " ")
		}
		if vals["console"] == nil { // the console and A2A Deployments are off
			check("the manager Deployment's args", args(""), "the manager", managerFlags)
			continue
		}
		check("the manager Deployment's args", args("-operator"), "the manager", managerFlags)
		a := args("-a2a")
		if !strings.HasPrefix(a, "a2a ") {
			t.Fatalf("the A2A Deployment's args %q do not start with the a2a command", a)
		}
		check("the A2A Deployment's args", a, "manager a2a", a2aFlags)
		c := args("-console")
		if !strings.HasPrefix(c, "console ") {
			t.Fatalf("the console Deployment's args %q do not start with the console command", c)
		}
		check("the console Deployment's args", c, "kubectl-agentrun console", consoleFlags)
	}
}

// helmOrKubectlFlag are the flags of helm and kubectl commands the README
// shows, not the manager's.
var helmOrKubectlFlag = map[string]bool{"create-namespace": true, "server-side": true, "clusterrole": true, "user": true, "force-conflicts": true,
	"set": true, "serviceaccount": true, "strict": true, "from-file": true}
