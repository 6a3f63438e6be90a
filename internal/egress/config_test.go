package egress

import (
	"errors"
	"flag"
	"io"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

const goodConfig = `# egress.toml
allow_cidrs = ["127.0.0.0/8", "169.254.20.10/32"]
deny_cidrs  = ["10.96.0.0/12", "fd00:10:96::/112"]
allow_hosts = ["api.openai.com", "*.Anthropic.com."]
deny_hosts  = ["*.internal.example.com"]

[namespaces.team-a]
allow_cidrs = ["192.168.50.0/24"]
allow_hosts = ["mcp.team-a.example"]

[namespaces.ci]
allow_hosts = ["*.ci.example"]
`

func TestParseGood(t *testing.T) {
	cfg, err := Parse(goodConfig)
	if err != nil {
		t.Fatal(err)
	}
	if want := prefixes("127.0.0.0/8", "169.254.20.10/32"); !slices.Equal(cfg.AllowCIDRs, want) {
		t.Errorf("AllowCIDRs = %v, want %v", cfg.AllowCIDRs, want)
	}
	if want := prefixes("10.96.0.0/12", "fd00:10:96::/112"); !slices.Equal(cfg.DenyCIDRs, want) {
		t.Errorf("DenyCIDRs = %v, want %v", cfg.DenyCIDRs, want)
	}
	if want := []string{"api.openai.com", "*.Anthropic.com."}; !slices.Equal(cfg.AllowHosts, want) {
		t.Errorf("AllowHosts = %v, want %v", cfg.AllowHosts, want)
	}
	if want := []string{"*.internal.example.com"}; !slices.Equal(cfg.DenyHosts, want) {
		t.Errorf("DenyHosts = %v, want %v", cfg.DenyHosts, want)
	}
	if len(cfg.Namespaces) != 2 {
		t.Fatalf("Namespaces = %v", cfg.Namespaces)
	}
	a := cfg.Namespaces["team-a"]
	if !slices.Equal(a.AllowCIDRs, prefixes("192.168.50.0/24")) || !slices.Equal(a.AllowHosts, []string{"mcp.team-a.example"}) {
		t.Errorf("team-a = %+v", a)
	}
	if ci := cfg.Namespaces["ci"]; len(ci.AllowCIDRs) != 0 || !slices.Equal(ci.AllowHosts, []string{"*.ci.example"}) {
		t.Errorf("ci = %+v", ci)
	}
	// The parsed config builds a policy that behaves as written.
	p := mustPolicy(t, cfg)
	if got := decide(t, p, "", "claude.anthropic.com", "160.79.104.10"); got != "" {
		t.Errorf("normalized wildcard did not match: %q", got)
	}
	if got := decide(t, p, "team-a", "mcp.team-a.example", "192.168.50.7"); got != "" {
		t.Errorf("team-a exception: %q", got)
	}
	if got := decide(t, p, "ci", "mcp.team-a.example", "192.168.50.7"); got != RuleNotAllowlisted {
		t.Errorf("ci has team-a's exception: %q", got)
	}
}

func TestParseEmpty(t *testing.T) {
	cfg, err := Parse("# nothing configured\n")
	if err != nil {
		t.Fatal(err)
	}
	p := mustPolicy(t, cfg)
	if got := decide(t, p, "", "x.example", "127.0.0.1"); got != RuleLoopback {
		t.Errorf("empty config is not the default policy: %q", got)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, src string
		line      int
		msg       string
	}{
		{"unknown top-level key", "allow_cidrs = []\nallow_cidr = [\"10.0.0.0/8\"]\n", 2, `unknown key "allow_cidr"`},
		{"unknown namespace key", "[namespaces.team-a]\nallow_cidrs = [\"10.0.0.0/8\"]\ndeny_cidrs = [\"10.1.0.0/16\"]\n", 3, `unknown key "namespaces.team-a.deny_cidrs"`},
		{"unknown table", "\n\n[egress]\nallow = 1\n", 3, `unknown key "egress"`},
		{"CIDR with host bits", "deny_cidrs = [\"10.0.0.0/8\"]\n\nallow_cidrs = [\n  \"127.0.0.0/8\",\n  \"10.0.0.1/8\",\n]\n", 3, `allow_cidrs[1]: "10.0.0.1/8" has host bits set; write 10.0.0.0/8`},
		{"not a CIDR", "deny_cidrs = [\"ten/8\"]\n", 1, `deny_cidrs[0]: "ten/8" is not a CIDR`},
		{"address without length", "allow_cidrs = [\"169.254.20.10\"]\n", 1, `write 169.254.20.10/32`},
		{"IPv4-mapped CIDR", "deny_cidrs = [\"::ffff:10.0.0.0/104\"]\n", 1, "write it as IPv4"},
		{"namespace CIDR", "[namespaces.team-a]\n\nallow_cidrs = [\"300.0.0.0/8\"]\n", 3, `namespaces.team-a.allow_cidrs[0]`},
		{"bad allow pattern", "allow_hosts = [\"ok.example\", \"foo.*.example\"]\n", 1, `allow_hosts[1]: host pattern "foo.*.example"`},
		{"IP as deny pattern", "\ndeny_hosts = [\"169.254.169.254\"]\n", 2, "is an IP address"},
		{"URL as pattern", "[namespaces.x]\nallow_hosts = [\"https://mcp.example\"]\n", 2, "bare host name"},
		{"bad namespace name", "[namespaces.Team_A]\nallow_hosts = [\"a.example\"]\n", 1, `namespace "Team_A" is not a valid namespace name`},
		{"empty namespace table", "[namespaces.team-a]\n", 1, "has no allow_cidrs or allow_hosts"},
		{"wrong type", "allow_cidrs = \"10.0.0.0/8\"\n", 1, "allow_cidrs"},
		{"syntax error", "allow_cidrs = [\"10.0.0.0/8\"\n", 0, ""},
	}
	for _, c := range cases {
		_, err := Parse(c.src)
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("%s: error %v is not a *ParseError", c.name, err)
			continue
		}
		if c.line != 0 && pe.Line != c.line {
			t.Errorf("%s: line %d, want %d (%v)", c.name, pe.Line, c.line, err)
		}
		if pe.Key != DataKey {
			t.Errorf("%s: key %q", c.name, pe.Key)
		}
		if !strings.Contains(pe.Message, c.msg) {
			t.Errorf("%s: message %q does not contain %q", c.name, pe.Message, c.msg)
		}
	}
}

func TestParseConfigMap(t *testing.T) {
	if _, err := ParseConfigMap(map[string]string{"other.toml": ""}); err == nil || !strings.Contains(err.Error(), DataKey) {
		t.Errorf("missing key: %v", err)
	}
	cfg, err := ParseConfigMap(map[string]string{DataKey: `deny_hosts = ["x.example"]`})
	if err != nil || !slices.Equal(cfg.DenyHosts, []string{"x.example"}) {
		t.Errorf("got %+v, %v", cfg, err)
	}
}

func TestValidate(t *testing.T) {
	bad := []struct {
		name string
		cfg  Config
		msg  string
	}{
		{"zero prefix", Config{AllowCIDRs: []netip.Prefix{{}}}, "allow_cidrs[0]: invalid prefix"},
		{"host bits", Config{DenyCIDRs: []netip.Prefix{netip.PrefixFrom(netip.MustParseAddr("10.0.0.1"), 8)}}, "deny_cidrs[0]"},
		{"pattern", Config{DenyHosts: []string{"a.*"}}, "deny_hosts[0]"},
		{"namespace", Config{Namespaces: map[string]NamespaceException{"-x": {AllowHosts: []string{"a.example"}}}}, `namespace "-x"`},
		{"namespace pattern", Config{Namespaces: map[string]NamespaceException{"x": {AllowHosts: []string{"*"}}}}, "namespaces.x.allow_hosts[0]"},
	}
	for _, b := range bad {
		err := b.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), b.msg) {
			t.Errorf("%s: %v does not mention %q", b.name, err, b.msg)
		}
		if _, err := New(&b.cfg); err == nil {
			t.Errorf("%s: New accepted it", b.name)
		}
	}
}

func TestBindFlagsAndMerge(t *testing.T) {
	var flags Config
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	BindFlags(fs, &flags)
	err := fs.Parse([]string{
		"--egress-allow-cidr=127.0.0.0/8",
		"--egress-allow-cidr", "169.254.20.10/32, fd00:ec2::254/128,",
		"--egress-deny-cidr=10.96.0.0/12",
		"--egress-allow-host=api.openai.com,*.anthropic.com",
		"--egress-deny-host=bad.example",
		"--egress-deny-host=*.internal.example",
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := prefixes("127.0.0.0/8", "169.254.20.10/32", "fd00:ec2::254/128"); !slices.Equal(flags.AllowCIDRs, want) {
		t.Errorf("AllowCIDRs = %v", flags.AllowCIDRs)
	}
	if !slices.Equal(flags.DenyCIDRs, prefixes("10.96.0.0/12")) {
		t.Errorf("DenyCIDRs = %v", flags.DenyCIDRs)
	}
	if !slices.Equal(flags.AllowHosts, []string{"api.openai.com", "*.anthropic.com"}) {
		t.Errorf("AllowHosts = %v", flags.AllowHosts)
	}
	if !slices.Equal(flags.DenyHosts, []string{"bad.example", "*.internal.example"}) {
		t.Errorf("DenyHosts = %v", flags.DenyHosts)
	}
	if got := fs.Lookup(FlagAllowCIDR).Value.String(); got != "127.0.0.0/8,169.254.20.10/32,fd00:ec2::254/128" {
		t.Errorf("flag String() = %q", got)
	}

	cm, err := Parse(`
allow_cidrs = ["127.0.0.0/8", "192.0.2.0/24"]
deny_hosts = ["bad.example", "worse.example"]
[namespaces.team-a]
allow_cidrs = ["169.254.30.0/24"]
`)
	if err != nil {
		t.Fatal(err)
	}
	m := Merge(&flags, nil, cm)
	if want := prefixes("127.0.0.0/8", "169.254.20.10/32", "fd00:ec2::254/128", "192.0.2.0/24"); !slices.Equal(m.AllowCIDRs, want) {
		t.Errorf("merged AllowCIDRs = %v", m.AllowCIDRs)
	}
	if want := []string{"bad.example", "*.internal.example", "worse.example"}; !slices.Equal(m.DenyHosts, want) {
		t.Errorf("merged DenyHosts = %v", m.DenyHosts)
	}
	if !slices.Equal(m.Namespaces["team-a"].AllowCIDRs, prefixes("169.254.30.0/24")) {
		t.Errorf("merged namespaces = %v", m.Namespaces)
	}
	// Merge copies: appending to the result leaves the inputs alone.
	m.AllowHosts[0] = "changed.example"
	if flags.AllowHosts[0] != "api.openai.com" {
		t.Error("Merge shares its inputs' slices")
	}
	p := mustPolicy(t, m)
	if got := decide(t, p, "", "worse.example", ""); got != RuleDeniedHost {
		t.Errorf("ConfigMap deny lost in merge: %q", got)
	}
	if got := decide(t, p, "team-a", "changed.example", "169.254.30.9"); got != "" {
		t.Errorf("ConfigMap namespace exception lost in merge: %q", got)
	}
}

func TestFlagErrors(t *testing.T) {
	cases := []struct{ arg, msg string }{
		{"--egress-allow-cidr=10.0.0.1/8", "host bits set"},
		{"--egress-allow-cidr=127.0.0.1", "write 127.0.0.1/32"},
		{"--egress-deny-cidr=", "empty value"},
		{"--egress-deny-cidr=10.0.0.0/8,bogus", `"bogus" is not a CIDR`},
		{"--egress-allow-host=https://x.example", "bare host name"},
		{"--egress-deny-host=10.0.0.1", "is an IP address"},
		{"--egress-deny-host= , ", "empty value"},
	}
	for _, c := range cases {
		var cfg Config
		fs := flag.NewFlagSet("manager", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		BindFlags(fs, &cfg)
		err := fs.Parse([]string{c.arg})
		name := strings.TrimPrefix(strings.SplitN(c.arg, "=", 2)[0], "--")
		if err == nil || !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error %v should name the flag and say %q", c.arg, err, c.msg)
		}
	}
}
