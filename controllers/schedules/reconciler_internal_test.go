package schedules

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

func TestOldestBeyondKeepsTheNewest(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	run := func(name string, at time.Duration) arv1.AgentRun {
		return arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(base.Add(at))}}
	}
	runs := []arv1.AgentRun{run("s-4", 4*time.Second), run("s-2", 2*time.Second), run("s-8", 8*time.Second), run("s-6", 6*time.Second)}
	var got []string
	for _, r := range oldestBeyond(runs, 2) {
		got = append(got, r.Name)
	}
	if !slices.Equal(got, []string{"s-4", "s-2"}) {
		t.Errorf("deleted %v, want the two oldest [s-4 s-2]", got)
	}
	if out := oldestBeyond(runs, 4); len(out) != 0 {
		t.Errorf("deleted %d within the limit", len(out))
	}
	if out := oldestBeyond(runs, 0); len(out) != 4 {
		t.Errorf("limit 0 deleted %d of 4", len(out))
	}
}

// A schedule hears of its runs' creation, deletion and end, not of every
// status write in between.
func TestRunEndedPassesOnlyTheEnd(t *testing.T) {
	at := func(p arv1.Phase) *arv1.AgentRun { return &arv1.AgentRun{Status: arv1.AgentRunStatus{Phase: p}} }
	p := runEnded{}
	for _, c := range []struct {
		from, to arv1.Phase
		want     bool
	}{
		{arv1.PhaseRunning, arv1.PhaseComplete, true},
		{arv1.PhaseRunning, arv1.PhaseCancelled, true},
		{arv1.PhaseStarting, arv1.PhaseRunning, false},
		{arv1.PhaseRunning, arv1.PhaseWaitingInput, false},
		{arv1.PhaseComplete, arv1.PhaseComplete, false},
	} {
		if got := p.Update(event.UpdateEvent{ObjectOld: at(c.from), ObjectNew: at(c.to)}); got != c.want {
			t.Errorf("%s -> %s passed %v, want %v", c.from, c.to, got, c.want)
		}
	}
	if !p.Create(event.CreateEvent{Object: at("")}) || !p.Delete(event.DeleteEvent{Object: at(arv1.PhaseComplete)}) {
		t.Error("creation and deletion must pass")
	}
}
