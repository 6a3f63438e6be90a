// Package runqueue bounds how many runs are active (driven by the
// manager) at once and admits the rest first come, first served, so a
// burst of runs finishes in order instead of everybody progressing a
// little and nobody finishing (a breadth-first convoy). Order is by the
// run tree's root: a fan-out worker or sub-agent queues with its parent's
// place, so a tree started early finishes early. Across namespaces the
// budget is shared fairly: the next slot goes to the namespace with the
// fewest active runs, so one tenant's thousand queued runs cannot hold back
// another's ten. Within a namespace's line a higher priority goes first
// (then the earlier place): priority reorders a tenant's own queue, it
// does not take another tenant's share. A parked run gives its slot back;
// when something wakes it, it queues again with its original place.
package runqueue

import (
	"container/heap"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/priority"
)

// Run is what admission knows of a run.
type Run struct {
	UID       types.UID
	Namespace string
	Name      string
	// Place orders runs: earlier places are admitted first.
	Place Place
}

// Place is a run's position in line.
type Place struct {
	// Priority goes first: higher is sooner.
	Priority int32
	// Root is when the run's tree root was created; RootName breaks ties.
	Root     time.Time
	RootName string
	// Created is when the run itself was created; Name breaks ties.
	Created time.Time
	Name    string
}

// PlaceOf is a run's place in line: its tree root's creation, then its
// own. A child carries its root's in labels set when it was created.
// Priority is left 0: it depends on the cluster's priority classes, so
// the caller sets it.
func PlaceOf(run *arv1.AgentRun) Place {
	p := Place{Root: run.CreationTimestamp.Time, RootName: run.Name, Created: run.CreationTimestamp.Time, Name: run.Name}
	if ns, err := strconv.ParseInt(run.Labels[arv1.LabelRootCreated], 10, 64); err == nil {
		p.Root, p.RootName = time.Unix(0, ns), run.Labels[arv1.LabelRoot]
	}
	return p
}

// RunOf is a run as admission sees it: its place, with the priority its
// spec asks for in classes, or, for a child, that of its tree's root
// (rootOf finds the root; nil when it is gone), so a tree's children
// queue as it does. The manager lines runs up by it, and `kubectl
// agentrun ps` counts places in line by it, so the two cannot disagree.
func RunOf(run *arv1.AgentRun, classes priority.Classes, rootOf func(ns, name string) *arv1.AgentRun) Run {
	p := PlaceOf(run)
	p.Priority = classes.Of(&run.Spec)
	if p.RootName != run.Name {
		if root := rootOf(run.Namespace, p.RootName); root != nil {
			p.Priority = classes.Of(&root.Spec)
		}
	}
	return Run{UID: run.UID, Namespace: run.Namespace, Name: run.Name, Place: p}
}

// Before reports whether p goes ahead of q.
func (p Place) Before(q Place) bool {
	switch {
	case p.Priority != q.Priority:
		return p.Priority > q.Priority
	case !p.Root.Equal(q.Root):
		return p.Root.Before(q.Root)
	case p.RootName != q.RootName:
		return p.RootName < q.RootName
	case !p.Created.Equal(q.Created):
		return p.Created.Before(q.Created)
	}
	return p.Name < q.Name
}

// Controller is safe for concurrent use. Build it with New.
type Controller struct {
	limit int
	// nsLimit bounds one namespace's active runs (0: no bound).
	nsLimit func(namespace string) int
	// wake re-queues a run admission picked.
	wake func(namespace, name string)

	mu      sync.Mutex
	active  map[types.UID]string // uid -> namespace
	byNS    map[string]int       // namespace -> active runs
	queues  map[string]*queue    // namespace -> waiting runs
	waiting map[types.UID]*item
	// promised runs were given a slot and woken (and left the line); they
	// hold it until their reconcile takes it.
	promised   map[types.UID]Run
	promisedBy map[string]int
}

// New makes a controller admitting at most limit runs at once (limit <= 0:
// no bound), at most nsLimit(ns) of one namespace, waking picked runs
// through wake.
func New(limit int, nsLimit func(string) int, wake func(namespace, name string)) *Controller {
	if nsLimit == nil {
		nsLimit = func(string) int { return 0 }
	}
	return &Controller{
		limit: limit, nsLimit: nsLimit, wake: wake,
		active: map[types.UID]string{}, byNS: map[string]int{}, queues: map[string]*queue{},
		waiting: map[types.UID]*item{}, promised: map[types.UID]Run{}, promisedBy: map[string]int{},
	}
}

// Admit reports whether the run may be driven now. A run already active
// stays so; a run whose turn came (it was woken for a slot) takes it.
// Otherwise the run waits in line (since says from when; now is the time
// it first asked) and free slots go to the runs whose turn it is (they are
// woken).
func (c *Controller) Admit(r Run, now time.Time) (admitted bool, since time.Time) {
	c.mu.Lock()
	if _, ok := c.active[r.UID]; ok {
		c.mu.Unlock()
		return true, time.Time{}
	}
	if _, ok := c.promised[r.UID]; !ok {
		c.enqueue(r, now)
	}
	woken := c.fill()
	_, admitted = c.promised[r.UID]
	if admitted {
		c.unpromise(r.UID)
		c.active[r.UID] = r.Namespace
		c.byNS[r.Namespace]++
		woken = without(woken, r.UID)
	} else if it, ok := c.waiting[r.UID]; ok {
		since = it.since
	}
	c.mu.Unlock()
	c.wakeAll(woken)
	return admitted, since
}

// Enqueue puts runs in line without admitting any (a restarted manager
// lines up the runs that were working before their reconciles come).
func (c *Controller) Enqueue(runs ...Run) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range runs {
		if _, ok := c.active[r.UID]; !ok {
			if _, ok := c.promised[r.UID]; !ok {
				c.enqueue(r, time.Now())
			}
		}
	}
}

// Release gives a run's slot back (it finished, parked, or went away) and
// wakes the runs the free slots go to.
func (c *Controller) Release(uid types.UID) {
	c.mu.Lock()
	if ns, ok := c.active[uid]; ok {
		delete(c.active, uid)
		if c.byNS[ns]--; c.byNS[ns] <= 0 {
			delete(c.byNS, ns)
		}
	}
	woken := c.fill()
	c.mu.Unlock()
	c.wakeAll(woken)
}

// Refill gives free slots to the runs whose turn it is, waking them: call
// it when a namespace's bound was raised, so its waiting runs need not
// wait for another run to finish.
func (c *Controller) Refill() {
	c.mu.Lock()
	woken := c.fill()
	c.mu.Unlock()
	c.wakeAll(woken)
}

// Forget drops a run entirely (deleted): its slot, its promise and its
// place in line.
func (c *Controller) Forget(uid types.UID) {
	c.mu.Lock()
	if it, ok := c.waiting[uid]; ok {
		c.dequeue(it)
	}
	c.unpromise(uid)
	c.mu.Unlock()
	c.Release(uid)
}

// Reprioritize sets the priority of every waiting run to priorityOf's
// and reorders the lines (the priority classes changed). A run promised
// or holding a slot keeps it.
func (c *Controller) Reprioritize(priorityOf func(Run) int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, it := range c.waiting {
		it.Place.Priority = priorityOf(it.Run)
	}
	for _, q := range c.queues {
		heap.Init(q)
	}
}

// Has reports whether the run is active, promised a slot or in line.
func (c *Controller) Has(uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, active := c.active[uid]
	_, promised := c.promised[uid]
	_, waiting := c.waiting[uid]
	return active || promised || waiting
}

// EachRun calls fn with every run that is active, promised a slot or in
// line (a run may come twice).
func (c *Controller) EachRun(fn func(types.UID)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid := range c.active {
		fn(uid)
	}
	for uid := range c.promised {
		fn(uid)
	}
	for uid := range c.waiting {
		fn(uid)
	}
}

// Active is how many runs are active.
func (c *Controller) Active() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.active)
}

// Waiting is how many runs wait in line.
func (c *Controller) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting)
}

// fill gives free slots to the runs whose turn it is, moving them from the
// line to the promised (their slot is held until they come), and returns
// them to be woken. Called with mu held.
func (c *Controller) fill() []Run {
	var woken []Run
	for c.limit <= 0 || len(c.active)+len(c.promised) < c.limit {
		next := c.pick()
		if next == nil {
			break
		}
		c.dequeue(next)
		c.promised[next.UID] = next.Run
		c.promisedBy[next.Namespace]++
		woken = append(woken, next.Run)
	}
	return woken
}

func (c *Controller) unpromise(uid types.UID) {
	r, ok := c.promised[uid]
	if !ok {
		return
	}
	delete(c.promised, uid)
	if c.promisedBy[r.Namespace]--; c.promisedBy[r.Namespace] <= 0 {
		delete(c.promisedBy, r.Namespace)
	}
}

// pick is the run the next slot goes to: the head of the line of the
// namespace with the fewest active (and promised) runs, among namespaces
// under their own bound; the earliest place among equals.
func (c *Controller) pick() *item {
	var best *item
	bestLoad := 0
	for ns, q := range c.queues {
		load := c.byNS[ns] + c.promisedBy[ns]
		if l := c.nsLimit(ns); l > 0 && load >= l {
			continue
		}
		head := (*q)[0]
		if best == nil || load < bestLoad || (load == bestLoad && head.Place.Before(best.Place)) {
			best, bestLoad = head, load
		}
	}
	return best
}

func (c *Controller) wakeAll(runs []Run) {
	if c.wake == nil {
		return
	}
	for _, r := range runs {
		c.wake(r.Namespace, r.Name)
	}
}

func (c *Controller) enqueue(r Run, now time.Time) {
	if it, ok := c.waiting[r.UID]; ok {
		it.Place = r.Place
		heap.Fix(c.queues[r.Namespace], it.index)
		return
	}
	q := c.queues[r.Namespace]
	if q == nil {
		q = &queue{}
		c.queues[r.Namespace] = q
	}
	it := &item{Run: r, since: now}
	heap.Push(q, it)
	c.waiting[r.UID] = it
}

func (c *Controller) dequeue(it *item) {
	q := c.queues[it.Namespace]
	heap.Remove(q, it.index)
	if q.Len() == 0 {
		delete(c.queues, it.Namespace)
	}
	delete(c.waiting, it.UID)
}

func without(runs []Run, uid types.UID) []Run {
	out := runs[:0]
	for _, r := range runs {
		if r.UID != uid {
			out = append(out, r)
		}
	}
	return out
}

type item struct {
	Run
	index int
	since time.Time
}

// queue is a min-heap of waiting runs by place.
type queue []*item

func (q queue) Len() int           { return len(q) }
func (q queue) Less(i, j int) bool { return q[i].Place.Before(q[j].Place) }
func (q queue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *queue) Push(x any) { it := x.(*item); it.index = len(*q); *q = append(*q, it) }
func (q *queue) Pop() any {
	old := *q
	it := old[len(old)-1]
	*q = old[:len(old)-1]
	return it
}
