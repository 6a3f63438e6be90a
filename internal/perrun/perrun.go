// Package perrun keeps what a process holds in memory per run: a Box keeps
// one pending value per run, for the reconcile to take once (a step's
// report, a failure to show), and a Registry knows every holder of per-run
// state, so that one Forget drops all of a run's. Steps and the reconcile
// run on different goroutines, so every holder is guarded.
package perrun

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Box holds at most one value per run UID. The zero value is not usable;
// make one with New.
type Box[V any] struct {
	mu sync.Mutex
	m  map[types.UID]V
}

// New makes an empty Box.
func New[V any]() *Box[V] { return &Box[V]{m: map[types.UID]V{}} }

// Put sets the run's value, replacing any earlier one.
func (b *Box[V]) Put(uid types.UID, v V) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.m[uid] = v
}

// Take returns and forgets the run's value, if there is one.
func (b *Box[V]) Take(uid types.UID) (V, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.m[uid]
	delete(b.m, uid)
	return v, ok
}

// Get returns the run's value, if there is one, and keeps it.
func (b *Box[V]) Get(uid types.UID) (V, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.m[uid]
	return v, ok
}

// Has reports whether a value waits for the run.
func (b *Box[V]) Has(uid types.UID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.m[uid]
	return ok
}

// Restore puts back a value whose handling failed, unless a newer one came
// meanwhile.
func (b *Box[V]) Restore(uid types.UID, v V) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, newer := b.m[uid]; !newer {
		b.m[uid] = v
	}
}

// Update calls fn with the run's value (ok: there is one) under the box's
// lock, and keeps what fn returns, or drops the run's value when keep is
// false: a read and a write no other caller can come between. fn must not
// call back into the box.
func (b *Box[V]) Update(uid types.UID, fn func(v V, ok bool) (_ V, keep bool)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.m[uid]
	if v, keep := fn(v, ok); keep {
		b.m[uid] = v
	} else {
		delete(b.m, uid)
	}
}

// Len is how many runs have a value.
func (b *Box[V]) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.m)
}

// Forget drops the run's value, if there is one.
func (b *Box[V]) Forget(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, uid)
}

// EachRun calls fn with every run that has a value (under the box's lock:
// fn must not call back into it).
func (b *Box[V]) EachRun(fn func(types.UID)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for uid := range b.m {
		fn(uid)
	}
}
