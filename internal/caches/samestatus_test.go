package caches

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// TestSameStatusIsWhatIsStored: statuses that serialise alike are the
// same whatever their Go values, and any difference a reader could see
// (a scalar, a usage counter, a nested list) is not.
func TestSameStatusIsWhatIsStored(t *testing.T) {
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	base := func() *arv1.AgentRunStatus {
		return &arv1.AgentRunStatus{
			Phase: arv1.PhaseRunning, CurrentStage: "s2", Stage: "s2", StageIndex: 1, NumStages: 3, Iteration: 2,
			Model: "m", Usage: arv1.Usage{ModelCalls: 3, TotalTokens: 40, CostUSD: "0.01"},
			Stages:     []arv1.StageStatus{{Name: "s1", Visits: 1}, {Name: "s2", Visits: 1}},
			StartedAt:  &metav1.Time{Time: at},
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Running", Message: "calling"}},
		}
	}
	cases := []struct {
		name string
		edit func(*arv1.AgentRunStatus)
		same bool
	}{
		{"unchanged", func(*arv1.AgentRunStatus) {}, true},
		{"the stages gone", func(s *arv1.AgentRunStatus) { s.Stages = nil }, false},
		{"nanoseconds nobody stores", func(s *arv1.AgentRunStatus) { s.StartedAt = &metav1.Time{Time: at.Add(300 * time.Nanosecond)} }, true},
		{"the phase", func(s *arv1.AgentRunStatus) { s.Phase = arv1.PhaseComplete }, false},
		{"one more model call", func(s *arv1.AgentRunStatus) { s.Usage.ModelCalls++ }, false},
		{"the cost", func(s *arv1.AgentRunStatus) { s.Usage.CostUSD = "0.02" }, false},
		{"the iteration", func(s *arv1.AgentRunStatus) { s.Iteration++ }, false},
		{"the stage", func(s *arv1.AgentRunStatus) { s.CurrentStage, s.Stage = "s3", "s3" }, false},
		{"the model", func(s *arv1.AgentRunStatus) { s.Model = "other" }, false},
		{"a stage's visits", func(s *arv1.AgentRunStatus) { s.Stages[1].Visits = 2 }, false},
		{"a condition's message", func(s *arv1.AgentRunStatus) { s.Conditions[0].Message = "waiting" }, false},
		{"a wait", func(s *arv1.AgentRunStatus) { s.WaitingOn = &arv1.WaitingOn{Reason: arv1.WaitStoreUnavailable} }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := base(), base()
			c.edit(b)
			if got := SameStatus(a, b); got != c.same {
				t.Errorf("SameStatus = %v, want %v", got, c.same)
			}
			if got := SameStatus(b, a); got != c.same {
				t.Errorf("SameStatus, the other way round = %v, want %v", got, c.same)
			}
		})
	}
	// An empty list and none serialise alike.
	a, b := base(), base()
	a.Stages, b.Stages = nil, []arv1.StageStatus{}
	if !SameStatus(a, b) {
		t.Error("an empty list and none should be the same status")
	}
}
