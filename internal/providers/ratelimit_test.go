package providers_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/providers/providertest"
)

func TestRateLimitHint(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339Nano) }
	httpDate := func(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }
	for _, tc := range []struct {
		name   string
		header map[string]string
		want   time.Duration
		ok     bool
	}{
		{name: "no headers"},
		{name: "unrelated headers", header: map[string]string{"Content-Type": "application/json"}},

		{name: "retry-after seconds", header: map[string]string{"Retry-After": "2"}, want: 2 * time.Second, ok: true},
		{name: "retry-after fractional", header: map[string]string{"Retry-After": "1.5"}, want: 1500 * time.Millisecond, ok: true},
		{name: "retry-after zero", header: map[string]string{"Retry-After": "0"}, want: 0, ok: true},
		{name: "retry-after spaces", header: map[string]string{"Retry-After": " 3 "}, want: 3 * time.Second, ok: true},
		{name: "retry-after HTTP-date", header: map[string]string{"Retry-After": httpDate(90 * time.Second)}, want: 90 * time.Second, ok: true},
		{name: "retry-after RFC 850 date", header: map[string]string{"Retry-After": "Friday, 02-Jan-26 03:05:05 GMT"}, want: time.Minute, ok: true},
		{name: "retry-after ANSI C date", header: map[string]string{"Retry-After": "Fri Jan  2 03:04:35 2026"}, want: 30 * time.Second, ok: true},
		{name: "retry-after date in the past", header: map[string]string{"Retry-After": httpDate(-time.Minute)}},
		{name: "retry-after capped", header: map[string]string{"Retry-After": "7200"}, want: time.Hour, ok: true},
		{name: "retry-after date capped", header: map[string]string{"Retry-After": httpDate(3 * time.Hour)}, want: time.Hour, ok: true},
		{name: "retry-after huge", header: map[string]string{"Retry-After": strings.Repeat("9", 400)}, want: time.Hour, ok: true},
		{name: "retry-after negative", header: map[string]string{"Retry-After": "-1"}},
		{name: "retry-after words", header: map[string]string{"Retry-After": "soon"}},
		{name: "retry-after hex", header: map[string]string{"Retry-After": "0x10"}},
		{name: "retry-after exponent", header: map[string]string{"Retry-After": "1e3"}},
		{name: "retry-after NaN", header: map[string]string{"Retry-After": "NaN"}},
		{name: "retry-after Inf", header: map[string]string{"Retry-After": "Inf"}},

		{name: "retry-after-ms", header: map[string]string{"Retry-After-Ms": "1500"}, want: 1500 * time.Millisecond, ok: true},
		{name: "retry-after-ms fractional", header: map[string]string{"Retry-After-Ms": "250.5"}, want: 250500 * time.Microsecond, ok: true},
		{name: "retry-after-ms wins", header: map[string]string{"Retry-After-Ms": "1500", "Retry-After": "2"}, want: 1500 * time.Millisecond, ok: true},
		{name: "retry-after-ms unparseable falls back", header: map[string]string{"Retry-After-Ms": "soon", "Retry-After": "3"}, want: 3 * time.Second, ok: true},
		{name: "retry-after-ms negative falls back", header: map[string]string{"Retry-After-Ms": "-5", "Retry-After": "3"}, want: 3 * time.Second, ok: true},
		{name: "retry-after-ms capped", header: map[string]string{"Retry-After-Ms": "99999999999"}, want: time.Hour, ok: true},

		{
			name: "openai spent tokens limit",
			header: map[string]string{
				"X-Ratelimit-Remaining-Requests": "5", "X-Ratelimit-Reset-Requests": "6m0s",
				"X-Ratelimit-Remaining-Tokens": "0", "X-Ratelimit-Reset-Tokens": "1.5s",
			},
			want: 1500 * time.Millisecond, ok: true,
		},
		{
			name: "openai spent requests limit",
			header: map[string]string{
				"X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": "20ms",
				"X-Ratelimit-Remaining-Tokens": "1000", "X-Ratelimit-Reset-Tokens": "6m0s",
			},
			want: 20 * time.Millisecond, ok: true,
		},
		{
			name:   "openai none spent: longest",
			header: map[string]string{"X-Ratelimit-Reset-Requests": "6m0s", "X-Ratelimit-Reset-Tokens": "20ms"},
			want:   6 * time.Minute, ok: true,
		},
		{
			name: "openai spent reset unparseable: longest given",
			header: map[string]string{
				"X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": "whenever",
				"X-Ratelimit-Reset-Tokens": "2s",
			},
			want: 2 * time.Second, ok: true,
		},
		{name: "openai 1h2m3s capped", header: map[string]string{"X-Ratelimit-Reset-Requests": "1h2m3s"}, want: time.Hour, ok: true},
		{name: "openai 2m3s", header: map[string]string{"X-Ratelimit-Reset-Requests": "2m3s"}, want: 123 * time.Second, ok: true},
		{name: "openai 1m30.5s", header: map[string]string{"X-Ratelimit-Reset-Tokens": "1m30.5s"}, want: 90500 * time.Millisecond, ok: true},
		{name: "openai 0.5s", header: map[string]string{"X-Ratelimit-Reset-Tokens": "0.5s"}, want: 500 * time.Millisecond, ok: true},
		{name: "openai 7.66s", header: map[string]string{"X-Ratelimit-Reset-Tokens": "7.66s"}, want: 7660 * time.Millisecond, ok: true},
		{name: "openai bare seconds", header: map[string]string{"X-Ratelimit-Reset-Tokens": "2"}, want: 2 * time.Second, ok: true},
		{name: "openai bare fractional seconds", header: map[string]string{"X-Ratelimit-Reset-Tokens": "0.25"}, want: 250 * time.Millisecond, ok: true},
		{name: "openai upper case", header: map[string]string{"X-Ratelimit-Reset-Tokens": "1M5S"}, want: 65 * time.Second, ok: true},
		{name: "openai negative ignored", header: map[string]string{"X-Ratelimit-Reset-Tokens": "-1s"}},
		{name: "openai unknown unit ignored", header: map[string]string{"X-Ratelimit-Reset-Tokens": "3 fortnights"}},
		{name: "openai unit without number ignored", header: map[string]string{"X-Ratelimit-Reset-Tokens": "s"}},
		{name: "retry-after beats resets", header: map[string]string{"Retry-After": "4", "X-Ratelimit-Remaining-Tokens": "0", "X-Ratelimit-Reset-Tokens": "9s"}, want: 4 * time.Second, ok: true},
		{name: "past retry-after date falls to resets", header: map[string]string{"Retry-After": httpDate(-time.Minute), "X-Ratelimit-Reset-Tokens": "9s"}, want: 9 * time.Second, ok: true},

		{
			name: "anthropic spent tokens limit",
			header: map[string]string{
				"Anthropic-Ratelimit-Requests-Remaining": "10", "Anthropic-Ratelimit-Requests-Reset": at(50 * time.Second),
				"Anthropic-Ratelimit-Tokens-Remaining": "0", "Anthropic-Ratelimit-Tokens-Reset": at(20 * time.Second),
			},
			want: 20 * time.Second, ok: true,
		},
		{
			name: "anthropic spent output tokens limit",
			header: map[string]string{
				"Anthropic-Ratelimit-Input-Tokens-Remaining": "5000", "Anthropic-Ratelimit-Input-Tokens-Reset": at(40 * time.Second),
				"Anthropic-Ratelimit-Output-Tokens-Remaining": "0", "Anthropic-Ratelimit-Output-Tokens-Reset": at(7 * time.Second),
			},
			want: 7 * time.Second, ok: true,
		},
		{
			name: "anthropic none spent: longest",
			header: map[string]string{
				"Anthropic-Ratelimit-Requests-Remaining": "10", "Anthropic-Ratelimit-Requests-Reset": at(50 * time.Second),
				"Anthropic-Ratelimit-Tokens-Remaining": "900", "Anthropic-Ratelimit-Tokens-Reset": at(20 * time.Second),
			},
			want: 50 * time.Second, ok: true,
		},
		{name: "anthropic fractional seconds", header: map[string]string{"Anthropic-Ratelimit-Tokens-Reset": "2026-01-02T03:04:06.5Z"}, want: 1500 * time.Millisecond, ok: true},
		{name: "anthropic offset zone", header: map[string]string{"Anthropic-Ratelimit-Tokens-Reset": "2026-01-02T05:05:05+02:00"}, want: time.Minute, ok: true},
		{name: "anthropic capped", header: map[string]string{"Anthropic-Ratelimit-Tokens-Reset": at(5 * time.Hour)}, want: time.Hour, ok: true},
		{
			name: "anthropic past reset ignored",
			header: map[string]string{
				"Anthropic-Ratelimit-Tokens-Remaining": "0", "Anthropic-Ratelimit-Tokens-Reset": at(-time.Second),
				"Anthropic-Ratelimit-Requests-Reset": at(3 * time.Second),
			},
			want: 3 * time.Second, ok: true,
		},
		{name: "anthropic unparseable", header: map[string]string{"Anthropic-Ratelimit-Tokens-Reset": "tomorrow"}},
		{
			name:   "openai resets beat anthropic's",
			header: map[string]string{"X-Ratelimit-Reset-Tokens": "2s", "Anthropic-Ratelimit-Tokens-Reset": at(30 * time.Second)},
			want:   2 * time.Second, ok: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.header {
				h.Set(k, v)
			}
			got, ok := providers.RateLimitHint(h, now)
			if got != tc.want || ok != tc.ok {
				t.Errorf("RateLimitHint(%v) = %v, %v; want %v, %v", tc.header, got, ok, tc.want, tc.ok)
			}
		})
	}
	if got, ok := providers.RateLimitHint(nil, now); got != 0 || ok {
		t.Errorf("RateLimitHint(nil) = %v, %v; want 0, false", got, ok)
	}
}

// rateCase is one scripted refusal and the hint it must carry.
type rateCase struct {
	name        string
	reply       providertest.Reply
	class       journal.FailureClass
	status      int
	rateLimited bool
	// overloaded: the refusal is the provider's overload, not a limit.
	overloaded bool
	// The wait must be in [min, max].
	min, max time.Duration
}

func checkRate(t *testing.T, pe *providers.Error, tc rateCase) {
	t.Helper()
	if pe.Class != tc.class || pe.Status != tc.status {
		t.Errorf("error = {%s %d %q}, want class %s status %d", pe.Class, pe.Status, pe.Message, tc.class, tc.status)
	}
	if pe.RateLimited != tc.rateLimited {
		t.Errorf("RateLimited = %v, want %v (%q)", pe.RateLimited, tc.rateLimited, pe.Message)
	}
	if pe.Overloaded != tc.overloaded {
		t.Errorf("Overloaded = %v, want %v (%q)", pe.Overloaded, tc.overloaded, pe.Message)
	}
	if pe.RetryAfter < tc.min || pe.RetryAfter > tc.max {
		t.Errorf("RetryAfter = %v, want between %v and %v", pe.RetryAfter, tc.min, tc.max)
	}
	if strings.Contains(pe.Message, testKey) || strings.Contains(pe.Error(), testKey) {
		t.Errorf("error leaks the API key: %q", pe.Message)
	}
}

func TestOpenAIRateLimits(t *testing.T) {
	for _, tc := range []rateCase{
		{
			name:  "429 retry-after",
			reply: providertest.Reply{Status: 429, Header: map[string]string{"Retry-After": "2"}},
			class: journal.FailFailed, status: 429, rateLimited: true, min: 2 * time.Second, max: 2 * time.Second,
		},
		{
			name:  "retry-after-ms wins",
			reply: providertest.Reply{Status: 429, Header: map[string]string{"Retry-After": "2", "Retry-After-Ms": "1500"}},
			class: journal.FailFailed, status: 429, rateLimited: true, min: 1500 * time.Millisecond, max: 1500 * time.Millisecond,
		},
		{
			name:  "HTTP-date retry-after",
			reply: providertest.Reply{Status: 429, Header: map[string]string{"Retry-After": time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)}},
			class: journal.FailFailed, status: 429, rateLimited: true, min: 20 * time.Second, max: 30 * time.Second,
		},
		{
			name: "reset headers, tokens spent",
			reply: providertest.Reply{Status: 429, Header: map[string]string{
				"X-Ratelimit-Limit-Requests": "500", "X-Ratelimit-Remaining-Requests": "499", "X-Ratelimit-Reset-Requests": "6m0s",
				"X-Ratelimit-Limit-Tokens": "30000", "X-Ratelimit-Remaining-Tokens": "0", "X-Ratelimit-Reset-Tokens": "1.5s",
			}},
			class: journal.FailFailed, status: 429, rateLimited: true, min: 1500 * time.Millisecond, max: 1500 * time.Millisecond,
		},
		{
			name:  "429 without a hint",
			reply: providertest.Reply{Status: 429},
			class: journal.FailFailed, status: 429, rateLimited: true,
		},
		{
			name: "429 insufficient_quota",
			reply: providertest.Reply{
				Status: 429, ErrorType: "insufficient_quota", ErrorCode: "insufficient_quota",
				ErrorMessage: "You exceeded your current quota, please check your plan and billing details.",
				Header:       map[string]string{"Retry-After": "2"},
			},
			class: journal.FailCredits, status: 0,
		},
		{
			name:  "500 without headers",
			reply: providertest.Reply{Status: 500, ErrorMessage: "The server had an error"},
			class: journal.FailFailed, status: 500,
		},
		{
			name:  "500 with reset headers only",
			reply: providertest.Reply{Status: 500, Header: map[string]string{"X-Ratelimit-Remaining-Tokens": "10", "X-Ratelimit-Reset-Tokens": "6m0s"}},
			class: journal.FailFailed, status: 500,
		},
		{
			name:  "503 without retry-after",
			reply: providertest.Reply{Status: 503},
			class: journal.FailFailed, status: 503,
		},
		{
			name:  "503 with retry-after",
			reply: providertest.Reply{Status: 503, Header: map[string]string{"Retry-After": "7"}},
			class: journal.FailFailed, status: 503, rateLimited: true, overloaded: true, min: 7 * time.Second, max: 7 * time.Second,
		},
		{
			name:  "429 from a proxy, not JSON",
			reply: providertest.Reply{Status: 429, RawBody: "<html>Too Many Requests</html>", ContentType: "text/html", Header: map[string]string{"Retry-After": "3"}},
			class: journal.FailFailed, status: 429, rateLimited: true, min: 3 * time.Second, max: 3 * time.Second,
		},
		{
			name:  "429 echoing the key",
			reply: providertest.Reply{Status: 429, EchoKey: true, Header: map[string]string{"Retry-After": "1"}},
			class: journal.FailFailed, status: 429, rateLimited: true, min: time.Second, max: time.Second,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := providertest.NewOpenAIServer(t)
			srv.Push(tc.reply)
			pe := mustFail(t, providers.NewOpenAI(srv.URL, nil), baseRequest())
			checkRate(t, pe, tc)
			if n := srv.Requests(); n != 1 {
				t.Errorf("server saw %d requests, want 1 (the SDK must not retry)", n)
			}
		})
	}
}

func TestAnthropicRateLimits(t *testing.T) {
	rfc := func(d time.Duration) string { return time.Now().Add(d).UTC().Format(time.RFC3339) }
	for _, tc := range []rateCase{
		{
			name:  "429 retry-after",
			reply: providertest.Reply{Status: 429, Header: map[string]string{"Retry-After": "4"}},
			class: journal.FailFailed, status: 429, rateLimited: true, min: 4 * time.Second, max: 4 * time.Second,
		},
		{
			name:  "529 overloaded",
			reply: providertest.Reply{Status: 529, Header: map[string]string{"Retry-After": "10"}},
			class: journal.FailFailed, status: 529, rateLimited: true, overloaded: true, min: 10 * time.Second, max: 10 * time.Second,
		},
		{
			name: "429 reset headers, tokens spent",
			reply: providertest.Reply{Status: 429, Header: map[string]string{
				"Anthropic-Ratelimit-Requests-Limit": "50", "Anthropic-Ratelimit-Requests-Remaining": "49", "Anthropic-Ratelimit-Requests-Reset": rfc(50 * time.Second),
				"Anthropic-Ratelimit-Tokens-Limit": "40000", "Anthropic-Ratelimit-Tokens-Remaining": "0", "Anthropic-Ratelimit-Tokens-Reset": rfc(20 * time.Second),
			}},
			class: journal.FailFailed, status: 429, rateLimited: true, min: 15 * time.Second, max: 20 * time.Second,
		},
		{
			name:  "429 billing",
			reply: providertest.Reply{Status: 429, ErrorType: "billing_error", ErrorMessage: "Monthly spend limit reached for billing.", Header: map[string]string{"Retry-After": "4"}},
			class: journal.FailCredits, status: 0,
		},
		{
			name:  "500 without headers",
			reply: providertest.Reply{Status: 500},
			class: journal.FailFailed, status: 500,
		},
		{
			name:  "503 with retry-after",
			reply: providertest.Reply{Status: 503, Header: map[string]string{"Retry-After": "5"}},
			class: journal.FailFailed, status: 503, rateLimited: true, overloaded: true, min: 5 * time.Second, max: 5 * time.Second,
		},
		{
			name:  "529 from a proxy, not JSON",
			reply: providertest.Reply{Status: 529, RawBody: "overloaded", Header: map[string]string{"Retry-After": "6"}},
			class: journal.FailFailed, status: 529, rateLimited: true, overloaded: true, min: 6 * time.Second, max: 6 * time.Second,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := providertest.NewAnthropicServer(t)
			srv.Push(tc.reply)
			pe := mustFail(t, providers.NewAnthropic(srv.URL, nil), baseRequest())
			checkRate(t, pe, tc)
			if n := srv.Requests(); n != 1 {
				t.Errorf("server saw %d requests, want 1 (the SDK must not retry)", n)
			}
		})
	}
}

// TestAnthropicOverloadedType checks the fake answers a 529 in Anthropic's
// overloaded_error shape, which the adapter keeps in the message.
func TestAnthropicOverloadedType(t *testing.T) {
	srv := providertest.NewAnthropicServer(t)
	srv.Push(providertest.Reply{Status: 529})
	pe := mustFail(t, providers.NewAnthropic(srv.URL, nil), baseRequest())
	if !pe.RateLimited || !pe.Overloaded || !strings.Contains(pe.Message, "overloaded_error") {
		t.Errorf("529: error = %+v, want rate limited, overloaded, with overloaded_error", pe)
	}
}

// TestReplyHeadersOnCompletions checks a scripted reply's headers reach the
// client on successful answers too.
func TestReplyHeadersOnCompletions(t *testing.T) {
	for name, srv := range map[string]*providertest.Server{
		"openai":    providertest.NewOpenAIServer(t),
		"anthropic": providertest.NewAnthropicServer(t),
	} {
		srv.Push(providertest.Reply{Text: "ok", Header: map[string]string{"X-Ratelimit-Remaining-Requests": "41", "Retry-After": "1"}})
		path := "/chat/completions"
		if name == "anthropic" {
			path = "/v1/messages"
		}
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, bytes.NewBufferString(`{"model":"m1","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Anthropic-Version", "2023-06-01")
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_ = res.Body.Close()
		if res.StatusCode != http.StatusOK || res.Header.Get("X-Ratelimit-Remaining-Requests") != "41" || res.Header.Get("Retry-After") != "1" {
			t.Errorf("%s: status %d, headers %v; want 200 with the scripted headers", name, res.StatusCode, res.Header)
		}
		if ct := res.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type = %q, want application/json", name, ct)
		}
	}
}
