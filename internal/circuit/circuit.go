// Package circuit keeps one breaker per provider, shared by every run the
// manager hosts: after Threshold consecutive failures the provider is left
// alone for Cooldown, so runs fail over or park instead of hammering it.
package circuit

import (
	"sync"
	"time"
)

// The seeds' defaults: three consecutive failures open the circuit for five
// minutes.
const (
	DefaultThreshold = 3
	DefaultCooldown  = 300 * time.Second
)

// Breakers holds the breakers by key (namespace/provider).
type Breakers struct {
	Threshold int
	Cooldown  time.Duration

	mu sync.Mutex
	m  map[string]*breaker
}

type breaker struct {
	failures  int
	openUntil time.Time
	lastClass string
}

// New returns breakers with the seeds' defaults.
func New() *Breakers {
	return &Breakers{Threshold: DefaultThreshold, Cooldown: DefaultCooldown, m: map[string]*breaker{}}
}

// Success closes the key's circuit.
func (b *Breakers) Success(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, key)
}

// Failure records a failed call of class; the Threshold-th in a row opens
// the circuit until now + Cooldown.
func (b *Breakers) Failure(key, class string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.m[key]
	if s == nil {
		s = &breaker{}
		b.m[key] = s
	}
	s.failures++
	s.lastClass = class
	if s.failures >= b.Threshold {
		s.openUntil = now.Add(b.Cooldown)
	}
}

// Open reports whether the key's circuit is open at now, until when, and the
// class of the failure that opened it. Once the cooldown passes the circuit
// is half-open: one call may probe, and its outcome closes or reopens it.
func (b *Breakers) Open(key string, now time.Time) (open bool, until time.Time, lastClass string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.m[key]
	if s == nil || !now.Before(s.openUntil) {
		return false, time.Time{}, ""
	}
	return true, s.openUntil, s.lastClass
}

// State is one breaker as the metrics report it.
type State struct {
	// Key is the breaker's key (namespace/provider).
	Key string
	// Open is true while the cooldown runs; false for a breaker that has
	// failures below the threshold or is half-open.
	Open bool
}

// States lists the breakers that have recorded a failure since their last
// success (a provider that never failed, or recovered, has none), as at now.
func (b *Breakers) States(now time.Time) []State {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]State, 0, len(b.m))
	for k, s := range b.m {
		out = append(out, State{Key: k, Open: now.Before(s.openUntil)})
	}
	return out
}
