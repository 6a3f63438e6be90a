package egress

import (
	"fmt"
	"net/netip"
	"strings"
)

// pattern is a host pattern: an exact host name, or "*.suffix", which
// matches any name with at least one more label in front of suffix (not
// suffix itself).
type pattern struct {
	name     string // lower case, without a trailing dot
	wildcard bool
}

func (p pattern) String() string {
	if p.wildcard {
		return "*." + p.name
	}
	return p.name
}

func (p pattern) match(host string) bool {
	if p.wildcard {
		return len(host) > len(p.name)+1 && strings.HasSuffix(host, "."+p.name)
	}
	return host == p.name
}

// normalizeHost is the form hosts are matched in: lower case, without
// IPv6 brackets and without one trailing dot.
func normalizeHost(h string) string {
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	h = strings.TrimSuffix(h, ".")
	return strings.ToLower(h)
}

// parsePattern validates and normalizes a host pattern.
func parsePattern(s string) (pattern, error) {
	if s == "" {
		return pattern{}, fmt.Errorf("empty host pattern")
	}
	if strings.ContainsAny(s, "/:[]@ \t") {
		if _, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
			return pattern{}, ipPatternError(s)
		}
		return pattern{}, fmt.Errorf("host pattern %q must be a bare host name, without scheme, port, path or spaces", s)
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return pattern{}, ipPatternError(s)
	}
	name := strings.ToLower(strings.TrimSuffix(s, "."))
	p := pattern{name: name}
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		p = pattern{name: rest, wildcard: true}
	}
	if p.name == "" || p.name == "*" {
		return pattern{}, fmt.Errorf("host pattern %q: a wildcard needs a suffix, as in *.example.com", s)
	}
	if strings.Contains(p.name, "*") {
		return pattern{}, fmt.Errorf("host pattern %q: the only wildcard is a leading \"*.\", as in *.example.com", s)
	}
	if len(p.name) > 253 {
		return pattern{}, fmt.Errorf("host pattern %q is longer than 253 characters", s)
	}
	for _, label := range strings.Split(p.name, ".") {
		if err := checkLabel(label); err != nil {
			return pattern{}, fmt.Errorf("host pattern %q: %v", s, err)
		}
	}
	return p, nil
}

func ipPatternError(s string) error {
	return fmt.Errorf("host pattern %q is an IP address; addresses go in the CIDR lists (allow_cidrs/deny_cidrs, --egress-allow-cidr/--egress-deny-cidr) as a /32 or /128 prefix", s)
}

// checkLabel accepts a DNS label of letters, digits, '-' and '_' (which
// some real names carry), not starting or ending with '-'.
func checkLabel(l string) error {
	switch {
	case l == "":
		return fmt.Errorf("empty label (two dots in a row, or a leading dot)")
	case len(l) > 63:
		return fmt.Errorf("label %q is longer than 63 characters", l)
	case l[0] == '-' || l[len(l)-1] == '-':
		return fmt.Errorf("label %q starts or ends with '-'", l)
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if c >= 0x80 {
			return fmt.Errorf("label %q is not ASCII; write internationalized names in their xn-- (punycode) form", l)
		}
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' {
			return fmt.Errorf("label %q has the character %q; only letters, digits, '-' and '_' are allowed", l, c)
		}
	}
	return nil
}
