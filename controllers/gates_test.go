package controllers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

const withCheckpoint = `
[agent]
name = "gated"
[stages.plan]
[stages.plan.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.plan.transitions.build]
condition = "always"
[[stages.plan.interaction_points]]
name = "approve-plan"
prompt = "Approve the plan?"
unattended = "auto_approve"
[[stages.plan.script]]
text = "plan"
[stages.build]
[stages.build.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.build.script]]
text = "built"
complete = true
`

// TestInteractionPointParksAttendedAndPassesUnattended: an attended run
// parks on the checkpoint and needs a person; a yolo run passes it by
// policy and records that the gate was forced.
func TestInteractionPointParksAttendedAndPassesUnattended(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "gated", map[string]string{"agent.toml": withCheckpoint})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createRun(t, ns, "attended", "gated")
	createRun(t, ns, "unattended", "gated", func(r *arv1.AgentRun) { r.Spec.Yolo = true })

	parked := waitFor(t, ns, "attended", 20*time.Second, "InteractionPoint", func(r *arv1.AgentRun) bool {
		return r.Status.WaitingOn != nil && r.Status.WaitingOn.Reason == arv1.WaitInteractionPoint
	})
	if parked.Status.Phase != arv1.PhaseWaitingInput || !parked.NeedsAPerson() || parked.Status.CurrentStage != "plan" {
		t.Errorf("attended run: phase %s needsAPerson %v stage %s", parked.Status.Phase, parked.NeedsAPerson(), parked.Status.CurrentStage)
	}
	if c := meta.FindStatusCondition(parked.Status.Conditions, arv1.ConditionNeedsAttention); c == nil || c.Status != "True" || c.Reason != string(arv1.WaitInteractionPoint) {
		t.Errorf("NeedsAttention = %+v", c)
	}
	if c := meta.FindStatusCondition(parked.Status.Conditions, arv1.ConditionReconciling); c == nil || c.Status != "True" {
		t.Errorf("a run waiting on a person is still in progress for kstatus: Reconciling = %+v", c)
	}
	done := waitFor(t, ns, "unattended", 20*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	if !done.Status.Flags.GatesForced {
		t.Error("the unattended run passed a checkpoint without a person but gatesForced is false")
	}
	if err := holdsFor(500*time.Millisecond, func() error {
		if r := getRun(t, ns, "attended"); r.Status.Phase != arv1.PhaseWaitingInput {
			return fmt.Errorf("the attended run moved on without an answer: %s", r.Status.Phase)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// TestBrokenBlueprintIsAnError: a blueprint that does not parse cannot be
// resumed into, so the run errors with the key, line and problem.
func TestBrokenBlueprintIsAnError(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "broken", map[string]string{"agent.toml": "[agent]\nname = \"b\"\n[stages.a]\nmax_iterations = 0\n"})
	createRun(t, ns, "r", "broken")
	run := waitFor(t, ns, "r", 20*time.Second, "Error", phaseIs(arv1.PhaseError))
	if !strings.Contains(run.Status.Error, "agent.toml line 4") || !strings.Contains(run.Status.Error, "max_iterations") {
		t.Errorf("error %q does not name the key, line and problem", run.Status.Error)
	}
	if run.Status.WaitingOn != nil {
		t.Errorf("an errored run is parked: %+v", run.Status.WaitingOn)
	}
	if c := meta.FindStatusCondition(run.Status.Conditions, arv1.ConditionStalled); c == nil || c.Status != "True" || c.Reason != arv1.ReasonFailed {
		t.Errorf("Stalled = %+v", c)
	}
}

// TestBackpressureIsVisibleAndNeverSetup: with one executor slot (and no
// bound on active runs), runs that wait for the slot longer than a moment show it
// with a Reconciling reason, never NeedsSetup. Run a holds the slot for
// longer than pressureShownAfter.
func TestBackpressureIsVisibleAndNeverSetup(t *testing.T) {
	startManager(t, managerOpts{steps: 1})
	ns := newNamespace(t)
	createConfigMap(t, ns, "paced", map[string]string{"agent.toml": pacedThree})
	createConfigMap(t, ns, "hog", map[string]string{"agent.toml": strings.Replace(
		strings.Replace(pacedThree, "delay_ms = 600", "delay_ms = 9000", 1), `name = "paced"`, `name = "hog"`, 1)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createRun(t, ns, "a", "hog")
	waitFor(t, ns, "a", 20*time.Second, "its first call started", func(r *arv1.AgentRun) bool { return r.Status.Phase == arv1.PhaseRunning })
	for _, n := range []string{"b", "c"} {
		createRun(t, ns, n, "paced")
	}
	sawBackpressure := false
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		allDone := true
		for _, n := range []string{"a", "b", "c"} {
			r := getRun(t, ns, n)
			if r.Status.WaitingOn != nil && r.Status.WaitingOn.Reason == arv1.WaitNeedsSetup {
				t.Fatalf("%s parked on NeedsSetup under backpressure", n)
			}
			if c := meta.FindStatusCondition(r.Status.Conditions, arv1.ConditionReconciling); c != nil && c.Reason == arv1.ReasonWaitingForExecutor {
				sawBackpressure = true
			}
			allDone = allDone && r.Status.Phase == arv1.PhaseComplete
		}
		if allDone {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !sawBackpressure {
		t.Error("no run ever showed Reconciling=WaitingForExecutor with one slot and three runs")
	}
	for _, n := range []string{"a", "b", "c"} {
		if r := getRun(t, ns, n); r.Status.Phase != arv1.PhaseComplete {
			t.Errorf("%s ended %s", n, r.Status.Phase)
		}
	}
}
