package steps

import (
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
)

// TestOverloadIsGivenUpOnAfterItsBound: overload refusals in a row are
// waited out until the bound has passed since the first, the operator's
// own backoff cut to the bound for a last try there; a provider asking to
// wait past the bound is given up on at once; a 429 restarts the count;
// with no bound (no other model to go to) nothing is given up.
func TestOverloadIsGivenUpOnAfterItsBound(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	overloaded := &providers.Error{Status: 529, RateLimited: true, Overloaded: true}
	said := func(d time.Duration) *providers.Error {
		return &providers.Error{Status: 529, RateLimited: true, Overloaded: true, RetryAfter: d}
	}
	limited := &providers.Error{Status: 429, RateLimited: true, RetryAfter: time.Second}

	o := overload{bound: 60 * time.Second}
	steps := []struct {
		pe         *providers.Error
		now, until time.Time
		next       time.Time
		giveUp     bool
	}{
		{pe: said(10 * time.Second), now: s(0), until: s(10), next: s(10)},
		{pe: overloaded, now: s(10), until: s(42), next: s(42)},
		{pe: overloaded, now: s(42), until: s(106), next: s(60)}, // own backoff: cut to the bound
		{pe: overloaded, now: s(60), until: s(124), giveUp: true, next: s(124)},
	}
	for i, st := range steps {
		next, giveUp := o.refused(st.pe, st.now, st.until)
		if next != st.next || giveUp != st.giveUp {
			t.Errorf("refusal %d: next %v give up %v, want %v %v", i, next.Sub(t0), giveUp, st.next.Sub(t0), st.giveUp)
		}
	}
	if f := o.failure(overloaded, s(60)); f.Class != journal.FailOverloaded || f.Status != 529 {
		t.Errorf("failure %+v", f)
	}

	o = overload{bound: 60 * time.Second}
	if _, giveUp := o.refused(said(2*time.Minute), s(0), s(120)); !giveUp {
		t.Error("a provider asking to wait past the bound is waited on")
	}

	o = overload{bound: 60 * time.Second}
	o.refused(overloaded, s(0), s(1))
	o.refused(limited, s(50), s(51))
	if _, giveUp := o.refused(overloaded, s(70), s(71)); giveUp {
		t.Error("a 429 in between did not restart the count")
	}

	o = overload{}
	if _, giveUp := o.refused(overloaded, s(0), s(3600)); giveUp {
		t.Error("a call with no other model to go to gave up")
	}
}
