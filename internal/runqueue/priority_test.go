package runqueue

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/priority"
)

func prioritized(r Run, p int32) Run {
	r.Place.Priority = p
	return r
}

// TestPriorityGoesBeforeCreation: within a namespace's line the waiting
// run of highest priority is admitted next, however late it was created;
// equal priorities keep creation order.
func TestPriorityGoesBeforeCreation(t *testing.T) {
	var w woken
	c := New(1, nil, w.wake)
	admit(c, run("ns", "busy", t0))
	for i := range 5 {
		admit(c, run("ns", fmt.Sprintf("q%d", i), t0.Add(time.Duration(i+1)*time.Second)))
	}
	admit(c, prioritized(run("ns", "urgent", t0.Add(time.Hour)), 100))
	admit(c, prioritized(run("ns", "low", t0.Add(-time.Hour)), -1))
	var order []string
	for range 7 {
		c.Release(c.onlyActive(t))
		next := w[len(w)-1]
		order = append(order, next)
		admit(c, c.promisedRun(t))
	}
	want := []string{"ns/urgent", "ns/q0", "ns/q1", "ns/q2", "ns/q3", "ns/q4", "ns/low"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("admitted %v, want %v", order, want)
	}
}

// TestPriorityStaysWithinTheFairShare: a namespace's high-priority run
// does not take the slot another namespace with fewer active runs is due
// (priority only breaks ties between equally loaded namespaces).
func TestPriorityStaysWithinTheFairShare(t *testing.T) {
	var w woken
	c := New(3, nil, w.wake)
	admit(c, run("a", "a0", t0))
	admit(c, run("a", "a1", t0.Add(time.Second)))
	admit(c, run("b", "b0", t0.Add(2*time.Second)))
	admit(c, prioritized(run("a", "a-urgent", t0.Add(time.Hour)), 1000))
	admit(c, run("b", "b1", t0.Add(time.Hour+time.Second)))
	w = nil
	c.Release("b/b0")
	if len(w) != 1 || w[0] != "b/b1" {
		t.Fatalf("the freed slot woke %v, want b/b1: b has no run active against a's 2, whatever a's priority", w)
	}
}

// TestReprioritizeReordersTheLine: a class's new value re-orders runs
// already waiting.
func TestReprioritizeReordersTheLine(t *testing.T) {
	var w woken
	c := New(1, nil, w.wake)
	admit(c, run("ns", "busy", t0))
	admit(c, run("ns", "early", t0.Add(time.Second)))
	admit(c, run("ns", "late", t0.Add(time.Minute)))
	c.Reprioritize(func(r Run) int32 {
		if r.Name == "late" {
			return 5
		}
		return 0
	})
	c.Release("ns/busy")
	if w[len(w)-1] != "ns/late" {
		t.Fatalf("woke %v, want the reprioritized ns/late first", w)
	}
}

// BenchmarkUrgentBehindTenThousand is one urgent run created behind
// 10,000 queued runs of its namespace: it is put in line and, when the
// next slot frees, admitted. The figure, µs/urgent, is the time from its
// creation's Admit to its own admission (docs/scaling.md); ns/op also
// counts queueing the 10,000, which is timed so that the benchmark's
// iteration count follows the whole op (a stopped timer around it made a
// run take minutes).
func BenchmarkUrgentBehindTenThousand(b *testing.B) {
	var urgentTime time.Duration
	n := 0
	for b.Loop() {
		var w woken
		c := New(1, nil, w.wake)
		admit(c, run("ns", "busy", t0))
		for i := range 10_000 {
			admit(c, run("ns", fmt.Sprintf("q%05d", i), t0.Add(time.Duration(i)*time.Millisecond)))
		}
		urgent := prioritized(run("ns", "urgent", t0.Add(time.Hour)), 100)
		start := time.Now()
		admit(c, urgent)
		c.Release("ns/busy")
		admitted := admit(c, urgent)
		urgentTime += time.Since(start)
		n++
		if !admitted {
			b.Fatalf("the urgent run was not admitted next; woke %v", w[len(w)-1])
		}
	}
	b.ReportMetric(float64(urgentTime.Microseconds())/float64(n), "µs/urgent")
}

// onlyActive is the one active run's UID (the tests use one slot).
func (c *Controller) onlyActive(t *testing.T) (uid types.UID) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.active) != 1 {
		t.Fatalf("%d runs active, want 1", len(c.active))
	}
	for u := range c.active {
		uid = u
	}
	return uid
}

// promisedRun is the one run promised a slot.
func (c *Controller) promisedRun(t *testing.T) Run {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.promised) != 1 {
		t.Fatalf("%d runs promised a slot, want 1", len(c.promised))
	}
	for _, r := range c.promised {
		return r
	}
	return Run{}
}

// TestRunOfTakesClassesAndTheRoots: a run's priority is its spec.priority,
// else its class's value, else the default class's; a child's is its tree
// root's, when the root is found, else its own.
func TestRunOfTakesClassesAndTheRoots(t *testing.T) {
	classes, err := priority.Parse(map[string]string{"urgent": "1000", "normal": "7", priority.DefaultKey: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	urgentRoot := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "root"}, Spec: arv1.AgentRunSpec{PriorityClassName: "urgent"}}
	child := func(mutate func(*arv1.AgentRun)) *arv1.AgentRun {
		r := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "root-c0",
			Labels: map[string]string{arv1.LabelRoot: "root", arv1.LabelRootCreated: strconv.FormatInt(t0.UnixNano(), 10)}}}
		if mutate != nil {
			mutate(r)
		}
		return r
	}
	found := func(_, name string) *arv1.AgentRun {
		if name == "root" {
			return urgentRoot
		}
		return nil
	}
	gone := func(string, string) *arv1.AgentRun { return nil }
	three := int32(3)
	for _, tc := range []struct {
		name   string
		run    *arv1.AgentRun
		rootOf func(string, string) *arv1.AgentRun
		want   int32
	}{
		{"spec.priority", &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: arv1.AgentRunSpec{Priority: &three}}, gone, 3},
		{"a class", &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: arv1.AgentRunSpec{PriorityClassName: "urgent"}}, gone, 1000},
		{"the default class", &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, gone, 7},
		{"a child takes its root's class", child(func(r *arv1.AgentRun) { r.Spec.Priority = &three }), found, 1000},
		{"a child whose root is gone keeps its own", child(func(r *arv1.AgentRun) { r.Spec.Priority = &three }), gone, 3},
	} {
		got := RunOf(tc.run, classes, tc.rootOf)
		if got.Place.Priority != tc.want {
			t.Errorf("%s: priority %d, want %d", tc.name, got.Place.Priority, tc.want)
		}
	}
	if p := RunOf(child(nil), classes, found).Place; p.RootName != "root" || !p.Root.Equal(t0) {
		t.Errorf("a child's place = %+v, want its root's name and creation", p)
	}
}
