package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"syscall"
)

// Dialer connects only to addresses the policy allows. It resolves the host
// itself, checks every candidate address and dials an allowed one by IP, so
// a name that resolves differently between a check and the dial (DNS
// rebinding) cannot slip through: what is dialed is what was checked.
type Dialer struct {
	p *Policy
	v *view
	// namespace is named in refusals. A transport's dialer serves every
	// namespace sharing the transport and takes the namespace from the
	// request's context instead (fromContext); the decision never depends on
	// it.
	namespace   string
	fromContext bool
}

func (d *Dialer) namespaceFor(ctx context.Context) string {
	if d.fromContext {
		ns, _ := ctx.Value(nsKey{}).(string)
		return ns
	}
	return d.namespace
}

// DialContext dials address ("host:port", as net.Dialer takes it) over
// network "tcp", "tcp4" or "tcp6". A refusal is a *net.OpError wrapping a
// *Refusal.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	ns := d.namespaceFor(ctx)
	fail := func(addr net.Addr, err error) error {
		return &net.OpError{Op: "dial", Net: network, Addr: addr, Err: err}
	}
	lookupNet := ""
	switch network {
	case "tcp":
		lookupNet = "ip"
	case "tcp4":
		lookupNet = "ip4"
	case "tcp6":
		lookupNet = "ip6"
	default:
		return nil, fail(nil, fmt.Errorf("egress: network %q is not supported (only tcp)", network))
	}
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fail(nil, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fail(nil, fmt.Errorf("egress: port %q is not a number", portStr))
	}

	hv := d.v.checkHost(host)
	if hv.refusal != nil {
		return nil, fail(nil, d.p.report(hv.refusal, ns, StageDial))
	}
	var candidates []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		candidates = []netip.Addr{a}
	} else {
		candidates, err = d.p.opts.resolver.LookupNetIP(ctx, lookupNet, host)
		if err != nil {
			return nil, fail(nil, err)
		}
	}

	var allowed []netip.Addr
	var first *Refusal
	for _, a := range candidates {
		dial := a.Unmap()
		if network == "tcp4" && !dial.Is4() || network == "tcp6" && !dial.Is6() {
			continue
		}
		if r := d.v.checkAddr(host, a, hv.needAddrAllow); r != nil {
			if first == nil {
				first = r
			}
			continue
		}
		allowed = append(allowed, dial)
	}
	if len(allowed) == 0 {
		if first != nil {
			return nil, fail(tcpAddr(first.Addr, port), d.p.report(first, ns, StageDial))
		}
		return nil, fail(nil, &net.DNSError{Err: errNoAddress.Error(), Name: host, IsNotFound: true})
	}

	// Connect to the checked addresses only, in the resolver's order. The
	// Control hook refuses anything else just before connect(2), so that
	// even a future change that passed a name here could not dial an
	// unchecked address.
	nd := &net.Dialer{Timeout: dialTimeout, KeepAlive: keepAlive, ControlContext: onlyAddrs(allowed)}
	var lastErr error
	for _, a := range allowed {
		conn, err := nd.DialContext(ctx, network, netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// onlyAddrs is a net.Dialer ControlContext that allows connecting only to
// one of addrs.
func onlyAddrs(addrs []netip.Addr) func(ctx context.Context, network, address string, c syscall.RawConn) error {
	return func(_ context.Context, _, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("egress: refusing to connect to unparsed address %q", address)
		}
		if !slices.Contains(addrs, ap.Addr().Unmap()) {
			return fmt.Errorf("egress: refusing to connect to unchecked address %s", ap.Addr())
		}
		return nil
	}
}

func tcpAddr(a netip.Addr, port uint64) net.Addr {
	if !a.IsValid() {
		return nil
	}
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(a, uint16(port)))
}
