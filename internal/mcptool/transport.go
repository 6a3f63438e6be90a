package mcptool

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/url"
	"sync"

	"github.com/agentrun-dev/agentrun-operator/internal/egress"
)

// roundTripper serves one List or Call. It adds the bearer token and records
// the status of the latest POST, because the SDK reports HTTP failures only
// as text ("Unauthorized") while callers need the number.
type roundTripper struct {
	base  http.RoundTripper
	token string
	// origin is the scheme and host of the server URL: the token goes only
	// there, never to a host a redirect points at.
	origin string

	mu     sync.Mutex
	status int
	// refusal is the egress policy's refusal of a request of this
	// session, if one came (from the transport or the redirect check), so
	// it reaches the CallError whatever the SDK does with the error chain.
	refusal *egress.Refusal

	// cancelSent is closed once a notifications/cancelled POST was sent; see
	// closeSession.
	cancelSent chan struct{}
	cancelOnce sync.Once
}

func newRoundTripper(hc *http.Client, s Server) *roundTripper {
	rt := &roundTripper{base: http.DefaultTransport, token: s.Token, cancelSent: make(chan struct{})}
	if hc != nil && hc.Transport != nil {
		rt.base = hc.Transport
	}
	if u, err := url.Parse(s.URL); err == nil {
		rt.origin = u.Scheme + "://" + u.Host
	}
	return rt
}

// client is hc (or a zero client) with its transport wrapped by rt, so the
// caller's timeouts, proxies, redirect policy and connection pool still
// apply.
func (rt *roundTripper) client(hc *http.Client) *http.Client {
	var c http.Client
	if hc != nil {
		c = *hc
	}
	c.Transport = rt
	if check := c.CheckRedirect; check != nil {
		c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
			err := check(req, via)
			rt.note(err)
			return err
		}
	}
	return &c
}

// note keeps the first egress refusal among errs.
func (rt *roundTripper) note(err error) {
	var r *egress.Refusal
	if err == nil || !errors.As(err, &r) {
		return
	}
	rt.mu.Lock()
	if rt.refusal == nil {
		rt.refusal = r
	}
	rt.mu.Unlock()
}

// refused is the refusal noted, if any.
func (rt *roundTripper) refused() *egress.Refusal {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.refusal
}

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if rt.token != "" && rt.origin != "" && req.URL.Scheme+"://"+req.URL.Host == rt.origin {
		// A RoundTripper must not modify its request: set the header on a copy.
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+rt.token)
	}
	resp, err := rt.base.RoundTrip(req)
	rt.note(err)
	if req.Method == http.MethodPost {
		rt.mu.Lock()
		rt.status = 0
		if err == nil {
			rt.status = resp.StatusCode
		}
		rt.mu.Unlock()
		if isCancelNotice(req) {
			rt.cancelOnce.Do(func() { close(rt.cancelSent) })
		}
	}
	return resp, err
}

// cancelNotice is how the SDK's encoder starts a cancellation notification
// (jsonrpc, then method, then params).
var cancelNotice = []byte(`"method":"notifications/cancelled"`)

// isCancelNotice peeks at the start of a POST body (a fresh copy from
// GetBody) for the notifications/cancelled method.
func isCancelNotice(req *http.Request) bool {
	if req.GetBody == nil {
		return false
	}
	body, err := req.GetBody()
	if err != nil {
		return false
	}
	defer body.Close()
	head := make([]byte, 128)
	n, _ := io.ReadFull(body, head)
	return bytes.Contains(head[:n], cancelNotice)
}

// failedStatus is the latest POST's status if it was not a success.
func (rt *roundTripper) failedStatus() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.status >= 200 && rt.status < 300 {
		return 0
	}
	return rt.status
}
