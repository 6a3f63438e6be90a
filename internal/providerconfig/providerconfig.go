// Package providerconfig parses the provider ConfigMap: which model
// providers exist, where their API keys live and what their models cost. It
// is pure so the reconciler can re-read it whenever a run waiting in
// NeedsSetup might have been fixed, and tests need no cluster.
package providerconfig

import (
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/blueprint/tomlpos"
	"github.com/agentrun-dev/agentrun-operator/internal/money"
	"github.com/agentrun-dev/agentrun-operator/internal/ratelimit"
)

// DefaultConfigMapName is used when a run does not name a provider config.
const DefaultConfigMapName = "agentrun-providers"

// DataKey is the ConfigMap key holding the TOML.
const DataKey = "providers.toml"

// Provider types.
const (
	TypeOpenAI    = "openai"
	TypeAnthropic = "anthropic"
	// TypeScripted replays responses declared in the blueprint, with no
	// network, for demos and tests.
	TypeScripted = "scripted"
)

// ParseError is a provider-config problem with its position, so a
// ProviderConfigInvalid remedy can point at the line to fix.
type ParseError = tomlpos.Error

// Config is a parsed provider config.
type Config struct {
	DefaultProvider string
	DefaultModel    string
	// FallbackOrder lists provider names to try first, in order.
	FallbackOrder []string
	// Providers are sorted by name so listings and lookups are stable.
	Providers []*Provider
}

// Provider is one [providers.X] table.
type Provider struct {
	Name    string
	Type    string
	BaseURL string
	// APIKeySecret is where the API key lives. For a scripted provider it
	// is optional; if set, the key must exist, which lets a demo show the
	// NeedsSetup path.
	APIKeySecret   *SecretKeyRef
	Models         []string
	TimeoutSeconds int
	// OverloadFailoverSeconds is how long a model may keep answering that
	// it is overloaded before the stage fails over to its next model (0:
	// DefaultOverloadFailover); see OverloadFailover.
	OverloadFailoverSeconds int
	// Rates maps a model to its rate card.
	Rates map[string]RateCard
	// Limits are the provider's limits for each of its models, the
	// defaults for models without an override.
	Limits ratelimit.Limits
	// ModelLimits holds the models with a limits table, merged with Limits.
	ModelLimits map[string]ratelimit.Limits
}

// DefaultOverloadFailover is how long a model may keep answering that it
// is overloaded (HTTP 529, or 503 with Retry-After) before a stage that
// lists another model fails over to it, when the provider sets no
// overload_failover_seconds. A provider's overload usually passes within
// seconds; one that lasts a minute is worth another model.
const DefaultOverloadFailover = 60 * time.Second

// OverloadFailover is how long a model of p may keep answering that it is
// overloaded before its stage fails over to its next model.
func (p *Provider) OverloadFailover() time.Duration {
	if p.OverloadFailoverSeconds > 0 {
		return time.Duration(p.OverloadFailoverSeconds) * time.Second
	}
	return DefaultOverloadFailover
}

// SecretKeyRef names one key of a Secret in the run's namespace.
type SecretKeyRef struct {
	Name string
	Key  string
}

// RateCard holds prices in USD per million tokens.
type RateCard struct {
	Prompt     money.NanoUSD
	Completion money.NanoUSD
	// Cached and CacheWrite default to Prompt when not given: charging
	// them as ordinary prompt tokens is the closest safe guess.
	Cached     money.NanoUSD
	CacheWrite money.NanoUSD
	// MaxOutputTokens bounds one answer's completion tokens, as far as the
	// operator knows (max_output_tokens; 0: not declared). A quota reserves
	// a call's worst case with it (internal/quota).
	MaxOutputTokens int64
}

// Usage is the token usage of one model call. Prompt counts prompt tokens
// not read from cache; adapters whose API reports cached tokens inside the
// prompt count subtract them first, so no token is billed twice.
type Usage struct {
	Prompt     int64
	Completion int64
	Cached     int64
	CacheWrite int64
}

type rawConfig struct {
	DefaultProvider string                 `toml:"default_provider"`
	DefaultModel    string                 `toml:"default_model"`
	FallbackOrder   []string               `toml:"fallback_order"`
	Providers       map[string]rawProvider `toml:"providers"`
}

type rawProvider struct {
	Type           string        `toml:"type"`
	BaseURL        string        `toml:"base_url"`
	APIKeySecret   *rawSecretRef `toml:"api_key_secret"`
	Models         []string      `toml:"models"`
	TimeoutSeconds int           `toml:"timeout_seconds"`
	// OverloadFailoverSeconds: see Provider.OverloadFailoverSeconds.
	OverloadFailoverSeconds int                `toml:"overload_failover_seconds"`
	Rates                   map[string]rawRate `toml:"rates"`
	rawLimits
	Limits map[string]rawLimits `toml:"limits"`
}

// rawLimits keeps pointers so an override can tell an explicit 0
// (unbounded for this model) from a field it leaves to the provider.
type rawLimits struct {
	MaxConcurrent     *int   `toml:"max_concurrent"`
	RequestsPerMinute *int   `toml:"requests_per_minute"`
	TokensPerMinute   *int64 `toml:"tokens_per_minute"`
}

type rawSecretRef struct {
	Name string `toml:"name"`
	Key  string `toml:"key"`
}

// rawRate keeps rates as strings: TOML floats cannot hold prices exactly.
type rawRate struct {
	Prompt     *string `toml:"prompt"`
	Completion *string `toml:"completion"`
	Cached     *string `toml:"cached"`
	CacheWrite *string `toml:"cache_write"`
	// MaxOutputTokens is the most completion tokens one answer of the
	// model may have, for quotas' worst cases.
	MaxOutputTokens *int64 `toml:"max_output_tokens"`
}

type parser struct {
	idx *tomlpos.Index
}

func (p *parser) errf(line int, format string, args ...any) *ParseError {
	return &ParseError{Key: DataKey, Line: line, Message: fmt.Sprintf(format, args...)}
}

// Parse reads the provider config from the ConfigMap data. Every error is a
// *ParseError.
func Parse(data map[string]string) (*Config, error) {
	src, ok := data[DataKey]
	if !ok {
		return nil, &ParseError{Key: DataKey, Message: fmt.Sprintf("provider config has no %q key", DataKey)}
	}
	p := &parser{idx: tomlpos.New(src)}
	cfg, perr := p.parse(src)
	if perr != nil {
		return nil, perr
	}
	return cfg, nil
}

func (p *parser) parse(src string) (*Config, *ParseError) {
	var raw rawConfig
	if _, line, msg, ok := p.idx.DecodeStrict(src, &raw); !ok {
		return nil, p.errf(line, "%s", msg)
	}
	if len(raw.Providers) == 0 {
		return nil, p.errf(0, "no providers declared; add a [providers.<name>] table")
	}

	cfg := &Config{DefaultProvider: raw.DefaultProvider, DefaultModel: raw.DefaultModel, FallbackOrder: raw.FallbackOrder}
	names := make([]string, 0, len(raw.Providers))
	for n := range raw.Providers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		prov, err := p.provider(n, raw.Providers[n])
		if err != nil {
			return nil, err
		}
		cfg.Providers = append(cfg.Providers, prov)
	}

	if d := cfg.DefaultProvider; d != "" {
		if _, ok := cfg.Provider(d); !ok {
			return nil, p.errf(p.idx.Line("default_provider"), "default_provider %q is not a declared provider", d)
		}
	}
	seen := map[string]bool{}
	for _, n := range cfg.FallbackOrder {
		if _, ok := cfg.Provider(n); !ok {
			return nil, p.errf(p.idx.Line("fallback_order"), "fallback_order: %q is not a declared provider", n)
		}
		if seen[n] {
			return nil, p.errf(p.idx.Line("fallback_order"), "fallback_order: %q is listed twice", n)
		}
		seen[n] = true
	}
	return cfg, nil
}

// provider validates one provider of the config.
func (p *parser) provider(name string, r rawProvider) (*Provider, *ParseError) {
	at := func(key ...string) int { return p.idx.Line(append([]string{"providers", name}, key...)...) }
	fail := func(line int, format string, args ...any) *ParseError {
		return p.errf(line, "provider %q: %s", name, fmt.Sprintf(format, args...))
	}
	// A "/" would make "provider/model" references ambiguous.
	if name == "" || strings.Contains(name, "/") {
		return nil, p.errf(at(), "provider name %q must be non-empty and contain no \"/\"", name)
	}
	prov := &Provider{Name: name, Type: r.Type, BaseURL: r.BaseURL, Models: r.Models, TimeoutSeconds: r.TimeoutSeconds, OverloadFailoverSeconds: r.OverloadFailoverSeconds}
	switch r.Type {
	case TypeOpenAI, TypeAnthropic, TypeScripted:
	case "":
		return nil, fail(at(), "type is required (one of %s, %s, %s)", TypeOpenAI, TypeAnthropic, TypeScripted)
	default:
		return nil, fail(at("type"), "type %q is not one of %s, %s, %s", r.Type, TypeOpenAI, TypeAnthropic, TypeScripted)
	}
	if r.BaseURL != "" {
		u, err := url.Parse(r.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fail(at("base_url"), "base_url %q must be an absolute http(s) URL", r.BaseURL)
		}
	}
	if s := r.APIKeySecret; s != nil {
		if s.Name == "" || s.Key == "" {
			return nil, fail(at("api_key_secret"), "api_key_secret needs both name and key")
		}
		prov.APIKeySecret = &SecretKeyRef{Name: s.Name, Key: s.Key}
	} else if r.Type != TypeScripted {
		return nil, fail(at(), "api_key_secret = {name = \"...\", key = \"...\"} is required for type %q", r.Type)
	}
	for i, m := range r.Models {
		if m == "" {
			return nil, fail(at("models"), "models[%d] is empty", i)
		}
		if slices.Contains(r.Models[:i], m) {
			return nil, fail(at("models"), "model %q is listed twice", m)
		}
	}
	if r.TimeoutSeconds < 0 {
		return nil, fail(at("timeout_seconds"), "timeout_seconds must be >= 0, got %d", r.TimeoutSeconds)
	}
	if r.OverloadFailoverSeconds < 0 {
		return nil, fail(at("overload_failover_seconds"), "overload_failover_seconds must be >= 0, got %d", r.OverloadFailoverSeconds)
	}
	if err := p.providerRates(prov, r); err != nil {
		return nil, err
	}
	if err := p.providerLimits(prov, r, at, fail); err != nil {
		return nil, err
	}
	return prov, nil
}

// providerRates reads the provider's rate cards, model by model.
func (p *parser) providerRates(prov *Provider, r rawProvider) *ParseError {
	models := make([]string, 0, len(r.Rates))
	for m := range r.Rates {
		models = append(models, m)
	}
	sort.Strings(models)
	for _, m := range models {
		rc, err := p.rateCard(prov.Name, m, r.Rates[m])
		if err != nil {
			return err
		}
		if prov.Rates == nil {
			prov.Rates = map[string]RateCard{}
		}
		prov.Rates[m] = rc
	}
	return nil
}

// providerLimits reads the provider's limits, and each model's over them.
func (p *parser) providerLimits(prov *Provider, r rawProvider, at func(key ...string) int, fail func(int, string, ...any) *ParseError) *ParseError {
	lim, err := p.limits(r.rawLimits, ratelimit.Limits{}, func(key string) int { return at(key) }, fail)
	if err != nil {
		return err
	}
	prov.Limits = lim
	models := make([]string, 0, len(r.Limits))
	for m := range r.Limits {
		models = append(models, m)
	}
	sort.Strings(models)
	for _, m := range models {
		// A limit on a model the provider does not list is most likely a
		// typo, which would otherwise silently leave the model unlimited.
		if !slices.Contains(r.Models, m) {
			return fail(at("limits", m), "limits for model %q, which is not in models", m)
		}
		ml, err := p.limits(r.Limits[m], prov.Limits,
			func(key string) int { return at("limits", m, key) },
			func(line int, format string, args ...any) *ParseError {
				return fail(line, "model %q: %s", m, fmt.Sprintf(format, args...))
			})
		if err != nil {
			return err
		}
		if prov.ModelLimits == nil {
			prov.ModelLimits = map[string]ratelimit.Limits{}
		}
		prov.ModelLimits[m] = ml
	}
	return nil
}

// limits overrides base with the fields r sets; 0 means unbounded.
func (p *parser) limits(r rawLimits, base ratelimit.Limits, at func(key string) int, fail func(int, string, ...any) *ParseError) (ratelimit.Limits, *ParseError) {
	l := base
	if v := r.MaxConcurrent; v != nil {
		if *v < 0 {
			return l, fail(at("max_concurrent"), "max_concurrent must be >= 0, got %d", *v)
		}
		l.MaxConcurrent = *v
	}
	if v := r.RequestsPerMinute; v != nil {
		if *v < 0 {
			return l, fail(at("requests_per_minute"), "requests_per_minute must be >= 0, got %d", *v)
		}
		l.RequestsPerMinute = *v
	}
	if v := r.TokensPerMinute; v != nil {
		if *v < 0 {
			return l, fail(at("tokens_per_minute"), "tokens_per_minute must be >= 0, got %d", *v)
		}
		l.TokensPerMinute = *v
	}
	return l, nil
}

func (p *parser) rateCard(provider, model string, r rawRate) (RateCard, *ParseError) {
	var rc RateCard
	for _, f := range []struct {
		key      string
		val      *string
		dst      *money.NanoUSD
		required bool
	}{
		{"prompt", r.Prompt, &rc.Prompt, true},
		{"completion", r.Completion, &rc.Completion, true},
		{"cached", r.Cached, &rc.Cached, false},
		{"cache_write", r.CacheWrite, &rc.CacheWrite, false},
	} {
		line := p.idx.Line("providers", provider, "rates", model, f.key)
		if f.val == nil {
			if f.required {
				return rc, p.errf(line, "provider %q: model %q: rate %s is required", provider, model, f.key)
			}
			*f.dst = rc.Prompt
			continue
		}
		n, err := money.ParseUSD(*f.val)
		if err != nil {
			return rc, p.errf(line, "provider %q: model %q: rate %s: %v", provider, model, f.key, err)
		}
		*f.dst = n
	}
	if m := r.MaxOutputTokens; m != nil {
		if *m < 1 {
			return rc, p.errf(p.idx.Line("providers", provider, "rates", model, "max_output_tokens"), "provider %q: model %q: max_output_tokens must be at least 1, got %d", provider, model, *m)
		}
		rc.MaxOutputTokens = *m
	}
	return rc, nil
}

// Provider returns the named provider.
func (c *Config) Provider(name string) (*Provider, bool) {
	i, ok := slices.BinarySearchFunc(c.Providers, name, func(p *Provider, n string) int { return strings.Compare(p.Name, n) })
	if !ok {
		return nil, false
	}
	return c.Providers[i], true
}

// Resolve picks a provider and model for a reference:
//   - "provider/model" selects that provider and that model, listed or not,
//     since OpenAI-compatible servers accept models nobody wrote down;
//   - a bare model (or a ref whose first segment is not a provider, such as
//     "meta-llama/Llama-3") selects the first provider, in fallback_order
//     then name order, that lists it;
//   - "" uses default_provider and default_model (a provider alone uses its
//     first model; a model alone resolves as a bare model).
func (c *Config) Resolve(ref string) (*Provider, string, bool) {
	if ref == "" {
		switch {
		case c.DefaultProvider != "" && c.DefaultModel != "":
			p, ok := c.Provider(c.DefaultProvider)
			return p, c.DefaultModel, ok
		case c.DefaultProvider != "":
			p, ok := c.Provider(c.DefaultProvider)
			if !ok || len(p.Models) == 0 {
				return nil, "", false
			}
			return p, p.Models[0], true
		case c.DefaultModel != "":
			return c.byModel(c.DefaultModel)
		default:
			return nil, "", false
		}
	}
	if name, model, ok := strings.Cut(ref, "/"); ok && model != "" {
		if p, ok := c.Provider(name); ok {
			return p, model, true
		}
	}
	return c.byModel(ref)
}

func (c *Config) byModel(model string) (*Provider, string, bool) {
	for _, p := range c.ordered() {
		if slices.Contains(p.Models, model) {
			return p, model, true
		}
	}
	return nil, "", false
}

// ordered lists providers in failover order: fallback_order first, then the
// rest by name.
func (c *Config) ordered() []*Provider {
	out := make([]*Provider, 0, len(c.Providers))
	for _, n := range c.FallbackOrder {
		if p, ok := c.Provider(n); ok && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	for _, p := range c.Providers {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// LimitsFor returns the rate limits of one model of the provider: its
// override if it has one, else the provider's defaults. Zero fields are
// unbounded.
func (p *Provider) LimitsFor(model string) ratelimit.Limits {
	if l, ok := p.ModelLimits[model]; ok {
		return l
	}
	return p.Limits
}

// Price is the exact cost of one call to model, rounded once to a whole
// nano-dollar. It reports false when the provider has no rate card for the
// model, so the caller can count the call as unpriced instead of free.
func (p *Provider) Price(model string, u Usage) (money.NanoUSD, bool) {
	rc, ok := p.Rates[model]
	if !ok {
		return 0, false
	}
	return money.Total(
		money.Line{Tokens: u.Prompt, PerMillion: rc.Prompt},
		money.Line{Tokens: u.Completion, PerMillion: rc.Completion},
		money.Line{Tokens: u.Cached, PerMillion: rc.Cached},
		money.Line{Tokens: u.CacheWrite, PerMillion: rc.CacheWrite},
	), true
}
