package egress_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/agentrun-dev/agentrun-operator/internal/egress"
)

func Example() {
	cfg := &egress.Config{
		Namespaces: map[string]egress.NamespaceException{
			"team-a": {AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("169.254.20.10/32")}},
		},
	}
	p, err := egress.New(cfg, egress.WithAPIServerPrefixes([]netip.Prefix{netip.MustParsePrefix("10.96.0.1/32")}))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, c := range []struct{ ns, url string }{
		{"team-a", "http://169.254.20.10:8080/"},
		{"team-b", "http://169.254.20.10:8080/"},
		{"team-a", "http://[::ffff:169.254.169.254]/latest/meta-data/"},
		{"team-a", "https://10.96.0.1/api"},
	} {
		var r *egress.Refusal
		if err := p.CheckURL(ctx, c.ns, c.url); errors.As(err, &r) {
			fmt.Printf("%s %s: refused (%s)\n", c.ns, c.url, r.Rule)
		} else {
			fmt.Printf("%s %s: allowed\n", c.ns, c.url)
		}
	}
	// Output:
	// team-a http://169.254.20.10:8080/: allowed
	// team-b http://169.254.20.10:8080/: refused (link-local)
	// team-a http://[::ffff:169.254.169.254]/latest/meta-data/: refused (metadata)
	// team-a https://10.96.0.1/api: refused (apiserver)
}
