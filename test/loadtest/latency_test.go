package loadtest_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/test/loadtest"
)

// TestLatencyServerSpeaksOpenAI: the operator's own OpenAI provider (the
// official SDK) reads the server's answers: text for a stage, the complete
// tool call for a request carrying the final-stage marker, usage both times.
func TestLatencyServerSpeaksOpenAI(t *testing.T) {
	srv, err := loadtest.NewLatencyServer(50*time.Millisecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	p := providers.NewOpenAI(srv.BaseURL(), nil)
	ctx := context.Background()

	start := time.Now()
	res, err := p.Call(ctx, providers.Request{Model: "m1", SystemPrompt: "You plan.", Task: "a task", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("answered after %v, want >= 50ms", took)
	}
	if res.Response.Text != "ok" || res.Response.Complete || res.Usage.Prompt != 100 || res.Usage.Completion != 10 {
		t.Errorf("a stage call: got %+v", res)
	}
	res, err = p.Call(ctx, providers.Request{Model: "m1", SystemPrompt: loadtest.FinalStageMarker + " You review.", Task: "a task", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Response.Complete || res.Response.Output != "done" || res.FinishReason != "tool_calls" {
		t.Errorf("the final call: got %+v", res)
	}
	st := srv.Take()
	if st.Requests != 2 || st.Accepted != 2 || st.Finals != 1 || st.RateLimited != 0 {
		t.Errorf("stats: %+v", st)
	}
}

// TestLatencyServerRateLimits: beyond the bucket a call gets 429 at once,
// with Retry-After: 1 and OpenAI's error shape; the bare client retries it.
func TestLatencyServerRateLimits(t *testing.T) {
	srv, err := loadtest.NewLatencyServer(0, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	limited := 0
	for range 8 {
		resp, err := http.Post(srv.URL()+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m1","messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			limited++
			if resp.Header.Get("Retry-After") != "1" {
				t.Errorf("429 without Retry-After: 1: %v", resp.Header)
			}
		}
	}
	if limited < 2 || limited > 3 {
		t.Errorf("%d of 8 immediate calls limited, want 3 (bucket of 5; 2 if one token came back meanwhile)", limited)
	}
	srv.Take()
	res, err := loadtest.BareLatency(context.Background(), srv.URL(), 4, 3)
	if err != nil {
		t.Fatal(err)
	}
	st := srv.Take()
	if res.Calls != 12 || st.Accepted != 12 || st.Finals != 4 || res.Errors != st.RateLimited {
		t.Errorf("bare client: %+v, server: %d accepted, %d final, %d limited", res, st.Accepted, st.Finals, st.RateLimited)
	}
	t.Logf("bare client through a 5/s limit: %+v, busiest second %d", res, st.BusiestSecond())
}

// TestBareLatencyConcurrent: n clients of 3 calls of 100ms take about
// 300ms, all n in flight at once.
func TestBareLatencyConcurrent(t *testing.T) {
	srv, err := loadtest.NewLatencyServer(100*time.Millisecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const n = 50
	res, err := loadtest.BareLatency(context.Background(), srv.URL(), n, 3)
	if err != nil {
		t.Fatal(err)
	}
	st := srv.Take()
	if res.Calls != 3*n || res.Errors != 0 || st.MaxInFlight != n || st.BusiestSecond() != 3*n {
		t.Errorf("bare client: %+v; server: max in flight %d, busiest second %d", res, st.MaxInFlight, st.BusiestSecond())
	}
	if res.Wall < 300*time.Millisecond || res.Wall > 3*time.Second {
		t.Errorf("wall %v for 3 calls of 100ms", res.Wall)
	}
}
