package egress

import (
	"flag"
	"fmt"
	"net/netip"
	"strings"
)

// Flag names bound by BindFlags.
const (
	FlagAllowCIDR = "egress-allow-cidr"
	FlagDenyCIDR  = "egress-deny-cidr"
	FlagAllowHost = "egress-allow-host"
	FlagDenyHost  = "egress-deny-host"
)

// BindFlags registers the repeatable flags --egress-allow-cidr,
// --egress-deny-cidr, --egress-allow-host and --egress-deny-host on fs. Each
// takes a comma-separated list and may be repeated; values are validated as
// they are parsed and appended to c. Combine the result with the ConfigMap's
// config through Merge.
func BindFlags(fs *flag.FlagSet, c *Config) {
	fs.Var(&cidrList{&c.AllowCIDRs}, FlagAllowCIDR, "CIDR the manager may connect to on a tenant's behalf although the default policy refuses it, e.g. 127.0.0.0/8 for local development; comma-separated, repeatable")
	fs.Var(&cidrList{&c.DenyCIDRs}, FlagDenyCIDR, "CIDR the manager must never connect to on a tenant's behalf (beats every allow); comma-separated, repeatable")
	fs.Var(&hostList{&c.AllowHosts}, FlagAllowHost, "host or *.suffix the manager may connect to; when set, hosts matching none are refused (allowlist mode); comma-separated, repeatable")
	fs.Var(&hostList{&c.DenyHosts}, FlagDenyHost, "host or *.suffix the manager must never connect to (beats everything); comma-separated, repeatable")
}

// splitList splits a flag value on commas, trimming spaces and dropping
// empty items, so "a, b," is two items.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

type cidrList struct{ dst *[]netip.Prefix }

func (l *cidrList) String() string {
	if l == nil || l.dst == nil {
		return ""
	}
	s := make([]string, len(*l.dst))
	for i, p := range *l.dst {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func (l *cidrList) Set(v string) error {
	items := splitList(v)
	if len(items) == 0 {
		return fmt.Errorf("empty value; give a CIDR such as 10.0.0.0/8")
	}
	var add []netip.Prefix
	for _, s := range items {
		p, err := ParseCIDR(s)
		if err != nil {
			return err
		}
		add = append(add, p)
	}
	*l.dst = appendNew(*l.dst, add...)
	return nil
}

type hostList struct{ dst *[]string }

func (l *hostList) String() string {
	if l == nil || l.dst == nil {
		return ""
	}
	return strings.Join(*l.dst, ",")
}

func (l *hostList) Set(v string) error {
	items := splitList(v)
	if len(items) == 0 {
		return fmt.Errorf("empty value; give a host such as api.example.com or *.example.com")
	}
	for _, s := range items {
		if _, err := parsePattern(s); err != nil {
			return err
		}
	}
	*l.dst = appendNew(*l.dst, items...)
	return nil
}
