// Package ratelimit holds model calls back on the client side so a provider
// never has to refuse them: per bucket (one provider account and model) it
// enforces concurrency, an evenly spread request rate and a token rate,
// shares each bucket fairly among the namespaces using it, and honours the
// provider's own Retry-After when it refuses anyway.
//
// Rates use a virtual schedule (GCRA): each start reserves its cost in time
// on the schedule, and a call may start once the schedule, including its
// own reservation, is no more than a small burst window ahead of now. This
// spreads calls evenly, since providers may enforce per-minute limits over
// much shorter windows.
package ratelimit

import (
	"container/list"
	"context"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

const (
	// burstWindow bounds how far ahead of now the schedule may run: at most
	// half a second's worth of calls or tokens start at once.
	burstWindow = 500 * time.Millisecond
	// idleAfter is how long an unused, caught-up bucket is kept; dropping
	// it earlier would only cost re-creating it.
	idleAfter = 10 * time.Minute
	// sweepEvery rate-limits the idle sweep, which walks every bucket.
	sweepEvery = time.Minute
	// displacedStep is how far calls of runs under way must have pushed
	// back the new runs waiting behind them before those are told their
	// later start.
	displacedStep = time.Second
	// lastRunsWindow caps how long the last new runs may go ahead of runs
	// under way (see bucket.lastRunsFirst): a call of a run under way is
	// held back by them at most this long, well under the five seconds
	// after which a wait is shown in the run's status.
	lastRunsWindow = 3 * time.Second
	// maxCharge caps one reservation so huge estimates cannot overflow
	// time arithmetic.
	maxCharge = 24 * time.Hour
)

// Limits bound one bucket; a zero field is unbounded.
type Limits struct {
	MaxConcurrent     int   // calls in flight at once
	RequestsPerMinute int   // calls started per minute
	TokensPerMinute   int64 // tokens (prompt + completion) per minute
}

// IsZero reports whether the limits bound nothing.
func (l Limits) IsZero() bool {
	return l.MaxConcurrent <= 0 && l.RequestsPerMinute <= 0 && l.TokensPerMinute <= 0
}

// Request asks to start one call.
type Request struct {
	Key       string // the bucket: one provider account and model (the caller builds it)
	Limits    Limits // the bucket's limits as configured now; the latest call's limits win
	Namespace string // fairness is across namespaces within one bucket
	Tokens    int64  // estimated tokens of the call (prompt estimate + expected completion)
	// UnderWay says the call's run has made calls before. Within its
	// namespace it goes ahead of runs' first calls, so when more runs
	// want the bucket than it allows, the runs already going finish first
	// and a new run waits for its turn once, at its start, instead of
	// before every call (a wait long enough to be shown costs its run two
	// status writes). Runs under way are served in arrival order among
	// themselves, and new runs too; a new run starts as soon as the runs
	// ahead of it leave room. The last new runs of a backlog go first
	// again (bucket.lastRunsFirst), so the batch's end is not drawn out.
	UnderWay bool
	// Provider and Model name the bucket in metrics; the key may not be
	// shown, since it stands for an account.
	Provider, Model string
}

// BucketStats describes one bucket for metrics.
type BucketStats struct {
	Key             string
	Provider, Model string    // the latest call's names for the bucket
	InFlight        int       // calls started and not yet Done
	Waiting         int       // calls queued in Acquire
	PausedUntil     time.Time // the latest Pause, zero if never paused
	// LearnedPerSecond is the request rate learned from the provider's
	// refusals (learn.go), zero when none is learned or one is configured.
	LearnedPerSecond float64
}

// Limiter holds the buckets by key. Safe for concurrent use.
type Limiter struct {
	clk   clock.WithTicker
	share atomic.Uint64 // math.Float64bits of the share

	mu        sync.RWMutex
	buckets   map[string]*bucket
	rings     map[string]*startRing // every key's starts, for learning
	lastSweep time.Time

	firing atomic.Int64 // see bucket.firing
}

// New returns a limiter enforcing full limits (share 1). Pass
// clock.RealClock{} in production and a fake clock in tests.
func New(clk clock.WithTicker) *Limiter {
	l := &Limiter{clk: clk, buckets: map[string]*bucket{}, rings: map[string]*startRing{}, lastSweep: clk.Now()}
	l.share.Store(math.Float64bits(1))
	return l
}

// Permit is one started call. Done must be called when the call ends.
type Permit struct {
	b *bucket // nil for a call no bucket tracks
	// reqCharge and tokCharge are what the start reserved on the
	// schedules (tokCharge for the estimate), to correct or refund it.
	reqCharge, tokCharge time.Duration
	at                   time.Time // when it started
	done                 bool
}

// free is the permit of every untracked (unbounded, never paused) call, so
// such calls allocate nothing.
var free = &Permit{}

// SetShare sets the fraction (0 < f <= 1) of every limit this process
// enforces: with several replicas each holds its share (shards held / shards
// total). Concurrency is rounded down but never below 1; rates are scaled.
// Values above 1 count as 1; zero, negative or NaN values are ignored, since
// a replica holding no shards makes no calls anyway.
func (l *Limiter) SetShare(f float64) {
	if !(f > 0) {
		return
	}
	f = min(f, 1)
	l.share.Store(math.Float64bits(f))
	l.mu.RLock()
	bs := make([]*bucket, 0, len(l.buckets))
	for _, b := range l.buckets {
		bs = append(bs, b)
	}
	l.mu.RUnlock()
	for _, b := range bs {
		b.mu.Lock()
		b.apply(f)
		b.pump(l.clk.Now())
		b.mu.Unlock()
	}
}

func (l *Limiter) shareNow() float64 { return math.Float64frombits(l.share.Load()) }

// bucket returns the bucket for key, locked; create says whether to make
// one when it is missing (otherwise nil is returned).
func (l *Limiter) bucket(key string, create bool) *bucket {
	for {
		l.mu.RLock()
		b := l.buckets[key]
		l.mu.RUnlock()
		if b == nil {
			if !create {
				return nil
			}
			l.mu.Lock()
			if b = l.buckets[key]; b == nil {
				now := l.clk.Now()
				if now.Sub(l.lastSweep) >= sweepEvery {
					l.sweepLocked(now)
				}
				b = &bucket{key: key, clk: l.clk, queues: map[string]*nsQueue{}, lastUsed: now, firing: &l.firing}
				b.learn.starts = l.ringLocked(key)
				b.apply(l.shareNow())
				l.buckets[key] = b
			}
			l.mu.Unlock()
		}
		b.mu.Lock()
		if !b.dead {
			return b
		}
		// Swept between lookup and lock: look again.
		b.mu.Unlock()
	}
}

// ring returns key's start counts, made on first use.
func (l *Limiter) ring(key string) *startRing {
	l.mu.RLock()
	r := l.rings[key]
	l.mu.RUnlock()
	if r != nil {
		return r
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := l.clk.Now(); now.Sub(l.lastSweep) >= sweepEvery {
		l.sweepLocked(now)
	}
	return l.ringLocked(key)
}

// ringLocked is ring with l.mu held for writing.
func (l *Limiter) ringLocked(key string) *startRing {
	r := l.rings[key]
	if r == nil {
		r = &startRing{}
		l.rings[key] = r
	}
	return r
}

// sweepLocked drops idle buckets and the start counts of keys idle with no
// bucket; l.mu must be held for writing.
func (l *Limiter) sweepLocked(now time.Time) {
	l.lastSweep = now
	for k, r := range l.rings {
		if l.buckets[k] == nil && r.idle(now) {
			delete(l.rings, k)
		}
	}
	for k, b := range l.buckets {
		b.mu.Lock()
		if b.idle(now) {
			b.dead = true
			delete(l.buckets, k)
		}
		b.mu.Unlock()
	}
}

// Acquire blocks until the call may start, or ctx ends (then it returns
// ctx's error and holds nothing). onWait, if not nil, is called (from the
// Acquire goroutine, without locks held) each time the call has to wait,
// with when it expects to be allowed: first when it queues, again when the
// expectation moves later (a Pause, or calls ahead taking longer). The time
// is zero when only concurrency holds the call back, since nobody knows when
// a slot frees. onWait is not called when the call starts at once.
func (l *Limiter) Acquire(ctx context.Context, r Request, onWait func(until time.Time)) (*Permit, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b := l.bucket(r.Key, !r.Limits.IsZero())
	if b == nil {
		l.ring(r.Key).add(l.clk.Now())
		return free, nil
	}
	now := l.clk.Now()
	b.lastUsed = now
	b.provider, b.model = r.Provider, r.Model
	if r.Limits != b.raw {
		b.raw = r.Limits
		b.apply(l.shareNow())
		b.pump(now)
	}
	tokens := max(r.Tokens, 0)
	b.catchUp(now)
	if b.waiting == 0 && b.slotFree() && !now.Before(b.readyAt(tokens)) {
		p := b.start(tokens, now)
		b.mu.Unlock()
		return p, nil
	}
	w := &waiter{tokens: tokens, underWay: r.UnderWay, since: now, ready: make(chan struct{}), notify: make(chan struct{}, 1)}
	b.enqueue(w, r.Namespace)
	b.pump(now)
	if w.permit != nil {
		b.mu.Unlock()
		return w.permit, nil
	}
	// pump may have told the waiter already (it is next, held by time);
	// report once, the later of both.
	w.until = latest(w.until, b.estimate(w, now))
	select {
	case <-w.notify:
	default:
	}
	until := w.until
	b.mu.Unlock()
	if onWait != nil {
		onWait(until)
	}
	for {
		select {
		case <-w.ready:
			return w.permit, nil
		case <-w.notify:
			b.mu.Lock()
			until := w.until
			granted := w.permit != nil
			b.mu.Unlock()
			if onWait != nil && !granted {
				onWait(until)
			}
		case <-ctx.Done():
			b.mu.Lock()
			if p := w.permit; p != nil {
				// Granted as ctx ended: give the start back.
				b.refund(p, l.clk.Now())
			} else {
				b.remove(w)
			}
			b.pump(l.clk.Now())
			b.mu.Unlock()
			return nil, ctx.Err()
		}
	}
}

// Done ends the call: frees its concurrency slot and corrects the token
// count from the estimate to the tokens the provider reported (0 = keep the
// estimate). Calls after the first, and calls on a nil Permit, do nothing.
func (p *Permit) Done(actualTokens int64) {
	if p == nil || p.b == nil {
		return
	}
	b := p.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if p.done {
		return
	}
	p.done = true
	now := b.clk.Now()
	b.lastUsed = now
	b.inFlight--
	b.timeCall(now.Sub(p.at))
	if actualTokens > 0 && b.tokPerMin > 0 {
		b.tokTAT = shift(b.tokTAT, b.tokCost(actualTokens)-p.tokCharge, now)
	}
	if b.waiting > 0 && b.learns() && b.learn.grow() {
		b.applyLearned()
	}
	b.pump(now)
}

// Refused ends a call the provider refused for its rate limit (429/529),
// which must not be sent again before until. It reports whether the whole
// bucket is paused until then (the caller's Acquire waits); false means a
// rate learned from earlier refusals is in force and was only cut (see
// learn.go), so the caller waits until then on its own while the bucket's
// other calls go on at the cut rate. p may be the permit of an untracked
// call.
func (l *Limiter) Refused(p *Permit, key string, until time.Time) (paused bool) {
	b := p.b
	if b == nil {
		b = l.bucket(key, true)
	} else {
		b.mu.Lock()
	}
	defer b.mu.Unlock()
	now := l.clk.Now()
	if p.b != nil && !p.done {
		p.done = true
		b.inFlight--
	}
	if b.learns() && b.learn.steering() {
		b.learn.slowDown(now)
		b.applyLearned()
		b.lastUsed = now
		b.pump(now)
		return false
	}
	if b.learns() {
		b.learn.refused(p.at, now, b.pausedUntil.After(now))
	}
	b.pauseLocked(until, now)
	return true
}

// Pause holds every call of the bucket until `until` (the provider said
// 429/529 with Retry-After): no call of that bucket starts before then.
// Later pauses extend, earlier ones don't shorten.
func (l *Limiter) Pause(key string, until time.Time) {
	b := l.bucket(key, true)
	defer b.mu.Unlock()
	b.pauseLocked(until, l.clk.Now())
}

// pauseLocked extends the pause to until and tells the waiters.
func (b *bucket) pauseLocked(until, now time.Time) {
	b.lastUsed = now
	if until.After(b.pausedUntil) {
		b.pausedUntil = until
		for _, q := range b.order {
			for e := q.l.Front(); e != nil; e = e.Next() {
				e.Value.(*waiter).later(until)
			}
		}
	}
	b.pump(now)
}

// Stats for metrics: per bucket key, calls in flight and calls waiting,
// sorted by key.
func (l *Limiter) Stats() []BucketStats {
	l.mu.RLock()
	bs := make([]*bucket, 0, len(l.buckets))
	for _, b := range l.buckets {
		bs = append(bs, b)
	}
	l.mu.RUnlock()
	out := make([]BucketStats, 0, len(bs))
	for _, b := range bs {
		b.mu.Lock()
		if !b.dead {
			st := BucketStats{Key: b.key, Provider: b.provider, Model: b.model, InFlight: b.inFlight, Waiting: b.waiting, PausedUntil: b.pausedUntil}
			if b.learns() {
				st.LearnedPerSecond = b.learn.rate
			}
			out = append(out, st)
		}
		b.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// bucket is one key's state; every field is guarded by mu.
type bucket struct {
	mu  sync.Mutex
	key string
	// provider and model are the names metrics show for the bucket.
	provider, model string
	clk             clock.WithTicker
	dead            bool // swept from the map; lookups must retry

	raw Limits // as configured
	// Effective limits after the share.
	maxConc     int
	reqInterval time.Duration // schedule time one start reserves; 0 = unbounded
	reqWindow   time.Duration // how far ahead the request schedule may run
	tokPerMin   float64       // 0 = unbounded

	inFlight    int
	reqTAT      time.Time // when the request schedule is paid up
	tokTAT      time.Time // when the token schedule is paid up
	pausedUntil time.Time
	lastUsed    time.Time
	learn       learner // the request rate learned from refusals
	// callTime is how long the bucket's calls take, a moving average of
	// the calls that ended (Done); zero until one has.
	callTime time.Duration

	// Waiters: a queue per namespace (runs under way first, see nsQueue),
	// served round-robin from order[cursor].
	queues  map[string]*nsQueue
	order   []*nsQueue
	cursor  int
	waiting int
	// newWaiting counts the waiters of new runs (not UnderWay), in
	// every namespace, and newTokens sums their estimated tokens.
	newWaiting int
	newTokens  int64

	// The armed timer, if any: it fires at timerAt and pumps. timerGen
	// tells a current firing from a replaced timer's; timerStop ends the
	// goroutine of a clock without AfterFunc.
	timer     clock.Timer
	timerAt   time.Time
	timerGen  uint64
	timerStop chan struct{}
	// firing counts fired timers whose pump has not finished, so tests
	// know when the limiter is quiet. Shared by the limiter's buckets.
	firing *atomic.Int64
}

// nsQueue is one namespace's waiters: the calls of runs under way in
// arrival order, then the first calls of new runs in arrival order.
type nsQueue struct {
	name string
	l    list.List // of *waiter
	// firstNew is the first new run's waiter (nil: none waits); underWay
	// counts the waiters before it.
	firstNew *list.Element
	underWay int
	// displaced is how much later than they were told the new runs'
	// waiters start, not yet told (see enqueue); displacedUnderWay the
	// same for the waiters of runs under way, which the last new runs
	// go ahead of (see pump).
	displaced, displacedUnderWay time.Duration
}

type waiter struct {
	tokens   int64
	underWay bool
	since    time.Time // when it was queued
	q        *nsQueue
	elem     *list.Element
	ready    chan struct{} // closed when permit is set
	permit   *Permit
	// until is the start time last reported to onWait; notify asks the
	// Acquire goroutine to report it again.
	until  time.Time
	notify chan struct{}
}

// later raises the waiter's expected start to t and tells it, if t is later
// than what it was told.
func (w *waiter) later(t time.Time) {
	if !t.After(w.until) {
		return
	}
	w.until = t
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// apply derives the effective limits from raw and the share.
func (b *bucket) apply(share float64) {
	b.maxConc = 0
	if m := b.raw.MaxConcurrent; m > 0 {
		b.maxConc = max(1, int(math.Floor(float64(m)*share)))
	}
	b.reqInterval, b.reqWindow = 0, 0
	if rpm := float64(b.raw.RequestsPerMinute) * share; rpm > 0 {
		b.reqInterval = clampDur(float64(time.Minute) / rpm)
		burst := max(1, math.Floor(rpm/60*burstWindow.Seconds()))
		b.reqWindow = time.Duration(burst) * b.reqInterval
	}
	b.applyLearned()
	b.tokPerMin = 0
	if tpm := float64(b.raw.TokensPerMinute) * share; tpm > 0 {
		b.tokPerMin = tpm
	}
}

// learns reports whether the bucket learns its request rate: it has none
// configured.
func (b *bucket) learns() bool { return b.raw.RequestsPerMinute <= 0 }

// applyLearned puts the learned rate in force on a bucket that learns. The
// learned rate is this process's own observation, so no share applies.
func (b *bucket) applyLearned() {
	if b.learns() {
		b.reqInterval, b.reqWindow = b.learn.interval()
	}
}

// catchUp settles a learning episode whose pause has ended before anything
// starts.
func (b *bucket) catchUp(now time.Time) {
	if b.learn.pending && !now.Before(b.pausedUntil) && b.learn.settle() {
		b.applyLearned()
	}
}

func clampDur(ns float64) time.Duration {
	if ns > float64(maxCharge) {
		return maxCharge
	}
	return time.Duration(ns)
}

// tokCost is the schedule time tokens reserve.
func (b *bucket) tokCost(tokens int64) time.Duration {
	if b.tokPerMin <= 0 || tokens <= 0 {
		return 0
	}
	return clampDur(float64(tokens) * float64(time.Minute) / b.tokPerMin)
}

func (b *bucket) slotFree() bool { return b.maxConc <= 0 || b.inFlight < b.maxConc }

// readyAt is the earliest time a call of tokens may start as far as the
// pause and the rates go. A start is allowed when the schedule after it is
// at most the burst window ahead of now; a call bigger than the window still
// starts once the schedule has caught up with now.
func (b *bucket) readyAt(tokens int64) time.Time {
	t := b.pausedUntil
	if b.reqInterval > 0 {
		t = latest(t, b.reqTAT.Add(b.reqInterval-b.reqWindow))
	}
	if b.tokPerMin > 0 {
		r := b.tokTAT.Add(b.tokCost(tokens) - burstWindow)
		if r.After(b.tokTAT) {
			r = b.tokTAT
		}
		t = latest(t, r)
	}
	return t
}

// start reserves a call's place on the schedules and returns its permit.
func (b *bucket) start(tokens int64, now time.Time) *Permit {
	p := &Permit{b: b, at: now}
	b.learn.starts.add(now)
	if b.reqInterval > 0 {
		p.reqCharge = b.reqInterval
		b.reqTAT = latest(b.reqTAT, now).Add(p.reqCharge)
	}
	if b.tokPerMin > 0 {
		p.tokCharge = b.tokCost(tokens)
		b.tokTAT = latest(b.tokTAT, now).Add(p.tokCharge)
	}
	b.inFlight++
	return p
}

// refund undoes start for a permit nobody will use.
func (b *bucket) refund(p *Permit, now time.Time) {
	p.done = true
	b.inFlight--
	b.reqTAT = shift(b.reqTAT, -p.reqCharge, now)
	b.tokTAT = shift(b.tokTAT, -p.tokCharge, now)
}

// shift moves a schedule by d: forward from no earlier than now, backward
// to no earlier than now (a schedule already behind now stays put).
func shift(tat time.Time, d time.Duration, now time.Time) time.Time {
	switch {
	case d > 0:
		return latest(tat, now).Add(d)
	case d < 0 && tat.After(now):
		return latest(tat.Add(d), now)
	}
	return tat
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (b *bucket) enqueue(w *waiter, ns string) {
	q := b.queues[ns]
	if q == nil {
		q = &nsQueue{name: ns}
		b.queues[ns] = q
		// Join the round just before the cursor: every namespace already
		// waiting gets its turn first, then this one.
		b.order = slices.Insert(b.order, b.cursor, q)
		b.cursor = (b.cursor + 1) % len(b.order)
	}
	w.q = q
	b.waiting++
	if !w.underWay {
		b.newWaiting++
		b.newTokens += w.tokens
		w.elem = q.l.PushBack(w)
		if q.firstNew == nil {
			q.firstNew = w.elem
		}
		return
	}
	q.underWay++
	if q.firstNew == nil {
		w.elem = q.l.PushBack(w)
		return
	}
	w.elem = q.l.InsertBefore(w, q.firstNew)
	// The new runs' waiters now start one request (and this call's
	// tokens) later than they were told.
	q.displaced = b.pushBack(q.firstNew, nil, q.displaced+b.slotOf(w))
}

// slotOf is how much schedule time w's start takes from the waiters it
// goes ahead of: one request, or its tokens if those take longer.
func (b *bucket) slotOf(w *waiter) time.Duration {
	var by time.Duration
	if b.reqInterval > 0 {
		by = b.reqInterval
	}
	if b.tokPerMin > 0 {
		by = max(by, b.tokCost(w.tokens))
	}
	return by
}

// pushBack tells the waiters from `from` up to (not including) `to` that
// they start `by` later than they were told, once by adds up to
// displacedStep (so a long queue is walked about once a second, not on
// every call that goes ahead of it), and returns what is left untold.
func (b *bucket) pushBack(from, to *list.Element, by time.Duration) time.Duration {
	if by < displacedStep {
		return by
	}
	for e := from; e != nil && e != to; e = e.Next() {
		if w := e.Value.(*waiter); !w.until.IsZero() {
			w.later(w.until.Add(by))
		}
	}
	return 0
}

// timeCall folds one call's duration into callTime, a moving average
// weighting the latest call an eighth.
func (b *bucket) timeCall(d time.Duration) {
	if d <= 0 {
		return
	}
	if b.callTime == 0 {
		b.callTime = d
		return
	}
	b.callTime += (d - b.callTime) / 8
}

// lastRunsFirst reports whether the new runs waiting go ahead of head, a
// run under way that waits: when every new run still waiting could start
// within one call's time (by the request rate and the token rate), they
// do. Runs under way going first keeps a backlog's runs finishing early,
// but at its end it would leave fewer runs going than the limit serves
// while each makes its remaining calls one after another, drawing the
// batch out by up to that many calls' time; the last new runs starting
// first keep enough runs going to the end. head waits at most one call's
// time for them (lastRunsWindow at most), so there is no starvation while
// new runs keep coming.
func (b *bucket) lastRunsFirst(head *waiter, now time.Time) bool {
	window := min(b.callTime, lastRunsWindow)
	if window <= 0 || (b.reqInterval <= 0 && b.tokPerMin <= 0) || now.Sub(head.since) >= window {
		return false
	}
	// The schedule time the new runs' starts take: their requests, and
	// their tokens.
	if b.reqInterval > 0 && b.newWaiting > int(window/b.reqInterval) {
		return false
	}
	return b.tokCost(b.newTokens) <= window
}

// remove takes a waiter out of its queue, keeping the round-robin position.
func (b *bucket) remove(w *waiter) {
	q := w.q
	if w.elem == q.firstNew {
		q.firstNew = w.elem.Next()
	}
	if w.underWay {
		q.underWay--
	} else {
		b.newWaiting--
		b.newTokens -= w.tokens
	}
	q.l.Remove(w.elem)
	b.waiting--
	if q.l.Len() > 0 {
		return
	}
	delete(b.queues, q.name)
	i := slices.Index(b.order, q)
	b.order = slices.Delete(b.order, i, i+1)
	if i < b.cursor {
		b.cursor--
	}
	if b.cursor >= len(b.order) {
		b.cursor = 0
	}
}

// pump grants every waiter that may start now, in round-robin order, and
// arms the timer for the next one held back by time. Called whenever state
// changes: a release, a timer, a pause, a new waiter, a cancellation.
func (b *bucket) pump(now time.Time) {
	b.catchUp(now)
	for b.waiting > 0 {
		if !b.slotFree() {
			// A release will pump again; no timer needed.
			b.disarm()
			return
		}
		q := b.order[b.cursor]
		w := q.l.Front().Value.(*waiter)
		lastRun := w.underWay && q.firstNew != nil && b.lastRunsFirst(w, now)
		if lastRun {
			w = q.firstNew.Value.(*waiter)
		}
		if at := b.readyAt(w.tokens); now.Before(at) {
			b.arm(at, now)
			w.later(at)
			return
		}
		// Advance the cursor past q unless remove drops q (which leaves
		// the cursor on the next namespace already).
		if q.l.Len() > 1 {
			b.cursor = (b.cursor + 1) % len(b.order)
		}
		b.remove(w)
		if lastRun {
			// The runs under way it went ahead of start one slot later.
			q.displacedUnderWay = b.pushBack(q.l.Front(), q.firstNew, q.displacedUnderWay+b.slotOf(w))
		}
		w.permit = b.start(w.tokens, now)
		close(w.ready)
	}
	b.disarm()
}

// estimate is when a newly queued waiter expects to start: its own readiness
// pushed back by the request slots of the waiters served before it. Zero
// means only concurrency holds it back.
func (b *bucket) estimate(w *waiter, now time.Time) time.Time {
	ahead := b.ahead(w)
	t := b.pausedUntil
	if b.reqInterval > 0 {
		t = latest(t, b.reqTAT.Add(b.reqInterval-b.reqWindow+time.Duration(ahead)*b.reqInterval))
	}
	if b.tokPerMin > 0 {
		// Callers ahead are assumed to cost about as much as this one.
		t = latest(t, b.readyAt(w.tokens).Add(time.Duration(ahead)*b.tokCost(w.tokens)))
	}
	if !t.After(now) {
		return time.Time{}
	}
	return t
}

// ahead counts the waiters round-robin serves before w, which must be the
// last of its namespace's runs under way (UnderWay) or new runs.
func (b *bucket) ahead(w *waiter) int {
	i := w.q.l.Len() - 1
	if w.underWay {
		i = w.q.underWay - 1
	}
	k := slices.Index(b.order, w.q)
	n := i
	for j, q := range b.order {
		if j == k {
			continue
		}
		// Namespaces from the cursor up to w's get one more turn first.
		off, offK := (j-b.cursor+len(b.order))%len(b.order), (k-b.cursor+len(b.order))%len(b.order)
		turns := i
		if off < offK {
			turns++
		}
		n += min(q.l.Len(), turns)
	}
	return n
}

// arm makes sure a timer fires by at. An earlier timer is kept: firing
// early only pumps once more and re-arms.
func (b *bucket) arm(at, now time.Time) {
	if b.timer != nil && !b.timerAt.After(at) {
		return
	}
	b.disarm()
	b.timerGen++
	gen, d := b.timerGen, at.Sub(now)
	b.timerAt = at
	if dc, ok := b.clk.(clock.WithDelayedExecution); ok {
		// The callback may run under the clock's own lock (fake clocks),
		// so it only hands off.
		b.timer = dc.AfterFunc(d, func() {
			b.firing.Add(1)
			go b.fire(gen)
		})
		b.timerStop = nil
		return
	}
	t := b.clk.NewTimer(d)
	stop := make(chan struct{})
	b.timer, b.timerStop = t, stop
	go func() {
		select {
		case <-t.C():
			b.firing.Add(1)
			b.fire(gen)
		case <-stop:
		}
	}()
}

// fire pumps for the timer of generation gen.
func (b *bucket) fire(gen uint64) {
	defer b.firing.Add(-1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timerGen == gen && b.timer != nil {
		b.timer, b.timerStop = nil, nil
	}
	b.pump(b.clk.Now())
}

func (b *bucket) disarm() {
	if b.timer == nil {
		return
	}
	b.timer.Stop()
	if b.timerStop != nil {
		close(b.timerStop)
	}
	b.timer, b.timerStop = nil, nil
}

// idle reports whether dropping the bucket forgets nothing that matters:
// nobody uses it and its schedules and pause have caught up with now.
func (b *bucket) idle(now time.Time) bool {
	return b.waiting == 0 && b.inFlight == 0 &&
		!b.pausedUntil.After(now) && !b.reqTAT.After(now) && !b.tokTAT.After(now) &&
		now.Sub(b.lastUsed) >= idleAfter
}
