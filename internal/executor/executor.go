// Package executor runs steps (a model call, a tool call, a webhook
// delivery, a tool-catalog listing) in a bounded pool so that a reconcile
// never waits on the network. A step is reserved before the reconcile
// writes the status that records it and started only once that write
// succeeded, so nothing is ever started that status does not show. A
// finished step wakes its run through a channel the controller watches; a
// full pool is backpressure, reported as such and never as a setup problem.
// Steps that share a remote (one MCP server) share a lane with its own
// limit, so one hung server cannot take every slot.
package executor

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// Key identifies one step: the run's UID and the journal seq of its intent
// (negative seqs name a run's other steps, such as its webhook delivery).
type Key struct {
	Run types.UID
	Seq int64
}

// Step is what the pool needs to know about a step.
type Step struct {
	Key Key
	// Lane groups steps that call the same remote; empty means no lane.
	Lane string
	// Wake is sent when the step ends, and when a refused step's run may
	// try again.
	Wake event.GenericEvent
	// Fence, when set, also ends the step's context: the replica's hold on
	// the run's shard (a step of a shard this replica no longer drives
	// must not go on calling out).
	Fence context.Context
}

// Pool is a bounded set of workers. The zero value is not usable; use New.
type Pool struct {
	// base is cancelled when the manager stops, so no step outlives it (a
	// stopped manager must not write journal entries a successor re-derives).
	base      context.Context
	stop      context.CancelFunc
	size      int
	laneLimit int
	events    chan event.GenericEvent

	mu       sync.Mutex
	busy     int            // reserved or running
	lanes    map[string]int // lane -> reserved or running
	inflight map[Key]context.CancelFunc
	reserved map[Key]bool
	// laneOf is the lane of each reserved or running step that has one.
	laneOf map[Key]string
	// waiting holds runs that found no room, woken in the order they
	// asked when room frees.
	waiting map[types.UID]waiter
	order   []types.UID
}

type waiter struct {
	lane string
	wake event.GenericEvent
}

// New makes a pool running at most size steps at once, at most laneLimit
// of them in one lane (0: a quarter of size, at least 1).
func New(size, laneLimit int) *Pool {
	size = max(size, 1)
	if laneLimit <= 0 {
		laneLimit = max(size/4, 1)
	}
	base, stop := context.WithCancel(context.Background())
	return &Pool{
		base: base, stop: stop, size: size, laneLimit: min(laneLimit, size),
		events:   make(chan event.GenericEvent, 1024),
		lanes:    map[string]int{},
		inflight: map[Key]context.CancelFunc{},
		reserved: map[Key]bool{},
		laneOf:   map[Key]string{},
		waiting:  map[types.UID]waiter{},
	}
}

// Events is the channel the controller watches: one event per finished
// step, one per waiting run when room frees, and those sent by Notify.
func (p *Pool) Events() <-chan event.GenericEvent { return p.events }

// Size is the pool's capacity.
func (p *Pool) Size() int { return p.size }

// LaneLimit is how many steps of one lane may run at once.
func (p *Pool) LaneLimit() int { return p.laneLimit }

// Busy is how many steps are reserved or running now.
func (p *Pool) Busy() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.busy
}

// Waiting is how many runs found no free slot (in the pool or their
// lane) and wait to be woken when one frees: the executor's queue.
func (p *Pool) Waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.waiting)
}

// InFlightSeqs is the set of the run's steps (by key seq) reserved or
// running now.
func (p *Pool) InFlightSeqs(run types.UID) map[int64]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[int64]bool{}
	for k := range p.inflight {
		if k.Run == run {
			out[k.Seq] = true
		}
	}
	for k := range p.reserved {
		if k.Run == run {
			out[k.Seq] = true
		}
	}
	return out
}

// RunInFlight reports whether any step of the run is reserved or running.
func (p *Pool) RunInFlight(run types.UID) bool { return len(p.InFlightSeqs(run)) > 0 }

// CallInFlight reports whether one of the run's calls (a step keyed by a
// journal seq, not a webhook delivery's negative seq) is reserved or
// running. A run has at most one call at a time, and the step making it
// may go on to the calls that follow (keeping its first seq as its key),
// so "is the run's call in flight" is a question about the run, not a seq.
func (p *Pool) CallInFlight(run types.UID) bool {
	for seq := range p.InFlightSeqs(run) {
		if seq >= 0 {
			return true
		}
	}
	return false
}

// OnlyRemote reports whether the run has steps reserved or running and
// every one of them is in a lane: it waits on remote servers (MCP tool
// calls or listings) and on nothing this process does, so it need not
// hold one of the active-run slots other runs wait for.
func (p *Pool) OnlyRemote(run types.UID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, local := 0, false
	count := func(k Key) {
		if k.Run != run {
			return
		}
		n++
		if _, remote := p.laneOf[k]; !remote {
			local = true
		}
	}
	for k := range p.inflight {
		count(k)
	}
	for k := range p.reserved {
		count(k)
	}
	return n > 0 && !local
}

// Ticket is a reserved slot: Start runs the step in it, Release gives it
// back. Both are safe on a nil ticket (nothing was reserved).
type Ticket struct {
	p    *Pool
	step Step
	done bool
}

// LaneFull reports whether the lane (one MCP server's) has no free slot.
func (p *Pool) LaneFull(lane string) bool {
	if lane == "" {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lanes[lane] >= p.laneLimit
}

// Reserve holds a slot for the step. ok is false when there is no room:
// the run is then woken (s.Wake) when a slot of its lane frees. A nil
// ticket with ok=true means the step is already reserved or running.
func (p *Pool) Reserve(s Step) (t *Ticket, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, running := p.inflight[s.Key]; running || p.reserved[s.Key] {
		return nil, true
	}
	if p.busy >= p.size || (s.Lane != "" && p.lanes[s.Lane] >= p.laneLimit) {
		if _, ok := p.waiting[s.Key.Run]; !ok {
			p.order = append(p.order, s.Key.Run)
		}
		p.waiting[s.Key.Run] = waiter{lane: s.Lane, wake: s.Wake}
		return nil, false
	}
	delete(p.waiting, s.Key.Run)
	p.busy++
	if s.Lane != "" {
		p.lanes[s.Lane]++
		p.laneOf[s.Key] = s.Lane
	}
	p.reserved[s.Key] = true
	return &Ticket{p: p, step: s}, true
}

// Start runs fn in the reserved slot. fn gets a context cancelled by
// Cancel, by the step's Fence, or when the pool stops, and carrying the
// Fence's values (the hold's epoch the store fences writes by); when it
// returns the run is woken.
func (t *Ticket) Start(fn func(context.Context)) {
	if t == nil || t.done {
		return
	}
	t.done = true
	p := t.p
	p.mu.Lock()
	delete(p.reserved, t.step.Key)
	ctx, cancel := context.WithCancel(p.base)
	p.inflight[t.step.Key] = cancel
	p.mu.Unlock()
	stopFence := func() bool { return false }
	if t.step.Fence != nil {
		stopFence = context.AfterFunc(t.step.Fence, cancel)
		ctx = WithValuesOf(ctx, t.step.Fence)
	}
	go func() {
		defer func() {
			stopFence()
			cancel()
			p.mu.Lock()
			delete(p.inflight, t.step.Key)
			delete(p.laneOf, t.step.Key)
			next := p.free(t.step.Lane)
			p.mu.Unlock()
			p.Notify(append([]event.GenericEvent{t.step.Wake}, next...)...)
		}()
		fn(ctx)
	}()
}

// TakeLane holds a slot of lane for a step already running in the pool
// that goes on to call that lane's remote (a run's step moving from its
// model call to an MCP tool call): the lane's limit holds for it too, so a
// hung server still holds at most its lane's slots. false when the lane is
// full; release gives the slot back.
func (p *Pool) TakeLane(lane string) (release func(), ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lanes[lane] >= p.laneLimit {
		return nil, false
	}
	p.lanes[lane]++
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			if p.lanes[lane]--; p.lanes[lane] <= 0 {
				delete(p.lanes, lane)
			}
			next := p.wakeRoom()
			p.mu.Unlock()
			p.Notify(next...)
		})
	}, true
}

// Release gives the slot back without running anything (the status write
// that was to record the step failed).
func (t *Ticket) Release() {
	if t == nil || t.done {
		return
	}
	t.done = true
	p := t.p
	p.mu.Lock()
	delete(p.reserved, t.step.Key)
	delete(p.laneOf, t.step.Key)
	next := p.free(t.step.Lane)
	p.mu.Unlock()
	p.Notify(next...)
}

// free returns a slot of lane and picks the waiting runs that now have
// room, at most as many as there are free slots. Called with mu held.
func (p *Pool) free(lane string) []event.GenericEvent {
	p.busy--
	if lane != "" {
		if p.lanes[lane]--; p.lanes[lane] <= 0 {
			delete(p.lanes, lane)
		}
	}
	return p.wakeRoom()
}

// wakeRoom picks the waiting runs that have room now. Called with mu held.
func (p *Pool) wakeRoom() []event.GenericEvent {
	var next []event.GenericEvent
	room := p.size - p.busy
	kept := p.order[:0]
	for _, uid := range p.order {
		w, ok := p.waiting[uid]
		switch {
		case !ok:
			continue // admitted or cancelled meanwhile
		case len(next) < room && (w.lane == "" || p.lanes[w.lane] < p.laneLimit):
			next = append(next, w.wake)
			delete(p.waiting, uid)
		default:
			kept = append(kept, uid)
		}
	}
	p.order = kept
	return next
}

// Submit reserves a slot and starts fn in it at once: false when there is
// no room (the run is woken when there is), true when started or already
// running.
func (p *Pool) Submit(s Step, fn func(context.Context)) bool {
	t, ok := p.Reserve(s)
	t.Start(fn)
	return ok
}

// Notify wakes runs, in order, unless the pool has stopped.
func (p *Pool) Notify(evs ...event.GenericEvent) {
	for _, ev := range evs {
		select {
		case p.events <- ev:
		case <-p.base.Done():
			return
		}
	}
}

// Cancel stops every running step of the run and forgets it as waiting.
func (p *Pool) Cancel(run types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, cancel := range p.inflight {
		if k.Run == run {
			cancel()
		}
	}
	delete(p.waiting, run)
}

// Forget drops the run as waiting for room. Its steps, if any, are left
// to end (Cancel stops them); each leaves the pool when it does.
func (p *Pool) Forget(run types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.waiting, run)
}

// Has reports whether the pool keeps anything of the run: a step reserved
// or running, or a wait for room.
func (p *Pool) Has(run types.UID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.waiting[run]; ok {
		return true
	}
	for k := range p.inflight {
		if k.Run == run {
			return true
		}
	}
	for k := range p.reserved {
		if k.Run == run {
			return true
		}
	}
	return false
}

// EachRun calls fn with every run the pool keeps anything of (a run may
// come more than once).
func (p *Pool) EachRun(fn func(types.UID)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for uid := range p.waiting {
		fn(uid)
	}
	for k := range p.inflight {
		fn(k.Run)
	}
	for k := range p.reserved {
		fn(k.Run)
	}
}

// NeedLeaderElection is false: every replica runs the steps of the runs it
// drives, not only the leader.
func (p *Pool) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable: it blocks until the manager stops, then
// cancels every running step.
func (p *Pool) Start(ctx context.Context) error {
	<-ctx.Done()
	p.stop()
	return nil
}

// WithValuesOf is ctx (its deadline and cancellation) carrying also the
// values of from, ctx's own first.
func WithValuesOf(ctx, from context.Context) context.Context {
	return valuesOf{Context: ctx, from: from}
}

type valuesOf struct {
	context.Context
	from context.Context
}

func (v valuesOf) Value(key any) any {
	if x := v.Context.Value(key); x != nil {
		return x
	}
	return v.from.Value(key)
}
