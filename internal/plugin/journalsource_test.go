package plugin

import (
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// TestKubectlAgentrunDatabaseJournalWithoutHistoryAPI: the commands that
// work on a run's entries read a database journal through the history
// API; in a cluster that does not serve it (this control plane has no
// aggregated APIs) each says so and fails, rather than showing an empty
// journal: no failovers, no regions, no entries to fork from, nothing to
// follow, "no journal entries yet", no output. The history package's tests
// read such journals through the API.
func TestKubectlAgentrunDatabaseJournalWithoutHistoryAPI(t *testing.T) {
	controlPlane(t)
	ns := newNamespace(t)
	createRun(t, ns, "db", nil, arv1.AgentRunStatus{Phase: arv1.PhaseRunning, JournalStore: arv1.JournalDatabase})
	want := "run " + ns + "/db keeps its journal in the database, and the history API (history.agentrun.dev) is not served in this cluster: install the history server (docs/history.md)"
	for _, args := range [][]string{
		{"describe", "db"},
		{"regions", "db"},
		{"regions", "db", "draft"},
		{"fork", "db", "--from-entry", "1"},
		{"transcript", "db", "--follow"},
		{"transcript", "db"},
		{"output", "db"},
	} {
		stdout, stderr, code := kubectlPlugin(t, append(args, "-n", ns)...)
		if code != 1 || stdout != "" || !strings.Contains(stderr, want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 1 and %q", args, code, stdout, stderr, want)
		}
	}
	var runs arv1.AgentRunList
	if err := k8sClient.List(ctxFor(t), &runs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if n := len(runs.Items); n != 1 {
		t.Errorf("a refused fork created a run: %d runs", n)
	}
}
