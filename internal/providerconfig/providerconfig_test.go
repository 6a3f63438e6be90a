package providerconfig

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/money"
	"github.com/agentrun-dev/agentrun-operator/internal/ratelimit"
)

const fullConfig = `default_provider = "openai"
default_model = "gpt-4o-mini"
fallback_order = ["openai", "anthropic"]

[providers.openai]
type = "openai"
base_url = "https://api.openai.com/v1"
api_key_secret = { name = "openai-creds", key = "api-key" }
models = ["gpt-4o-mini", "gpt-4o"]
timeout_seconds = 60
overload_failover_seconds = 20

[providers.openai.rates."gpt-4o-mini"]
prompt = "0.15"
completion = "0.60"
cached = "0.075"
cache_write = "0"

[providers.anthropic]
type = "anthropic"
api_key_secret = { name = "anthropic-creds", key = "key" }
models = ["claude-sonnet", "gpt-4o"]

[providers.demo]
type = "scripted"
models = ["scripted-1"]

[providers.demo.rates.scripted-1]
prompt = "1"
completion = "2"
`

func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	cfg, err := Parse(map[string]string{DataKey: src})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestParseFull(t *testing.T) {
	cfg := mustParse(t, fullConfig)
	m := money.MustParseUSD
	want := &Config{
		DefaultProvider: "openai",
		DefaultModel:    "gpt-4o-mini",
		FallbackOrder:   []string{"openai", "anthropic"},
		Providers: []*Provider{
			{
				Name: "anthropic", Type: "anthropic",
				APIKeySecret: &SecretKeyRef{Name: "anthropic-creds", Key: "key"},
				Models:       []string{"claude-sonnet", "gpt-4o"},
			},
			{
				Name: "demo", Type: "scripted", Models: []string{"scripted-1"},
				Rates: map[string]RateCard{"scripted-1": {Prompt: m("1"), Completion: m("2"), Cached: m("1"), CacheWrite: m("1")}},
			},
			{
				Name: "openai", Type: "openai", BaseURL: "https://api.openai.com/v1",
				APIKeySecret:   &SecretKeyRef{Name: "openai-creds", Key: "api-key"},
				Models:         []string{"gpt-4o-mini", "gpt-4o"},
				TimeoutSeconds: 60, OverloadFailoverSeconds: 20,
				Rates: map[string]RateCard{"gpt-4o-mini": {
					Prompt: m("0.15"), Completion: m("0.6"), Cached: m("0.075"), CacheWrite: 0,
				}},
			},
		},
	}
	if !reflect.DeepEqual(cfg, want) {
		for i := range cfg.Providers {
			t.Logf("got provider %+v", *cfg.Providers[i])
		}
		t.Fatalf("got %+v", cfg)
	}
	if p, ok := cfg.Provider("demo"); !ok || p.Name != "demo" {
		t.Errorf("Provider(demo) = %v %v", p, ok)
	}
	if _, ok := cfg.Provider("nope"); ok {
		t.Errorf("Provider(nope) found")
	}
}

func TestParseErrors(t *testing.T) {
	const openai = "[providers.openai]\ntype = \"openai\"\napi_key_secret = {name = \"s\", key = \"k\"}\n" // lines 1-3
	tests := []struct {
		name string
		data map[string]string
		line int
		msg  string
	}{
		{"missing key", map[string]string{"other.toml": ""}, 0, `no "providers.toml" key`},
		{"syntax", map[string]string{DataKey: openai + "models = [\n"}, 4, "expected"},
		{"type mismatch", map[string]string{DataKey: openai + "timeout_seconds = \"60\"\n"}, 4, `"providers.openai.timeout_seconds"`},
		{"unknown top-level key", map[string]string{DataKey: "default_providr = \"x\"\n" + openai}, 1, `unknown key "default_providr"`},
		{"unknown provider key", map[string]string{DataKey: openai + "api_key = \"sk-123\"\n"}, 4, `unknown key "providers.openai.api_key"`},
		{"unknown rate key", map[string]string{DataKey: openai + "[providers.openai.rates.m]\nprompt = \"1\"\ncompletion = \"1\"\ninput = \"1\"\n"}, 7, `unknown key "providers.openai.rates.m.input"`},
		{"no providers", map[string]string{DataKey: "default_model = \"m\"\n"}, 0, "no providers"},
		{"missing type", map[string]string{DataKey: "[providers.x]\nmodels = [\"m\"]\n"}, 1, "type is required"},
		{"bad type", map[string]string{DataKey: "[providers.x]\ntype = \"gemini\"\n"}, 2, `type "gemini" is not one of openai, anthropic, scripted`},
		{"openai needs secret", map[string]string{DataKey: "[providers.o]\ntype = \"openai\"\n"}, 1, "api_key_secret"},
		{"anthropic needs secret", map[string]string{DataKey: "\n[providers.a]\ntype = \"anthropic\"\n"}, 2, `required for type "anthropic"`},
		{"secret incomplete", map[string]string{DataKey: "[providers.s]\ntype = \"scripted\"\napi_key_secret = {name = \"s\"}\n"}, 3, "needs both name and key"},
		{"bad base_url", map[string]string{DataKey: openai + "base_url = \"api.openai.com\"\n"}, 4, "absolute http(s) URL"},
		{"empty model", map[string]string{DataKey: openai + "models = [\"\"]\n"}, 4, "models[0] is empty"},
		{"duplicate model", map[string]string{DataKey: openai + "models = [\"a\", \"a\"]\n"}, 4, `"a" is listed twice`},
		{"negative timeout", map[string]string{DataKey: openai + "timeout_seconds = -1\n"}, 4, "timeout_seconds must be >= 0"},
		{"negative overload failover", map[string]string{DataKey: openai + "overload_failover_seconds = -1\n"}, 4, "overload_failover_seconds must be >= 0"},
		{"slash in name", map[string]string{DataKey: "[providers.\"a/b\"]\ntype = \"scripted\"\n"}, 1, `contain no "/"`},
		{"bad rate", map[string]string{DataKey: openai + "[providers.openai.rates.\"gpt-4o\"]\nprompt = \"0.15\"\ncompletion = \"abc\"\n"}, 6, `provider "openai": model "gpt-4o": rate completion: invalid amount "abc"`},
		{"negative rate", map[string]string{DataKey: openai + "[providers.openai.rates.m]\nprompt = \"-1\"\ncompletion = \"1\"\n"}, 5, `model "m": rate prompt`},
		{"too precise rate", map[string]string{DataKey: openai + "[providers.openai.rates.m]\nprompt = \"0.0000000001\"\ncompletion = \"1\"\n"}, 5, "more than 9 decimals"},
		{"float rate", map[string]string{DataKey: openai + "[providers.openai.rates.m]\nprompt = 0.15\n"}, 5, "incompatible types"},
		{"missing completion rate", map[string]string{DataKey: openai + "[providers.openai.rates.m]\nprompt = \"1\"\n"}, 4, "rate completion is required"},
		{"unknown default_provider", map[string]string{DataKey: "default_provider = \"x\"\n" + openai}, 1, `default_provider "x" is not a declared provider`},
		{"unknown fallback", map[string]string{DataKey: "fallback_order = [\"openai\", \"x\"]\n" + openai}, 1, `fallback_order: "x"`},
		{"duplicate fallback", map[string]string{DataKey: "fallback_order = [\"openai\", \"openai\"]\n" + openai}, 1, "listed twice"},
		{"negative max_concurrent", map[string]string{DataKey: openai + "max_concurrent = -1\n"}, 4, `provider "openai": max_concurrent must be >= 0, got -1`},
		{"negative requests_per_minute", map[string]string{DataKey: openai + "models = [\"m\"]\nrequests_per_minute = -5\n"}, 5, "requests_per_minute must be >= 0, got -5"},
		{"negative tokens_per_minute", map[string]string{DataKey: openai + "tokens_per_minute = -100\n"}, 4, "tokens_per_minute must be >= 0, got -100"},
		{"float limit", map[string]string{DataKey: openai + "requests_per_minute = 1.5\n"}, 4, "incompatible types"},
		{"string limit", map[string]string{DataKey: openai + "tokens_per_minute = \"1000\"\n"}, 4, `"providers.openai.tokens_per_minute"`},
		{"limits for unlisted model", map[string]string{DataKey: openai + "models = [\"m\"]\n[providers.openai.limits.\"gpt-4o\"]\nrequests_per_minute = 5\n"}, 5, `limits for model "gpt-4o", which is not in models`},
		{"limits without models", map[string]string{DataKey: openai + "[providers.openai.limits.m]\nmax_concurrent = 1\n"}, 4, `limits for model "m"`},
		{"negative model limit", map[string]string{DataKey: openai + "models = [\"m\"]\n[providers.openai.limits.m]\nmax_concurrent = 2\ntokens_per_minute = -1\n"}, 7, `provider "openai": model "m": tokens_per_minute must be >= 0, got -1`},
		{"unknown limits key", map[string]string{DataKey: openai + "models = [\"m\"]\n[providers.openai.limits.m]\nrpm = 1\n"}, 6, `unknown key "providers.openai.limits.m.rpm"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.data)
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("want *ParseError, got %T %v", err, err)
			}
			if pe.Key != DataKey || pe.Line != tt.line || !strings.Contains(pe.Message, tt.msg) {
				t.Errorf("got %q line %d %q; want line %d containing %q", pe.Key, pe.Line, pe.Message, tt.line, tt.msg)
			}
		})
	}
}

func TestParseErrorString(t *testing.T) {
	e := &ParseError{Key: DataKey, Line: 3, Message: "boom"}
	if e.Error() != "providers.toml line 3: boom" {
		t.Errorf("got %q", e.Error())
	}
}

func TestResolve(t *testing.T) {
	cfg := mustParse(t, fullConfig)
	tests := []struct {
		ref      string
		provider string
		model    string
		ok       bool
	}{
		{"", "openai", "gpt-4o-mini", true},
		{"openai/gpt-4o", "openai", "gpt-4o", true},
		{"anthropic/unlisted-model", "anthropic", "unlisted-model", true},
		{"gpt-4o", "openai", "gpt-4o", true}, // listed by both; fallback_order wins
		{"claude-sonnet", "anthropic", "claude-sonnet", true},
		{"scripted-1", "demo", "scripted-1", true},
		{"nobody/has-this", "", "", false},
		{"unknown-model", "", "", false},
		{"openai/", "", "", false},
	}
	for _, tt := range tests {
		p, model, ok := cfg.Resolve(tt.ref)
		name := ""
		if p != nil {
			name = p.Name
		}
		if ok != tt.ok || name != tt.provider || model != tt.model {
			t.Errorf("Resolve(%q) = %q, %q, %v; want %q, %q, %v", tt.ref, name, model, ok, tt.provider, tt.model, tt.ok)
		}
	}
}

func TestResolveDefaults(t *testing.T) {
	const provs = `[providers.b]
type = "scripted"
models = ["shared", "b1"]
[providers.a]
type = "scripted"
models = ["shared"]
[providers.empty]
type = "scripted"
`
	tests := []struct {
		head     string
		ref      string
		provider string
		model    string
		ok       bool
	}{
		{"", "", "", "", false},
		{`default_provider = "b"` + "\n", "", "b", "shared", true},
		{`default_provider = "empty"` + "\n", "", "", "", false},
		{`default_model = "b1"` + "\n", "", "b", "b1", true},
		{"", "shared", "a", "shared", true}, // name order without fallback_order
		{`fallback_order = ["b"]` + "\n", "shared", "b", "shared", true},
		{"", "meta-llama/Llama-3", "", "", false},
	}
	for _, tt := range tests {
		cfg := mustParse(t, tt.head+provs)
		p, model, ok := cfg.Resolve(tt.ref)
		name := ""
		if p != nil {
			name = p.Name
		}
		if ok != tt.ok || name != tt.provider || model != tt.model {
			t.Errorf("%q Resolve(%q) = %q, %q, %v; want %q, %q, %v", tt.head, tt.ref, name, model, ok, tt.provider, tt.model, tt.ok)
		}
	}
	// A model whose name contains "/" resolves as a bare model when its first
	// segment is not a provider.
	cfg := mustParse(t, "[providers.vllm]\ntype = \"scripted\"\nmodels = [\"meta-llama/Llama-3\"]\n")
	if p, model, ok := cfg.Resolve("meta-llama/Llama-3"); !ok || p.Name != "vllm" || model != "meta-llama/Llama-3" {
		t.Errorf("slash model: %v %q %v", p, model, ok)
	}
}

func TestPrice(t *testing.T) {
	cfg := mustParse(t, fullConfig)
	openai, _ := cfg.Provider("openai")
	tests := []struct {
		usage Usage
		want  string
	}{
		{Usage{Prompt: 1234}, "0.0001851"},
		{Usage{Completion: 1_000_000}, "0.6"},
		{Usage{Prompt: 1000, Completion: 500, Cached: 2000, CacheWrite: 7}, "0.0006"},
		{Usage{}, "0"},
		// One prompt token costs 150 nano-dollars and one cached token 75.
		{Usage{Prompt: 1, Cached: 1}, "0.000000225"},
	}
	for _, tt := range tests {
		got, ok := openai.Price("gpt-4o-mini", tt.usage)
		if !ok {
			t.Fatalf("no price")
		}
		if got.String() != tt.want {
			t.Errorf("Price(%+v) = %s, want %s", tt.usage, got, tt.want)
		}
	}
	if _, ok := openai.Price("gpt-4o", Usage{Prompt: 1}); ok {
		t.Errorf("priced a model without a rate card")
	}
	demo, _ := cfg.Provider("demo")
	// Cached defaults to the prompt rate: 10 cached at $1/M = 0.00001.
	if got, _ := demo.Price("scripted-1", Usage{Cached: 10}); got.String() != "0.00001" {
		t.Errorf("default cached rate: %s", got)
	}
}

func TestParseLimits(t *testing.T) {
	// The full config declares no limits: everything is unbounded.
	cfg := mustParse(t, fullConfig)
	for _, p := range cfg.Providers {
		if !p.Limits.IsZero() || p.ModelLimits != nil || !p.LimitsFor("gpt-4o-mini").IsZero() {
			t.Errorf("%s: limits %+v %+v without limit keys", p.Name, p.Limits, p.ModelLimits)
		}
	}

	cfg = mustParse(t, `[providers.openai]
type = "openai"
api_key_secret = { name = "s", key = "k" }
models = ["gpt-4o-mini", "gpt-4o", "o1", "local"]
max_concurrent = 100
requests_per_minute = 500
tokens_per_minute = 200000
[providers.openai.limits."gpt-4o-mini"]
requests_per_minute = 5000
tokens_per_minute = 2000000
[providers.openai.limits.o1]
max_concurrent = 2
[providers.openai.limits.local]
requests_per_minute = 0   # explicitly unbounded for this model
[providers.anthropic]
type = "anthropic"
api_key_secret = { name = "s", key = "k" }
models = ["claude"]
[providers.anthropic.limits.claude]
tokens_per_minute = 40000
`)
	openai, _ := cfg.Provider("openai")
	def := ratelimit.Limits{MaxConcurrent: 100, RequestsPerMinute: 500, TokensPerMinute: 200000}
	if openai.Limits != def {
		t.Errorf("provider limits %+v", openai.Limits)
	}
	want := map[string]ratelimit.Limits{
		"gpt-4o-mini": {MaxConcurrent: 100, RequestsPerMinute: 5000, TokensPerMinute: 2000000},
		"o1":          {MaxConcurrent: 2, RequestsPerMinute: 500, TokensPerMinute: 200000},
		"local":       {MaxConcurrent: 100, TokensPerMinute: 200000},
	}
	if !reflect.DeepEqual(openai.ModelLimits, want) {
		t.Errorf("model limits %+v", openai.ModelLimits)
	}
	for model, w := range map[string]ratelimit.Limits{
		"gpt-4o-mini": want["gpt-4o-mini"],
		"o1":          want["o1"],
		"gpt-4o":      def, // no override: the provider's defaults
		"unlisted":    def, // "openai/unlisted" resolves too, with the defaults
	} {
		if got := openai.LimitsFor(model); got != w {
			t.Errorf("LimitsFor(%q) = %+v, want %+v", model, got, w)
		}
	}
	anthropic, _ := cfg.Provider("anthropic")
	if !anthropic.Limits.IsZero() || anthropic.LimitsFor("claude") != (ratelimit.Limits{TokensPerMinute: 40000}) || !anthropic.LimitsFor("other").IsZero() {
		t.Errorf("anthropic limits %+v %+v", anthropic.Limits, anthropic.ModelLimits)
	}
}

// TestMaxOutputTokens: a rate card's max_output_tokens is read (quotas
// reserve a call's worst case with it); below 1 is refused with its line.
func TestMaxOutputTokens(t *testing.T) {
	src := "[providers.p]\ntype = \"scripted\"\nmodels = [\"m\"]\n[providers.p.rates.m]\nprompt = \"1\"\ncompletion = \"2\"\nmax_output_tokens = 300\n"
	cfg := mustParse(t, src)
	p, _ := cfg.Provider("p")
	if got := p.Rates["m"].MaxOutputTokens; got != 300 {
		t.Errorf("max_output_tokens = %d, want 300", got)
	}
	_, err := Parse(map[string]string{DataKey: strings.Replace(src, "= 300", "= 0", 1)})
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Line != 7 || !strings.Contains(err.Error(), "max_output_tokens must be at least 1") {
		t.Errorf("max_output_tokens = 0: %v", err)
	}
}

// TestOverloadFailover: a provider without overload_failover_seconds fails
// an overloaded model over after the default; one with it, after that.
func TestOverloadFailover(t *testing.T) {
	if got := (&Provider{}).OverloadFailover(); got != time.Minute {
		t.Errorf("default = %v, want one minute", got)
	}
	if got := (&Provider{OverloadFailoverSeconds: 5}).OverloadFailover(); got != 5*time.Second {
		t.Errorf("overload_failover_seconds = 5 gives %v", got)
	}
}
