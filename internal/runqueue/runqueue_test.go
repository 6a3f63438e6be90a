package runqueue

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

type woken []string

func (w *woken) wake(ns, name string) { *w = append(*w, ns+"/"+name) }

func run(ns, name string, created time.Time) Run {
	return Run{UID: types.UID(ns + "/" + name), Namespace: ns, Name: name,
		Place: Place{Root: created, RootName: name, Created: created, Name: name}}
}

var t0 = time.Unix(1_800_000_000, 0)

// TestFirstComeFirstServed: with two slots, the two earliest runs are
// admitted whatever order their reconciles come in; a later run waits, and
// each freed slot wakes the earliest waiting run, which then takes it.
func TestFirstComeFirstServed(t *testing.T) {
	var w woken
	c := New(2, nil, w.wake)
	runs := make([]Run, 5)
	for i := range runs {
		runs[i] = run("ns", fmt.Sprintf("r%d", i), t0.Add(time.Duration(i)*time.Second))
	}
	for _, i := range []int{3, 1, 4, 0, 2} {
		admit(c, runs[i])
	}
	// r3 and r1 asked first and took the free slots; the rest wait.
	if c.Active() != 2 || c.Waiting() != 3 {
		t.Fatalf("active %d waiting %d, want 2 and 3", c.Active(), c.Waiting())
	}
	c.Release(runs[3].UID)
	if len(w) != 1 || w[0] != "ns/r0" {
		t.Fatalf("a freed slot woke %v, want the earliest waiting run ns/r0", w)
	}
	// r2 comes before r0 does: r0's slot is held for it.
	if admit(c, runs[2]) {
		t.Fatal("a later run took the slot held for the earliest")
	}
	if !admit(c, runs[0]) {
		t.Fatal("the woken run did not get its slot")
	}
	c.Release(runs[1].UID)
	if last := w[len(w)-1]; last != "ns/r2" {
		t.Fatalf("woke %v, want ns/r2 next", w)
	}
}

// TestAParkedRunQueuesWithItsPlace: a run that gave its slot back (it
// parked) and is woken again goes ahead of runs created after it.
func TestAParkedRunQueuesWithItsPlace(t *testing.T) {
	var w woken
	c := New(1, nil, w.wake)
	old, newer := run("ns", "old", t0), run("ns", "new", t0.Add(time.Minute))
	if !admit(c, old) {
		t.Fatal("an empty controller refused a run")
	}
	c.Release(old.UID) // parked
	if !admit(c, newer) {
		t.Fatal("the free slot was not given")
	}
	if admit(c, old) {
		t.Fatal("no slot is free, yet the woken parked run got one")
	}
	c.Release(newer.UID)
	if len(w) == 0 || w[len(w)-1] != "ns/old" {
		t.Fatalf("woke %v, want the older run", w)
	}
}

// TestNamespacesShareTheBudget: one namespace's thousand queued runs do
// not hold back another namespace's runs: each freed slot goes to the
// namespace with fewer active runs.
func TestNamespacesShareTheBudget(t *testing.T) {
	var w woken
	c := New(4, nil, w.wake)
	var big []Run
	for i := range 1000 {
		r := run("a", fmt.Sprintf("a%04d", i), t0.Add(time.Duration(i)*time.Millisecond))
		big = append(big, r)
		admit(c, r)
	}
	small := []Run{run("b", "b0", t0.Add(time.Hour)), run("b", "b1", t0.Add(time.Hour+time.Second))}
	for _, r := range small {
		if admit(c, r) {
			t.Fatal("a slot was free with four of a's runs active")
		}
	}
	w = nil
	c.Release(big[0].UID)
	if len(w) != 1 || w[0] != "b/b0" {
		t.Fatalf("the freed slot woke %v, want b's first run (b has none active)", w)
	}
	admit(c, small[0])
	c.Release(big[1].UID)
	if w[len(w)-1] != "b/b1" {
		t.Fatalf("woke %v, want b/b1: b has 1 active against a's 2", w)
	}
	admit(c, small[1])
	c.Release(big[2].UID)
	if w[len(w)-1] != "a/a0004" {
		t.Fatalf("woke %v, want a's next run once b's line is empty", w)
	}
}

// TestNamespaceBound: a namespace at its own bound gets no more slots,
// however many are free.
func TestNamespaceBound(t *testing.T) {
	var w woken
	c := New(10, func(ns string) int {
		if ns == "capped" {
			return 2
		}
		return 0
	}, w.wake)
	admitted := 0
	for i := range 5 {
		if admit(c, run("capped", fmt.Sprintf("c%d", i), t0.Add(time.Duration(i)*time.Second))) {
			admitted++
		}
	}
	if admitted != 2 || c.Waiting() != 3 {
		t.Fatalf("admitted %d (waiting %d), want the bound of 2", admitted, c.Waiting())
	}
	if !admit(c, run("other", "o", t0)) {
		t.Fatal("another namespace was held back by the capped one")
	}
}

// TestRefillAdmitsWhenABoundIsRaised: runs held back only by their
// namespace's bound are woken by Refill once the bound is raised, without
// waiting for another run to finish.
func TestRefillAdmitsWhenABoundIsRaised(t *testing.T) {
	var w woken
	bound := 1
	c := New(10, func(string) int { return bound }, w.wake)
	for i := range 3 {
		admit(c, run("team", fmt.Sprintf("r%d", i), t0.Add(time.Duration(i)*time.Second)))
	}
	if c.Active() != 1 || c.Waiting() != 2 {
		t.Fatalf("active %d waiting %d, want 1 and 2 under a bound of 1", c.Active(), c.Waiting())
	}
	w = nil
	c.Refill()
	if len(w) != 0 {
		t.Fatalf("Refill with the same bound woke %v", w)
	}
	bound = 3
	c.Refill()
	if len(w) != 2 || w[0] != "team/r1" || w[1] != "team/r2" {
		t.Fatalf("after raising the bound Refill woke %v, want team/r1 and team/r2 in order", w)
	}
}

// TestForgetFreesEverything: a deleted run's slot, promise and place go.
func TestForgetFreesEverything(t *testing.T) {
	var w woken
	c := New(1, nil, w.wake)
	a, b, d := run("ns", "a", t0), run("ns", "b", t0.Add(time.Second)), run("ns", "d", t0.Add(2*time.Second))
	admit(c, a)
	admit(c, b)
	admit(c, d)
	c.Release(a.UID) // b is promised the slot
	c.Forget(b.UID)  // and deleted before it came
	if w[len(w)-1] != "ns/d" || !admit(c, d) {
		t.Fatalf("woke %v; the deleted run's promised slot must go to the next", w)
	}
	c.Forget(d.UID)
	if c.Active() != 0 || c.Waiting() != 0 {
		t.Fatalf("active %d waiting %d after forgetting everyone", c.Active(), c.Waiting())
	}
}

// TestUnbounded: limit 0 admits everyone at once.
func TestUnbounded(t *testing.T) {
	c := New(0, nil, nil)
	for i := range 100 {
		if !admit(c, run("ns", fmt.Sprintf("r%d", i), t0)) {
			t.Fatal("an unbounded controller refused a run")
		}
	}
}

func admit(c *Controller, r Run) bool {
	ok, _ := c.Admit(r, t0)
	return ok
}

// TestAdmitSaysSinceWhenARunWaits: the time a run first asked is kept
// while it waits, however often it asks again.
func TestAdmitSaysSinceWhenARunWaits(t *testing.T) {
	c := New(1, nil, nil)
	admit(c, run("ns", "a", t0))
	b := run("ns", "b", t0.Add(time.Second))
	if ok, since := c.Admit(b, t0.Add(time.Minute)); ok || !since.Equal(t0.Add(time.Minute)) {
		t.Fatalf("admitted %v since %v, want waiting since its first ask", ok, since)
	}
	if _, since := c.Admit(b, t0.Add(time.Hour)); !since.Equal(t0.Add(time.Minute)) {
		t.Fatalf("since %v after asking again, want the first ask", since)
	}
}
