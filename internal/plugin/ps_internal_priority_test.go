package plugin

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// TestPriorityCellAndLine: the PRIORITY cell shows the number asked for,
// else the class, else "-"; the line count puts a higher spec.priority
// ahead of runs created before it.
func TestPriorityCellAndLine(t *testing.T) {
	nine := int32(9)
	for _, tc := range []struct {
		spec arv1.AgentRunSpec
		want string
	}{
		{arv1.AgentRunSpec{Priority: &nine}, "9"},
		{arv1.AgentRunSpec{PriorityClassName: "urgent"}, "urgent"},
		{arv1.AgentRunSpec{}, "-"},
	} {
		if got := priorityText(&tc.spec); got != tc.want {
			t.Errorf("priorityText(%+v) = %q, want %q", tc.spec, got, tc.want)
		}
	}
	t0 := time.Unix(1_800_000_000, 0)
	queued := func(name string, at time.Time, p *int32) arv1.AgentRun {
		return arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: metav1.NewTime(at)},
			Spec: arv1.AgentRunSpec{Agent: "a", Task: "t", Priority: p}, Status: arv1.AgentRunStatus{Phase: arv1.PhaseQueued}}
	}
	runs := []arv1.AgentRun{queued("first", t0, nil), queued("second", t0.Add(time.Second), nil), queued("urgent", t0.Add(time.Hour), &nine)}
	l := newPsListing(runs, t0.Add(2*time.Hour), nil)
	markLine(l.order, l.objs)
	got := map[string]string{}
	for _, n := range l.order {
		got[n.row.Name] = n.row.Waiting
	}
	if got["urgent"] != "next in line" || got["first"] != "1 ahead in line" || got["second"] != "2 ahead in line" {
		t.Errorf("line %v, want urgent next, then first, then second", got)
	}
}
