package controllers

import (
	"testing"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// TestStageState: a stage's state from whether the run entered it, whether
// the run is in it, and the run's phase.
func TestStageState(t *testing.T) {
	cases := []struct {
		entered, current bool
		phase            arv1.Phase
		want             arv1.StageState
	}{
		{false, false, arv1.PhaseRunning, arv1.StagePending},
		{false, false, arv1.PhaseComplete, arv1.StageSkipped},
		{false, false, arv1.PhaseError, arv1.StageSkipped},
		{true, false, arv1.PhaseRunning, arv1.StageComplete},
		{true, false, arv1.PhaseError, arv1.StageComplete},
		{true, true, arv1.PhaseRunning, arv1.StageActive},
		{true, true, arv1.PhaseStarting, arv1.StageActive},
		{true, true, arv1.PhasePaused, arv1.StageActive},
		{true, true, arv1.PhaseWaitingInput, arv1.StageWaitingInput},
		{true, true, arv1.PhaseComplete, arv1.StageComplete},
		{true, true, arv1.PhaseCompleteInteractive, arv1.StageComplete},
		{true, true, arv1.PhaseError, arv1.StageError},
		{true, true, arv1.PhaseCancelled, arv1.StageCancelled},
	}
	for _, c := range cases {
		if got := stageState(c.entered, c.current, c.phase); got != c.want {
			t.Errorf("entered %v, current %v, phase %s: %s, want %s", c.entered, c.current, c.phase, got, c.want)
		}
	}
}
