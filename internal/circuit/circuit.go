// Package circuit keeps one breaker per provider, shared by every run the
// manager hosts: after Threshold consecutive failures the provider is left
// alone for Cooldown, so runs fail over or park instead of hammering it.
// Once the cooldown has passed the circuit is half-open and admits exactly
// one call, the probe: its success closes the circuit, its failure opens it
// for another cooldown, and until one of them is reported every other
// caller finds the circuit still open.
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

// ProbeRecheck is how soon a caller refused by a probe in flight is told to
// look again: a probe is one call, usually seconds, and its success lets
// everyone through, so the others need not wait out its whole bound.
const ProbeRecheck = 5 * time.Second

// Breakers holds the breakers by key (namespace/provider).
type Breakers struct {
	Threshold int
	Cooldown  time.Duration
	// ProbeBound is how long a probe may be out with no outcome reported
	// (its step was stopped, or hangs) before another caller may probe in
	// its place; Cooldown when zero.
	ProbeBound time.Duration

	mu sync.Mutex
	m  map[string]*breaker
	// probes maps a probe's owner to the key it probes (an owner makes
	// one call at a time).
	probes map[string]string
}

type breaker struct {
	failures  int
	openUntil time.Time
	lastClass string
	// probeOwner holds the half-open circuit's one probe since probeAt
	// ("" when no probe is out).
	probeOwner string
	probeAt    time.Time
}

// New returns breakers with the seeds' defaults.
func New() *Breakers {
	return &Breakers{Threshold: DefaultThreshold, Cooldown: DefaultCooldown, m: map[string]*breaker{}, probes: map[string]string{}}
}

func (b *Breakers) init() {
	if b.m == nil {
		b.m = map[string]*breaker{}
	}
	if b.probes == nil {
		b.probes = map[string]string{}
	}
}

func (b *Breakers) bound() time.Duration {
	if b.ProbeBound > 0 {
		return b.ProbeBound
	}
	return b.Cooldown
}

// halfOpen: the threshold was reached and the cooldown has passed.
func (b *Breakers) halfOpen(s *breaker, now time.Time) bool {
	return s.failures >= b.Threshold && !s.openUntil.IsZero() && !now.Before(s.openUntil)
}

// probing reports whether a probe is out on s at now (one past its bound
// no longer counts).
func (b *Breakers) probing(s *breaker, now time.Time) bool {
	return s.probeOwner != "" && now.Before(s.probeAt.Add(b.bound()))
}

// Success closes the key's circuit (a probe's success, or any call's).
func (b *Breakers) Success(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	if s := b.m[key]; s != nil {
		b.dropProbe(s)
	}
	delete(b.m, key)
}

// Failure records a failed call of class; the Threshold-th in a row opens
// the circuit until now + Cooldown, and a failed probe opens it again.
func (b *Breakers) Failure(key, class string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
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
	b.dropProbe(s)
}

// dropProbe forgets s's probe, if any (b.probes names an owner's key
// exactly while that breaker names the owner).
func (b *Breakers) dropProbe(s *breaker) {
	if s.probeOwner != "" {
		delete(b.probes, s.probeOwner)
	}
	s.probeOwner, s.probeAt = "", time.Time{}
}

// Open reports whether the key's circuit is open at now, until when a
// caller should look again, and the class of the failure that opened it.
// It is open during the cooldown, and while half-open as long as a probe
// is out (until: when the probe's bound ends, or ProbeRecheck from now if
// sooner). It records nothing: a caller that means to call the provider
// asks Admit.
func (b *Breakers) Open(key string, now time.Time) (open bool, until time.Time, lastClass string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.m[key]
	switch {
	case s == nil:
		return false, time.Time{}, ""
	case now.Before(s.openUntil):
		return true, s.openUntil, s.lastClass
	case b.halfOpen(s, now) && b.probing(s, now):
		until = s.probeAt.Add(b.bound())
		if recheck := now.Add(ProbeRecheck); recheck.Before(until) {
			until = recheck
		}
		return true, until, s.lastClass
	}
	return false, time.Time{}, ""
}

// Admit says whether owner may call the key's provider now. A closed
// circuit admits everyone and records nothing; an open one admits nobody.
// A half-open circuit admits one probe: the first caller, whose probe is
// recorded (with the time) until its outcome is reported (Success or
// Failure), it is given back (Release), or ProbeBound passes; its owner is
// admitted again meanwhile, everyone else refused.
func (b *Breakers) Admit(key, owner string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	s := b.m[key]
	switch {
	case s == nil:
		return true
	case now.Before(s.openUntil):
		return false
	case !b.halfOpen(s, now):
		return true // failures below the threshold: closed
	case b.probing(s, now):
		return s.probeOwner == owner
	}
	if k, ok := b.probes[owner]; ok && k != key {
		b.releaseLocked(owner) // one call at a time: an earlier claim is moot
	}
	b.dropProbe(s) // one past its bound
	s.probeOwner, s.probeAt = owner, now
	b.probes[owner] = key
	return true
}

// Release gives back the probe owner holds, if any, with no outcome: its
// call was not made after all, or ended with no verdict on the provider
// (cancelled, refused by policy). The circuit stays half-open and the next
// caller probes.
func (b *Breakers) Release(owner string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	b.releaseLocked(owner)
}

func (b *Breakers) releaseLocked(owner string) {
	key, ok := b.probes[owner]
	if !ok {
		return
	}
	delete(b.probes, owner)
	if s := b.m[key]; s != nil && s.probeOwner == owner {
		s.probeOwner, s.probeAt = "", time.Time{}
	}
}

// Probing reports whether owner holds a probe.
func (b *Breakers) Probing(owner string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.probes[owner]
	return ok
}

// EachProber calls fn with every owner holding a probe.
func (b *Breakers) EachProber(fn func(owner string)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for owner := range b.probes {
		fn(owner)
	}
}

// State is one breaker as the metrics report it.
type State struct {
	// Key is the breaker's key (namespace/provider).
	Key string
	// Open is true while the cooldown runs; false for a breaker that has
	// failures below the threshold or is half-open (probe out or not).
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
