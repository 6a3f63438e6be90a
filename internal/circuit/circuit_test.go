package circuit

import (
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
