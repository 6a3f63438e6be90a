package providers

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxRetryAfter caps the wait a provider's headers can ask for.
const MaxRetryAfter = time.Hour

// RateLimitHint reads how long a provider asked to wait before trying again
// from its response headers, at now. ok is false when no header says. The
// headers are read in this order, the first usable one deciding:
//
//  1. retry-after-ms: milliseconds, may be fractional (the OpenAI SDKs'
//     convention);
//  2. retry-after: delta-seconds, may be fractional, or an HTTP-date;
//  3. OpenAI's x-ratelimit-reset-requests and x-ratelimit-reset-tokens
//     (durations such as "1s", "6m0s", "20ms", or bare seconds);
//  4. Anthropic's anthropic-ratelimit-{requests,tokens,input-tokens,
//     output-tokens}-reset (RFC 3339 timestamps).
//
// Of the reset headers (3 and 4), the reset of a limit whose matching
// remaining header is 0 wins (the longest, when several are spent); when no
// limit says it is spent, the longest reset given. Negative and unparseable
// values are ignored; waits are capped at MaxRetryAfter.
func RateLimitHint(h http.Header, now time.Time) (time.Duration, bool) {
	if d, ok := retryAfterHint(h, now); ok {
		return d, true
	}
	return resetHint(h, now)
}

// retryAfterHint reads retry-after-ms, then retry-after: the headers that
// ask for a wait outright, whatever the status.
func retryAfterHint(h http.Header, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if d, ok := decimalDuration(v, time.Millisecond); ok {
			return d, true
		}
	}
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if d, ok := decimalDuration(v, time.Second); ok {
			return d, true
		}
		if t, err := http.ParseTime(v); err == nil {
			if d := t.Sub(now); d >= 0 {
				return min(d, MaxRetryAfter), true
			}
		}
	}
	return 0, false
}

// resetLimits pair each reset header with the remaining header of the same
// limit, OpenAI's first.
var (
	openAIResets = [][2]string{
		{"X-Ratelimit-Reset-Requests", "X-Ratelimit-Remaining-Requests"},
		{"X-Ratelimit-Reset-Tokens", "X-Ratelimit-Remaining-Tokens"},
	}
	anthropicResets = [][2]string{
		{"Anthropic-Ratelimit-Requests-Reset", "Anthropic-Ratelimit-Requests-Remaining"},
		{"Anthropic-Ratelimit-Tokens-Reset", "Anthropic-Ratelimit-Tokens-Remaining"},
		{"Anthropic-Ratelimit-Input-Tokens-Reset", "Anthropic-Ratelimit-Input-Tokens-Remaining"},
		{"Anthropic-Ratelimit-Output-Tokens-Reset", "Anthropic-Ratelimit-Output-Tokens-Remaining"},
	}
)

// resetHint reads the rate-limit reset headers: OpenAI's, then Anthropic's.
func resetHint(h http.Header, now time.Time) (time.Duration, bool) {
	if d, ok := pickReset(h, openAIResets, parseResetDuration); ok {
		return d, true
	}
	return pickReset(h, anthropicResets, func(v string) (time.Duration, bool) {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return 0, false
		}
		d := t.Sub(now)
		if d < 0 {
			return 0, false
		}
		return min(d, MaxRetryAfter), true
	})
}

// pickReset is the reset of the spent limits (the longest), else the
// longest reset given.
func pickReset(h http.Header, limits [][2]string, parse func(string) (time.Duration, bool)) (time.Duration, bool) {
	var spent, longest time.Duration
	var anySpent, found bool
	for _, l := range limits {
		v := strings.TrimSpace(h.Get(l[0]))
		if v == "" {
			continue
		}
		d, ok := parse(v)
		if !ok {
			continue
		}
		found, longest = true, max(longest, d)
		if isZero(h.Get(l[1])) {
			anySpent, spent = true, max(spent, d)
		}
	}
	switch {
	case anySpent:
		return spent, true
	case found:
		return longest, true
	}
	return 0, false
}

// isZero reports whether a remaining header says nothing is left.
func isZero(v string) bool {
	v = strings.TrimSpace(v)
	if !isDecimal(v) {
		return false
	}
	f, err := strconv.ParseFloat(v, 64)
	return err == nil && f == 0
}

// isDecimal reports whether s is an unsigned decimal number: digits with at
// most one point ("2", "1.5", ".5", "2.").
func isDecimal(s string) bool {
	digits, point := 0, false
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !point:
			point = true
		default:
			return false
		}
	}
	return digits > 0
}

// decimalDuration parses an unsigned decimal number of units, capped at
// MaxRetryAfter. Signs, exponents, hex, NaN and infinities are refused.
func decimalDuration(s string, unit time.Duration) (time.Duration, bool) {
	if !isDecimal(s) {
		return 0, false
	}
	f, ok := parseDecimal(s)
	if !ok {
		return 0, false
	}
	return capped(f * float64(unit))
}

// parseDecimal parses what isDecimal accepted; a number too large for a
// float64 is +Inf, which caps.
func parseDecimal(s string) (float64, bool) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !(errors.Is(err, strconv.ErrRange) && math.IsInf(f, 1)) {
		return 0, false
	}
	return f, true
}

// capped converts nanoseconds to a duration no longer than MaxRetryAfter,
// refusing negatives and NaN.
func capped(ns float64) (time.Duration, bool) {
	switch {
	case math.IsNaN(ns) || ns < 0:
		return 0, false
	case ns >= float64(MaxRetryAfter):
		return MaxRetryAfter, true
	}
	return time.Duration(ns), true
}

// resetUnits are the units parseResetDuration knows, in nanoseconds.
var resetUnits = map[string]float64{
	"ns": 1, "us": 1e3, "µs": 1e3, "μs": 1e3, "ms": 1e6,
	"s": 1e9, "m": 60e9, "h": 3600e9, "d": 86400e9,
}

// parseResetDuration parses an OpenAI-style reset: a Go-like duration
// ("1s", "6m0s", "0.5s", "20ms", "1h2m3s", "2m59.56s"), or a bare number of
// seconds. It is lenient with case and spaces, and caps the result at
// MaxRetryAfter rather than overflowing.
func parseResetDuration(s string) (time.Duration, bool) {
	s = strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), " ", ""))
	if s == "" {
		return 0, false
	}
	if isDecimal(s) {
		return decimalDuration(s, time.Second)
	}
	var total float64
	for s != "" {
		i := 0
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			i++
		}
		num := s[:i]
		if !isDecimal(num) {
			return 0, false
		}
		s = s[i:]
		j := 0
		for j < len(s) && (s[j] < '0' || s[j] > '9') && s[j] != '.' {
			j++
		}
		unit, ok := resetUnits[s[:j]]
		if !ok {
			return 0, false
		}
		s = s[j:]
		f, ok := parseDecimal(num)
		if !ok {
			return 0, false
		}
		total += f * unit
	}
	return capped(total)
}
