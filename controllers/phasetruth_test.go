package controllers_test

import (
	"testing"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/controllers"
)

// slowTwoStages is two stages whose scripted model calls take 3 s each:
// the whole run is shorter than the default status interval.
const slowTwoStages = `
[agent]
name = "slow"
[agent.title]
enabled = false
[stages.first]
[stages.first.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.first.transitions.second]
condition = "always"
[[stages.first.script]]
text = "one"
delay_ms = 3000
[stages.second]
[stages.second.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.second.script]]
text = "two"
delay_ms = 3000
complete = true
`

// TestWorkingRunNeverReadsQueued: with the default status interval (10 s),
// a run admitted and calling its model shows Running, with its stage,
// while that first call is still in flight (it answers after 3 s), not
// Queued until its end; the progress fields say when they were read
// (status.observedAt).
func TestWorkingRunNeverReadsQueued(t *testing.T) {
	h := startManager(t, managerOpts{statusInterval: controllers.DefaultStatusInterval})
	ns := newNamespace(t)
	createConfigMap(t, ns, "slow", map[string]string{"agent.toml": slowTwoStages})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	created := time.Now()
	uid := string(createRun(t, ns, "r", "slow").UID)
	run := waitFor(t, ns, "r", 30*time.Second, "Running", func(r *arv1.AgentRun) bool {
		return r.Status.Phase != arv1.PhaseQueued && r.Status.Phase != ""
	})
	shown := time.Since(created)
	if run.Status.Phase != arv1.PhaseRunning && run.Status.Phase != arv1.PhaseStarting {
		t.Fatalf("the first phase shown is %s, want Running", run.Status.Phase)
	}
	if shown >= 3*time.Second || h.scripted.Calls(uid) > 1 {
		t.Fatalf("the run left Queued %s after its creation, after its first call (3 s) had answered (%d calls made)", shown, h.scripted.Calls(uid))
	}
	if run.Status.ObservedAt == nil || run.Status.Stage == "" {
		t.Fatalf("status shows no stage (%q) or no observedAt", run.Status.Stage)
	}
	t.Logf("Running shown %s after the create, stage %q", shown, run.Status.Stage)
	waitFor(t, ns, "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
}
