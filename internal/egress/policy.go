package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// MaxRedirects is how many redirects a Client follows.
const MaxRedirects = 5

// Transport defaults.
const (
	DefaultResponseHeaderTimeout = 10 * time.Minute
	dialTimeout                  = 30 * time.Second
	keepAlive                    = 30 * time.Second
	tlsHandshakeTimeout          = 10 * time.Second
	idleConnTimeout              = 90 * time.Second
	expectContinueTimeout        = time.Second
	// A run's calls follow each other within milliseconds, so a call's
	// connection is kept for the next one: up to a thousand calls in flight
	// to one provider each keep theirs, instead of all but ten being closed
	// and opened again (a TLS handshake each) after every answer. An idle
	// connection costs a few KiB and is closed after idleConnTimeout.
	maxIdleConns        = 4096
	maxIdleConnsPerHost = 1024
)

// Resolver looks up a host's addresses. *net.Resolver satisfies it; tests
// inject their own to map names without DNS.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Option configures a Policy.
type Option func(*options)

type options struct {
	resolver              Resolver
	apiServer             []netip.Prefix
	managerPod            []netip.Prefix
	onRefusal             func(*Refusal)
	responseHeaderTimeout time.Duration
	tlsConfig             *tls.Config
}

// WithResolver sets the resolver used by the dialer and CheckURL (default
// net.DefaultResolver).
func WithResolver(r Resolver) Option { return func(o *options) { o.resolver = r } }

// WithAPIServerPrefixes protects the API server's addresses (refused with
// RuleAPIServer); see APIServerPrefixes.
func WithAPIServerPrefixes(p []netip.Prefix) Option {
	return func(o *options) { o.apiServer = append(o.apiServer, p...) }
}

// WithManagerPodPrefixes protects the manager pod's own addresses (refused
// with RuleManagerPod); see LocalInterfacePrefixes.
func WithManagerPodPrefixes(p []netip.Prefix) Option {
	return func(o *options) { o.managerPod = append(o.managerPod, p...) }
}

// WithOnRefusal calls fn for every refusal the policy returns (from a dial,
// a redirect or CheckURL), e.g. to count them by Rule and Stage. A dial
// that skips a refused address but connects to an allowed one is not a
// refusal. fn must be safe for concurrent use and should not block.
func WithOnRefusal(fn func(*Refusal)) Option { return func(o *options) { o.onRefusal = fn } }

// WithResponseHeaderTimeout bounds the wait for response headers after a
// request is written (default DefaultResponseHeaderTimeout, long enough for
// a model that answers only when it has finished; 0 means no limit).
func WithResponseHeaderTimeout(d time.Duration) Option {
	return func(o *options) { o.responseHeaderTimeout = d }
}

// WithTLSClientConfig sets the TLS configuration of the transports (for a
// private CA, say). It is cloned.
func WithTLSClientConfig(c *tls.Config) Option { return func(o *options) { o.tlsConfig = c } }

// Policy decides and enforces egress. It is safe for concurrent use and
// immutable; build a new one when the configuration changes (and call
// CloseIdleConnections on the old one).
type Policy struct {
	opts options
	// def is the view of every namespace without exceptions.
	def *view
	// views holds the namespaces with exceptions.
	views map[string]*view
	// transports holds one transport per view: def's is shared by every
	// namespace without exceptions, so no pooled connection crosses from a
	// namespace with exceptions to one without, or between two namespaces
	// with exceptions.
	transports map[*view]*http.Transport
}

// New builds a Policy from cfg (nil means the default policy).
func New(cfg *Config, opts ...Option) (*Policy, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Policy{
		opts:       options{resolver: net.DefaultResolver, responseHeaderTimeout: DefaultResponseHeaderTimeout},
		views:      map[string]*view{},
		transports: map[*view]*http.Transport{},
	}
	for _, o := range opts {
		o(&p.opts)
	}
	if p.opts.resolver == nil {
		p.opts.resolver = net.DefaultResolver
	}
	refusals := append([]refusalRange(nil), builtinRefusals...)
	for _, set := range []struct {
		rule string
		ps   []netip.Prefix
	}{{RuleAPIServer, p.opts.apiServer}, {RuleManagerPod, p.opts.managerPod}} {
		for _, pr := range set.ps {
			if !pr.IsValid() {
				return nil, fmt.Errorf("egress: invalid %s prefix", set.rule)
			}
			// Addresses are judged as IPv4 when IPv4-mapped, so a mapped
			// prefix is protected as the IPv4 prefix it stands for.
			a, bits := pr.Addr().WithZone(""), pr.Bits()
			if a.Is4In6() {
				a, bits = a.Unmap(), bits-96
				if bits < 0 {
					return nil, fmt.Errorf("egress: %s prefix %s is wider than the IPv4-mapped range", set.rule, pr)
				}
			}
			refusals = append(refusals, refusalRange{netip.PrefixFrom(a, bits).Masked(), set.rule})
		}
	}
	sortRefusals(refusals)

	base := view{
		allowCIDRs: slices.Clone(cfg.AllowCIDRs),
		denyCIDRs:  slices.Clone(cfg.DenyCIDRs),
		allowHosts: mustPatterns(cfg.AllowHosts),
		denyHosts:  mustPatterns(cfg.DenyHosts),
		allowlist:  len(cfg.AllowHosts) > 0,
		refusals:   refusals,
	}
	p.def = &base
	p.transports[p.def] = p.newTransport(p.def)
	for n, ex := range cfg.Namespaces {
		if ex.empty() {
			continue
		}
		v := base
		v.allowCIDRs = append(append([]netip.Prefix(nil), base.allowCIDRs...), ex.AllowCIDRs...)
		v.allowHosts = append(append([]pattern(nil), base.allowHosts...), mustPatterns(ex.AllowHosts)...)
		p.views[n] = &v
		p.transports[&v] = p.newTransport(&v)
	}
	return p, nil
}

// mustPatterns compiles patterns that Validate has accepted.
func mustPatterns(in []string) []pattern {
	out := make([]pattern, 0, len(in))
	for _, s := range in {
		p, err := parsePattern(s)
		if err != nil {
			panic("egress: unvalidated host pattern: " + err.Error())
		}
		out = append(out, p)
	}
	return out
}

func (p *Policy) view(namespace string) *view {
	if v, ok := p.views[namespace]; ok {
		return v
	}
	return p.def
}

func (p *Policy) report(r *Refusal, namespace, stage string) *Refusal {
	r.Namespace, r.Stage = namespace, stage
	if p.opts.onRefusal != nil {
		p.opts.onRefusal(r)
	}
	return r
}

func (p *Policy) newTransport(v *view) *http.Transport {
	d := &Dialer{p: p, v: v, fromContext: true}
	t := &http.Transport{
		// No proxy, whatever the environment says: a proxy would resolve
		// and connect itself, out of reach of the address check.
		Proxy:                 nil,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   tlsHandshakeTimeout,
		ResponseHeaderTimeout: p.opts.responseHeaderTimeout,
		IdleConnTimeout:       idleConnTimeout,
		ExpectContinueTimeout: expectContinueTimeout,
		MaxIdleConns:          maxIdleConns,
		MaxIdleConnsPerHost:   maxIdleConnsPerHost,
	}
	if p.opts.tlsConfig != nil {
		t.TLSClientConfig = p.opts.tlsConfig.Clone()
	}
	return t
}

// nsKey carries the namespace of a request to the shared transport's
// dialer, only to name it in refusals: the decision itself comes from the
// transport's own view.
type nsKey struct{}

// nsTransport is the RoundTripper of one namespace.
type nsTransport struct {
	namespace string
	t         *http.Transport
}

func (n *nsTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return n.t.RoundTrip(req.WithContext(context.WithValue(req.Context(), nsKey{}, n.namespace)))
}

// CloseIdleConnections closes the idle connections of the underlying
// transport, which may be shared with other namespaces.
func (n *nsTransport) CloseIdleConnections() { n.t.CloseIdleConnections() }

// Transport returns the RoundTripper for calls made on behalf of namespace:
// it dials only what the namespace's effective policy allows, and pools
// connections only with namespaces whose effective policy is the same.
// Redirects are the client's business: prefer Client, or give an SDK that
// takes a RoundTripper a client of its own with CheckRedirect from
// Client(namespace).
func (p *Policy) Transport(namespace string) http.RoundTripper {
	return &nsTransport{namespace: namespace, t: p.transports[p.view(namespace)]}
}

// Client returns an HTTP client for calls made on behalf of namespace. It
// has no overall timeout (bound calls with their context), follows at most
// MaxRedirects redirects, never from https to http, and only to hosts the
// policy allows. It is cheap: the connection pool lives in the transport.
func (p *Policy) Client(namespace string) *http.Client {
	v := p.view(namespace)
	return &http.Client{
		Transport:     p.Transport(namespace),
		CheckRedirect: func(req *http.Request, via []*http.Request) error { return p.checkRedirect(v, namespace, req, via) },
	}
}

// Dialer returns the dialer for namespace, for clients that are not HTTP.
func (p *Policy) Dialer(namespace string) *Dialer {
	return &Dialer{p: p, v: p.view(namespace), namespace: namespace}
}

// CloseIdleConnections closes the idle connections of every transport.
func (p *Policy) CloseIdleConnections() {
	for _, t := range p.transports {
		t.CloseIdleConnections()
	}
}

func (p *Policy) checkRedirect(v *view, namespace string, req *http.Request, via []*http.Request) error {
	if len(via) > MaxRedirects {
		return fmt.Errorf("egress: stopped after %d redirects: %w", MaxRedirects, ErrTooManyRedirects)
	}
	if prev := via[len(via)-1]; prev.URL.Scheme == "https" && req.URL.Scheme != "https" {
		return p.report(&Refusal{Host: normalizeHost(req.URL.Hostname()), Rule: RuleHTTPSDowngrade}, namespace, StageRedirect)
	}
	if r := p.checkTarget(v, req.URL); r != nil {
		return p.report(r, namespace, StageRedirect)
	}
	return nil
}

// checkTarget applies the rules that need no lookup: the scheme, the host
// rules and, for an IP literal, the address rules.
func (p *Policy) checkTarget(v *view, u *url.URL) *Refusal {
	if u.Scheme != "http" && u.Scheme != "https" {
		return &Refusal{Host: normalizeHost(u.Hostname()), Rule: RuleScheme, Match: u.Scheme}
	}
	host := u.Hostname()
	hv := v.checkHost(host)
	if hv.refusal != nil {
		return hv.refusal
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return v.checkAddr(host, a, hv.needAddrAllow)
	}
	return nil
}

// CheckURL checks rawURL for namespace without connecting, for admission
// or validation: the scheme must be http or https, the host must pass the
// host rules and, if it is an IP literal, the address rules. A name is
// resolved and refused if any of its current addresses is refused (stricter
// than the dial, which uses the allowed ones); this is best effort, since
// the name may resolve differently later, and the dial check is the
// enforcement. Errors are a *Refusal, or wrap ErrInvalidURL or
// ErrUnresolved.
func (p *Policy) CheckURL(ctx context.Context, namespace, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidURL, err)
	}
	v := p.view(namespace)
	if u.Scheme != "http" && u.Scheme != "https" {
		return p.report(&Refusal{Host: normalizeHost(u.Hostname()), Rule: RuleScheme, Match: u.Scheme}, namespace, StageURL)
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("%w: %q has no host", ErrInvalidURL, rawURL)
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return fmt.Errorf("%w: %q has a bad port %q", ErrInvalidURL, rawURL, port)
		}
	}
	if r := p.checkTarget(v, u); r != nil {
		return p.report(r, namespace, StageURL)
	}
	if isIPLiteral(host) {
		return nil
	}
	hv := v.checkHost(host)
	addrs, err := p.opts.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUnresolved, host, err)
	}
	if len(addrs) == 0 {
		return fmt.Errorf("%w: %s has no addresses", ErrUnresolved, host)
	}
	for _, a := range addrs {
		if r := v.checkAddr(host, a, hv.needAddrAllow); r != nil {
			return p.report(r, namespace, StageURL)
		}
	}
	return nil
}

var errNoAddress = errors.New("no address of the requested family")
