package controllers_test

import (
	"strings"
	"testing"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// stuckBehindAlways: work leaves by an always edge that is held back (by
// require_output here, by an empty required region in the variant) while
// its model only talks; its stuck edge fires after two turns, long before
// max_iterations.
const stuckBehindAlways = `[agent]
name = "held"
[agent.title]
enabled = false
[stages.work]
require_output = true
max_iterations = 10
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.work.transitions.review]
condition = "always"
[stages.work.transitions.rethink]
condition = "stuck"
stuck_after_iterations = 2
[[stages.work.script]]
text = "still thinking"
[stages.review]
allow_complete = true
[stages.review.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.review.script]]
complete = true
output = "reviewed"
[stages.rethink]
allow_complete = true
[stages.rethink.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.rethink.script]]
complete = true
output = "rethought"
`

// TestStuckEdgeFiresWhileAlwaysIsHeldBack: runtime-signal edges are not
// held back by the gates of a stage's always edge (docs/blueprints.md), so
// a run whose always edge waits on output or a region takes its stuck edge
// at the threshold instead of running on to max_iterations.
func TestStuckEdgeFiresWhileAlwaysIsHeldBack(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	byRegion := strings.Replace(strings.Replace(stuckBehindAlways, "require_output = true\n", "", 1),
		"condition = \"always\"\n", "condition = \"always\"\nrequire_regions = [\"draft\"]\n", 1)
	createConfigMap(t, ns, "by-output", map[string]string{"agent.toml": stuckBehindAlways})
	createConfigMap(t, ns, "by-region", map[string]string{"agent.toml": byRegion})
	for _, name := range []string{"by-output", "by-region"} {
		createRun(t, ns, name, name)
	}
	for _, name := range []string{"by-output", "by-region"} {
		t.Run(name, func(t *testing.T) {
			run := waitFor(t, ns, name, 30*time.Second, "an end", func(r *arv1.AgentRun) bool { return r.Status.Phase.IsTerminal() })
			if run.Status.Phase != arv1.PhaseComplete {
				t.Fatalf("phase %s (%s), want Complete", run.Status.Phase, run.Status.Error)
			}
			l := run.Status.LastTransition
			if l == nil || l.From != "work" || l.To != "rethink" || l.Condition != "stuck" || !strings.Contains(l.Reason, "stuck_after_iterations = 2") {
				t.Fatalf("lastTransition %+v, want work -> rethink by stuck naming the threshold", l)
			}
			if run.Status.Flags.MaxIterationsHit {
				t.Errorf("flags.maxIterationsHit set: the run ran on to max_iterations")
			}
			for _, s := range run.Status.Stages {
				if s.Name == "work" && s.Iterations != 2 {
					t.Errorf("stage work took %d turns, want 2 (the stuck threshold)", s.Iterations)
				}
			}
			waitForEvent(t, ns, name, arv1.ReasonSignalTransition, "Took the stuck edge from stage work to rethink")
		})
	}
}
