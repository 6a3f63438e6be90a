package egress

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocsExample keeps docs/egress.md honest: its ConfigMap example parses
// and does what its comments say, and its sample error is what a refusal
// prints.
func TestDocsExample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "egress.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	start := strings.Index(text, "# egress.toml\n")
	if start < 0 {
		t.Fatal("docs/egress.md has no egress.toml example")
	}
	end := strings.Index(text[start:], "```")
	cfg, err := Parse(text[start : start+end])
	if err != nil {
		t.Fatalf("docs example does not parse: %v", err)
	}
	p := mustPolicy(t, cfg)
	cases := []struct{ ns, host, addr, want string }{
		{"", "node-local-dns.kube-system.svc.cluster.local", "169.254.20.10", ""},
		{"", "x.svc.cluster.local", "169.254.169.254", RuleMetadata},
		{"", "x.svc.cluster.local", "169.254.20.11", RuleLinkLocal},
		{"", "api.openai.com", "10.96.0.10", RuleDeniedCIDR},
		{"", "a.internal.example.com", "", RuleDeniedHost},
		{"", "example.org", "93.184.215.14", RuleNotAllowlisted},
		{"team-a", "mcp.team-a.example.com", "192.168.50.9", ""},
		{"team-b", "mcp.team-a.example.com", "192.168.50.9", RuleNotAllowlisted},
	}
	for _, c := range cases {
		if got := decide(t, p, c.ns, c.host, c.addr); got != c.want {
			t.Errorf("%s %s at %s: %q, want %q", c.ns, c.host, c.addr, got, c.want)
		}
	}

	r := &Refusal{Host: "metadata.example", Addr: netip.MustParseAddr("169.254.169.254"), Namespace: "team-a", Rule: RuleMetadata}
	if !strings.Contains(text, "\n"+r.Error()+"\n") {
		t.Errorf("docs/egress.md does not show the error as printed: %s", r.Error())
	}
}
