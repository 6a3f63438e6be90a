package plugin

import (
	"slices"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/priority"
	"github.com/agentrun-dev/agentrun-operator/internal/runqueue"
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
	l := newPsListing(runs, t0.Add(2*time.Hour), nil, priority.Classes{})
	got := map[string]string{}
	for _, n := range l.order {
		got[n.row.Name] = n.row.Waiting
	}
	if got["urgent"] != "next in line" || got["first"] != "1 ahead in line" || got["second"] != "2 ahead in line" {
		t.Errorf("line %v, want urgent next, then first, then second", got)
	}
}

// lineFixture is a namespace's line under the classes urgent 1000,
// raised 10 (the default class) and low -100: runs naming a class, one
// naming none (the default), one with spec.priority, and a sub-agent of
// the urgent run, which queues with its root's priority though it names
// no class itself. busy holds the one slot.
func lineFixture(t *testing.T) ([]arv1.AgentRun, priority.Classes) {
	t.Helper()
	classes, err := priority.Parse(map[string]string{"urgent": "1000", "raised": "10", "low": "-100", priority.DefaultKey: "raised"})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_800_000_000, 0)
	five := int32(5)
	run := func(name string, at time.Duration, phase arv1.Phase, mutate func(*arv1.AgentRun)) arv1.AgentRun {
		r := arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(t0.Add(at))},
			Spec: arv1.AgentRunSpec{Agent: "a", Task: "t"}, Status: arv1.AgentRunStatus{Phase: phase}}
		if mutate != nil {
			mutate(&r)
		}
		return r
	}
	class := func(c string) func(*arv1.AgentRun) { return func(r *arv1.AgentRun) { r.Spec.PriorityClassName = c } }
	return []arv1.AgentRun{
		run("busy", 0, arv1.PhaseRunning, nil),
		run("low", time.Second, arv1.PhaseQueued, class("low")),
		run("plain", 2*time.Second, arv1.PhaseQueued, nil),
		run("numbered", 3*time.Second, arv1.PhaseQueued, func(r *arv1.AgentRun) { r.Spec.Priority = &five }),
		run("urgent", time.Hour, arv1.PhaseRunning, class("urgent")),
		run("urgent-c0", time.Hour+time.Second, arv1.PhaseQueued, func(r *arv1.AgentRun) {
			r.Labels = map[string]string{arv1.LabelRoot: "urgent", arv1.LabelRootCreated: strconv.FormatInt(t0.Add(time.Hour).UnixNano(), 10)}
			r.Status.ParentRun = "urgent"
		}),
		run("late-urgent", 2*time.Hour, arv1.PhaseQueued, class("urgent")),
	}, classes
}

// TestLineIsTheManagersOrder: the WAITING cell counts places in the order
// the manager's admission queue (runqueue.Controller, fed with
// runqueue.RunOf as the reconciler feeds it) admits the runs, priority
// classes, the default class and a child's root's class included.
func TestLineIsTheManagersOrder(t *testing.T) {
	runs, classes := lineFixture(t)
	byName := map[string]*arv1.AgentRun{}
	for i := range runs {
		byName[runs[i].Name] = &runs[i]
	}
	rootOf := func(_, name string) *arv1.AgentRun { return byName[name] }

	var woken []string
	c := runqueue.New(1, nil, func(_, name string) { woken = append(woken, name) })
	now := time.Unix(1_900_000_000, 0)
	if ok, _ := c.Admit(runqueue.RunOf(byName["busy"], classes, rootOf), now); !ok {
		t.Fatal("busy not admitted to the free slot")
	}
	for i := range runs {
		if waitsInLine(&runs[i]) {
			c.Admit(runqueue.RunOf(&runs[i], classes, rootOf), now)
		}
	}
	managers := []string{}
	active := "busy"
	for range 5 {
		c.Release(types.UID("uid-" + active))
		active = woken[len(woken)-1]
		managers = append(managers, active)
		c.Admit(runqueue.RunOf(byName[active], classes, rootOf), now)
	}

	l := newPsListing(runs, now, nil, classes)
	ps := make([]string, len(managers))
	for _, n := range l.order {
		switch w := n.row.Waiting; {
		case w == "next in line":
			ps[0] = n.row.Name
		case len(w) > 0 && w[0] >= '1' && w[0] <= '9':
			k, _ := strconv.Atoi(w[:len(w)-len(" ahead in line")])
			ps[k] = n.row.Name
		}
	}
	if want := []string{"urgent-c0", "late-urgent", "plain", "numbered", "low"}; !slices.Equal(managers, want) {
		t.Fatalf("the manager admitted %v, want %v (the fixture is wrong)", managers, want)
	}
	if !slices.Equal(ps, managers) {
		t.Errorf("ps places the line as %v, the manager admits %v", ps, managers)
	}
}

// TestClassesMatter: without the classes ps says so only when they could
// change the order: a run in line (or its root) naming a class, or runs
// with and without spec.priority.
func TestClassesMatter(t *testing.T) {
	runs, _ := lineFixture(t)
	if !classesMatter(runs) {
		t.Error("classes named in line, but they do not matter")
	}
	plainOnly := []arv1.AgentRun{runs[0], runs[2]}
	if classesMatter(plainOnly) {
		t.Error("one plain run in line: the classes cannot change its place")
	}
	if !classesMatter([]arv1.AgentRun{runs[2], runs[3]}) {
		t.Error("a plain run and a numbered one: the default class decides which goes first")
	}
	if !classesMatter([]arv1.AgentRun{runs[4], runs[5]}) {
		t.Error("a child whose root names a class")
	}
}
