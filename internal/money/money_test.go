package money

import (
	"math"
	"testing"
)

func TestParseUSDAndString(t *testing.T) {
	tests := []struct {
		in   string
		want NanoUSD
		str  string // canonical rendering
	}{
		{"0", 0, "0"},
		{"0.0", 0, "0"},
		{"0.15", 150_000_000, "0.15"},
		{"1.5", 1_500_000_000, "1.5"},
		{"1.50", 1_500_000_000, "1.5"},
		{"12.000000001", 12_000_000_001, "12.000000001"},
		{"0.000000123", 123, "0.000000123"},
		{"0.075", 75_000_000, "0.075"},
		{"007", 7_000_000_000, "7"},
		{"9223372036.854775807", math.MaxInt64, "9223372036.854775807"},
	}
	for _, tt := range tests {
		got, err := ParseUSD(tt.in)
		if err != nil {
			t.Errorf("ParseUSD(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseUSD(%q) = %d, want %d", tt.in, got, tt.want)
		}
		if s := got.String(); s != tt.str {
			t.Errorf("String(%d) = %q, want %q", got, s, tt.str)
		}
		if back, err := ParseUSD(got.String()); err != nil || back != got {
			t.Errorf("round trip of %q: %d, %v", tt.in, back, err)
		}
	}
}

func TestParseUSDRejects(t *testing.T) {
	for _, in := range []string{
		"", "-1", "-0.5", "+1", "1.0000000001", ".5", "5.", "1e3", "abc",
		"1,5", " 1", "1 ", "0x10", "1.2.3", "NaN", "9223372036.854775808",
		"99999999999",
	} {
		if n, err := ParseUSD(in); err == nil {
			t.Errorf("ParseUSD(%q) = %d, want error", in, n)
		}
	}
}

func TestStringNegative(t *testing.T) {
	if s := NanoUSD(-1_500_000_000).String(); s != "-1.5" {
		t.Errorf("got %q", s)
	}
	if s := NanoUSD(math.MinInt64).String(); s != "-9223372036.854775808" {
		t.Errorf("got %q", s)
	}
}

func TestCost(t *testing.T) {
	tests := []struct {
		tokens int64
		rate   string
		want   string
	}{
		{1234, "0.15", "0.0001851"},
		{1_000_000, "0.60", "0.6"},
		{0, "3", "0"},
		{1, "0.15", "0.00000015"},
		// 1 token at $0.0000005/M is 0.0000000000005 USD: rounds to 0.
		{1, "0.0000005", "0"},
		// 1 token at $0.0005/M is exactly half a nano-dollar: rounds up.
		{1, "0.0005", "0.000000001"},
		{1, "0.000499999", "0"},
		// Large but realistic: 10^12 tokens at $75/M.
		{1_000_000_000_000, "75", "75000000"},
	}
	for _, tt := range tests {
		got := Cost(tt.tokens, MustParseUSD(tt.rate))
		if got.String() != tt.want {
			t.Errorf("Cost(%d, %s) = %s, want %s", tt.tokens, tt.rate, got, tt.want)
		}
	}
}

func TestTotalRoundsOnce(t *testing.T) {
	// Each line alone is 0.4 nano and would round to 0; together 0.8 -> 1.
	half := MustParseUSD("0.0004")
	got := Total(Line{1, half}, Line{1, half})
	if got != 1 {
		t.Errorf("Total = %d, want 1", got)
	}
}

func TestCostSaturates(t *testing.T) {
	if got := Cost(math.MaxInt64, math.MaxInt64); got != math.MaxInt64 {
		t.Errorf("got %d", got)
	}
	if got := Cost(-math.MaxInt64, math.MaxInt64); got != math.MinInt64 {
		t.Errorf("got %d", got)
	}
}
