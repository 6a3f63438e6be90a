package mcptool_test

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/egress"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool/mcptest"
)

// acceptCounter listens on addr and counts (then drops) connections.
func acceptCounter(t *testing.T, addr string) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	n := &atomic.Int64{}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = l.Close() })
	return "http://" + l.Addr().String() + "/mcp", n
}

func refusalOf(t *testing.T, err error) (*mcptool.CallError, *egress.Refusal) {
	t.Helper()
	var ce *mcptool.CallError
	var r *egress.Refusal
	if !errors.As(err, &ce) || !errors.As(err, &r) {
		t.Fatalf("error %v (%T) is not a CallError carrying an egress refusal", err, err)
	}
	return ce, r
}

// TestEgressRefusalReachesTheCaller: List and Call through a client of the
// egress policy fail on a refused address with a CallError that carries
// the *egress.Refusal (so the controller can say EgressRefused), a List
// refused at dial is NotSent, and nothing connects.
func TestEgressRefusalReachesTheCaller(t *testing.T) {
	url, accepted := acceptCounter(t, "127.0.0.2:0")
	p, err := egress.New(&egress.Config{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	if err != nil {
		t.Fatal(err)
	}
	s := mcptool.Server{Name: "tracker", URL: url, Token: "tok-canary-9"}
	_, err = mcptool.List(ctxT(t), p.Client("team-a"), s)
	ce, r := refusalOf(t, err)
	if !ce.NotSent || r.Rule != egress.RuleLoopback || r.Stage != egress.StageDial || r.Namespace != "team-a" {
		t.Errorf("List: NotSent=%v refusal %+v, want NotSent, rule loopback at dial for team-a", ce.NotSent, r)
	}
	_, err = mcptool.Call(ctxT(t), p.Client("team-a"), s, "echo", nil, "k")
	if ce, _ := refusalOf(t, err); !ce.NotSent || strings.Contains(ce.Message, "tok-canary-9") {
		t.Errorf("Call: %+v, want NotSent without the token", ce)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the refused address accepted %d connections", n)
	}

	// The same policy lets an allowed server through.
	srv := mcptest.New(t, mcptest.Options{})
	if tools, err := mcptool.List(ctxT(t), p.Client("team-a"), mcptool.Server{Name: "ok", URL: srv.URL()}); err != nil || len(tools) == 0 {
		t.Fatalf("allowed server: %d tools, %v", len(tools), err)
	}
}

// TestMCPRedirectToARefusedAddressIsNotFollowed: an allowed URL that
// redirects to a refused address fails at the redirect, with the refusal,
// and the target sees nothing.
func TestMCPRedirectToARefusedAddressIsNotFollowed(t *testing.T) {
	target, accepted := acceptCounter(t, "127.0.0.2:0")
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirect.Close)
	p, err := egress.New(&egress.Config{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = mcptool.List(ctxT(t), p.Client("team-a"), mcptool.Server{Name: "hop", URL: redirect.URL + "/mcp"})
	if _, r := refusalOf(t, err); r.Rule != egress.RuleLoopback || r.Stage != egress.StageRedirect {
		t.Errorf("refusal %+v, want rule loopback at the redirect", r)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the redirect target accepted %d connections", n)
	}
}
