package plugin

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// TestKubectlAgentrunPsOutputFormats: ps -o json and yaml print the runs as
// kubectl get does (a v1 List of AgentRuns, managed fields left out), -o
// name their resource names, -o jsonpath a template over that list, and -o
// wide the listing with the agent, the priority, the wire state and the
// age.
func TestKubectlAgentrunPsOutputFormats(t *testing.T) {
	controlPlane(t)
	ns := newNamespace(t)
	seven := int32(7)
	createRun(t, ns, "alpha", func(r *arv1.AgentRun) { r.Spec.Priority = &seven }, arv1.AgentRunStatus{Phase: arv1.PhaseRunning, Stage: "plan 1/2"})
	createRun(t, ns, "beta", func(r *arv1.AgentRun) { r.Spec.Agent = "reviewer" },
		arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput, WaitingOn: waitTool.DeepCopy()})

	type list struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Items      []arv1.AgentRun `json:"items"`
	}
	check := func(format string, l list) {
		t.Helper()
		if l.APIVersion != "v1" || l.Kind != "List" || len(l.Items) != 2 {
			t.Fatalf("-o %s: %s %s with %d items", format, l.APIVersion, l.Kind, len(l.Items))
		}
		byName := map[string]arv1.AgentRun{}
		for _, r := range l.Items {
			if r.Kind != "AgentRun" || r.APIVersion != arv1.GroupVersion.String() || len(r.ManagedFields) != 0 {
				t.Errorf("-o %s item %s: %s %s, %d managed fields", format, r.Name, r.APIVersion, r.Kind, len(r.ManagedFields))
			}
			byName[r.Name] = r
		}
		if byName["alpha"].Status.Stage != "plan 1/2" || byName["beta"].Spec.Agent != "reviewer" ||
			byName["beta"].Status.WaitingOn == nil || byName["beta"].Status.WaitingOn.Point != "call-3" {
			t.Errorf("-o %s items: %+v", format, byName)
		}
	}
	var fromJSON, fromYAML list
	if out := mustPlugin(t, "ps", "-n", ns, "-o", "json"); json.Unmarshal([]byte(out), &fromJSON) != nil {
		t.Fatalf("-o json:\n%s", out)
	}
	check("json", fromJSON)
	if out := mustPlugin(t, "ps", "-n", ns, "-oyaml"); yaml.Unmarshal([]byte(out), &fromYAML) != nil {
		t.Fatalf("-o yaml:\n%s", out)
	}
	check("yaml", fromYAML)

	names := strings.Fields(mustPlugin(t, "ps", "-n", ns, "-o", "name"))
	sort.Strings(names)
	if want := []string{"agentrun.agentrun.dev/alpha", "agentrun.agentrun.dev/beta"}; !reflect.DeepEqual(names, want) {
		t.Errorf("-o name: %q, want %q", names, want)
	}
	got := strings.Fields(mustPlugin(t, "ps", "-n", ns, "-o", "jsonpath={.items[*].status.phase}"))
	sort.Strings(got)
	if want := []string{"Running", "WaitingInput"}; !reflect.DeepEqual(got, want) {
		t.Errorf("-o jsonpath: %q, want %q", got, want)
	}

	header := []string{"RUN", "PHASE", "WAITING", "STAGE", "TOKENS", "COST", "WORKING", "LAST MOVED", "DRIVER", "AGENT", "PRIORITY", "STATE", "AGE"}
	rows, _, footer := psRows(t, mustPlugin(t, "ps", "-n", ns, "-o", "wide"), header)
	if rows["beta"]["AGENT"] != "reviewer" || rows["beta"]["STATE"] != "suspended" || rows["alpha"]["AGENT"] != "researcher" ||
		rows["alpha"]["PRIORITY"] != "7" || rows["beta"]["PRIORITY"] != "-" ||
		rows["alpha"]["STATE"] != "running" || !strings.HasSuffix(rows["alpha"]["AGE"], "s") || footer != "1 run needs an answer" {
		t.Errorf("-o wide rows %v, footer %q", rows, footer)
	}

	// An empty namespace is an empty list, not a message.
	empty := newNamespace(t)
	var none list
	if out, stderr, code := kubectlPlugin(t, "ps", "-n", empty, "-o", "json"); code != 0 || json.Unmarshal([]byte(out), &none) != nil ||
		none.Kind != "List" || len(none.Items) != 0 || stderr != "" {
		t.Errorf("-o json of no runs: exit %d, %q, %q", code, out, stderr)
	}
}

// TestKubectlAgentrunStatusFormats: status -o yaml and jsonpath render the
// same run-state object as -o json; -o name names the run.
func TestKubectlAgentrunStatusFormats(t *testing.T) {
	controlPlane(t)
	ns := newNamespace(t)
	createRun(t, ns, "setup", nil, arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput, WaitingOn: &arv1.WaitingOn{
		Reason: arv1.WaitNeedsSetup, NeedsAPerson: true, Summary: "NeedsSetup: SecretMissing", Blocker: arv1.BlockerSecretMissing, Remedy: "create the Secret"}})
	var fromJSON, fromYAML map[string]any
	if err := json.Unmarshal([]byte(mustPlugin(t, "status", "setup", "-n", ns, "-o", "json")), &fromJSON); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(mustPlugin(t, "status", "setup", "-n", ns, "-o", "yaml")), &fromYAML); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromJSON, fromYAML) || fromJSON["status"].(map[string]any)["state"] != "suspended" {
		t.Errorf("-o yaml %v\n-o json %v", fromYAML, fromJSON)
	}
	if out := mustPlugin(t, "status", "setup", "-n", ns, "-o", "jsonpath={.status.state}"); out != "suspended" {
		t.Errorf("-o jsonpath={.status.state}: %q", out)
	}
	if out := mustPlugin(t, "status", "setup", "-n", ns, "-o", "name"); out != "agentrun.agentrun.dev/setup\n" {
		t.Errorf("-o name: %q", out)
	}
}
