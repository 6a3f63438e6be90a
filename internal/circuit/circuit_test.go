package circuit

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestBreakerOpensAfterThresholdAndCloses(t *testing.T) {
	b := New()
	now := time.Unix(1000, 0)
	for i := 1; i < DefaultThreshold; i++ {
		b.Failure("ns/p", "ProviderFailed", now)
		if open, _, _ := b.Open("ns/p", now); open {
			t.Fatalf("open after %d failures, threshold %d", i, DefaultThreshold)
		}
	}
	b.Failure("ns/p", "CreditsExhausted", now)
	open, until, class := b.Open("ns/p", now.Add(time.Second))
	if !open || !until.Equal(now.Add(DefaultCooldown)) || class != "CreditsExhausted" {
		t.Fatalf("Open = %v until %v class %q, want open until +%s with the last class", open, until, class, DefaultCooldown)
	}
	if open, _, _ := b.Open("ns/other", now); open {
		t.Fatal("another provider's circuit opened")
	}
	if open, _, _ := b.Open("ns/p", now.Add(DefaultCooldown)); open {
		t.Fatal("still open once the cooldown passed (half-open lets one probe through)")
	}
	b.Failure("ns/p", "ProviderFailed", now.Add(DefaultCooldown))
	if open, _, _ := b.Open("ns/p", now.Add(DefaultCooldown+time.Second)); !open {
		t.Fatal("a failed probe did not reopen the circuit")
	}
	b.Success("ns/p")
	if open, _, _ := b.Open("ns/p", now.Add(DefaultCooldown+time.Second)); open {
		t.Fatal("a success did not close the circuit")
	}
}

// TestStatesListFailingBreakers: States shows each provider with failures
// since its last success, open only during the cooldown.
func TestStatesListFailingBreakers(t *testing.T) {
	b := New()
	now := time.Unix(1000, 0)
	if got := b.States(now); len(got) != 0 {
		t.Fatalf("States of fresh breakers = %v, want none", got)
	}
	b.Failure("ns/flaky", "ProviderFailed", now)
	for range DefaultThreshold {
		b.Failure("ns/down", "ProviderUnreachable", now)
	}
	b.Failure("ns/healed", "ProviderFailed", now)
	b.Success("ns/healed")
	got := map[string]bool{}
	for _, s := range b.States(now.Add(time.Second)) {
		got[s.Key] = s.Open
	}
	if want := map[string]bool{"ns/flaky": false, "ns/down": true}; len(got) != len(want) || got["ns/flaky"] || !got["ns/down"] {
		t.Fatalf("States = %v, want %v", got, want)
	}
	for _, s := range b.States(now.Add(DefaultCooldown)) {
		if s.Open {
			t.Errorf("%s open once the cooldown passed (half-open)", s.Key)
		}
	}
}

// tripped returns breakers whose "ns/p" circuit opened at now, with a
// cooldown of a minute.
func tripped(now time.Time) *Breakers {
	b := New()
	b.Cooldown = time.Minute
	for range DefaultThreshold {
		b.Failure("ns/p", "ProviderUnreachable", now)
	}
	return b
}

// TestHalfOpenAdmitsOneProbe: once the cooldown passes, of many callers
// asking at once exactly one is admitted; the others find the circuit
// still open, told to look again soon, and its owner is admitted again.
func TestHalfOpenAdmitsOneProbe(t *testing.T) {
	now := time.Unix(1000, 0)
	b := tripped(now)
	if b.Admit("ns/p", "early", now.Add(time.Second)) {
		t.Fatal("admitted during the cooldown")
	}
	after := now.Add(time.Minute)
	if open, _, _ := b.Open("ns/p", after); open {
		t.Fatal("open once the cooldown passed, with no probe out")
	}
	const callers = 64
	var (
		wg       sync.WaitGroup
		admitted atomic.Int32
		winner   atomic.Value
		start    = make(chan struct{})
	)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			owner := fmt.Sprintf("run-%d", i)
			if b.Admit("ns/p", owner, after) {
				admitted.Add(1)
				winner.Store(owner)
			}
		}()
	}
	close(start)
	wg.Wait()
	if n := admitted.Load(); n != 1 {
		t.Fatalf("%d callers admitted to the half-open circuit, want exactly 1", n)
	}
	probe := winner.Load().(string)
	at := after.Add(time.Second)
	open, until, class := b.Open("ns/p", at)
	if !open || class != "ProviderUnreachable" || !until.Equal(at.Add(ProbeRecheck)) {
		t.Fatalf("Open with a probe out = %v until %v class %q; want open, look again in %s, the last class", open, until, class, ProbeRecheck)
	}
	if b.Admit("ns/p", "latecomer", at) {
		t.Fatal("a second caller admitted while the probe is out")
	}
	if !b.Admit("ns/p", probe, at) {
		t.Fatal("the probe's owner refused its own probe")
	}
	if got := b.States(at); len(got) != 1 || got[0].Open {
		t.Fatalf("States with a probe out = %v, want one half-open (not open) breaker", got)
	}
}

// TestProbeSuccessCloses: the probe's success closes the circuit for
// everyone.
func TestProbeSuccessCloses(t *testing.T) {
	now := time.Unix(1000, 0)
	b := tripped(now)
	after := now.Add(time.Minute)
	if !b.Admit("ns/p", "probe", after) {
		t.Fatal("the first caller after the cooldown was refused")
	}
	b.Success("ns/p")
	if open, _, _ := b.Open("ns/p", after); open {
		t.Fatal("still open after the probe succeeded")
	}
	for _, o := range []string{"a", "b", "c"} {
		if !b.Admit("ns/p", o, after) {
			t.Fatalf("%s refused by a closed circuit", o)
		}
	}
	if got := b.States(after); len(got) != 0 {
		t.Fatalf("States after the probe succeeded = %v, want none", got)
	}
	// Closed means closed: it takes Threshold new failures to open again.
	b.Failure("ns/p", "ProviderFailed", after)
	if !b.Admit("ns/p", "d", after) {
		t.Fatal("one failure after closing refused a caller")
	}
}

// TestProbeFailureReopens: a failed probe opens the circuit for a new
// cooldown, after which one caller probes again.
func TestProbeFailureReopens(t *testing.T) {
	now := time.Unix(1000, 0)
	b := tripped(now)
	after := now.Add(time.Minute)
	if !b.Admit("ns/p", "probe", after) {
		t.Fatal("the first caller after the cooldown was refused")
	}
	failedAt := after.Add(2 * time.Second)
	b.Failure("ns/p", "ProviderTimedOut", failedAt)
	open, until, class := b.Open("ns/p", failedAt)
	if !open || !until.Equal(failedAt.Add(time.Minute)) || class != "ProviderTimedOut" {
		t.Fatalf("Open after a failed probe = %v until %v class %q; want open for a new cooldown with the probe's class", open, until, class)
	}
	if b.Admit("ns/p", "probe", failedAt.Add(time.Second)) || b.Admit("ns/p", "other", failedAt.Add(time.Second)) {
		t.Fatal("admitted during the new cooldown")
	}
	again := failedAt.Add(time.Minute)
	if !b.Admit("ns/p", "other", again) || b.Admit("ns/p", "probe", again) {
		t.Fatal("after the new cooldown, want the first caller to probe and the next refused")
	}
}

// TestLostProbeReleasesAfterBound: a probe whose outcome never comes (its
// step was stopped) holds the circuit only for its bound; one given back
// (Release) lets the next caller probe at once.
func TestLostProbeReleasesAfterBound(t *testing.T) {
	now := time.Unix(1000, 0)
	b := tripped(now)
	after := now.Add(time.Minute)
	if !b.Admit("ns/p", "lost", after) {
		t.Fatal("the first caller after the cooldown was refused")
	}
	// Until its bound (the cooldown by default) it holds.
	near := after.Add(time.Minute - time.Second)
	if b.Admit("ns/p", "other", near) {
		t.Fatal("another caller admitted before the lost probe's bound")
	}
	if open, until, _ := b.Open("ns/p", near); !open || !until.Equal(after.Add(time.Minute)) {
		t.Fatalf("Open near the bound = %v until %v, want open until the bound %v", open, until, after.Add(time.Minute))
	}
	past := after.Add(time.Minute)
	if open, _, _ := b.Open("ns/p", past); open {
		t.Fatal("open once the lost probe's bound passed")
	}
	if !b.Admit("ns/p", "other", past) {
		t.Fatal("no caller admitted once the lost probe's bound passed")
	}
	if b.Admit("ns/p", "lost", past) {
		t.Fatal("the lost probe's owner still admitted after another took its place")
	}
	// A probe given back (its call not made) goes to the next caller.
	b.Release("other")
	if !b.Admit("ns/p", "third", past) {
		t.Fatal("a released probe was not given to the next caller")
	}
	b.ProbeBound = 10 * time.Second
	if b.Admit("ns/p", "fourth", past.Add(9*time.Second)) || !b.Admit("ns/p", "fourth", past.Add(10*time.Second)) {
		t.Fatal("ProbeBound does not bound a probe")
	}
}

// TestReleaseWithoutProbe: Release is harmless for an owner holding no
// probe, and an owner claiming a second circuit gives up the first.
func TestReleaseWithoutProbe(t *testing.T) {
	now := time.Unix(1000, 0)
	b := tripped(now)
	for range DefaultThreshold {
		b.Failure("ns/q", "ProviderFailed", now)
	}
	b.Release("nobody")
	after := now.Add(time.Minute)
	if !b.Admit("ns/p", "run", after) || !b.Admit("ns/q", "run", after) {
		t.Fatal("a caller refused by two half-open circuits with no probe out")
	}
	if !b.Admit("ns/p", "other", after) {
		t.Fatal("the first circuit's probe was not given up when its owner probed another")
	}
	if b.Admit("ns/q", "other", after) {
		t.Fatal("a second probe admitted on the other circuit")
	}
}
