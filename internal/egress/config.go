package egress

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/agentrun-dev/agentrun-operator/internal/blueprint/tomlpos"
)

// Config widens or narrows the default policy. The zero Config is the
// default policy. Host patterns are kept as written; New normalizes them.
type Config struct {
	// AllowCIDRs lift default refusals: an entry lifts a refusal only if it
	// is at least as specific as the refused range (see docs/egress.md).
	// In allowlist mode they also admit destinations by address.
	AllowCIDRs []netip.Prefix
	// DenyCIDRs refuse addresses, private ones included; they beat every
	// allow.
	DenyCIDRs []netip.Prefix
	// AllowHosts, when not empty, turns on allowlist mode: a host must
	// match one of them (or its address lie in an allowed CIDR).
	AllowHosts []string
	// DenyHosts refuse hosts; they beat everything.
	DenyHosts []string
	// Namespaces holds per-namespace exceptions, which only widen the
	// policy for that namespace.
	Namespaces map[string]NamespaceException
}

// NamespaceException widens the policy for one namespace.
type NamespaceException struct {
	// AllowCIDRs act like Config.AllowCIDRs for this namespace only.
	AllowCIDRs []netip.Prefix
	// AllowHosts act like Config.AllowHosts for this namespace only; they
	// never turn allowlist mode on, so they matter only when Config.AllowHosts
	// is set.
	AllowHosts []string
}

func (e NamespaceException) empty() bool { return len(e.AllowCIDRs) == 0 && len(e.AllowHosts) == 0 }

// ParseError is a problem in the egress TOML with its position.
type ParseError = tomlpos.Error

type rawConfig struct {
	AllowCIDRs []string                `toml:"allow_cidrs"`
	DenyCIDRs  []string                `toml:"deny_cidrs"`
	AllowHosts []string                `toml:"allow_hosts"`
	DenyHosts  []string                `toml:"deny_hosts"`
	Namespaces map[string]rawNamespace `toml:"namespaces"`
}

type rawNamespace struct {
	AllowCIDRs []string `toml:"allow_cidrs"`
	AllowHosts []string `toml:"allow_hosts"`
}

// ParseConfigMap parses the egress configuration from a ConfigMap's data
// (its DataKey entry). Every error is a *ParseError.
func ParseConfigMap(data map[string]string) (*Config, error) {
	src, ok := data[DataKey]
	if !ok {
		return nil, &ParseError{Key: DataKey, Message: fmt.Sprintf("the ConfigMap has no %q key", DataKey)}
	}
	return Parse(src)
}

// Parse parses an egress TOML document. Unknown keys, bad CIDRs, bad host
// patterns and bad namespace names are refused with their line. Every error
// is a *ParseError.
func Parse(src string) (*Config, error) {
	idx := tomlpos.New(src)
	fail := func(line int, format string, args ...any) error {
		return &ParseError{Key: DataKey, Line: line, Message: fmt.Sprintf(format, args...)}
	}
	var raw rawConfig
	if _, line, msg, ok := idx.DecodeStrict(src, &raw); !ok {
		return nil, fail(line, "%s", msg)
	}
	cfg := &Config{AllowHosts: raw.AllowHosts, DenyHosts: raw.DenyHosts}
	var err error
	lists := []struct {
		key string
		in  []string
		out *[]netip.Prefix
	}{
		{"allow_cidrs", raw.AllowCIDRs, &cfg.AllowCIDRs},
		{"deny_cidrs", raw.DenyCIDRs, &cfg.DenyCIDRs},
	}
	for _, l := range lists {
		if *l.out, err = parseCIDRs(l.key, l.in); err != nil {
			return nil, fail(idx.Line(l.key), "%v", err)
		}
	}
	if err := checkPatterns("allow_hosts", raw.AllowHosts); err != nil {
		return nil, fail(idx.Line("allow_hosts"), "%v", err)
	}
	if err := checkPatterns("deny_hosts", raw.DenyHosts); err != nil {
		return nil, fail(idx.Line("deny_hosts"), "%v", err)
	}
	for _, n := range slices.Sorted(maps.Keys(raw.Namespaces)) {
		rn := raw.Namespaces[n]
		at := func(key ...string) int { return idx.Line(append([]string{"namespaces", n}, key...)...) }
		if err := checkNamespace(n); err != nil {
			return nil, fail(at(), "%v", err)
		}
		var ex NamespaceException
		if ex.AllowCIDRs, err = parseCIDRs("namespaces."+n+".allow_cidrs", rn.AllowCIDRs); err != nil {
			return nil, fail(at("allow_cidrs"), "%v", err)
		}
		if err := checkPatterns("namespaces."+n+".allow_hosts", rn.AllowHosts); err != nil {
			return nil, fail(at("allow_hosts"), "%v", err)
		}
		ex.AllowHosts = rn.AllowHosts
		if ex.empty() {
			return nil, fail(at(), "namespaces.%s has no allow_cidrs or allow_hosts; remove the table or add an exception", n)
		}
		if cfg.Namespaces == nil {
			cfg.Namespaces = map[string]NamespaceException{}
		}
		cfg.Namespaces[n] = ex
	}
	return cfg, nil
}

// ParseCIDR parses one CIDR as the config and the flags accept it: a
// masked prefix (no host bits set), IPv4 written as IPv4.
func ParseCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		if a, aerr := netip.ParseAddr(s); aerr == nil {
			return netip.Prefix{}, fmt.Errorf("%q is an address, not a CIDR; write %s", s, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		}
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR such as 10.0.0.0/8 or fd00::/8", s)
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%q is an IPv4-mapped prefix; write it as IPv4 (IPv4-mapped addresses are checked as IPv4)", s)
	}
	if m := p.Masked(); m != p {
		return netip.Prefix{}, fmt.Errorf("%q has host bits set; write %s", s, m)
	}
	return p, nil
}

func parseCIDRs(key string, in []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, s := range in {
		p, err := ParseCIDR(s)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %v", key, i, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func checkPatterns(key string, in []string) error {
	for i, s := range in {
		if _, err := parsePattern(s); err != nil {
			return fmt.Errorf("%s[%d]: %v", key, i, err)
		}
	}
	return nil
}

// checkNamespace accepts a Kubernetes namespace name (a DNS-1123 label).
func checkNamespace(n string) error {
	ok := n != "" && len(n) <= 63 && n[0] != '-' && n[len(n)-1] != '-'
	for i := 0; ok && i < len(n); i++ {
		c := n[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-'
	}
	if !ok {
		return fmt.Errorf("namespace %q is not a valid namespace name (lower-case letters, digits and '-', at most 63)", n)
	}
	return nil
}

// Validate checks a Config built in code (Parse and the flags already
// validate what they produce).
func (c *Config) Validate() error {
	var errs []string
	checkCIDRs := func(key string, ps []netip.Prefix) {
		for i, p := range ps {
			if !p.IsValid() {
				errs = append(errs, fmt.Sprintf("%s[%d]: invalid prefix", key, i))
			} else if _, err := ParseCIDR(p.String()); err != nil {
				errs = append(errs, fmt.Sprintf("%s[%d]: %v", key, i, err))
			}
		}
	}
	add := func(err error) {
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	checkCIDRs("allow_cidrs", c.AllowCIDRs)
	checkCIDRs("deny_cidrs", c.DenyCIDRs)
	add(checkPatterns("allow_hosts", c.AllowHosts))
	add(checkPatterns("deny_hosts", c.DenyHosts))
	for _, n := range slices.Sorted(maps.Keys(c.Namespaces)) {
		add(checkNamespace(n))
		checkCIDRs("namespaces."+n+".allow_cidrs", c.Namespaces[n].AllowCIDRs)
		add(checkPatterns("namespaces."+n+".allow_hosts", c.Namespaces[n].AllowHosts))
	}
	if len(errs) > 0 {
		return fmt.Errorf("egress config: %s", strings.Join(errs, "; "))
	}
	return nil
}

// Merge returns the union of configs (nil ones are skipped): every list is
// the concatenation of all of them without repeats, and so are each
// namespace's exceptions. Because a deny beats every allow, a deny from any
// source holds; allowlist mode is on when any source has allowed hosts.
// This is how the manager's flags and the ConfigMap combine.
func Merge(configs ...*Config) *Config {
	out := &Config{}
	for _, c := range configs {
		if c == nil {
			continue
		}
		out.AllowCIDRs = appendNew(out.AllowCIDRs, c.AllowCIDRs...)
		out.DenyCIDRs = appendNew(out.DenyCIDRs, c.DenyCIDRs...)
		out.AllowHosts = appendNew(out.AllowHosts, c.AllowHosts...)
		out.DenyHosts = appendNew(out.DenyHosts, c.DenyHosts...)
		for n, ex := range c.Namespaces {
			if out.Namespaces == nil {
				out.Namespaces = map[string]NamespaceException{}
			}
			cur := out.Namespaces[n]
			cur.AllowCIDRs = appendNew(cur.AllowCIDRs, ex.AllowCIDRs...)
			cur.AllowHosts = appendNew(cur.AllowHosts, ex.AllowHosts...)
			out.Namespaces[n] = cur
		}
	}
	return out
}

func appendNew[T comparable](dst []T, items ...T) []T {
	for _, it := range items {
		if !slices.Contains(dst, it) {
			dst = append(dst, it)
		}
	}
	return dst
}
