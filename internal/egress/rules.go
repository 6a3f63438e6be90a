package egress

import (
	"cmp"
	"net/netip"
	"slices"
)

// Rule words name why a destination was refused. They are stable, short and
// meant for metrics labels and conditions.
const (
	RuleLoopback       = "loopback"
	RuleLinkLocal      = "link-local"
	RuleMetadata       = "metadata"
	RuleAPIServer      = "apiserver"
	RuleManagerPod     = "manager-pod"
	RuleUnspecified    = "unspecified"
	RuleMulticast      = "multicast"
	RuleBroadcast      = "broadcast"
	RuleDeniedCIDR     = "denied-cidr"
	RuleDeniedHost     = "denied-host"
	RuleNotAllowlisted = "not-allowlisted"
	// RuleScheme refuses a URL whose scheme is not http or https.
	RuleScheme = "scheme"
	// RuleHTTPSDowngrade refuses a redirect from https to http.
	RuleHTTPSDowngrade = "https-downgrade"
)

// refusalRange is one default refusal: a range and the rule that names it.
type refusalRange struct {
	prefix netip.Prefix
	rule   string
}

// builtinRefusals are refused with no configuration. Private ranges
// (10/8, 172.16/12, 192.168/16, fc00::/7) are deliberately absent: in-cluster
// Services live there.
var builtinRefusals = []refusalRange{
	// Cloud metadata services hand out the node's credentials. AWS, GCP,
	// Azure and OpenStack answer on 169.254.169.254, AWS also on
	// fd00:ec2::254 (inside fc00::/7, which is otherwise allowed), and
	// Alibaba Cloud on 100.100.100.200.
	{netip.MustParsePrefix("169.254.169.254/32"), RuleMetadata},
	{netip.MustParsePrefix("fd00:ec2::254/128"), RuleMetadata},
	{netip.MustParsePrefix("100.100.100.200/32"), RuleMetadata},
	{netip.MustParsePrefix("127.0.0.0/8"), RuleLoopback},
	{netip.MustParsePrefix("::1/128"), RuleLoopback},
	{netip.MustParsePrefix("169.254.0.0/16"), RuleLinkLocal},
	{netip.MustParsePrefix("fe80::/10"), RuleLinkLocal},
	{netip.MustParsePrefix("0.0.0.0/8"), RuleUnspecified},
	{netip.MustParsePrefix("::/128"), RuleUnspecified},
	{netip.MustParsePrefix("224.0.0.0/4"), RuleMulticast},
	{netip.MustParsePrefix("ff00::/8"), RuleMulticast},
	{netip.MustParsePrefix("255.255.255.255/32"), RuleBroadcast},
}

// embeddingPrefixes are IPv6 forms that carry an IPv4 address in their last
// 32 bits and reach that IPv4 host: IPv4-translated (SIIT), the NAT64
// well-known prefix and the deprecated IPv4-compatible form. IPv4-mapped
// addresses (::ffff:0:0/96) are handled by Unmap.
var embeddingPrefixes = []netip.Prefix{
	netip.MustParsePrefix("::ffff:0:0:0/96"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("::/96"),
}

var (
	ipv6Loopback    = netip.IPv6Loopback()
	ipv6Unspecified = netip.IPv6Unspecified()
)

// canonical is the address the rules judge a by: without its zone, and as
// IPv4 when a is an IPv6 form that embeds an IPv4 address, so that
// ::ffff:127.0.0.1 is judged as 127.0.0.1.
func canonical(a netip.Addr) netip.Addr {
	a = a.WithZone("").Unmap()
	if !a.Is6() || a == ipv6Loopback || a == ipv6Unspecified {
		return a
	}
	for _, p := range embeddingPrefixes {
		if p.Contains(a) {
			b := a.As16()
			return netip.AddrFrom4([4]byte(b[12:16]))
		}
	}
	return a
}

// view is the effective policy of one namespace: the global rules plus that
// namespace's exceptions. Namespaces without exceptions share one view, and
// so one transport.
type view struct {
	// allowCIDRs holds the global and the namespace's allowed prefixes.
	allowCIDRs []netip.Prefix
	denyCIDRs  []netip.Prefix
	// allowHosts holds the global and the namespace's allowed patterns.
	allowHosts []pattern
	denyHosts  []pattern
	// allowlist is on when global allowed host patterns are configured: a
	// destination must then be allowed by name or by an allowed CIDR. A
	// namespace's exceptions never turn it on.
	allowlist bool
	// refusals holds the built-in and the protected ranges, most specific
	// first.
	refusals []refusalRange
}

// sortRefusals orders ranges most specific first; among equally specific
// ranges the earlier one wins, so built-in metadata ranges and protected
// ranges are named before broader rules.
func sortRefusals(rs []refusalRange) {
	slices.SortStableFunc(rs, func(a, b refusalRange) int { return cmp.Compare(b.prefix.Bits(), a.prefix.Bits()) })
}

// hostVerdict is the outcome of the host rules.
type hostVerdict struct {
	// refusal is set when a host rule refuses the host outright.
	refusal *Refusal
	// needAddrAllow means the host passed only because the address rules
	// can still admit it: in allowlist mode a host matching no allowed
	// pattern (or an IP literal) is admitted only at an address inside an
	// allowed CIDR.
	needAddrAllow bool
}

// checkHost applies the host rules: denied patterns, then (in allowlist
// mode) allowed patterns. An IP literal matches no pattern.
func (v *view) checkHost(host string) hostVerdict {
	h := normalizeHost(host)
	isIP := false
	if _, err := netip.ParseAddr(h); err == nil {
		isIP = true
	}
	if !isIP {
		for _, p := range v.denyHosts {
			if p.match(h) {
				return hostVerdict{refusal: &Refusal{Host: h, Rule: RuleDeniedHost, Match: p.String()}}
			}
		}
	}
	if !v.allowlist {
		return hostVerdict{}
	}
	if !isIP {
		for _, p := range v.allowHosts {
			if p.match(h) {
				return hostVerdict{}
			}
		}
	}
	if len(v.allowCIDRs) == 0 {
		// No address can admit it either: refuse without a lookup.
		return hostVerdict{refusal: &Refusal{Host: h, Rule: RuleNotAllowlisted}}
	}
	return hostVerdict{needAddrAllow: true}
}

// checkAddr applies the address rules to a, one of host's addresses:
// denied CIDRs, then the most specific default refusal, which an allowed
// CIDR lifts only when it is at least as specific (so allowing
// 169.254.0.0/16 for a node-local service does not open 169.254.169.254/32,
// and allowing 127.0.0.0/8 does not open an API server at 127.0.0.1/32).
func (v *view) checkAddr(host string, a netip.Addr, needAddrAllow bool) *Refusal {
	c, raw := canonical(a), a.WithZone("").Unmap()
	refuse := func(rule string, match netip.Prefix) *Refusal {
		r := &Refusal{Host: normalizeHost(host), Addr: a, Rule: rule}
		if match.IsValid() {
			r.Match = match.String()
		}
		return r
	}
	// A deny matches the address as written too, so denying 64:ff9b::/96
	// refuses NAT64 even though its addresses are judged as IPv4.
	for _, p := range v.denyCIDRs {
		if p.Contains(c) || p.Contains(raw) {
			return refuse(RuleDeniedCIDR, p)
		}
	}
	allowBits := -1
	for _, p := range v.allowCIDRs {
		if p.Contains(c) && p.Bits() > allowBits {
			allowBits = p.Bits()
		}
	}
	for _, r := range v.refusals {
		if r.prefix.Contains(c) {
			if allowBits < r.prefix.Bits() {
				return refuse(r.rule, r.prefix)
			}
			break
		}
	}
	if needAddrAllow && allowBits < 0 {
		return refuse(RuleNotAllowlisted, netip.Prefix{})
	}
	return nil
}
