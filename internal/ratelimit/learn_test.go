package ratelimit

import (
	"math"
	"testing"
	"time"
)

// learned is the bucket's learned rate, calls/s.
func learned(t *testing.T, l *Limiter, key string) float64 {
	t.Helper()
	settle(l)
	return stats(t, l, key).LearnedPerSecond
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// grantedNow collects the pending Acquires granted by now, without waiting
// for the others.
func grantedNow(t *testing.T, l *Limiter, pds []*pending) (got []*Permit, rest []*pending) {
	t.Helper()
	settle(l)
	want := len(pds) - stats(t, l, "k").Waiting
	for _, pd := range pds {
		if len(got) < want {
			select {
			case r := <-pd.res:
				if r.err != nil {
					t.Fatalf("%s: %v", pd.name, r.err)
				}
				got = append(got, r.p)
				continue
			case <-time.After(50 * time.Millisecond):
			}
		}
		rest = append(rest, pd)
	}
	if len(got) != want {
		t.Fatalf("%d granted, stats say %d", len(got), want)
	}
	return got, rest
}

func TestLearnsRateFromRefusals(t *testing.T) {
	l, fc := newFake()
	r := Request{Key: "k", Namespace: "a"}

	// No bucket yet: the first refusal has no history to learn from, so
	// the pause ends with every held call let go at once, as before.
	p, _, ok := try(t, l, r)
	if !ok || p.b != nil {
		t.Fatalf("an unbounded call was held or tracked: %v %+v", ok, p)
	}
	l.Refused(p, "k", t0.Add(time.Second))
	var held []*pending
	for i := range 10 {
		held = append(held, goAcquire(l, "first"+string(rune('a'+i)), r))
	}
	for _, pd := range held {
		pd.waited(t)
	}
	step(l, fc, time.Second)
	first, rest := grantedNow(t, l, held)
	if len(first) != 10 || len(rest) != 0 {
		t.Fatalf("after a pause with nothing learned %d of 10 started at once", len(first))
	}
	if got := learned(t, l, "k"); got != 0 {
		t.Fatalf("learned %v from no history", got)
	}

	// Two of the ten are refused 200 ms later: 8 accepted in the second
	// before, so the rate becomes 0.9 x 8 = 7.2/s once the pause ends.
	step(l, fc, 200*time.Millisecond)
	pauseEnd := fc.Now().Add(time.Second)
	l.Refused(first[0], "k", pauseEnd)
	step(l, fc, time.Millisecond) // a refusal arriving later belongs to the same episode
	l.Refused(first[1], "k", pauseEnd)
	for _, p := range first[2:] {
		p.Done(0) // no waiters: no growth
	}
	if got := learned(t, l, "k"); got != 0 {
		t.Fatalf("learned %v before the pause ended", got)
	}
	held = nil
	for i := range 8 {
		held = append(held, goAcquire(l, "second"+string(rune('a'+i)), r))
	}
	for _, pd := range held {
		pd.waited(t)
	}
	step(l, fc, pauseEnd.Sub(fc.Now()))
	if got := learned(t, l, "k"); !near(got, 7.2) {
		t.Fatalf("learned %v/s, want 7.2", got)
	}
	// The schedule lets half a second's worth (3) start at once, then one
	// every 1/7.2 s.
	now, rest := grantedNow(t, l, held)
	if len(now) != 3 {
		t.Fatalf("%d started when the pause ended, want 3", len(now))
	}
	step(l, fc, time.Second/7)
	next, rest := grantedNow(t, l, rest)
	if len(next) != 1 {
		t.Fatalf("%d started one interval later, want 1", len(next))
	}

	// An accepted call while calls wait raises the rate: by
	// max(0.05, 0.5/7.2) per call.
	next[0].Done(0)
	if got, want := learned(t, l, "k"), 7.2+0.5/7.2; !near(got, want) {
		t.Fatalf("after an accepted call with calls waiting: %v/s, want %v", got, want)
	}
	for _, p := range now {
		p.Done(0)
	}
	for _, pd := range rest {
		pd.cancel()
		if res := <-pd.res; res.err == nil {
			res.p.Done(0)
		}
	}

	// With a rate learned, a refusal pauses nothing: the rate is cut to 0.9
	// of the lower of itself and what was accepted in the second before
	// (here nothing but the refused call started), once a second.
	before := learned(t, l, "k")
	step(l, fc, 5*time.Second)
	q, _, ok := try(t, l, r)
	if !ok {
		t.Fatal("an idle bucket held a call")
	}
	if l.Refused(q, "k", fc.Now().Add(time.Minute)) {
		t.Fatal("a refusal paused a bucket with a learned rate")
	}
	if got := learned(t, l, "k"); !near(got, before*0.9) {
		t.Fatalf("after a refusal: %v/s, want 0.9 x %v", got, before)
	}
	q, _, ok = try(t, l, r)
	if !ok {
		t.Fatal("a call after the refusal was held: the bucket is paused")
	}
	l.Refused(q, "k", fc.Now().Add(time.Minute))
	if got := learned(t, l, "k"); !near(got, before*0.9) {
		t.Fatalf("a second refusal within the second cut again: %v/s", got)
	}
	step(l, fc, time.Second)
	q, _, _ = try(t, l, r)
	l.Refused(q, "k", fc.Now().Add(time.Minute))
	if got := learned(t, l, "k"); !near(got, before*0.81) {
		t.Fatalf("a refusal a second later: %v/s, want 0.81 x %v", got, before)
	}
	if s := stats(t, l, "k"); s.PausedUntil.After(fc.Now()) {
		t.Fatalf("paused until %v", s.PausedUntil)
	}
}

func TestConfiguredRateIsNotLearnedOver(t *testing.T) {
	l, fc := newFake()
	r := Request{Key: "k", Limits: Limits{RequestsPerMinute: 600}, Namespace: "a"}
	var ps []*Permit
	for range 5 {
		p, _, ok := try(t, l, r)
		if !ok {
			t.Fatal("a call within the burst was held")
		}
		ps = append(ps, p)
	}
	l.Refused(ps[0], "k", fc.Now().Add(time.Second))
	step(l, fc, time.Second)
	// Still ten a second: half a second's worth (5) start at once, the
	// next waits 100 ms.
	started := 0
	for {
		_, until, ok := try(t, l, r)
		if !ok {
			if started != 5 || !until.Equal(fc.Now().Add(100*time.Millisecond)) {
				t.Fatalf("configured rate not in force: %d started at once, the next expected in %v", started, until.Sub(fc.Now()))
			}
			break
		}
		if started++; started > 5 {
			t.Fatalf("%d started at once against 10 a second", started)
		}
	}
	if got := learned(t, l, "k"); got != 0 {
		t.Fatalf("learned %v/s over a configured requests_per_minute", got)
	}
}

// The first refusal of a key no bucket tracked yet learns from the starts
// counted for every key: 20 started, 5 refused, so 0.9 x 15 a second.
func TestFirstRefusalLearnsFromUntrackedStarts(t *testing.T) {
	l, fc := newFake()
	r := Request{Key: "k", Namespace: "a"}
	var ps []*Permit
	for range 20 {
		p, _, ok := try(t, l, r)
		if !ok {
			t.Fatal("an unbounded call was held")
		}
		ps = append(ps, p)
	}
	step(l, fc, 300*time.Millisecond)
	until := fc.Now().Add(time.Second)
	for _, p := range ps[:5] {
		l.Refused(p, "k", until)
	}
	step(l, fc, time.Second)
	if _, _, ok := try(t, l, r); !ok {
		t.Fatal("held after the pause")
	}
	if got := learned(t, l, "k"); !near(got, 13.5) {
		t.Fatalf("learned %v/s, want 13.5", got)
	}
}
