package ratelimit

import (
	"math"
	"sync/atomic"
	"time"
)

// Learning a provider's request rate from its refusals.
//
// A provider whose limit providers.toml does not declare still says when it
// is over it: 429 with Retry-After. Waiting out the pause alone sends every
// held call at once when it ends, most of which are refused again (measured
// before this: 925 refusals for 900 calls against a 50/s server). So a
// bucket without a configured request rate learns one, additive-increase /
// multiplicative-decrease:
//
//   - An episode starts with a refusal while the bucket is not paused (the
//     refusals of calls already in flight belong to it). Its measure is the
//     calls started in the second before it that the provider did not
//     refuse; refusals arriving later take their call off the measure.
//   - When the pause ends, the learned rate becomes 0.9 of that measure;
//     with nothing accepted, nothing is learned yet and the next refusal
//     starts another episode.
//   - Each accepted call while calls wait raises the rate by 0.05 calls/s
//     (5% a second at any rate), at least 0.5 calls/s per second, and
//     never more than doubling per call: the bucket probes for the
//     provider's limit as it rises, and backs off when told. A measure
//     taken while this process was slower than the provider (a busy
//     manager) is outgrown in seconds, and since a refusal only cuts the
//     rate, probing costs a few refused calls, not a pause.
//   - Once a rate is learned, a refusal no longer pauses the bucket (a
//     whole second with nothing sent, each time the probe touches the
//     limit): the refused call alone waits what the provider said, and the
//     rate is cut to 0.9 of the lower of itself and what the provider
//     accepted in the second before, at most once a second.
//
// A configured requests_per_minute always wins and is never learned over.
const (
	// measureWindow is how far before an episode's first refusal the
	// accepted calls are counted.
	measureWindow = time.Second
	// slotWidth is the resolution of the start counts.
	slotWidth = 100 * time.Millisecond
	// slots keeps a little more than measureWindow of start counts.
	slots = int(measureWindow/slotWidth) + 2
	// learnBackoff scales the measured rate at the end of a pause.
	learnBackoff = 0.9
	// growPerCall is the rise per accepted call, in calls/s (so the
	// rate rises by that fraction a second); growFloor the least rise a
	// second, in calls/s.
	growPerCall = 0.05
	growFloor   = 0.5
	// minLearned keeps a learned rate from falling to nothing: one call a
	// minute.
	minLearned = 1.0 / 60
)

// startRing counts one key's call starts by slot of slotWidth. It is
// lock-free and exists for every key, tracked by a bucket or not, so the
// first refusal of a provider nobody limited still has a second of history
// to learn from.
type startRing struct {
	epochs [slots]atomic.Int64 // the slot number each count belongs to
	counts [slots]atomic.Int64
	last   atomic.Int64 // slot number of the latest start, for the sweep
}

func slotOf(t time.Time) int64 { return t.UnixNano() / int64(slotWidth) }

// add counts a start at now. Two starts racing into a fresh slot may lose
// one count; the measure is an estimate anyway.
func (r *startRing) add(now time.Time) {
	e := slotOf(now)
	i := int(e % int64(slots))
	if r.epochs[i].Load() != e && r.epochs[i].Swap(e) != e {
		r.counts[i].Store(0)
	}
	r.counts[i].Add(1)
	r.last.Store(e)
}

// in sums the starts of the slots inside (from, to].
func (r *startRing) in(from, to time.Time) int {
	lo, hi := slotOf(from), slotOf(to)
	n := int64(0)
	for i := range r.counts {
		if e := r.epochs[i].Load(); e > lo && e <= hi {
			n += r.counts[i].Load()
		}
	}
	return int(n)
}

// idle reports whether the ring saw no start for idleAfter.
func (r *startRing) idle(now time.Time) bool {
	return slotOf(now)-r.last.Load() > int64(idleAfter/slotWidth)
}

// learner is a bucket's learned request rate and what it measures; guarded
// by the bucket's mu.
type learner struct {
	rate   float64    // calls/s learned; 0 = none
	starts *startRing // the key's starts

	// The current episode: pending says it awaits the end of the pause;
	// accepted counts the calls started in (from, to] not refused.
	pending  bool
	from, to time.Time
	accepted int

	// Once a rate is learned: the refusals by when they came, and the
	// last cut.
	refusals startRing
	lastCut  time.Time
}

// refused records a refusal at now of a call started at start (zero: an
// untracked call, taken as started now, since refusals come at once); paused says
// whether the bucket was paused when it arrived (then it belongs to the
// episode under way).
func (l *learner) refused(start, now time.Time, paused bool) {
	if start.IsZero() {
		start = now
	}
	if !paused && !l.pending {
		l.pending = true
		l.from, l.to = now.Add(-measureWindow), now
		l.accepted = l.starts.in(l.from, l.to)
	}
	if l.pending && slotOf(start) > slotOf(l.from) && slotOf(start) <= slotOf(l.to) {
		l.accepted = max(0, l.accepted-1)
	}
}

// settle ends a pending episode: called once the pause is over. It reports
// whether the rate changed.
func (l *learner) settle() bool {
	if !l.pending {
		return false
	}
	l.pending = false
	if l.accepted == 0 {
		return false
	}
	l.rate = max(minLearned, float64(l.accepted)/measureWindow.Seconds()*learnBackoff)
	return true
}

// steering reports whether a learned rate is in force and no episode is
// under way: then a refusal slows the rate down instead of pausing.
func (l *learner) steering() bool { return l.rate > 0 && !l.pending }

// slowDown cuts the learned rate for a refusal at now, once per
// measureWindow (the refusals of calls sent before the cut belong to it).
func (l *learner) slowDown(now time.Time) {
	l.refusals.add(now)
	if !l.lastCut.IsZero() && now.Sub(l.lastCut) < measureWindow {
		return
	}
	l.lastCut = now
	from := now.Add(-measureWindow)
	r := l.rate
	if accepted := l.starts.in(from, now) - l.refusals.in(from, now); accepted > 0 {
		r = min(r, float64(accepted)/measureWindow.Seconds())
	}
	l.rate = max(minLearned, r*learnBackoff)
}

// grow raises the rate after an accepted call while calls wait for it.
func (l *learner) grow() bool {
	if l.rate <= 0 || l.pending {
		return false
	}
	l.rate += min(l.rate, max(growPerCall, growFloor/l.rate))
	return true
}

// interval is the schedule time one start reserves at the learned rate,
// and the burst window of the request schedule.
func (l *learner) interval() (time.Duration, time.Duration) {
	if l.rate <= 0 {
		return 0, 0
	}
	iv := clampDur(float64(time.Second) / l.rate)
	burst := max(1, math.Floor(l.rate*burstWindow.Seconds()))
	return iv, time.Duration(burst) * iv
}
