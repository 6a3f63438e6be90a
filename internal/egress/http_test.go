package egress

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func get(t *testing.T, c *http.Client, u string) (string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d", u, resp.StatusCode)
	}
	return string(b), nil
}

func TestRefusalThroughHTTPClient(t *testing.T) {
	var mu sync.Mutex
	var seen []*Refusal
	p := mustPolicy(t, nil, WithOnRefusal(func(r *Refusal) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r)
	}))
	// 127.0.0.1:1 is refused before any connection is tried.
	_, err := p.Client("team-b").Get("http://127.0.0.1:1/hook")
	var ue *url.Error
	if !errors.As(err, &ue) {
		t.Fatalf("%v is not a *url.Error", err)
	}
	var op *net.OpError
	if !errors.As(err, &op) {
		t.Fatalf("%v holds no *net.OpError", err)
	}
	r := refusalOf(t, err)
	if r.Rule != RuleLoopback || r.Namespace != "team-b" || r.Stage != StageDial || r.Host != "127.0.0.1" {
		t.Errorf("refusal %+v", r)
	}
	if !strings.Contains(r.Remedy(), "--egress-allow-cidr=127.0.0.0/8") {
		t.Errorf("remedy %q", r.Remedy())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != r {
		t.Errorf("OnRefusal saw %v, want the one refusal", seen)
	}
}

// TestNamespacePooling: a connection pooled for a namespace whose exception
// allows a host is never used for a namespace without it.
func TestNamespacePooling(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, l, http.HandlerFunc(ok))
	p := mustPolicy(t, &Config{Namespaces: map[string]NamespaceException{
		"team-a": {AllowCIDRs: prefixes("127.0.0.1/32")},
		"team-c": {AllowCIDRs: prefixes("127.0.0.1/32")},
	}})
	defer p.CloseIdleConnections()

	for i := range 2 {
		if _, err := get(t, p.Client("team-a"), srv.URL); err != nil {
			t.Fatalf("team-a request %d: %v", i, err)
		}
	}
	if n := srv.conns.Load(); n != 1 {
		t.Fatalf("team-a used %d connections for two requests; the test needs a pooled one", n)
	}
	_, err = get(t, p.Client("team-b"), srv.URL)
	if r := refusalOf(t, err); r.Rule != RuleLoopback || r.Namespace != "team-b" {
		t.Errorf("team-b refusal %+v", r)
	}
	// team-c has the same exception but its own pool.
	if _, err := get(t, p.Client("team-c"), srv.URL); err != nil {
		t.Fatalf("team-c: %v", err)
	}
	if n, reqs := srv.conns.Load(), srv.requests.Load(); n != 2 || reqs != 3 {
		t.Errorf("server saw %d connections and %d requests, want 2 and 3", n, reqs)
	}

	under := func(ns string) *http.Transport { return p.Transport(ns).(*nsTransport).t }
	if under("team-b") != under("team-d") || under("team-b") != under("") {
		t.Error("namespaces without exceptions do not share one transport")
	}
	if under("team-a") == under("team-b") || under("team-a") == under("team-c") {
		t.Error("a namespace with exceptions shares a transport")
	}
}

func TestRedirects(t *testing.T) {
	a, b := listenPair(t)
	two := serveCounting(t, b)
	port := strconv.Itoa(a.Addr().(*net.TCPAddr).Port)
	res := newResolver().
		set("good.test", "127.0.0.1").
		set("denied.test", "127.0.0.1").
		set("sneaky.test", "127.0.0.2")
	var mu sync.Mutex
	paths := map[string]int{}
	srv := startServer(t, a, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths[r.URL.Path]++
		mu.Unlock()
		to := map[string]string{
			"/metadata": "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
			"/mapped":   "http://[::ffff:169.254.169.254]/latest/meta-data/",
			"/denied":   "http://denied.test:" + port + "/final",
			"/loop2":    "http://127.0.0.2:" + port + "/final",
			"/sneaky":   "http://sneaky.test:" + port + "/final",
			"/good":     "http://good.test:" + port + "/final",
			"/file":     "file:///etc/passwd",
		}[r.URL.Path]
		if strings.HasPrefix(r.URL.Path, "/hop/") {
			n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/hop/"))
			if n > 0 {
				to = "/hop/" + strconv.Itoa(n-1)
			}
		}
		if to == "" {
			ok(w, r)
			return
		}
		http.Redirect(w, r, to, http.StatusFound)
	}))
	p := mustPolicy(t, &Config{AllowCIDRs: prefixes("127.0.0.1/32"), DenyHosts: []string{"denied.test"}}, WithResolver(res))
	c := p.Client("team-a")

	if body, err := get(t, c, srv.URL+"/good"); err != nil || body != "ok" {
		t.Errorf("allowed redirect: %q, %v", body, err)
	}
	if _, err := get(t, c, srv.URL+"/hop/5"); err != nil {
		t.Errorf("five redirects: %v", err)
	}
	_, err := get(t, c, srv.URL+"/hop/6")
	if !errors.Is(err, ErrTooManyRedirects) {
		t.Errorf("six redirects: %v", err)
	}

	cases := []struct{ path, rule, stage string }{
		{"/metadata", RuleMetadata, StageRedirect},
		{"/mapped", RuleMetadata, StageRedirect},
		{"/denied", RuleDeniedHost, StageRedirect},
		{"/loop2", RuleLoopback, StageRedirect},
		{"/sneaky", RuleLoopback, StageDial}, // a name: the dial refuses the address
		{"/file", RuleScheme, StageRedirect},
	}
	for _, cs := range cases {
		_, err := get(t, c, srv.URL+cs.path)
		r := refusalOf(t, err)
		if r.Rule != cs.rule || r.Stage != cs.stage || r.Namespace != "team-a" {
			t.Errorf("%s: refusal %+v, want rule %s at %s", cs.path, r, cs.rule, cs.stage)
		}
	}
	mu.Lock()
	if paths["/final"] != 1 || paths["/hop/0"] != 1 {
		t.Errorf("requests by path: %v; only the good redirect and five hops may arrive", paths)
	}
	if n := paths["/hop/6"] + paths["/hop/5"] + paths["/hop/4"] + paths["/hop/3"] + paths["/hop/2"] + paths["/hop/1"] + paths["/hop/0"]; n != 6+6 {
		// 6 from the five-hop chain (5..0), 6 from the six-hop chain
		// (6..1, its 6th redirect to /hop/0 not followed).
		t.Errorf("hop requests: %v", paths)
	}
	mu.Unlock()
	assertAccepted(t, two, 0)
}

func TestRedirectHTTPSToHTTP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	plain := serveCounting(t, l)
	target := "http://" + hostPort("127.0.0.1", plain.port()) + "/"
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/up" {
			ok(w, r)
			return
		}
		http.Redirect(w, r, target, http.StatusMovedPermanently)
	}))
	defer tlsSrv.Close()
	tlsCfg := tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig
	p := mustPolicy(t, &Config{AllowCIDRs: prefixes("127.0.0.1/32")}, WithTLSClientConfig(tlsCfg))
	c := p.Client("")
	if _, err := get(t, c, tlsSrv.URL+"/up"); err != nil {
		t.Fatalf("https itself: %v", err)
	}
	_, err = get(t, c, tlsSrv.URL+"/down")
	if r := refusalOf(t, err); r.Rule != RuleHTTPSDowngrade || r.Stage != StageRedirect {
		t.Errorf("refusal %+v", r)
	}
	assertAccepted(t, plain, 0)
}

func TestClientSettings(t *testing.T) {
	p := mustPolicy(t, &Config{AllowCIDRs: prefixes("127.0.0.1/32")}, WithResponseHeaderTimeout(50*time.Millisecond))
	c := p.Client("x")
	if c.Timeout != 0 {
		t.Errorf("client has an overall timeout %v", c.Timeout)
	}
	tr := p.transports[p.def]
	if tr.Proxy != nil {
		t.Error("transport uses a proxy, which would connect out of the policy's sight")
	}
	if tr.TLSHandshakeTimeout <= 0 || tr.IdleConnTimeout <= 0 || tr.MaxIdleConnsPerHost <= 0 {
		t.Errorf("transport timeouts unset: %+v", tr)
	}
	def := mustPolicy(t, nil)
	if d := def.transports[def.def].ResponseHeaderTimeout; d != DefaultResponseHeaderTimeout {
		t.Errorf("default response header timeout %v", d)
	}

	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	start := time.Now()
	_, err := c.Get(srv.URL)
	if err == nil || !strings.Contains(err.Error(), "timeout awaiting response headers") {
		t.Errorf("slow headers: %v", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("gave up after %v", el)
	}

	// The context bounds a call: there is no client timeout to do it.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	if _, err := mustPolicy(t, &Config{AllowCIDRs: prefixes("127.0.0.1/32")}).Client("").Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("context deadline: %v", err)
	}
}

func TestRebindingThroughClient(t *testing.T) {
	a, b := listenPair(t)
	two := serveCounting(t, b)
	srv := startServer(t, a, http.HandlerFunc(ok))
	port := strconv.Itoa(a.Addr().(*net.TCPAddr).Port)
	res := newResolver().sequence("rebind.test", []string{"127.0.0.1"}, []string{"127.0.0.2"})
	p := mustPolicy(t, &Config{AllowCIDRs: prefixes("127.0.0.1/32")}, WithResolver(res))
	c := p.Client("")
	u := "http://rebind.test:" + port + "/"
	if _, err := get(t, c, u); err != nil {
		t.Fatal(err)
	}
	// A new connection means a new lookup, now answering 127.0.0.2.
	p.CloseIdleConnections()
	_, err := get(t, c, u)
	if r := refusalOf(t, err); r.Rule != RuleLoopback {
		t.Errorf("refusal %+v", r)
	}
	if srv.requests.Load() != 1 {
		t.Errorf("server saw %d requests", srv.requests.Load())
	}
	assertAccepted(t, two, 0)
}
