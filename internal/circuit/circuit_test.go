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
