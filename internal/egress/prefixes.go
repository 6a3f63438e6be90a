package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
)

// APIServerPrefixes turns a rest.Config-style host ("https://10.0.0.1:6443",
// "10.0.0.1:6443", "https://[fd00::1]:6443", "https://kubernetes.default.svc"
// or a bare name) into single-address prefixes (/32 or /128) to pass to
// WithAPIServerPrefixes. A name is resolved with r (nil means
// net.DefaultResolver).
//
// In a cluster the host is the kubernetes Service's ClusterIP; the API
// servers' own endpoint addresses (the default/kubernetes EndpointSlice)
// reach it too, so protect those as well (AddrPrefixes).
func APIServerPrefixes(ctx context.Context, host string, r Resolver) ([]netip.Prefix, error) {
	if r == nil {
		r = net.DefaultResolver
	}
	raw := strings.TrimSpace(host)
	if raw == "" {
		return nil, fmt.Errorf("egress: empty API server host")
	}
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("egress: API server host %q: %v", host, err)
	}
	name := u.Hostname()
	if name == "" {
		return nil, fmt.Errorf("egress: API server host %q has no host name", host)
	}
	if a, err := netip.ParseAddr(name); err == nil {
		return AddrPrefixes([]netip.Addr{a}), nil
	}
	addrs, err := r.LookupNetIP(ctx, "ip", name)
	if err != nil {
		return nil, fmt.Errorf("egress: resolving API server host %q: %w", name, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("egress: API server host %q has no addresses", name)
	}
	return AddrPrefixes(addrs), nil
}

// LocalInterfacePrefixes lists this process's interface addresses as
// single-address prefixes, to pass to WithManagerPodPrefixes. Loopback
// addresses are left out: they are refused anyway. It lists the addresses,
// not the interfaces' subnets, which hold the other pods of the node.
func LocalInterfacePrefixes() ([]netip.Prefix, error) {
	ifAddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("egress: listing interface addresses: %w", err)
	}
	var addrs []netip.Addr
	for _, ia := range ifAddrs {
		var ip net.IP
		switch v := ia.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		default:
			continue
		}
		a, ok := netip.AddrFromSlice(ip)
		if !ok || a.Unmap().IsLoopback() {
			continue
		}
		addrs = append(addrs, a)
	}
	return AddrPrefixes(addrs), nil
}

// AddrPrefixes turns addresses into single-address prefixes, IPv4-mapped
// ones as IPv4, without zones or repeats.
func AddrPrefixes(addrs []netip.Addr) []netip.Prefix {
	var out []netip.Prefix
	for _, a := range addrs {
		if !a.IsValid() {
			continue
		}
		a = a.WithZone("").Unmap()
		p := netip.PrefixFrom(a, a.BitLen())
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}
