package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// patience bounds real-time waits for goroutines the fake clock released;
// generous because the machine is shared.
const patience = 10 * time.Second

func newFake() (*Limiter, *testingclock.FakeClock) {
	fc := testingclock.NewFakeClock(t0)
	return New(fc), fc
}

// settle returns once no pump is running: fired timers have pumped, and
// Stats takes every bucket lock, so a grant's follow-up (re-arming the
// timer) has finished too.
func settle(l *Limiter) {
	deadline := time.Now().Add(patience)
	for l.firing.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	l.Stats()
}

// step advances the fake clock once the limiter is settled, so every timer
// it meant to arm is armed.
func step(l *Limiter, fc *testingclock.FakeClock, d time.Duration) {
	settle(l)
	fc.Step(d)
}

// try starts a call if it may start now; otherwise it gives up at once
// (cancelling from onWait) and reports when the limiter expected to allow it.
func try(t *testing.T, l *Limiter, r Request) (*Permit, time.Time, bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var until time.Time
	waited := false
	p, err := l.Acquire(ctx, r, func(u time.Time) {
		if !waited {
			waited, until = true, u
		}
		cancel()
	})
	if err != nil {
		if !waited || !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire: %v (waited %v)", err, waited)
		}
		return nil, until, false
	}
	if waited {
		t.Fatalf("Acquire started after onWait")
	}
	return p, time.Time{}, true
}

type result struct {
	p   *Permit
	err error
}

// pending is an Acquire running in its own goroutine.
type pending struct {
	name   string
	waits  chan time.Time
	res    chan result
	cancel context.CancelFunc
}

func goAcquire(l *Limiter, name string, r Request) *pending {
	ctx, cancel := context.WithCancel(context.Background())
	pd := &pending{name: name, waits: make(chan time.Time, 100), res: make(chan result, 1), cancel: cancel}
	go func() {
		p, err := l.Acquire(ctx, r, func(u time.Time) { pd.waits <- u })
		pd.res <- result{p, err}
	}()
	return pd
}

// waited returns the next onWait time.
func (pd *pending) waited(t *testing.T) time.Time {
	t.Helper()
	select {
	case u := <-pd.waits:
		return u
	case r := <-pd.res:
		t.Fatalf("%s: started without waiting (%v)", pd.name, r.err)
	case <-time.After(patience):
		t.Fatalf("%s: onWait not called", pd.name)
	}
	return time.Time{}
}

func (pd *pending) granted(t *testing.T) *Permit {
	t.Helper()
	select {
	case r := <-pd.res:
		if r.err != nil {
			t.Fatalf("%s: %v", pd.name, r.err)
		}
		return r.p
	case <-time.After(patience):
		t.Fatalf("%s: not granted", pd.name)
	}
	return nil
}

func stats(t *testing.T, l *Limiter, key string) BucketStats {
	t.Helper()
	for _, s := range l.Stats() {
		if s.Key == key {
			return s
		}
	}
	t.Fatalf("no bucket %q in %+v", key, l.Stats())
	return BucketStats{}
}

func TestUnboundedNeverBlocks(t *testing.T) {
	l, fc := newFake()
	r := Request{Key: "openai/gpt", Namespace: "a", Tokens: 1 << 40}
	for range 1000 {
		p, _, ok := try(t, l, r)
		if !ok {
			t.Fatal("unbounded call waited")
		}
		p.Done(1 << 50)
	}
	if fc.HasWaiters() || len(l.Stats()) != 0 {
		t.Fatalf("unbounded calls left timers (%v) or buckets %+v", fc.HasWaiters(), l.Stats())
	}
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		p, _ := l.Acquire(ctx, r, nil)
		p.Done(5)
	}); n != 0 {
		t.Errorf("unbounded Acquire+Done allocates %v times", n)
	}
	if !(Limits{}).IsZero() || (Limits{TokensPerMinute: 1}).IsZero() {
		t.Error("IsZero wrong")
	}
}

func TestRequestsPerMinuteSpreadEvenly(t *testing.T) {
	l, fc := newFake()
	// 600 per minute is 10 per second; the burst is half a second: 5.
	r := Request{Key: "k", Limits: Limits{RequestsPerMinute: 600}, Namespace: "a"}
	var starts []time.Duration
	for fc.Since(t0) < time.Minute {
		for {
			p, until, ok := try(t, l, r)
			if !ok {
				if !until.After(fc.Now()) {
					t.Fatalf("refused at %v, expected at %v", fc.Since(t0), until.Sub(t0))
				}
				break
			}
			p.Done(0)
			starts = append(starts, fc.Since(t0))
		}
		fc.Step(10 * time.Millisecond)
	}
	if want := 5 + 599; len(starts) != want {
		t.Errorf("%d starts in a minute, want %d", len(starts), want)
	}
	for i := 5; i < len(starts); i++ {
		if gap := starts[i] - starts[i-1]; gap < 100*time.Millisecond {
			t.Fatalf("starts %d and %d only %v apart", i-1, i, gap)
		}
	}
	// No one-second window sees more than the rate plus the burst, and
	// once the burst is spent none sees more than the rate.
	for i := range starts {
		n := 0
		for j := i; j < len(starts) && starts[j] < starts[i]+time.Second; j++ {
			n++
		}
		if n > 15 || (starts[i] > 0 && n > 10) {
			t.Fatalf("%d starts in the second from %v", n, starts[i])
		}
	}

	// A slow rate allows a burst of one.
	r = Request{Key: "slow", Limits: Limits{RequestsPerMinute: 60}, Namespace: "a"}
	if _, _, ok := try(t, l, r); !ok {
		t.Fatal("first call refused")
	}
	if _, until, ok := try(t, l, r); ok || !until.Equal(fc.Now().Add(time.Second)) {
		t.Fatalf("second call: ok=%v until %v", ok, until.Sub(fc.Now()))
	}
}

func TestTokensPerMinute(t *testing.T) {
	l, fc := newFake()
	// 6000 per minute is 100 tokens per second; the burst is 50 tokens.
	lim := Limits{TokensPerMinute: 6000}
	r := Request{Key: "small", Limits: lim, Namespace: "a", Tokens: 30}
	if _, _, ok := try(t, l, r); !ok {
		t.Fatal("first call refused")
	}
	if _, until, ok := try(t, l, r); ok || !until.Equal(t0.Add(100*time.Millisecond)) {
		t.Fatalf("second call: ok=%v until %v", ok, until.Sub(t0))
	}
	fc.Step(100 * time.Millisecond)
	if _, _, ok := try(t, l, r); !ok {
		t.Fatal("second call refused when due")
	}

	// A call above the burst starts on a caught-up schedule and pushes it
	// forward by its whole cost.
	big := Request{Key: "big", Limits: lim, Namespace: "a", Tokens: 1000}
	small := Request{Key: "big", Limits: lim, Namespace: "a", Tokens: 10}
	now := fc.Now()
	p, _, ok := try(t, l, big)
	if !ok {
		t.Fatal("big call refused")
	}
	w := goAcquire(l, "small", small)
	if u := w.waited(t); !u.Equal(now.Add(9600 * time.Millisecond)) {
		t.Fatalf("small call expected at %v, want 9.6s", u.Sub(now))
	}
	// The provider reports 100 tokens, not 1000: the schedule moves back
	// 9 seconds and the waiter is due at 0.6s.
	p.Done(100)
	step(l, fc, 599*time.Millisecond)
	if s := stats(t, l, "big"); s.Waiting != 1 {
		t.Fatalf("small call started early: %+v", s)
	}
	step(l, fc, time.Millisecond)
	w.granted(t).Done(0)

	// More tokens than estimated push the schedule later.
	key := "more"
	now = fc.Now()
	p, _, _ = try(t, l, Request{Key: key, Limits: lim, Tokens: 1000})
	p.Done(2000)
	p.Done(1 << 40) // a second Done is ignored
	if _, until, ok := try(t, l, Request{Key: key, Limits: lim, Tokens: 10}); ok || !until.Equal(now.Add(19600*time.Millisecond)) {
		t.Fatalf("after Done(2000): ok=%v until %v", ok, until.Sub(now))
	}
}

func TestMaxConcurrent(t *testing.T) {
	l, fc := newFake()
	r := Request{Key: "k", Limits: Limits{MaxConcurrent: 2}, Namespace: "a"}
	p1, _, ok1 := try(t, l, r)
	p2, _, ok2 := try(t, l, r)
	if !ok1 || !ok2 {
		t.Fatal("calls within the limit refused")
	}
	w := goAcquire(l, "third", r)
	if u := w.waited(t); !u.IsZero() {
		t.Fatalf("a concurrency wait has no known end, got %v", u)
	}
	settle(l)
	if fc.HasWaiters() {
		t.Fatal("a concurrency wait armed a timer")
	}
	p1.Done(0)
	p3 := w.granted(t)
	p1.Done(0) // ignored: does not free a second slot
	var nilPermit *Permit
	nilPermit.Done(0)
	if s := stats(t, l, "k"); s.InFlight != 2 || s.Waiting != 0 {
		t.Fatalf("stats %+v", s)
	}
	p2.Done(0)
	p3.Done(0)
	if s := stats(t, l, "k"); s.InFlight != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestFairAcrossNamespaces(t *testing.T) {
	l, fc := newFake()
	lim := Limits{RequestsPerMinute: 60} // one per second, burst 1
	if _, _, ok := try(t, l, Request{Key: "k", Limits: lim, Namespace: "a"}); !ok {
		t.Fatal("first call refused")
	}
	var as []*pending
	for i := range 100 {
		pd := goAcquire(l, fmt.Sprintf("a%d", i), Request{Key: "k", Limits: lim, Namespace: "a"})
		pd.waited(t) // queued in order
		as = append(as, pd)
	}
	b := goAcquire(l, "b", Request{Key: "k", Limits: lim, Namespace: "b"})
	// a gets one more turn first, so b expects the second slot.
	if u := b.waited(t); !u.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("b expected at %v, want 2s", u.Sub(t0))
	}
	if s := stats(t, l, "k"); s.Waiting != 101 {
		t.Fatalf("stats %+v", s)
	}

	var order []string
	queue := append([]*pending{b}, as...)
	for len(order) < 5 {
		var name string
		name, queue = nextGranted(t, l, fc, queue)
		order = append(order, name)
		if s := stats(t, l, "k"); s.Waiting != 100-len(order)+1 {
			t.Fatalf("after %v: %+v", order, s)
		}
	}
	want := []string{"a0", "b", "a1", "a2", "a3"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("grant order %v, want %v", order, want)
	}
	for _, pd := range queue {
		pd.cancel()
		if r := <-pd.res; !errors.Is(r.err, context.Canceled) {
			t.Fatalf("%s: %v", pd.name, r.err)
		}
	}
	settle(l)
	if s := stats(t, l, "k"); s.Waiting != 0 || fc.HasWaiters() {
		t.Fatalf("cancelled waiters left state: %+v timers %v", s, fc.HasWaiters())
	}
}

func TestPause(t *testing.T) {
	l, fc := newFake()
	lim := Limits{RequestsPerMinute: 60}
	r := Request{Key: "k", Limits: lim, Namespace: "a"}
	if _, _, ok := try(t, l, r); !ok {
		t.Fatal("first call refused")
	}
	w1 := goAcquire(l, "w1", r)
	if u := w1.waited(t); !u.Equal(t0.Add(time.Second)) {
		t.Fatalf("w1 expected at %v", u.Sub(t0))
	}
	l.Pause("k", t0.Add(30*time.Second))
	if u := w1.waited(t); !u.Equal(t0.Add(30 * time.Second)) {
		t.Fatalf("after Pause w1 expected at %v", u.Sub(t0))
	}
	l.Pause("k", t0.Add(5*time.Second)) // earlier: no effect
	if s := stats(t, l, "k"); !s.PausedUntil.Equal(t0.Add(30 * time.Second)) {
		t.Fatalf("an earlier pause shortened it: %+v", s)
	}
	w2 := goAcquire(l, "w2", Request{Key: "k", Limits: lim, Namespace: "b"})
	if u := w2.waited(t); u.Before(t0.Add(30 * time.Second)) {
		t.Fatalf("a call after Pause expected at %v", u.Sub(t0))
	}
	step(l, fc, time.Second)
	step(l, fc, 28*time.Second)
	if s := stats(t, l, "k"); s.Waiting != 2 {
		t.Fatalf("started during the pause: %+v", s)
	}
	step(l, fc, time.Second)
	w1.granted(t)
	// w2 then waits for the request rate again.
	if u := w2.waited(t); !u.Equal(t0.Add(31 * time.Second)) {
		t.Fatalf("w2 expected at %v", u.Sub(t0))
	}
	step(l, fc, time.Second)
	w2.granted(t)
	for _, pd := range []*pending{w1, w2} {
		select {
		case u := <-pd.waits:
			t.Fatalf("%s: extra onWait %v", pd.name, u)
		default:
		}
	}

	// A pause holds even calls without limits.
	l.Pause("free", fc.Now().Add(10*time.Second))
	u := goAcquire(l, "unbounded", Request{Key: "free", Namespace: "a"})
	if got := u.waited(t); !got.Equal(fc.Now().Add(10 * time.Second)) {
		t.Fatalf("unbounded call expected at %v", got.Sub(fc.Now()))
	}
	step(l, fc, 10*time.Second)
	u.granted(t).Done(0)
}

func TestCancelLeavesNoTrace(t *testing.T) {
	l, fc := newFake()
	r := Request{Key: "c", Limits: Limits{MaxConcurrent: 1}}
	p1, _, _ := try(t, l, r)
	ra, rb := r, r
	ra.Namespace, rb.Namespace = "a", "b"
	a := goAcquire(l, "a", ra)
	a.waited(t)
	b := goAcquire(l, "b", rb)
	b.waited(t)
	a.cancel()
	if res := <-a.res; !errors.Is(res.err, context.Canceled) || res.p != nil {
		t.Fatalf("cancelled Acquire returned %+v", res)
	}
	if s := stats(t, l, "c"); s.Waiting != 1 || s.InFlight != 1 {
		t.Fatalf("stats %+v", s)
	}
	p1.Done(0)
	b.granted(t).Done(0)

	// Cancelling the waiter a timer is armed for hands its slot on.
	lim := Limits{RequestsPerMinute: 60}
	try(t, l, Request{Key: "r", Limits: lim, Namespace: "a"})
	head := goAcquire(l, "head", Request{Key: "r", Limits: lim, Namespace: "a"})
	head.waited(t)
	next := goAcquire(l, "next", Request{Key: "r", Limits: lim, Namespace: "b"})
	if u := next.waited(t); !u.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("next expected at %v", u.Sub(t0))
	}
	head.cancel()
	<-head.res
	step(l, fc, time.Second)
	next.granted(t).Done(0)
	settle(l)
	if fc.HasWaiters() {
		t.Fatal("timers left with nobody waiting")
	}

	// An already cancelled context holds nothing.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if p, err := l.Acquire(ctx, Request{Key: "x", Limits: lim}, nil); p != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v %v", p, err)
	}
}

func TestKeysIndependent(t *testing.T) {
	l, _ := newFake()
	sat := Request{Key: "saturated", Limits: Limits{MaxConcurrent: 1, RequestsPerMinute: 1}, Namespace: "a"}
	try(t, l, sat)
	w := goAcquire(l, "w", sat)
	w.waited(t)
	l.Pause("paused", t0.Add(time.Hour))
	for _, key := range []string{"other", "another"} {
		if _, _, ok := try(t, l, Request{Key: key, Limits: Limits{MaxConcurrent: 1, RequestsPerMinute: 1}, Namespace: "a"}); !ok {
			t.Fatalf("%s waited for another key's bucket", key)
		}
	}
	w.cancel()
	<-w.res
}

func TestIdleBucketsDropped(t *testing.T) {
	l, fc := newFake()
	lim := Limits{RequestsPerMinute: 600, TokensPerMinute: 1e6}
	for i := range 1000 {
		p, _, _ := try(t, l, Request{Key: fmt.Sprint(i), Limits: lim, Tokens: 100})
		p.Done(0)
	}
	held, _, _ := try(t, l, Request{Key: "held", Limits: lim})
	l.Pause("paused", t0.Add(time.Hour))
	if n := len(l.Stats()); n != 1002 {
		t.Fatalf("%d buckets", n)
	}
	fc.Step(idleAfter + time.Second)
	try(t, l, Request{Key: "new", Limits: lim})
	var keys []string
	for _, s := range l.Stats() {
		keys = append(keys, s.Key)
	}
	if fmt.Sprint(keys) != "[held new paused]" {
		t.Fatalf("buckets after the sweep: %v", keys)
	}
	held.Done(0)
	// A dropped key works as new.
	if _, _, ok := try(t, l, Request{Key: "7", Limits: lim}); !ok {
		t.Fatal("re-created bucket refused")
	}
}

func TestSetShare(t *testing.T) {
	l, fc := newFake()
	l.SetShare(0.5)
	r := Request{Key: "c", Limits: Limits{MaxConcurrent: 3}}
	try(t, l, r)
	w := goAcquire(l, "w", r)
	w.waited(t)    // 3 * 0.5 rounds down to 1
	l.SetShare(0)  // ignored
	l.SetShare(-1) // ignored
	l.SetShare(2)  // counts as 1
	w.granted(t)   // now 3 slots
	try(t, l, r)   // the third
	if _, _, ok := try(t, l, r); ok {
		t.Fatal("a fourth call started")
	}

	l.SetShare(0.1)
	if _, _, ok := try(t, l, Request{Key: "one", Limits: Limits{MaxConcurrent: 1}}); !ok {
		t.Fatal("concurrency scaled below 1")
	}
	// 600 per minute at half share: 5 per second, burst 2.
	l.SetShare(0.5)
	rr := Request{Key: "rate", Limits: Limits{RequestsPerMinute: 600}}
	for range 2 {
		if _, _, ok := try(t, l, rr); !ok {
			t.Fatal("burst refused")
		}
	}
	if _, until, ok := try(t, l, rr); ok || !until.Equal(fc.Now().Add(200*time.Millisecond)) {
		t.Fatalf("third: ok=%v until %v", ok, until.Sub(fc.Now()))
	}
	// Tokens scale too: 6000 per minute at half share is 50 per second.
	rt := Request{Key: "tok", Limits: Limits{TokensPerMinute: 6000}, Tokens: 100}
	try(t, l, rt)
	if _, until, ok := try(t, l, rt); ok || !until.Equal(fc.Now().Add(2*time.Second)) {
		t.Fatalf("tokens: ok=%v until %v", ok, until.Sub(fc.Now()))
	}
}

func TestLimitsChangeAdopted(t *testing.T) {
	l, _ := newFake()
	r := Request{Key: "k", Limits: Limits{MaxConcurrent: 1}, Namespace: "a"}
	try(t, l, r)
	w := goAcquire(l, "w", r)
	w.waited(t)
	r.Limits.MaxConcurrent = 3
	if _, _, ok := try(t, l, r); !ok {
		t.Fatal("raised limit not adopted")
	}
	w.granted(t)
	if s := stats(t, l, "k"); s.InFlight != 3 {
		t.Fatalf("stats %+v", s)
	}
	// Unbounded from now on: nothing waits.
	r.Limits = Limits{}
	if _, _, ok := try(t, l, r); !ok {
		t.Fatal("limits removed but call waited")
	}
}

// TestRealClock runs the timer path on the real clock; the bound is loose
// on purpose.
func TestRealClock(t *testing.T) {
	l := New(clock.RealClock{})
	// 6000 per minute: 100 per second, burst 50; 80 calls need ~0.3s.
	r := Request{Key: "k", Limits: Limits{RequestsPerMinute: 6000, MaxConcurrent: 20}, Namespace: "a"}
	var waits atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 80)
	start := time.Now()
	for i := range 80 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rr := r
			rr.Namespace = fmt.Sprint(i % 3)
			p, err := l.Acquire(context.Background(), rr, func(time.Time) { waits.Add(1) })
			if err != nil {
				errs <- err
				return
			}
			time.Sleep(time.Millisecond)
			p.Done(0)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("80 calls took %v", d)
	}
	if waits.Load() == 0 {
		t.Fatal("nothing waited")
	}
	if s := stats(t, l, "k"); s.InFlight != 0 || s.Waiting != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestConcurrentStress checks the semaphore under the race detector with
// random cancellations and limit changes.
func TestConcurrentStress(t *testing.T) {
	l := New(clock.RealClock{})
	var inFlight, peak atomic.Int32
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i%4 == 0 {
				go func() { time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond); cancel() }()
			}
			r := Request{Key: "k", Limits: Limits{MaxConcurrent: 3}, Namespace: fmt.Sprint(i % 5), Tokens: 10}
			p, err := l.Acquire(ctx, r, nil)
			if err != nil {
				return
			}
			n := inFlight.Add(1)
			for {
				old := peak.Load()
				if n <= old || peak.CompareAndSwap(old, n) {
					break
				}
			}
			time.Sleep(100 * time.Microsecond)
			inFlight.Add(-1)
			p.Done(20)
		}()
		if i%50 == 0 {
			l.SetShare(1)
			l.Stats()
		}
	}
	wg.Wait()
	if peak.Load() > 3 {
		t.Fatalf("%d calls in flight, limit 3", peak.Load())
	}
	if s := stats(t, l, "k"); s.InFlight != 0 || s.Waiting != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestGrantRacesCancel lets a grant and a cancellation arrive together:
// whichever Acquire sees, the bucket must add up, and a start given back
// must free its slot and its place on the schedule.
func TestGrantRacesCancel(t *testing.T) {
	refunded, kept := 0, 0
	for i := 0; i < 200 && (refunded == 0 || kept == 0); i++ {
		l, _ := newFake()
		lim := Limits{MaxConcurrent: 1, RequestsPerMinute: 600} // burst 5
		p1, _, _ := try(t, l, Request{Key: "k", Limits: lim})
		ctx, cancel := context.WithCancel(context.Background())
		p, err := l.Acquire(ctx, Request{Key: "k", Limits: lim}, func(time.Time) {
			p1.Done(0) // grants the waiter
			cancel()
		})
		cancel()
		s := stats(t, l, "k")
		// Free the concurrency limit and count what the schedule allows.
		more := 0
		for {
			if _, _, ok := try(t, l, Request{Key: "k", Limits: Limits{RequestsPerMinute: 600}}); !ok {
				break
			}
			more++
		}
		if err != nil {
			refunded++
			if p != nil || s.InFlight != 0 || more != 4 {
				t.Fatalf("refunded: permit %v, stats %+v, %d more starts (want 4)", p, s, more)
			}
		} else {
			kept++
			if s.InFlight != 1 || more != 3 {
				t.Fatalf("kept: stats %+v, %d more starts (want 3)", s, more)
			}
		}
	}
	t.Logf("refunded %d, kept %d", refunded, kept)
}

// tickerOnly hides the fake clock's AfterFunc, to test the timer path used
// with clocks that lack it.
type tickerOnly struct{ clock.WithTicker }

func TestClockWithoutAfterFunc(t *testing.T) {
	fc := testingclock.NewFakeClock(t0)
	l := New(tickerOnly{fc})
	lim := Limits{RequestsPerMinute: 60}
	try(t, l, Request{Key: "k", Limits: lim})
	w := goAcquire(l, "w", Request{Key: "k", Limits: lim})
	w.waited(t)
	fc.Step(time.Second)
	w.granted(t).Done(0)

	c := goAcquire(l, "c", Request{Key: "k", Limits: lim})
	c.waited(t)
	c.cancel()
	if r := <-c.res; !errors.Is(r.err, context.Canceled) {
		t.Fatal(r.err)
	}
	settle(l)
	if fc.HasWaiters() {
		t.Fatal("cancelled waiter left its timer")
	}
}

// nextGranted steps the clock a second (a limit of one call per second)
// and returns the one call of queue granted then, and queue without it.
func nextGranted(t *testing.T, l *Limiter, fc *testingclock.FakeClock, queue []*pending) (string, []*pending) {
	t.Helper()
	step(l, fc, time.Second)
	settle(l)
	deadline := time.After(patience)
	for {
		for i, pd := range queue {
			select {
			case r := <-pd.res:
				if r.err != nil {
					t.Fatal(r.err)
				}
				return pd.name, append(queue[:i:i], queue[i+1:]...)
			default:
			}
		}
		select {
		case <-deadline:
			t.Fatalf("nothing granted at %v", fc.Since(t0))
		case <-time.After(time.Millisecond):
		}
	}
}

// TestRunsUnderWayGoFirst: within a namespace, a call of a run already
// under way is served before the first calls of new runs, which are told
// they start later; among each kind arrival order holds, a cancelled call
// leaves the order intact, and another namespace keeps its turn.
func TestRunsUnderWayGoFirst(t *testing.T) {
	l, fc := newFake()
	lim := Limits{RequestsPerMinute: 60} // one per second, burst 1
	if _, _, ok := try(t, l, Request{Key: "k", Limits: lim, Namespace: "a"}); !ok {
		t.Fatal("first call refused")
	}
	req := func(ns string, underWay bool) Request {
		return Request{Key: "k", Limits: lim, Namespace: ns, UnderWay: underWay}
	}
	n0 := goAcquire(l, "n0", req("a", false))
	if u := n0.waited(t); !u.Equal(t0.Add(time.Second)) {
		t.Fatalf("n0 expected at %v, want 1s", u.Sub(t0))
	}
	n1 := goAcquire(l, "n1", req("a", false))
	if u := n1.waited(t); !u.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("n1 expected at %v, want 2s", u.Sub(t0))
	}
	u0 := goAcquire(l, "u0", req("a", true))
	if u := u0.waited(t); !u.Equal(t0.Add(time.Second)) {
		t.Fatalf("u0 expected at %v, want 1s: ahead of the new runs", u.Sub(t0))
	}
	// The new runs are told they start a request later.
	if u := n0.waited(t); !u.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("n0 told %v after u0 went ahead, want 2s", u.Sub(t0))
	}
	if u := n1.waited(t); !u.Equal(t0.Add(3 * time.Second)) {
		t.Fatalf("n1 told %v after u0 went ahead, want 3s", u.Sub(t0))
	}
	u1 := goAcquire(l, "u1", req("a", true))
	if u := u1.waited(t); !u.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("u1 expected at %v, want 2s: after u0, ahead of the new runs", u.Sub(t0))
	}
	u2 := goAcquire(l, "u2", req("a", true))
	u2.waited(t)
	u2.cancel()
	if r := <-u2.res; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("u2: %v", r.err)
	}
	b := goAcquire(l, "b", req("b", false))
	b.waited(t)

	var order []string
	queue := []*pending{n0, n1, u0, u1, b}
	for len(queue) > 0 {
		var name string
		name, queue = nextGranted(t, l, fc, queue)
		order = append(order, name)
	}
	// a had the turn when b joined, so b comes second; then a's runs under
	// way, then its new runs.
	want := []string{"u0", "b", "u1", "n0", "n1"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("grant order %v, want %v", order, want)
	}
	settle(l)
	if s := stats(t, l, "k"); s.Waiting != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestNewRunsAreToldTheirDelayOnceASecond: calls of runs under way that go
// ahead of a new run push its start back; it is told once the delay adds
// up to a second, not on every call, so a long queue of new runs is not
// walked on every call.
func TestNewRunsAreToldTheirDelayOnceASecond(t *testing.T) {
	l, _ := newFake()
	lim := Limits{RequestsPerMinute: 120} // one per 500 ms
	if _, _, ok := try(t, l, Request{Key: "k", Limits: lim, Namespace: "a"}); !ok {
		t.Fatal("first call refused")
	}
	n0 := goAcquire(l, "n0", Request{Key: "k", Limits: lim, Namespace: "a"})
	told := n0.waited(t)
	under := func(name string) *pending {
		pd := goAcquire(l, name, Request{Key: "k", Limits: lim, Namespace: "a", UnderWay: true})
		pd.waited(t)
		return pd
	}
	u0 := under("u0")
	settle(l)
	select {
	case u := <-n0.waits:
		t.Fatalf("n0 told %v after half a second of delay", u.Sub(t0))
	case <-time.After(50 * time.Millisecond):
	}
	u1 := under("u1")
	if u := n0.waited(t); !u.Equal(told.Add(time.Second)) {
		t.Fatalf("n0 told %v after a second of delay, want %v", u.Sub(t0), told.Add(time.Second).Sub(t0))
	}
	for _, pd := range []*pending{n0, u0, u1} {
		pd.cancel()
		<-pd.res
	}
}

// TestLastNewRunsGoFirst: once the bucket knows how long its calls take,
// the new runs waiting go ahead of runs under way when all of them could
// start within one call's time (by a request rate or a token rate) (so the end of a backlog keeps enough runs
// going), and a run under way is held back at most that long; with more
// new runs waiting than that, runs under way go first.
func TestLastNewRunsGoFirst(t *testing.T) {
	for _, limit := range []struct {
		name   string
		lim    Limits
		tokens int64
	}{
		{"requests", Limits{RequestsPerMinute: 60}, 0}, // one per second, burst 1
		{"tokens", Limits{TokensPerMinute: 600}, 10},   // a call's 10 tokens take a second
	} {
		t.Run(limit.name, func(t *testing.T) { lastNewRunsGoFirst(t, limit.lim, limit.tokens) })
	}
}

func lastNewRunsGoFirst(t *testing.T, lim Limits, tokens int64) {
	req := func(underWay bool) Request {
		return Request{Key: "k", Limits: lim, Namespace: "a", UnderWay: underWay, Tokens: tokens}
	}
	for _, tc := range []struct {
		name  string
		news  int
		want  string
		told  []time.Duration // what u0 is told, in order
		timed bool            // a call has ended: the bucket knows their time
	}{
		{"three new runs fit in a call's time", 3, "[n0 n1 u0 n2]", []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}, true},
		{"four new runs do not", 4, "[u0 n0 n1 n2 n3]", []time.Duration{time.Second}, true},
		{"no call has ended yet", 2, "[u0 n0 n1]", []time.Duration{time.Second}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, fc := newFake()
			p, _, ok := try(t, l, req(false))
			if !ok {
				t.Fatal("first call refused")
			}
			step(l, fc, 3*time.Second)
			if tc.timed {
				p.Done(0) // the bucket's calls take 3 s: at most three new runs go first
			}
			if _, _, ok := try(t, l, req(true)); !ok {
				t.Fatal("second call refused")
			}
			u0 := goAcquire(l, "u0", req(true))
			queue := []*pending{u0}
			var told []time.Duration
			told = append(told, u0.waited(t).Sub(fc.Now()))
			for i := range tc.news {
				n := goAcquire(l, fmt.Sprintf("n%d", i), req(false))
				n.waited(t)
				queue = append(queue, n)
			}
			var order []string
			start := fc.Now()
			for len(queue) > 0 {
				var name string
				name, queue = nextGranted(t, l, fc, queue)
				order = append(order, name)
			drain:
				for {
					select {
					case u := <-u0.waits:
						told = append(told, u.Sub(start))
					default:
						break drain
					}
				}
			}
			if got := fmt.Sprint(order); got != tc.want {
				t.Fatalf("grant order %s, want %s", got, tc.want)
			}
			if fmt.Sprint(told) != fmt.Sprint(tc.told) {
				t.Fatalf("u0 told it starts after %v, want %v (it goes later by a second for each new run ahead of it)", told, tc.told)
			}
		})
	}
}
