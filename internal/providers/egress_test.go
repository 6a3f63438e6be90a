package providers_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/egress"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/providers/providertest"
)

// countingListener counts the connections a refused address would have
// received.
func countingListener(t *testing.T, addr string) (url string, accepted *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	accepted = &atomic.Int64{}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = l.Close() })
	return "http://" + l.Addr().String(), accepted
}

func policy(t *testing.T, allow ...string) *egress.Policy {
	t.Helper()
	cfg := &egress.Config{}
	for _, a := range allow {
		cfg.AllowCIDRs = append(cfg.AllowCIDRs, netip.MustParsePrefix(a))
	}
	p, err := egress.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEgressRefusalIsItsOwnClass: a base URL the egress policy refuses is
// classified EgressRefused (not ProviderUnreachable, although it arrives as
// a dial error) with the refusal's rule and remedy, and nothing connects.
func TestEgressRefusalIsItsOwnClass(t *testing.T) {
	url, accepted := countingListener(t, "127.0.0.1:0")
	hc := policy(t).Client("team-a")
	for name, p := range map[string]providers.Provider{
		"openai":    providers.NewOpenAI(url+"/v1", hc),
		"anthropic": providers.NewAnthropic(url, hc),
	} {
		t.Run(name, func(t *testing.T) {
			pe := mustFail(t, p, baseRequest())
			if pe.Class != journal.FailEgressRefused || pe.Status != 0 {
				t.Fatalf("error = {%s %d %q}, want %s status 0", pe.Class, pe.Status, pe.Message, journal.FailEgressRefused)
			}
			for _, want := range []string{"for namespace team-a: loopback address (rule loopback)", "--egress-allow-cidr=127.0.0.0/8"} {
				if !strings.Contains(pe.Message, want) {
					t.Errorf("message %q lacks %q", pe.Message, want)
				}
			}
		})
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the refused address accepted %d connections", n)
	}
}

// TestProviderRedirectToARefusedAddressIsNotFollowed: an allowed provider
// answering with a redirect to a refused address does not get the request
// re-sent there.
func TestProviderRedirectToARefusedAddressIsNotFollowed(t *testing.T) {
	target, accepted := countingListener(t, "127.0.0.2:0")
	srv := providertest.NewOpenAIServer(t)
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirect.Close)
	hc := policy(t, "127.0.0.1/32").Client("team-a")

	if _, err := call(t, providers.NewOpenAI(srv.URL+"/v1", hc), baseRequest()); err != nil {
		t.Fatalf("the allowed provider failed: %v", err)
	}
	pe := mustFail(t, providers.NewOpenAI(redirect.URL+"/v1", hc), baseRequest())
	if pe.Class != journal.FailEgressRefused || !strings.Contains(pe.Message, "(rule loopback)") {
		t.Fatalf("error = {%s %q}, want %s naming rule loopback", pe.Class, pe.Message, journal.FailEgressRefused)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the redirect target accepted %d connections", n)
	}
}
