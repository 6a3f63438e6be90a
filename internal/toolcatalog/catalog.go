// Package toolcatalog remembers what each MCP server offers (its tools and
// their effects), so a reconcile reads the catalog and never lists a
// server itself. Listings are made by executor steps; a failure is cached
// too, with the time the server may be tried again, so a dead server costs
// one listing per retry interval however many runs use it. Runs that wait
// for a listing are woken when it is done.
package toolcatalog

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/agentrun-dev/agentrun-operator/internal/mcptool"
)

// Defaults for how long a listing is trusted and how soon a failed one is
// tried again.
const (
	DefaultTTL   = time.Minute
	DefaultRetry = 30 * time.Second
)

// Key identifies a server as listed: its URL and (a hash of) its token, so
// servers that answer differently per token are listed apart and no token
// is kept here.
type Key string

// KeyOf is the catalog key of a server.
func KeyOf(s mcptool.Server) Key {
	h := sha256.Sum256([]byte(s.Token))
	k := Key(s.URL + "|" + hex.EncodeToString(h[:8]))
	if s.Protocol != "" {
		k = Key(s.Protocol+":") + k // an A2A agent and an MCP server at one URL are apart
	}
	return k
}

// KeyIn is the catalog key of a server as listed for runs of namespace.
// Listings are kept per namespace because the egress policy is: a listing
// one namespace's exception allowed must not serve a namespace the policy
// refuses, and one namespace's refused listing must not park another's
// runs (tenants share nothing through the catalog).
func KeyIn(namespace string, s mcptool.Server) Key {
	return Key(namespace + "|" + string(KeyOf(s)))
}

// State says what the catalog knows of a server.
type State int

// States of a server's entry.
const (
	// Unknown: never listed (or forgotten); a listing must be made first.
	Unknown State = iota
	// Listing: a listing is under way and nothing is known yet.
	Listing
	// Ready: the tools are known and fresh.
	Ready
	// Stale: the tools are known but older than the TTL; they are used while
	// a new listing is made.
	Stale
	// Failed: the last listing failed and RetryAt has not come yet.
	Failed
	// RetryDue: the last listing failed and may be tried again now.
	RetryDue
)

// Entry is what the catalog holds for a server.
type Entry struct {
	State State
	Tools []mcptool.Tool
	// Err is the last listing's failure (Failed, RetryDue, and Listing after
	// a failure).
	Err error
	// RetryAt is when a failed server may be listed again.
	RetryAt time.Time
}

// Unavailable reports whether the server's last listing failed, a
// re-listing under way included: runs that need it stay parked on it until
// a listing succeeds, so each retry of a dead server costs them no status
// writes (no flip to "listing" and back).
func (e Entry) Unavailable() bool {
	return e.State == Failed || e.State == RetryDue || (e.State == Listing && e.Err != nil)
}

// Pending reports whether the server has never been listed and is being
// (or is about to be): runs wait for that listing.
func (e Entry) Pending() bool {
	return e.State == Unknown || (e.State == Listing && e.Err == nil)
}

// NeedsListing reports whether a listing should be started now.
func (e Entry) NeedsListing() bool {
	return e.State == Unknown || e.State == Stale || e.State == RetryDue
}

// Catalog is safe for concurrent use. The zero value is not usable; use New.
type Catalog struct {
	ttl, retry time.Duration

	mu      sync.Mutex
	m       map[Key]*entry
	waiters map[Key]map[types.NamespacedName]struct{}
}

type entry struct {
	tools    []mcptool.Tool
	listedAt time.Time
	err      error
	retryAt  time.Time
	listing  bool
	known    bool // tools were listed at least once
}

// New makes a catalog that trusts a listing for ttl and retries a failed
// one after retry (defaults when zero).
func New(ttl, retry time.Duration) *Catalog {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if retry <= 0 {
		retry = DefaultRetry
	}
	return &Catalog{ttl: ttl, retry: retry, m: map[Key]*entry{}, waiters: map[Key]map[types.NamespacedName]struct{}{}}
}

// Lookup returns what is known of a server at now.
func (c *Catalog) Lookup(k Key, now time.Time) Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	switch {
	case !ok:
		return Entry{State: Unknown}
	case e.err != nil && !e.listing && now.Before(e.retryAt):
		return Entry{State: Failed, Err: e.err, RetryAt: e.retryAt, Tools: e.tools}
	case e.err != nil && !e.listing:
		return Entry{State: RetryDue, Err: e.err, RetryAt: e.retryAt, Tools: e.tools}
	case !e.known:
		return Entry{State: Listing, Err: e.err, RetryAt: e.retryAt}
	case now.Sub(e.listedAt) >= c.ttl && !e.listing:
		return Entry{State: Stale, Tools: e.tools}
	default:
		return Entry{State: Ready, Tools: e.tools}
	}
}

// Wait registers run to be woken when the server's next listing finishes.
func (c *Catalog) Wait(k Key, run types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.waiters[k]
	if w == nil {
		w = map[types.NamespacedName]struct{}{}
		c.waiters[k] = w
	}
	w[run] = struct{}{}
}

// Begin marks a listing of the server as started; false when one already
// is, so the caller starts nothing.
func (c *Catalog) Begin(k Key) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		e = &entry{}
		c.m[k] = e
	}
	if e.listing {
		return false
	}
	e.listing = true
	return true
}

// Abort undoes Begin when the listing could not be started (no room in the
// pool), leaving the entry as it was.
func (c *Catalog) Abort(k Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok {
		e.listing = false
		if !e.known && e.err == nil {
			delete(c.m, k)
		}
	}
}

// Finish records a listing's result at now and returns the runs waiting
// for it, to be woken. A failure keeps earlier tools out of use until the
// server answers again: what it offers is unknown.
func (c *Catalog) Finish(k Key, tools []mcptool.Tool, err error, now time.Time) []types.NamespacedName {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		e = &entry{}
		c.m[k] = e
	}
	e.listing = false
	if err != nil {
		e.err, e.retryAt, e.known, e.tools = err, now.Add(c.retry), false, nil
	} else {
		e.err, e.retryAt, e.known, e.tools, e.listedAt = nil, time.Time{}, true, tools, now
	}
	var out []types.NamespacedName
	for run := range c.waiters[k] {
		out = append(out, run)
	}
	delete(c.waiters, k)
	return out
}

// Forget drops a server's entry, so the next lookup lists it again (a call
// found it unreachable).
func (c *Catalog) Forget(k Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok && !e.listing {
		delete(c.m, k)
	}
}
