package egress

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitAccepted waits until l has accepted n connections.
func waitAccepted(t *testing.T, l *countingListener, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.accepted.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s accepted %d connections, want %d", l.Addr(), l.accepted.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// assertAccepted checks that l accepted exactly n connections so far. It
// connects once more directly and waits for that connection: the accept
// queue is ordered, so every earlier connection has been counted by then.
func assertAccepted(t *testing.T, l *countingListener, n int64) {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitAccepted(t, l, n+1)
	if got := l.accepted.Load() - 1; got != n {
		t.Errorf("%s accepted %d connections from the policy, want %d", l.Addr(), got, n)
	}
	l.accepted.Add(-1) // forget the probe
}

// refusalOf returns the *Refusal inside err, failing the test if there is
// none.
func refusalOf(t *testing.T, err error) *Refusal {
	t.Helper()
	var r *Refusal
	if !errors.As(err, &r) {
		t.Fatalf("error %v (%T) holds no *Refusal", err, err)
	}
	return r
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

func TestDialAllowedAndRefused(t *testing.T) {
	a, b := listenPair(t)
	one, two := serveCounting(t, a), serveCounting(t, b)
	port := one.port()
	res := newResolver().set("two.test", "127.0.0.2").set("one-mapped.test", "::ffff:127.0.0.1")
	p := mustPolicy(t, &Config{AllowCIDRs: prefixes("127.0.0.1/32")}, WithResolver(res))
	d := p.Dialer("team-a")
	ctx := testCtx(t)

	for _, target := range []string{"127.0.0.1", "::ffff:127.0.0.1", "one-mapped.test"} {
		c, err := d.DialContext(ctx, "tcp", hostPort(target, port))
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		if got := c.RemoteAddr().String(); got != hostPort("127.0.0.1", port) {
			t.Errorf("%s: connected to %s", target, got)
		}
		c.Close()
	}
	waitAccepted(t, one, 3)

	for _, target := range []string{"127.0.0.2", "::ffff:127.0.0.2", "two.test"} {
		c, err := d.DialContext(ctx, "tcp", hostPort(target, port))
		if err == nil {
			c.Close()
			t.Fatalf("%s: dial succeeded", target)
		}
		var op *net.OpError
		if !errors.As(err, &op) || op.Op != "dial" {
			t.Errorf("%s: %v is not a dial *net.OpError", target, err)
		}
		r := refusalOf(t, err)
		if r.Rule != RuleLoopback || r.Stage != StageDial || r.Namespace != "team-a" || canonical(r.Addr) != netip.MustParseAddr("127.0.0.2") {
			t.Errorf("%s: refusal %+v", target, r)
		}
		if !strings.Contains(err.Error(), "127.0.0.2") {
			t.Errorf("%s: error %q does not name the address", target, err)
		}
	}
	assertAccepted(t, two, 0)
	assertAccepted(t, one, 3)
}

func TestDialMixedAnswers(t *testing.T) {
	t.Run("refused first", func(t *testing.T) {
		a, b := listenPair(t)
		one, two := serveCounting(t, a), serveCounting(t, b)
		res := newResolver().set("mixed.test", "127.0.0.2", "127.0.0.1")
		p := mustPolicy(t, &Config{AllowCIDRs: prefixes("127.0.0.1/32")}, WithResolver(res))
		c, err := p.Dialer("").DialContext(testCtx(t), "tcp", hostPort("mixed.test", one.port()))
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		assertAccepted(t, one, 1)
		assertAccepted(t, two, 0)
	})
	t.Run("allowed one down", func(t *testing.T) {
		// Nothing listens on 127.0.0.1 at the port; 127.0.0.2 does. A
		// dialer that fell back to the next answer would reach it.
		a, b := listenPair(t)
		port := a.Addr().(*net.TCPAddr).Port
		a.Close()
		two := serveCounting(t, b)
		res := newResolver().set("mixed.test", "127.0.0.1", "127.0.0.2")
		p := mustPolicy(t, &Config{AllowCIDRs: prefixes("127.0.0.1/32")}, WithResolver(res))
		c, err := p.Dialer("").DialContext(testCtx(t), "tcp", hostPort("mixed.test", port))
		if err == nil {
			c.Close()
			t.Fatal("dial succeeded")
		}
		var r *Refusal
		if errors.As(err, &r) {
			t.Errorf("an allowed address that is down is not a refusal: %v", err)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("error %v is not the refused connection to 127.0.0.1", err)
		}
		assertAccepted(t, two, 0)
	})
	t.Run("all refused", func(t *testing.T) {
		res := newResolver().set("bad.test", "169.254.169.254", "127.0.0.1")
		p := mustPolicy(t, nil, WithResolver(res))
		_, err := p.Dialer("").DialContext(testCtx(t), "tcp", "bad.test:80")
		if r := refusalOf(t, err); r.Rule != RuleMetadata || r.Host != "bad.test" {
			t.Errorf("refusal %+v, want the first refused answer", r)
		}
	})
}

func TestDNSRebinding(t *testing.T) {
	t.Run("check then dial", func(t *testing.T) {
		a, b := listenPair(t)
		one, two := serveCounting(t, a), serveCounting(t, b)
		url := "http://" + hostPort("rebind.test", one.port()) + "/"
		res := newResolver().sequence("rebind.test", []string{"127.0.0.1"}, []string{"127.0.0.2"})
		p := mustPolicy(t, &Config{AllowCIDRs: prefixes("127.0.0.1/32")}, WithResolver(res))
		if err := p.CheckURL(testCtx(t), "", url); err != nil {
			t.Fatalf("CheckURL on the first answer: %v", err)
		}
		_, err := p.Dialer("").DialContext(testCtx(t), "tcp", hostPort("rebind.test", one.port()))
		if r := refusalOf(t, err); r.Rule != RuleLoopback || r.Addr != netip.MustParseAddr("127.0.0.2") {
			t.Errorf("refusal %+v", r)
		}
		assertAccepted(t, two, 0)
		assertAccepted(t, one, 0)
	})
	t.Run("dial uses the address it checked", func(t *testing.T) {
		a, b := listenPair(t)
		one, two := serveCounting(t, a), serveCounting(t, b)
		res := newResolver().sequence("rebind.test", []string{"127.0.0.1"}, []string{"127.0.0.2"})
		p := mustPolicy(t, &Config{AllowCIDRs: prefixes("127.0.0.1/32")}, WithResolver(res))
		c, err := p.Dialer("").DialContext(testCtx(t), "tcp", hostPort("rebind.test", one.port()))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got := c.RemoteAddr().String(); got != hostPort("127.0.0.1", one.port()) {
			t.Errorf("connected to %s", got)
		}
		if n := res.lookups("rebind.test"); n != 1 {
			t.Errorf("the dial looked the name up %d times, want once", n)
		}
		assertAccepted(t, one, 1)
		assertAccepted(t, two, 0)
	})
}

func TestDialHostRulesNeedNoLookup(t *testing.T) {
	res := newResolver().set("bad.test", "10.0.0.1").set("other.test", "10.0.0.1")
	p := mustPolicy(t, &Config{DenyHosts: []string{"bad.test"}}, WithResolver(res))
	_, err := p.Dialer("").DialContext(testCtx(t), "tcp", "BAD.test.:443")
	if r := refusalOf(t, err); r.Rule != RuleDeniedHost || r.Addr.IsValid() || r.Host != "bad.test" || r.Match != "bad.test" {
		t.Errorf("refusal %+v", r)
	}
	q := mustPolicy(t, &Config{AllowHosts: []string{"good.test"}}, WithResolver(res))
	_, err = q.Dialer("").DialContext(testCtx(t), "tcp", "other.test:443")
	if r := refusalOf(t, err); r.Rule != RuleNotAllowlisted || r.Addr.IsValid() {
		t.Errorf("refusal %+v", r)
	}
	if n := res.lookups("bad.test") + res.lookups("other.test"); n != 0 {
		t.Errorf("%d lookups for hosts the host rules refuse", n)
	}
}

func TestDialErrors(t *testing.T) {
	res := newResolver().set("v6only.test", "::1")
	p := mustPolicy(t, &Config{AllowCIDRs: prefixes("127.0.0.0/8", "::1/128")}, WithResolver(res))
	d := p.Dialer("")
	ctx := testCtx(t)
	cases := []struct{ network, address, msg string }{
		{"udp", "127.0.0.1:53", `network "udp" is not supported`},
		{"unix", "/run/x.sock", "not supported"},
		{"tcp", "127.0.0.1", "missing port"},
		{"tcp", "127.0.0.1:http", "not a number"},
		{"tcp4", "v6only.test:80", "no address of the requested family"},
		{"tcp6", "127.0.0.1:80", "no address of the requested family"},
		{"tcp", "nowhere.test:80", "no such host"},
	}
	for _, c := range cases {
		conn, err := d.DialContext(ctx, c.network, c.address)
		if err == nil {
			conn.Close()
			t.Errorf("%s %s: dial succeeded", c.network, c.address)
			continue
		}
		var r *Refusal
		if errors.As(err, &r) {
			t.Errorf("%s %s: %v is not a policy refusal", c.network, c.address, err)
		}
		if !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s %s: %v does not say %q", c.network, c.address, err, c.msg)
		}
	}
}

func TestOnlyAddrsControl(t *testing.T) {
	ctl := onlyAddrs([]netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("fe80::1%lo")})
	ctx := testCtx(t)
	for _, a := range []string{"127.0.0.1:80", "[::ffff:127.0.0.1]:80", "[fe80::1%lo]:80"} {
		if err := ctl(ctx, "tcp", a, nil); err != nil {
			t.Errorf("%s: %v", a, err)
		}
	}
	for _, a := range []string{"127.0.0.2:80", "[fe80::1]:80", "localhost:80", "garbage"} {
		if err := ctl(ctx, "tcp", a, nil); err == nil {
			t.Errorf("%s: allowed", a)
		}
	}
}
