package toolcatalog

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/agentrun-dev/agentrun-operator/internal/mcptool"
)

func TestEntryLifecycle(t *testing.T) {
	c := New(time.Minute, 30*time.Second)
	k := KeyOf(mcptool.Server{URL: "http://tools:8080/mcp", Token: "secret"})
	t0 := time.Unix(1000, 0)
	state := func(at time.Time) State { return c.Lookup(k, at).State }

	if s := state(t0); s != Unknown || !c.Lookup(k, t0).NeedsListing() {
		t.Fatalf("a new server is %v, want Unknown needing a listing", s)
	}
	if !c.Begin(k) || c.Begin(k) {
		t.Fatal("Begin must start one listing and refuse a second while it runs")
	}
	if e := c.Lookup(k, t0); e.State != Listing || e.NeedsListing() || !e.Pending() || e.Unavailable() {
		t.Fatalf("during the first listing: %+v, want Listing, Pending, not needing another", e)
	}
	run := types.NamespacedName{Namespace: "ns", Name: "r"}
	c.Wait(k, run)
	woken := c.Finish(k, []mcptool.Tool{{Name: "read_doc", Effect: mcptool.EffectRead}}, nil, t0)
	if len(woken) != 1 || woken[0] != run {
		t.Fatalf("Finish woke %v, want the waiting run", woken)
	}
	if e := c.Lookup(k, t0.Add(59*time.Second)); e.State != Ready || len(e.Tools) != 1 {
		t.Fatalf("after listing: %+v, want Ready with one tool", e)
	}
	if s := state(t0.Add(time.Minute)); s != Stale {
		t.Fatalf("after the TTL: %v, want Stale", s)
	}
	c.Begin(k)
	if e := c.Lookup(k, t0.Add(time.Minute)); e.State != Ready || len(e.Tools) != 1 {
		t.Fatalf("refreshing: %+v, want the old tools still Ready", e)
	}
	if len(c.Finish(k, nil, errors.New("connection refused"), t0.Add(2*time.Minute))) != 0 {
		t.Fatal("Finish woke runs nobody registered")
	}
	e := c.Lookup(k, t0.Add(2*time.Minute+10*time.Second))
	if e.State != Failed || e.Err == nil || len(e.Tools) != 0 || !e.RetryAt.Equal(t0.Add(2*time.Minute+30*time.Second)) {
		t.Fatalf("after a failure: %+v, want Failed without tools, retry 30s later", e)
	}
	if s := state(t0.Add(2*time.Minute + 30*time.Second)); s != RetryDue {
		t.Fatalf("at the retry time: %v, want RetryDue", s)
	}
	if e := c.Lookup(k, t0.Add(2*time.Minute+30*time.Second)); !e.Unavailable() || e.Pending() {
		t.Fatalf("a failed server due for a retry: %+v, want Unavailable, not Pending", e)
	}
	c.Begin(k)
	if e := c.Lookup(k, t0.Add(3*time.Minute)); e.State != Listing || !e.Unavailable() || e.Pending() {
		t.Fatalf("retrying a failed server: %+v, want Listing, still Unavailable (its runs stay parked), not Pending", e)
	}
	c.Abort(k)
	if s := state(t0.Add(3 * time.Minute)); s != RetryDue {
		t.Fatalf("after an aborted retry: %v, want RetryDue again", s)
	}
}

func TestKeysSeparateTokensAndHideThem(t *testing.T) {
	a := KeyOf(mcptool.Server{URL: "http://x/mcp", Token: "one"})
	b := KeyOf(mcptool.Server{URL: "http://x/mcp", Token: "two"})
	if a == b {
		t.Error("two tokens share a key")
	}
	if want := "one"; string(a) == "" || contains(string(a), want) {
		t.Errorf("key %q carries the token", a)
	}
}

func TestAbortOfAFirstListingForgetsTheServer(t *testing.T) {
	c := New(0, 0)
	k := KeyOf(mcptool.Server{URL: "http://x/mcp"})
	c.Begin(k)
	c.Abort(k)
	if s := c.Lookup(k, time.Now()).State; s != Unknown {
		t.Errorf("after an aborted first listing: %v, want Unknown", s)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestKeyInSeparatesNamespaces: the same server and token listed for two
// namespaces are two entries, since each namespace has its own egress
// policy.
func TestKeyInSeparatesNamespaces(t *testing.T) {
	s := mcptool.Server{URL: "http://tools:8080/mcp", Token: "secret"}
	a, b := KeyIn("team-a", s), KeyIn("team-b", s)
	if a == b {
		t.Fatalf("KeyIn gives %q for both namespaces", a)
	}
	if KeyIn("team-a", s) != a {
		t.Fatal("KeyIn is not stable")
	}
	c := New(0, 0)
	now := time.Now()
	if !c.Begin(a) {
		t.Fatal("Begin")
	}
	c.Finish(a, nil, errors.New("refused"), now)
	if e := c.Lookup(b, now); e.State != Unknown {
		t.Errorf("team-b sees team-a's failed listing: state %v", e.State)
	}
}
