package egress

import (
	"net/netip"
	"strings"
	"testing"
)

// decide runs the rule engine the way the dialer does for host at addr
// (addr "" means only the host rules) and returns the refusing rule, or ""
// when allowed.
func decide(t *testing.T, p *Policy, ns, host, addr string) string {
	t.Helper()
	v := p.view(ns)
	hv := v.checkHost(host)
	if hv.refusal != nil {
		if hv.refusal.Addr.IsValid() {
			t.Errorf("host rule refusal of %s carries an address %s", host, hv.refusal.Addr)
		}
		return hv.refusal.Rule
	}
	if addr == "" {
		return ""
	}
	a := netip.MustParseAddr(addr)
	if r := v.checkAddr(host, a, hv.needAddrAllow); r != nil {
		if r.Addr != a {
			t.Errorf("refusal of %s names address %s", addr, r.Addr)
		}
		return r.Rule
	}
	return ""
}

func mustPolicy(t *testing.T, cfg *Config, opts ...Option) *Policy {
	t.Helper()
	p, err := New(cfg, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

func prefixes(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range s {
		out = append(out, netip.MustParsePrefix(x))
	}
	return out
}

func TestDefaultPolicy(t *testing.T) {
	p := mustPolicy(t, nil)
	cases := []struct{ addr, want string }{
		{"127.0.0.1", RuleLoopback},
		{"127.255.255.254", RuleLoopback},
		{"::1", RuleLoopback},
		{"169.254.169.254", RuleMetadata},
		{"fd00:ec2::254", RuleMetadata},
		{"100.100.100.200", RuleMetadata},
		{"169.254.1.1", RuleLinkLocal},
		{"169.254.20.10", RuleLinkLocal},
		{"fe80::1", RuleLinkLocal},
		{"fe80::1%eth0", RuleLinkLocal},
		{"0.0.0.0", RuleUnspecified},
		{"0.1.2.3", RuleUnspecified},
		{"::", RuleUnspecified},
		{"224.0.0.1", RuleMulticast},
		{"239.255.255.250", RuleMulticast},
		{"ff02::1", RuleMulticast},
		{"255.255.255.255", RuleBroadcast},
		// IPv4-mapped, -translated, NAT64 and -compatible forms are judged
		// as the IPv4 address they reach.
		{"::ffff:127.0.0.1", RuleLoopback},
		{"::ffff:169.254.169.254", RuleMetadata},
		{"::ffff:0:127.0.0.1", RuleLoopback},
		{"::ffff:0:169.254.169.254", RuleMetadata},
		{"64:ff9b::169.254.169.254", RuleMetadata},
		{"64:ff9b::127.0.0.1", RuleLoopback},
		{"::127.0.0.1", RuleLoopback},
		{"::ffff:0.0.0.0", RuleUnspecified},
		// Private ranges and public addresses are allowed by default.
		{"10.0.0.1", ""},
		{"172.16.0.1", ""},
		{"172.31.255.254", ""},
		{"192.168.1.1", ""},
		{"fd12:3456::1", ""},
		{"fd00:ec2::253", ""},
		{"100.64.0.1", ""},
		{"8.8.8.8", ""},
		{"2001:db8::1", ""},
		{"::ffff:10.0.0.1", ""},
		{"64:ff9b::8.8.8.8", ""},
		{"169.253.255.255", ""},
		{"169.255.0.0", ""},
		{"128.0.0.1", ""},
		{"223.255.255.255", ""},
	}
	for _, c := range cases {
		if got := decide(t, p, "", "svc.example", c.addr); got != c.want {
			t.Errorf("%s: got %q, want %q", c.addr, got, c.want)
		}
	}
}

func TestProtectedPrefixes(t *testing.T) {
	p := mustPolicy(t, &Config{AllowCIDRs: prefixes("127.0.0.0/8")},
		WithAPIServerPrefixes(prefixes("10.96.0.1/32", "127.0.0.1/32", "::ffff:10.0.0.9/128")),
		WithManagerPodPrefixes(prefixes("10.244.1.5/32", "fd00:10:244::5/128", "fe80::fc:ff:fe00:1/128")))
	cases := []struct{ addr, want string }{
		{"10.96.0.1", RuleAPIServer},
		{"::ffff:10.96.0.1", RuleAPIServer},
		{"10.96.0.2", ""},
		{"10.0.0.9", RuleAPIServer}, // given IPv4-mapped, protected as IPv4
		{"10.244.1.5", RuleManagerPod},
		{"10.244.1.6", ""},
		{"fd00:10:244::5", RuleManagerPod},
		{"fe80::fc:ff:fe00:1", RuleManagerPod}, // more specific than link-local
		// Allowing loopback for development does not open an API server
		// listening there: the /32 is more specific than the /8.
		{"127.0.0.1", RuleAPIServer},
		{"127.0.0.2", ""},
	}
	for _, c := range cases {
		if got := decide(t, p, "", "x.example", c.addr); got != c.want {
			t.Errorf("%s: got %q, want %q", c.addr, got, c.want)
		}
	}
	if _, err := New(nil, WithAPIServerPrefixes([]netip.Prefix{{}})); err == nil {
		t.Error("New accepted an invalid API server prefix")
	}
}

func TestAllowedCIDRsLiftOnlyAsSpecificRefusals(t *testing.T) {
	cases := []struct {
		name  string
		allow []string
		addr  string
		want  string
	}{
		{"loopback opted in", []string{"127.0.0.0/8"}, "127.0.0.1", ""},
		{"loopback opted in, mapped", []string{"127.0.0.0/8"}, "::ffff:127.0.0.5", ""},
		{"IPv4 loopback does not open ::1", []string{"127.0.0.0/8"}, "::1", RuleLoopback},
		{"one loopback address", []string{"127.0.0.1/32"}, "127.0.0.1", ""},
		{"one loopback address, not the next", []string{"127.0.0.1/32"}, "127.0.0.2", RuleLoopback},
		{"link-local range", []string{"169.254.0.0/16"}, "169.254.20.10", ""},
		{"link-local range keeps metadata", []string{"169.254.0.0/16"}, "169.254.169.254", RuleMetadata},
		{"metadata only explicitly", []string{"169.254.169.254/32"}, "169.254.169.254", ""},
		{"everything is not specific", []string{"0.0.0.0/0"}, "127.0.0.1", RuleLoopback},
		{"everything IPv6 is not specific", []string{"::/0"}, "fe80::1", RuleLinkLocal},
		{"ULA range keeps AWS metadata", []string{"fc00::/7"}, "fd00:ec2::254", RuleMetadata},
		{"multicast opted in", []string{"224.0.0.0/4"}, "224.0.0.251", ""},
		{"unrelated allow", []string{"10.0.0.0/8"}, "127.0.0.1", RuleLoopback},
	}
	for _, c := range cases {
		p := mustPolicy(t, &Config{AllowCIDRs: prefixes(c.allow...)})
		if got := decide(t, p, "", "x.example", c.addr); got != c.want {
			t.Errorf("%s: %s with allow %v: got %q, want %q", c.name, c.addr, c.allow, got, c.want)
		}
	}
}

func TestDeniedCIDRs(t *testing.T) {
	p := mustPolicy(t, &Config{
		DenyCIDRs:  prefixes("10.0.0.0/8", "64:ff9b::/96", "fd00::/8"),
		AllowCIDRs: prefixes("10.1.2.3/32", "127.0.0.0/8"),
	})
	cases := []struct{ addr, want string }{
		{"10.2.3.4", RuleDeniedCIDR},
		{"10.1.2.3", RuleDeniedCIDR}, // a deny beats a more specific allow
		{"::ffff:10.2.3.4", RuleDeniedCIDR},
		{"64:ff9b::8.8.8.8", RuleDeniedCIDR}, // matched as written
		{"fd12::1", RuleDeniedCIDR},
		{"172.16.0.1", ""},
		{"127.0.0.1", ""},
	}
	for _, c := range cases {
		if got := decide(t, p, "", "x.example", c.addr); got != c.want {
			t.Errorf("%s: got %q, want %q", c.addr, got, c.want)
		}
	}
	r := p.view("").checkAddr("x.example", netip.MustParseAddr("10.1.2.3"), false)
	if r == nil || r.Match != "10.0.0.0/8" {
		t.Errorf("refusal %+v does not name the denied CIDR", r)
	}
}

func TestHostRules(t *testing.T) {
	p := mustPolicy(t, &Config{DenyHosts: []string{"*.internal.example.com", "Evil.Example.", "kubernetes.default.svc"}})
	cases := []struct{ host, want string }{
		{"a.internal.example.com", RuleDeniedHost},
		{"a.b.internal.example.com", RuleDeniedHost},
		{"A.Internal.EXAMPLE.com.", RuleDeniedHost},
		{"internal.example.com", ""}, // a wildcard needs one more label
		{"xinternal.example.com", ""},
		{"evil.example", RuleDeniedHost},
		{"EVIL.example.", RuleDeniedHost},
		{"sub.evil.example", ""}, // exact patterns are exact
		{"kubernetes.default.svc", RuleDeniedHost},
		{"good.example", ""},
		{"10.0.0.1", ""}, // IP literals match no host pattern
	}
	for _, c := range cases {
		if got := decide(t, p, "", c.host, ""); got != c.want {
			t.Errorf("%s: got %q, want %q", c.host, got, c.want)
		}
	}
}

func TestAllowlistMode(t *testing.T) {
	t.Run("hosts only", func(t *testing.T) {
		p := mustPolicy(t, &Config{AllowHosts: []string{"api.openai.com", "*.anthropic.com"}})
		cases := []struct{ host, addr, want string }{
			{"api.openai.com", "104.18.0.1", ""},
			{"API.OpenAI.com.", "104.18.0.1", ""},
			{"api.anthropic.com", "160.79.104.10", ""},
			{"anthropic.com", "", RuleNotAllowlisted},
			{"other.example", "", RuleNotAllowlisted},
			{"10.0.0.1", "", RuleNotAllowlisted},
			// An allowed host never lifts an address refusal: its DNS may
			// be tenant-influenced.
			{"api.openai.com", "127.0.0.1", RuleLoopback},
			{"api.openai.com", "169.254.169.254", RuleMetadata},
		}
		for _, c := range cases {
			if got := decide(t, p, "", c.host, c.addr); got != c.want {
				t.Errorf("%s at %q: got %q, want %q", c.host, c.addr, got, c.want)
			}
		}
	})
	t.Run("hosts and CIDRs", func(t *testing.T) {
		p := mustPolicy(t, &Config{AllowHosts: []string{"api.openai.com"}, AllowCIDRs: prefixes("10.0.0.0/8", "127.0.0.1/32")})
		cases := []struct{ host, addr, want string }{
			{"api.openai.com", "104.18.0.1", ""},
			{"mcp.tools.svc", "10.1.1.1", ""}, // admitted by address
			{"mcp.tools.svc", "192.168.1.1", RuleNotAllowlisted},
			{"10.0.0.7", "10.0.0.7", ""},
			{"192.168.0.7", "192.168.0.7", RuleNotAllowlisted},
			{"localhost", "127.0.0.1", ""},
			{"localhost", "127.0.0.2", RuleLoopback},
		}
		for _, c := range cases {
			if got := decide(t, p, "", c.host, c.addr); got != c.want {
				t.Errorf("%s at %q: got %q, want %q", c.host, c.addr, got, c.want)
			}
		}
	})
}

func TestNamespaceExceptions(t *testing.T) {
	p := mustPolicy(t, &Config{
		AllowHosts: []string{"api.openai.com"},
		DenyHosts:  []string{"*.blocked.example"},
		DenyCIDRs:  prefixes("10.0.0.0/8"),
		Namespaces: map[string]NamespaceException{
			"team-a": {AllowCIDRs: prefixes("169.254.20.10/32", "10.1.0.0/16", "192.168.0.0/16"), AllowHosts: []string{"mcp.team-a.example", "x.blocked.example"}},
		},
	})
	cases := []struct{ ns, host, addr, want string }{
		{"team-a", "mcp.team-a.example", "172.16.0.4", ""},
		{"team-b", "mcp.team-a.example", "", RuleNotAllowlisted},
		{"team-a", "node-dns.example", "169.254.20.10", ""},
		{"team-b", "169.254.20.10", "169.254.20.10", RuleNotAllowlisted},
		{"team-a", "169.254.169.254", "169.254.169.254", RuleMetadata},
		// A namespace's exceptions never beat a deny.
		{"team-a", "x.blocked.example", "", RuleDeniedHost},
		{"team-a", "svc.example", "10.1.2.3", RuleDeniedCIDR},
		{"team-a", "svc.example", "192.168.4.4", ""},
		{"team-b", "api.openai.com", "104.18.0.1", ""},
		{"", "mcp.team-a.example", "", RuleNotAllowlisted},
	}
	for _, c := range cases {
		if got := decide(t, p, c.ns, c.host, c.addr); got != c.want {
			t.Errorf("%s: %s at %q: got %q, want %q", c.ns, c.host, c.addr, got, c.want)
		}
	}
}

// TestPrecedence walks the documented order, denied host > denied CIDR >
// namespace exception allow > allowed CIDR/host > default refusals >
// default allow, each step with every lower layer also in play.
func TestPrecedence(t *testing.T) {
	cfg := &Config{
		AllowCIDRs: prefixes("127.0.0.0/8"),
		DenyCIDRs:  prefixes("127.0.0.3/32"),
		AllowHosts: []string{"*.example", "api.example"},
		DenyHosts:  []string{"bad.example"},
		Namespaces: map[string]NamespaceException{
			"team-a": {AllowCIDRs: prefixes("127.0.0.3/32", "169.254.169.254/32"), AllowHosts: []string{"bad.example", "team.other"}},
		},
	}
	p := mustPolicy(t, cfg)
	cases := []struct{ layer, ns, host, addr, want string }{
		{"denied host beats every allow", "team-a", "bad.example", "127.0.0.1", RuleDeniedHost},
		{"denied CIDR beats the namespace and global allows", "team-a", "api.example", "127.0.0.3", RuleDeniedCIDR},
		{"namespace allow beats a default refusal", "team-a", "api.example", "169.254.169.254", ""},
		{"namespace allow beats allowlist mode", "team-a", "team.other", "8.8.8.8", ""},
		{"without the exception the default refusal holds", "team-b", "api.example", "169.254.169.254", RuleMetadata},
		{"without the exception allowlist mode holds", "team-b", "team.other", "8.8.8.8", RuleNotAllowlisted},
		{"allowed CIDR beats a default refusal", "team-b", "api.example", "127.0.0.1", ""},
		{"allowed host passes allowlist mode", "team-b", "api.example", "8.8.8.8", ""},
		{"default refusal beats default allow", "team-b", "api.example", "169.254.1.1", RuleLinkLocal},
		{"default allow", "team-b", "api.example", "10.0.0.1", ""},
	}
	for _, c := range cases {
		if got := decide(t, p, c.ns, c.host, c.addr); got != c.want {
			t.Errorf("%s: %s %s at %s: got %q, want %q", c.layer, c.ns, c.host, c.addr, got, c.want)
		}
	}
}

func TestPatterns(t *testing.T) {
	good := []struct{ in, norm string }{
		{"api.example.com", "api.example.com"},
		{"API.Example.COM.", "api.example.com"},
		{"*.example.com", "*.example.com"},
		{"*.Example.com.", "*.example.com"},
		{"_acme.example.com", "_acme.example.com"},
		{"localhost", "localhost"},
		{"xn--bcher-kva.example", "xn--bcher-kva.example"},
	}
	for _, g := range good {
		p, err := parsePattern(g.in)
		if err != nil {
			t.Errorf("%q: %v", g.in, err)
			continue
		}
		if p.String() != g.norm {
			t.Errorf("%q normalized to %q, want %q", g.in, p, g.norm)
		}
	}
	bad := []struct{ in, msg string }{
		{"", "empty"},
		{"*", "needs a suffix"},
		{"*.", "needs a suffix"},
		{"foo.*.com", "leading"},
		{"*foo.com", "leading"},
		{"**.foo.com", "leading"},
		{"10.0.0.1", "CIDR"},
		{"::1", "CIDR"},
		{"[::1]", "CIDR"},
		{"https://api.example.com", "bare host name"},
		{"api.example.com:443", "bare host name"},
		{"api.example.com/v1", "bare host name"},
		{"a b.com", "bare host name"},
		{"a..b.com", "empty label"},
		{".a.com", "empty label"},
		{"-a.com", "'-'"},
		{"a!.com", "character"},
		{"bücher.example", "xn--"},
		{strings.Repeat("a", 64) + ".com", "63"},
		{strings.Repeat("a.", 127) + "com", "253"},
	}
	for _, b := range bad {
		_, err := parsePattern(b.in)
		if err == nil {
			t.Errorf("%q accepted", b.in)
		} else if !strings.Contains(err.Error(), b.msg) {
			t.Errorf("%q: error %q does not mention %q", b.in, err, b.msg)
		}
	}
}

func TestCanonical(t *testing.T) {
	cases := []struct{ in, want string }{
		{"::ffff:1.2.3.4", "1.2.3.4"},
		{"::ffff:0:1.2.3.4", "1.2.3.4"},
		{"64:ff9b::1.2.3.4", "1.2.3.4"},
		{"::1.2.3.4", "1.2.3.4"},
		{"::1", "::1"},
		{"::", "::"},
		{"fe80::1%eth0", "fe80::1"},
		{"2001:db8::1", "2001:db8::1"},
		{"64:ff9b:1::1.2.3.4", "64:ff9b:1::102:304"}, // local-use NAT64 is not decoded
	}
	for _, c := range cases {
		if got := canonical(netip.MustParseAddr(c.in)); got.String() != c.want {
			t.Errorf("canonical(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestPolicyIsImmutable(t *testing.T) {
	cfg := &Config{AllowCIDRs: prefixes("127.0.0.1/32"), DenyCIDRs: prefixes("10.0.0.0/8"), Namespaces: map[string]NamespaceException{
		"team-a": {AllowCIDRs: prefixes("169.254.20.10/32")},
	}}
	p := mustPolicy(t, cfg)
	cfg.AllowCIDRs[0] = netip.MustParsePrefix("169.254.169.254/32")
	cfg.DenyCIDRs[0] = netip.MustParsePrefix("127.0.0.0/8")
	cfg.Namespaces["team-a"].AllowCIDRs[0] = netip.MustParsePrefix("169.254.169.254/32")
	cfg.Namespaces["team-b"] = NamespaceException{AllowCIDRs: prefixes("127.0.0.0/8")}
	for _, c := range []struct{ ns, addr, want string }{
		{"", "127.0.0.1", ""},
		{"", "169.254.169.254", RuleMetadata},
		{"", "10.0.0.1", RuleDeniedCIDR},
		{"team-a", "169.254.20.10", ""},
		{"team-a", "169.254.169.254", RuleMetadata},
		{"team-b", "127.0.0.2", RuleLoopback},
	} {
		if got := decide(t, p, c.ns, "x.example", c.addr); got != c.want {
			t.Errorf("%s %s after changing the Config: %q, want %q", c.ns, c.addr, got, c.want)
		}
	}
}
