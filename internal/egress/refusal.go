package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Stages at which a Refusal can be made.
const (
	StageDial     = "dial"
	StageRedirect = "redirect"
	StageURL      = "url"
)

// Refusal is the error for a destination the policy does not allow. It
// reaches callers wrapped (a dial refusal in a *net.OpError, and that in the
// *url.Error of an http.Client), so find it with errors.As.
type Refusal struct {
	// Host is the requested host, lower case, without brackets or a
	// trailing dot; it is an IP literal when the URL held one.
	Host string
	// Addr is the refused address as resolved or written; it is the zero
	// Addr when a host rule (or the scheme) refused the request.
	Addr netip.Addr
	// Namespace is the namespace the call was made for ("" when none).
	Namespace string
	// Rule is a short machine word: one of the Rule constants.
	Rule string
	// Match is the prefix or host pattern that refused it, when one did
	// ("169.254.0.0/16", "*.internal.example.com"); for RuleScheme it is
	// the refused scheme.
	Match string
	// Stage is where it was refused: StageDial, StageRedirect or StageURL.
	Stage string
}

func (r *Refusal) Error() string {
	var b strings.Builder
	b.WriteString("egress refused: ")
	switch {
	case r.Addr.IsValid() && r.Host != "" && r.Host != r.Addr.WithZone("").String():
		fmt.Fprintf(&b, "%s (address %s)", r.Host, r.Addr)
	case r.Addr.IsValid():
		b.WriteString(r.Addr.String())
	case r.Host != "":
		b.WriteString(r.Host)
	default:
		b.WriteString("the URL")
	}
	if r.Namespace != "" {
		fmt.Fprintf(&b, " for namespace %s", r.Namespace)
	}
	b.WriteString(": ")
	b.WriteString(r.reason())
	fmt.Fprintf(&b, " (rule %s)", r.Rule)
	return b.String()
}

// reason says in words why it was refused.
func (r *Refusal) reason() string {
	embedded := ""
	if c := canonical(r.Addr); r.Addr.IsValid() && c != r.Addr.WithZone("") {
		embedded = fmt.Sprintf(", which reaches IPv4 %s", c)
	}
	switch r.Rule {
	case RuleLoopback:
		return "loopback address" + embedded
	case RuleLinkLocal:
		return "link-local address" + embedded
	case RuleMetadata:
		return "cloud metadata service" + embedded
	case RuleAPIServer:
		return "the Kubernetes API server" + embedded
	case RuleManagerPod:
		return "the manager pod's own address" + embedded
	case RuleUnspecified:
		return "unspecified address" + embedded
	case RuleMulticast:
		return "multicast address" + embedded
	case RuleBroadcast:
		return "broadcast address" + embedded
	case RuleDeniedCIDR:
		return "inside denied CIDR " + r.Match + embedded
	case RuleDeniedHost:
		return fmt.Sprintf("matches denied host pattern %q", r.Match)
	case RuleNotAllowlisted:
		if r.Addr.IsValid() {
			return "matches no allowed host pattern and the address is in no allowed CIDR" + embedded
		}
		return "matches no allowed host pattern"
	case RuleScheme:
		if r.Match == "" {
			return "the URL has no scheme; it must be http or https"
		}
		return fmt.Sprintf("scheme %q is not http or https", r.Match)
	case RuleHTTPSDowngrade:
		return "redirect from https to http"
	}
	return "refused"
}

// ConfigMap names used in remedies; the manager reads its egress
// configuration from DefaultConfigMapName, key DataKey.
const (
	DefaultConfigMapName = "agentrun-egress"
	DataKey              = "egress.toml"
)

// Remedy is one sentence a cluster admin can act on, naming the flag or
// ConfigMap key that would allow the destination (or saying why none
// should).
func (r *Refusal) Remedy() string {
	where := fmt.Sprintf("the %s ConfigMap (key %s)", DefaultConfigMapName, DataKey)
	c := canonical(r.Addr)
	exact := ""
	if c.IsValid() {
		exact = netip.PrefixFrom(c, c.BitLen()).String()
	}
	nsCIDR, nsHost := "", ""
	if r.Namespace != "" {
		nsCIDR = fmt.Sprintf(", or to namespaces.%s.allow_cidrs there to allow it for namespace %s only", r.Namespace, r.Namespace)
		nsHost = fmt.Sprintf(", or to namespaces.%s.allow_hosts there for namespace %s only", r.Namespace, r.Namespace)
	}
	switch r.Rule {
	case RuleLoopback:
		p := "127.0.0.0/8"
		if c.Is6() {
			p = "::1/128"
		}
		return fmt.Sprintf("Loopback is refused by default; for local development start the manager with --egress-allow-cidr=%s, or add %q to allow_cidrs in %s%s.", p, p, where, nsCIDR)
	case RuleLinkLocal:
		return fmt.Sprintf("Link-local addresses are refused by default; if %s is a real service, add --egress-allow-cidr=%s to the manager or %q to allow_cidrs in %s%s (a broader prefix never opens the metadata address).", c, exact, exact, where, nsCIDR)
	case RuleMetadata:
		return fmt.Sprintf("%s is a cloud metadata service, which hands out the node's credentials, so it is refused on purpose; only an explicit --egress-allow-cidr=%s (or allow_cidrs entry %q in %s) would allow it, which is almost never right.", c, exact, exact, where)
	case RuleAPIServer:
		return fmt.Sprintf("%s is the Kubernetes API server, refused so a tenant cannot reach it from the manager's network position; point the URL elsewhere (only an explicit --egress-allow-cidr=%s or allow_cidrs entry %q would allow it, which is not recommended).", c, exact, exact)
	case RuleManagerPod:
		return fmt.Sprintf("%s is the manager pod's own address, refused so a tenant cannot reach the manager's own endpoints; point the URL at another service (only an explicit --egress-allow-cidr=%s or allow_cidrs entry %q would allow it).", c, exact, exact)
	case RuleUnspecified, RuleMulticast, RuleBroadcast:
		return fmt.Sprintf("%s is not a unicast destination, so fix the URL (an explicit --egress-allow-cidr=%s or allow_cidrs entry %q would allow it).", c, exact, exact)
	case RuleDeniedCIDR:
		return fmt.Sprintf("%s is inside %s, denied by --egress-deny-cidr or deny_cidrs in %s; a deny overrides every allow, so remove or narrow that entry to allow it.", c, r.Match, where)
	case RuleDeniedHost:
		return fmt.Sprintf("%s matches %q, denied by --egress-deny-host or deny_hosts in %s; a deny overrides every allow, so remove or narrow that pattern to allow it.", r.Host, r.Match, where)
	case RuleNotAllowlisted:
		if r.Addr.IsValid() || isIPLiteral(r.Host) {
			if !c.IsValid() {
				c, _ = netip.ParseAddr(r.Host)
				exact = netip.PrefixFrom(c.Unmap(), c.Unmap().BitLen()).String()
			}
			return fmt.Sprintf("Allowed host patterns are configured and %s matches none; add the host to --egress-allow-host or allow_hosts, or its address %s to --egress-allow-cidr or allow_cidrs, in %s%s.", r.Host, exact, where, nsHost)
		}
		return fmt.Sprintf("Allowed host patterns are configured and %s matches none; add it (or a *.suffix wildcard) to --egress-allow-host or to allow_hosts in %s%s.", r.Host, where, nsHost)
	case RuleScheme:
		if r.Match == "" {
			return "Write the URL in full, starting with http:// or https://."
		}
		return fmt.Sprintf("Use an http:// or https:// URL; no setting allows scheme %q.", r.Match)
	case RuleHTTPSDowngrade:
		return "The server redirected from https to http, which is never followed; point the URL at the final https address."
	}
	return "No remedy is known for this refusal."
}

func isIPLiteral(h string) bool {
	_, err := netip.ParseAddr(h)
	return err == nil
}

// Errors that are not policy refusals.
var (
	// ErrInvalidURL is wrapped by CheckURL for a URL that cannot be parsed
	// or has no host or a bad port.
	ErrInvalidURL = errors.New("invalid URL")
	// ErrUnresolved is wrapped by CheckURL when a host name does not
	// resolve. The URL may still work later (a Service created after the
	// run), so admission-time callers may treat it as a warning.
	ErrUnresolved = errors.New("host does not resolve")
	// ErrTooManyRedirects is wrapped when a response chain exceeds
	// MaxRedirects.
	ErrTooManyRedirects = errors.New("too many redirects")
)
