// Package executor runs steps (one model call, one tool call) in a bounded
// pool so that a reconcile never blocks on a provider. A finished step wakes
// its run through a channel that the controller watches as a source; a full
// pool is backpressure, reported as such and never as a setup problem.
package executor

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// Key identifies one step: the run's UID and the journal seq of its intent.
type Key struct {
	Run types.UID
	Seq int64
}

// Pool is a bounded set of workers. The zero value is not usable; use New.
type Pool struct {
	// base is cancelled when the manager stops, so no step outlives it (a
	// stopped manager must not write journal entries a successor re-derives).
	base   context.Context
	stop   context.CancelFunc
	slots  chan struct{}
	events chan event.GenericEvent

	mu       sync.Mutex
	inflight map[Key]context.CancelFunc
	// waiting holds runs that found the pool full, woken when a slot frees.
	waiting map[types.UID]event.GenericEvent
}

// New makes a pool running at most size steps at once.
func New(size int) *Pool {
	if size < 1 {
		size = 1
	}
	base, stop := context.WithCancel(context.Background())
	return &Pool{
		base:     base,
		stop:     stop,
		slots:    make(chan struct{}, size),
		events:   make(chan event.GenericEvent, 1024),
		inflight: map[Key]context.CancelFunc{},
		waiting:  map[types.UID]event.GenericEvent{},
	}
}

// Events is the channel the controller watches: one event per finished step,
// and one per waiting run when a slot frees.
func (p *Pool) Events() <-chan event.GenericEvent { return p.events }

// Size is the pool's capacity.
func (p *Pool) Size() int { return cap(p.slots) }

// Busy is how many steps are running now.
func (p *Pool) Busy() int { return len(p.slots) }

// InFlight reports whether the step is running.
func (p *Pool) InFlight(k Key) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.inflight[k]
	return ok
}

// InFlightSeqs is the set of the run's steps (by intent seq) running now.
func (p *Pool) InFlightSeqs(run types.UID) map[int64]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[int64]bool{}
	for k := range p.inflight {
		if k.Run == run {
			out[k.Seq] = true
		}
	}
	return out
}

// RunInFlight reports whether any step of the run is running.
func (p *Pool) RunInFlight(run types.UID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.inflight {
		if k.Run == run {
			return true
		}
	}
	return false
}

// HasRoom reports whether a step could start now. When it could not, the
// run is registered to be woken (wake) when a slot frees, as a refused
// Submit would, so a caller can check before journaling an intent it
// could not start.
func (p *Pool) HasRoom(run types.UID, wake event.GenericEvent) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.slots) < cap(p.slots) {
		return true
	}
	p.waiting[run] = wake
	return false
}

// Submit starts fn for the step unless the pool is full (false: the caller
// reports backpressure; the run is woken when a slot frees) or the step is
// already running (true, nothing started). wake is the event sent when fn
// returns. fn gets a context cancelled by Cancel or when the pool stops.
func (p *Pool) Submit(k Key, wake event.GenericEvent, fn func(context.Context)) bool {
	p.mu.Lock()
	if _, ok := p.inflight[k]; ok {
		p.mu.Unlock()
		return true
	}
	select {
	case p.slots <- struct{}{}:
	default:
		p.waiting[k.Run] = wake
		p.mu.Unlock()
		return false
	}
	delete(p.waiting, k.Run)
	stepCtx, cancel := context.WithCancel(p.base)
	p.inflight[k] = cancel
	p.mu.Unlock()

	go func() {
		defer func() {
			cancel()
			p.mu.Lock()
			delete(p.inflight, k)
			<-p.slots
			var next []event.GenericEvent
			for uid, ev := range p.waiting {
				next = append(next, ev)
				delete(p.waiting, uid)
				if len(next) >= cap(p.slots)-len(p.slots) {
					break
				}
			}
			p.mu.Unlock()
			for _, ev := range append([]event.GenericEvent{wake}, next...) {
				select {
				case p.events <- ev:
				case <-p.base.Done():
					return
				}
			}
		}()
		fn(stepCtx)
	}()
	return true
}

// Cancel stops every running step of the run.
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

// Start implements manager.Runnable: it blocks until the manager stops, then
// cancels every running step.
func (p *Pool) Start(ctx context.Context) error {
	<-ctx.Done()
	p.stop()
	return nil
}
