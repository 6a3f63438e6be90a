package egress

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestCheckURL(t *testing.T) {
	res := newResolver().
		set("svc.tools.svc", "10.0.0.5").
		set("mixed.example", "10.0.0.5", "127.0.0.1").
		set("meta.example", "::ffff:169.254.169.254").
		set("bad.example", "10.0.0.6")
	var count int
	p := mustPolicy(t, &Config{DenyHosts: []string{"bad.example"}}, WithResolver(res), WithOnRefusal(func(*Refusal) { count++ }))
	ctx := testCtx(t)
	cases := []struct {
		url  string
		rule string // "" for no refusal
		err  error  // a sentinel the error wraps, when not a refusal
	}{
		{"http://svc.tools.svc:8080/mcp", "", nil},
		{"HTTPS://svc.tools.svc/hook", "", nil},
		{"http://10.0.0.1/", "", nil},
		{"ftp://svc.tools.svc/", RuleScheme, nil},
		{"file:///etc/passwd", RuleScheme, nil},
		{"gopher://svc.tools.svc/", RuleScheme, nil},
		{"svc.tools.svc/hook", RuleScheme, nil},
		{"//svc.tools.svc/hook", RuleScheme, nil},
		{"http://169.254.169.254/latest/meta-data/", RuleMetadata, nil},
		{"http://[::ffff:127.0.0.1]:8080/", RuleLoopback, nil},
		{"http://[fe80::1%25eth0]/", RuleLinkLocal, nil},
		{"http://0.0.0.0:8080/", RuleUnspecified, nil},
		{"http://mixed.example/", RuleLoopback, nil},
		{"http://meta.example/", RuleMetadata, nil},
		{"http://Bad.Example./", RuleDeniedHost, nil},
		{"http://user@bad.example/", RuleDeniedHost, nil},
		{"http://nowhere.example/", "", ErrUnresolved},
		{"http:///path", "", ErrInvalidURL},
		{"http://svc.tools.svc:99999/", "", ErrInvalidURL},
		{"http://svc.tools.svc:0/", "", ErrInvalidURL},
		{"http://[::1/", "", ErrInvalidURL},
		{"http://a b/", "", ErrInvalidURL},
	}
	wantCount := 0
	for _, c := range cases {
		err := p.CheckURL(ctx, "team-a", c.url)
		switch {
		case c.rule != "":
			wantCount++
			var r *Refusal
			if !errors.As(err, &r) {
				t.Errorf("%s: %v is not a refusal", c.url, err)
			} else if r.Rule != c.rule || r.Stage != StageURL || r.Namespace != "team-a" {
				t.Errorf("%s: refusal %+v, want rule %s", c.url, r, c.rule)
			}
		case c.err != nil:
			if !errors.Is(err, c.err) {
				t.Errorf("%s: %v, want %v", c.url, err, c.err)
			}
		case err != nil:
			t.Errorf("%s: %v", c.url, err)
		}
	}
	if count != wantCount {
		t.Errorf("OnRefusal called %d times, want %d", count, wantCount)
	}
	if n := res.lookups("bad.example"); n != 0 {
		t.Errorf("a denied host was looked up %d times", n)
	}
}

func TestAPIServerPrefixes(t *testing.T) {
	res := newResolver().set("kubernetes.default.svc", "10.96.0.1", "fd00:10:96::1", "10.96.0.1")
	ctx := testCtx(t)
	cases := []struct {
		host string
		want []string
	}{
		{"https://10.0.0.1:6443", []string{"10.0.0.1/32"}},
		{"10.0.0.1:6443", []string{"10.0.0.1/32"}},
		{"10.0.0.1", []string{"10.0.0.1/32"}},
		{"https://[fd00::1]:6443", []string{"fd00::1/128"}},
		{"https://[::ffff:10.0.0.1]:443", []string{"10.0.0.1/32"}},
		{"https://127.0.0.1:39117/", []string{"127.0.0.1/32"}},
		{"https://kubernetes.default.svc", []string{"10.96.0.1/32", "fd00:10:96::1/128"}},
		{"kubernetes.default.svc:443", []string{"10.96.0.1/32", "fd00:10:96::1/128"}},
	}
	for _, c := range cases {
		got, err := APIServerPrefixes(ctx, c.host, res)
		if err != nil {
			t.Errorf("%s: %v", c.host, err)
			continue
		}
		if !slices.Equal(got, prefixes(c.want...)) {
			t.Errorf("%s: %v, want %v", c.host, got, c.want)
		}
	}
	for _, bad := range []string{"", "https://", "nowhere.test:6443", "https://[::1"} {
		if got, err := APIServerPrefixes(ctx, bad, res); err == nil {
			t.Errorf("%q: %v, want an error", bad, got)
		}
	}

	ps, err := APIServerPrefixes(ctx, "https://10.96.0.1:443", nil)
	if err != nil {
		t.Fatal(err)
	}
	p := mustPolicy(t, nil, WithAPIServerPrefixes(ps))
	err = p.CheckURL(ctx, "", "https://10.96.0.1/api/v1/secrets")
	if r := refusalOf(t, err); r.Rule != RuleAPIServer || !strings.Contains(r.Remedy(), "API server") {
		t.Errorf("refusal %+v: %s", r, r.Remedy())
	}
}

func TestLocalInterfacePrefixes(t *testing.T) {
	got, err := LocalInterfacePrefixes()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range got {
		if p.Bits() != p.Addr().BitLen() {
			t.Errorf("%v is not a single address", p)
		}
		if p.Addr().IsLoopback() || p.Addr().Is4In6() || p.Addr().Zone() != "" {
			t.Errorf("%v should have been left out or normalized", p)
		}
	}
	// Every non-loopback address of every interface is listed, found here
	// through the per-interface API.
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var want int
	for _, ifc := range ifaces {
		addrs, err := ifc.Addrs()
		if err != nil {
			t.Fatal(err)
		}
		for _, ia := range addrs {
			ipn, ok := ia.(*net.IPNet)
			if !ok {
				continue
			}
			a, _ := netip.AddrFromSlice(ipn.IP)
			if a = a.Unmap(); a.IsLoopback() {
				continue
			}
			want++
			if !slices.Contains(got, netip.PrefixFrom(a, a.BitLen())) {
				t.Errorf("interface %s address %s missing from %v", ifc.Name, a, got)
			}
		}
	}
	if want == 0 {
		t.Skip("this machine has no non-loopback address to check")
	}
	p := mustPolicy(t, nil, WithManagerPodPrefixes(got))
	for _, pr := range got {
		if rule := decide(t, p, "", "manager.example", pr.Addr().String()); rule != RuleManagerPod {
			t.Errorf("own address %s: rule %q", pr.Addr(), rule)
		}
	}
}

func TestRefusalMessages(t *testing.T) {
	cases := []struct {
		r         Refusal
		errHas    []string
		remedyHas []string
		remedyNot string
	}{
		{Refusal{Host: "localhost", Addr: netip.MustParseAddr("127.0.0.1"), Namespace: "team-a", Rule: RuleLoopback, Match: "127.0.0.0/8"},
			[]string{"localhost (address 127.0.0.1)", "team-a", "loopback", "rule loopback"},
			[]string{"--egress-allow-cidr=127.0.0.0/8", "allow_cidrs", "namespaces.team-a.allow_cidrs", DefaultConfigMapName}, ""},
		{Refusal{Host: "::1", Addr: netip.MustParseAddr("::1"), Rule: RuleLoopback},
			[]string{"::1: loopback"}, []string{"--egress-allow-cidr=::1/128"}, "namespaces."},
		{Refusal{Host: "x", Addr: netip.MustParseAddr("::ffff:169.254.169.254"), Rule: RuleMetadata},
			[]string{"reaches IPv4 169.254.169.254", "metadata"}, []string{"169.254.169.254/32", "credentials"}, ""},
		{Refusal{Host: "x", Addr: netip.MustParseAddr("169.254.20.10"), Rule: RuleLinkLocal},
			[]string{"link-local"}, []string{"--egress-allow-cidr=169.254.20.10/32"}, ""},
		{Refusal{Host: "k", Addr: netip.MustParseAddr("10.96.0.1"), Rule: RuleAPIServer},
			[]string{"API server"}, []string{"10.96.0.1/32"}, ""},
		{Refusal{Host: "m", Addr: netip.MustParseAddr("10.244.0.5"), Rule: RuleManagerPod},
			[]string{"manager pod"}, []string{"10.244.0.5/32"}, ""},
		{Refusal{Host: "m", Addr: netip.MustParseAddr("224.0.0.1"), Rule: RuleMulticast},
			[]string{"multicast"}, []string{"not a unicast"}, ""},
		{Refusal{Host: "db.example", Addr: netip.MustParseAddr("10.1.2.3"), Rule: RuleDeniedCIDR, Match: "10.0.0.0/8"},
			[]string{"denied CIDR 10.0.0.0/8"}, []string{"--egress-deny-cidr", "deny_cidrs", "10.0.0.0/8"}, ""},
		{Refusal{Host: "a.internal.example", Rule: RuleDeniedHost, Match: "*.internal.example"},
			[]string{`a.internal.example: matches denied host pattern "*.internal.example"`}, []string{"--egress-deny-host", "deny_hosts"}, ""},
		{Refusal{Host: "mcp.example", Namespace: "ci", Rule: RuleNotAllowlisted},
			[]string{"mcp.example for namespace ci"}, []string{"--egress-allow-host", "allow_hosts", "namespaces.ci.allow_hosts"}, "allow_cidrs"},
		{Refusal{Host: "10.0.0.8", Rule: RuleNotAllowlisted},
			[]string{"10.0.0.8"}, []string{"--egress-allow-cidr", "10.0.0.8/32", "--egress-allow-host"}, ""},
		{Refusal{Host: "mcp.example", Addr: netip.MustParseAddr("192.168.1.4"), Rule: RuleNotAllowlisted},
			[]string{"no allowed CIDR"}, []string{"192.168.1.4/32", "--egress-allow-host"}, ""},
		{Refusal{Rule: RuleScheme, Match: "file"},
			[]string{`the URL: scheme "file"`}, []string{"http://", `"file"`}, ""},
		{Refusal{Host: "x.example", Rule: RuleHTTPSDowngrade},
			[]string{"https to http"}, []string{"https address"}, ""},
		{Refusal{Rule: RuleScheme},
			[]string{"has no scheme"}, []string{"http://"}, `""`},
	}
	for _, c := range cases {
		msg, remedy := c.r.Error(), c.r.Remedy()
		for _, s := range c.errHas {
			if !strings.Contains(msg, s) {
				t.Errorf("%s: Error() %q lacks %q", c.r.Rule, msg, s)
			}
		}
		for _, s := range c.remedyHas {
			if !strings.Contains(remedy, s) {
				t.Errorf("%s: Remedy() %q lacks %q", c.r.Rule, remedy, s)
			}
		}
		if c.remedyNot != "" && strings.Contains(remedy, c.remedyNot) {
			t.Errorf("%s: Remedy() %q should not mention %q", c.r.Rule, remedy, c.remedyNot)
		}
		if strings.Count(remedy, ". ") > 0 || !strings.HasSuffix(remedy, ".") {
			t.Errorf("%s: Remedy() %q is not one sentence", c.r.Rule, remedy)
		}
	}
}

var _ Resolver = net.DefaultResolver
