// Package money holds exact USD amounts. Costs are summed across many model
// calls and compared against budgets, so they are kept as integers rather
// than floats, which would drift and make budget checks flaky.
package money

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
)

// NanoUSD is an amount in billionths of a US dollar. Nine decimals cover the
// smallest per-token prices seen in rate cards while an int64 still spans
// about 9.2 billion dollars.
type NanoUSD int64

// nanosPerUSD is the scale of NanoUSD.
const nanosPerUSD = 1_000_000_000

// maxDecimals is how many fractional digits ParseUSD accepts; more would be
// silently lost, so they are rejected instead.
const maxDecimals = 9

// ParseUSD parses a non-negative decimal dollar amount such as "0", "0.15" or
// "12.000000001". It rejects signs, exponents, more than nine decimals and
// anything that is not plain digits, because rate cards and budgets are
// written by hand and a typo must not become a silently wrong price.
func ParseUSD(s string) (NanoUSD, error) {
	if s == "" {
		return 0, errors.New("empty amount")
	}
	whole, frac, hasDot := strings.Cut(s, ".")
	if whole == "" || (hasDot && frac == "") {
		return 0, fmt.Errorf("invalid amount %q: want digits like \"0.15\"", s)
	}
	if !allDigits(whole) || !allDigits(frac) {
		return 0, fmt.Errorf("invalid amount %q: want a non-negative decimal like \"0.15\"", s)
	}
	if len(frac) > maxDecimals {
		return 0, fmt.Errorf("invalid amount %q: more than %d decimals", s, maxDecimals)
	}
	var w int64
	for _, c := range whole {
		d := int64(c - '0')
		if w > (math.MaxInt64/nanosPerUSD-d)/10 {
			return 0, fmt.Errorf("amount %q is too large", s)
		}
		w = w*10 + d
	}
	var f int64
	for i := range maxDecimals {
		f *= 10
		if i < len(frac) {
			f += int64(frac[i] - '0')
		}
	}
	if w > (math.MaxInt64-f)/nanosPerUSD {
		return 0, fmt.Errorf("amount %q is too large", s)
	}
	return NanoUSD(w*nanosPerUSD + f), nil
}

// MustParseUSD is ParseUSD for constants in code and tests.
func MustParseUSD(s string) NanoUSD {
	n, err := ParseUSD(s)
	if err != nil {
		panic(err)
	}
	return n
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String renders the shortest exact decimal ("0", "0.15", "1.5",
// "0.000000123") so that status fields round-trip through ParseUSD.
func (n NanoUSD) String() string {
	neg := n < 0
	// uint64 keeps math.MinInt64 representable after negation.
	u := uint64(n)
	if neg {
		u = -u
	}
	whole, frac := u/nanosPerUSD, u%nanosPerUSD
	s := fmt.Sprint(whole)
	if frac != 0 {
		s += "." + strings.TrimRight(fmt.Sprintf("%09d", frac), "0")
	}
	if neg {
		s = "-" + s
	}
	return s
}

// Line is one priced quantity: tokens at a price per million tokens.
type Line struct {
	Tokens     int64
	PerMillion NanoUSD
}

// Cost is the price of tokens at perMillion dollars per million tokens,
// rounded half up to a whole nano-dollar.
func Cost(tokens int64, perMillion NanoUSD) NanoUSD {
	return Total(Line{Tokens: tokens, PerMillion: perMillion})
}

// Total sums the lines exactly and rounds once, so a call's cost does not
// depend on how many token kinds it is split into. Halves round away from
// zero (half up for the non-negative amounts seen in practice); a result
// beyond the int64 range saturates rather than wrapping.
func Total(lines ...Line) NanoUSD {
	var sum, term big.Int
	for _, l := range lines {
		term.Mul(big.NewInt(l.Tokens), big.NewInt(int64(l.PerMillion)))
		sum.Add(&sum, &term)
	}
	neg := sum.Sign() < 0
	sum.Abs(&sum)
	sum.Add(&sum, big.NewInt(500_000))
	sum.Quo(&sum, big.NewInt(1_000_000))
	if neg {
		sum.Neg(&sum)
	}
	switch {
	case sum.IsInt64():
		return NanoUSD(sum.Int64())
	case neg:
		return math.MinInt64
	default:
		return math.MaxInt64
	}
}
