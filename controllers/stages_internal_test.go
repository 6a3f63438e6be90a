package controllers

import (
	"testing"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// TestStageState: a stage's state from whether the run entered it, whether
// the run is in it, and the run's phase.
func TestStageState(t *testing.T) {
	cases := []struct {
		entered, current, failed bool
		phase                    arv1.Phase
		want                     arv1.StageState
	}{
		{false, false, false, arv1.PhaseRunning, arv1.StagePending},
		{false, false, false, arv1.PhaseComplete, arv1.StageSkipped},
		{false, false, false, arv1.PhaseError, arv1.StageSkipped},
		{true, false, false, arv1.PhaseRunning, arv1.StageComplete},
		{true, false, false, arv1.PhaseError, arv1.StageComplete},
		{true, true, false, arv1.PhaseRunning, arv1.StageActive},
		{true, true, false, arv1.PhaseStarting, arv1.StageActive},
		{true, true, false, arv1.PhasePaused, arv1.StageActive},
		{true, true, false, arv1.PhaseWaitingInput, arv1.StageWaitingInput},
		{true, true, false, arv1.PhaseComplete, arv1.StageComplete},
		{true, true, false, arv1.PhaseCompleteInteractive, arv1.StageComplete},
		{true, true, false, arv1.PhaseError, arv1.StageError},
		{true, true, false, arv1.PhaseCancelled, arv1.StageCancelled},
		{true, false, true, arv1.PhaseRunning, arv1.StageError}, // left on its error edge
		{true, false, true, arv1.PhaseComplete, arv1.StageError},
		{true, true, true, arv1.PhaseRunning, arv1.StageActive}, // re-entered: a new visit

	}
	for _, c := range cases {
		if got := stageState(c.entered, c.current, c.failed, c.phase); got != c.want {
			t.Errorf("entered %v, current %v, phase %s: %s, want %s", c.entered, c.current, c.phase, got, c.want)
		}
	}
}
