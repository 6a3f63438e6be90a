// Package writegauge counts the manager's own API writes in flight, so
// that best-effort writes (Events) can give way to the writes that move
// runs on. On a busy API server every request waits behind every other;
// an Event sent while a thousand runs end competes with their status
// writes for the same CPU and makes each run seen Complete later.
package writegauge

import (
	"net/http"
	"strings"
	"sync/atomic"
)

// Gauge counts write requests (anything but GET, HEAD and OPTIONS) in
// flight through the transports it wraps, leaving out Events, which are
// what gives way.
type Gauge struct{ n atomic.Int64 }

// InFlight is how many counted writes are waiting for the API server's
// answer now.
func (g *Gauge) InFlight() int64 { return g.n.Load() }

// Busy reports whether any counted write is in flight.
func (g *Gauge) Busy() bool { return g.InFlight() > 0 }

// Wrap returns rt counting the writes it carries: from the request until
// its response headers arrive (the API server answers a write once it is
// stored, so the headers mark its end).
func (g *Gauge) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper{g: g, next: rt}
}

type roundTripper struct {
	g    *Gauge
	next http.RoundTripper
}

func (t roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if !counted(req) {
		return t.next.RoundTrip(req)
	}
	t.g.n.Add(1)
	defer t.g.n.Add(-1)
	return t.next.RoundTrip(req)
}

// counted: a write, and not of an Event (core or events.k8s.io).
func counted(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return resource(req.URL.Path) != "events"
}

// resource is the resource a Kubernetes API path names:
// /api/v1/namespaces/{ns}/{resource}[/{name}[/{sub}]],
// /apis/{group}/{version}/namespaces/{ns}/{resource}[/...], or the same
// without the namespace part for cluster-scoped ones.
func resource(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		rest = parts[3:]
	default:
		return ""
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		return rest[2]
	}
	if len(rest) >= 1 {
		return rest[0]
	}
	return ""
}
