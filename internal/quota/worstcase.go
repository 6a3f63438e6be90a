package quota

import (
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/money"
	"github.com/agentrun-dev/agentrun-operator/internal/providerconfig"
)

// A model call reserves its worst case before it is made, so that calls in
// flight on every replica can never take a quota past its limit by more
// than they may cost together:
//
//   - prompt tokens at most the request's bytes plus PromptFraming: every
//     token of a byte-level tokenizer (those of OpenAI's and Anthropic's
//     models) stands for at least one byte of the text sent, and the
//     framing of messages adds a few tokens each;
//   - completion tokens at most the rate card's max_output_tokens, else
//     DefaultMaxOutputTokens (the Anthropic adapter's cap on every answer);
//   - priced at the model's rates, prompt tokens at the dearest of its
//     prompt, cached and cache-write rates;
//   - a model without a rate card at UnpricedRates, which is also what its
//     answered calls count as: unknown is never free.
//
// A provider that reports more than this (an OpenAI-compatible server
// answering longer than max_output_tokens) is counted at what it reports
// when the call settles: the quota then overshoots by that call, never
// under-counts.

// DefaultMaxOutputTokens is the completion bound of a model whose rate
// card declares no max_output_tokens.
const DefaultMaxOutputTokens = 4096

// PromptFraming bounds the tokens a request's message framing adds to
// its text.
const PromptFraming = 512

// UnpricedRates are what a call to a model without a rate card counts as,
// per million tokens: the highest list prices of any public model when
// this was written (prompt $150, completion $600), so a quota's cost is
// never less than the bill.
var UnpricedRates = providerconfig.RateCard{
	Prompt: money.MustParseUSD("150"), Completion: money.MustParseUSD("600"),
	Cached: money.MustParseUSD("150"), CacheWrite: money.MustParseUSD("150"),
}

// WorstCase is the most a call to model of p with a request of
// promptBytes may cost (nano-USD) and use (tokens); unpriced says the
// model has no rate card and UnpricedRates priced it.
func WorstCase(p *providerconfig.Provider, model string, promptBytes int64) (cost, tokens int64, unpriced bool) {
	rc, ok := providerconfig.RateCard{}, false
	if p != nil {
		rc, ok = p.Rates[model]
	}
	maxOut := int64(DefaultMaxOutputTokens)
	if rc.MaxOutputTokens > 0 {
		maxOut = rc.MaxOutputTokens
	}
	if !ok {
		rc = UnpricedRates
	}
	prompt := max(promptBytes, 0) + PromptFraming
	c := money.Total(
		money.Line{Tokens: prompt, PerMillion: max(rc.Prompt, rc.Cached, rc.CacheWrite)},
		money.Line{Tokens: maxOut, PerMillion: rc.Completion},
	)
	return int64(c), prompt + maxOut, !ok
}

// Settled is what an answered call counts against a quota: its cost as
// priced (the provider's figure or the rate card), else its usage at
// UnpricedRates; and its tokens, prompt plus completion as the ledger
// counts them.
func Settled(e *journal.Entry) (cost, tokens int64, unpriced bool) {
	var u journal.Usage
	if e.Usage != nil {
		u = *e.Usage
	}
	tokens = u.Prompt + u.Completion
	if e.CostNanoUSD != nil {
		return *e.CostNanoUSD, tokens, false
	}
	rc := UnpricedRates
	c := money.Total(
		money.Line{Tokens: u.Prompt, PerMillion: rc.Prompt},
		money.Line{Tokens: u.Completion, PerMillion: rc.Completion},
		money.Line{Tokens: u.Cached, PerMillion: rc.Cached},
		money.Line{Tokens: u.CacheWrite, PerMillion: rc.CacheWrite},
	)
	return int64(c), tokens, true
}
