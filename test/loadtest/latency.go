package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FinalStageMarker is the text whose presence in a chat-completion
// request's messages makes the LatencyServer answer with a complete tool
// call instead of plain text. LatencyBlueprint's last stage has it in its
// system prompt; BareLatency's last call of a run carries it.
const FinalStageMarker = "[final stage]"

// WriteToolMarker is the text whose presence in a chat-completion
// request's system prompt (its first system message) makes the
// LatencyServer answer with a call of the MCP write tool create_ticket
// (mcptest's unannotated tool), titled with the run's name, unless the
// request's last message is a tool result: then it answers "ok", so a
// stage carrying the marker makes exactly two calls, the write between
// them. ChainBlueprint's write stage has it.
const WriteToolMarker = "[write tool]"

// WriteTool is the tool a WriteToolMarker call asks for.
const WriteTool = "create_ticket"

// LatencyModelCalls is how many model calls a run of LatencyBlueprint
// makes (one per stage).
const LatencyModelCalls = 3

// LatencyBlueprint is ThreeStage with a real OpenAI-compatible provider:
// three stages (plan, build, review) of one call each to model m1 of
// provider llm (LatencyProvidersTOML), moving on by always edges. The
// review stage's system prompt holds FinalStageMarker, so the
// LatencyServer answers it with a complete tool call and the run completes
// after exactly 3 model calls; titles are off so no titling call is made.
const LatencyBlueprint = `
[agent]
name = "latency"
[agent.title]
enabled = false

[stages.plan]
system_prompt = "You plan the work. Answer with a short plan."
[stages.plan.model]
models = [{provider = "llm", model = "m1"}]
[stages.plan.transitions.build]
condition = "always"

[stages.build]
system_prompt = "You build what the plan says. Answer with what you built."
[stages.build.model]
models = [{provider = "llm", model = "m1"}]
[stages.build.transitions.review]
condition = "always"

[stages.review]
system_prompt = "[final stage] You review the work, then call complete."
allow_complete = true
[stages.review.model]
models = [{provider = "llm", model = "m1"}]
`

// LatencySecret is the Secret (key api-key) LatencyProvidersTOML's provider
// reads its API key from; SetupLatencyNamespace creates it.
const LatencySecret = "llm-key"

// LatencyProvidersTOML is a providers.toml with one OpenAI-compatible
// provider, llm, serving m1 at baseURL (a LatencyServer's BaseURL). extra,
// if not empty, is appended to the provider's table as is (for instance
// "requests_per_minute = 3000").
func LatencyProvidersTOML(baseURL, extra string) string {
	s := fmt.Sprintf(`
[providers.llm]
type = "openai"
base_url = %q
models = ["m1"]
api_key_secret = {name = %q, key = "api-key"}
`, baseURL, LatencySecret)
	if extra != "" {
		s += extra + "\n"
	}
	return s
}

// SetupLatencyNamespace is SetupNamespace with the given providers.toml
// instead of the scripted one, and the Secret LatencySecret (any key will
// do for the LatencyServer).
func (c *Cluster) SetupLatencyNamespace(ctx context.Context, prefix, agent, manifest, providersTOML string) (string, error) {
	ns, err := c.setupNamespaceWith(ctx, prefix, agent, manifest, providersTOML)
	if err != nil {
		return "", err
	}
	if err := c.CreateSecret(ctx, ns, LatencySecret, map[string]string{"api-key": "loadtest-key"}); err != nil {
		return "", err
	}
	return ns, nil
}

// CreateSecret creates an Opaque Secret with the given data.
func (c *Cluster) CreateSecret(ctx context.Context, ns, name string, data map[string]string) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: data}
	if err := c.Client.Create(ctx, s); err != nil {
		return fmt.Errorf("creating Secret %s/%s: %w", ns, name, err)
	}
	return nil
}

// LatencyServer is a loopback OpenAI-compatible chat-completions server
// (POST /v1/chat/completions) that answers every accepted call after a
// fixed delay, holding the connection meanwhile, as a real model does. A
// call whose messages hold FinalStageMarker gets a complete tool call
// ({"output": "done"}, finish_reason tool_calls), one whose system prompt
// holds WriteToolMarker a WriteTool call (see there), any other the text
// "ok".
// With a rate limit it keeps a token bucket of that many calls, refilled at
// that many per second, and answers a call that finds it empty with HTTP 429
// at once (Retry-After: 1, OpenAI's rate_limit_exceeded error body).
type LatencyServer struct {
	delay time.Duration
	rate  float64
	srv   *http.Server
	l     net.Listener

	requests atomic.Int64

	mu          sync.Mutex
	tokens      float64
	refilled    time.Time
	inFlight    int
	maxInFlight int
	starts      []time.Time
	runs        map[string][]CallSpan
	limited     int64
	finals      int64
	writes      int64
	bad         int64
}

// NewLatencyServer listens on 127.0.0.1 on a free port. delay is how long
// each accepted call is held before its answer; ratePerSec (0: none) is the
// rate limit in calls per second, also the bucket's capacity.
func NewLatencyServer(delay time.Duration, ratePerSec int) (*LatencyServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &LatencyServer{delay: delay, rate: float64(ratePerSec), l: l, tokens: float64(ratePerSec), refilled: time.Now()}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.handle)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

// URL is the server's root, http://127.0.0.1:<port>.
func (s *LatencyServer) URL() string { return "http://" + s.l.Addr().String() }

// BaseURL is what a providers.toml names: URL + "/v1".
func (s *LatencyServer) BaseURL() string { return s.URL() + "/v1" }

// Delay is how long an accepted call is held.
func (s *LatencyServer) Delay() time.Duration { return s.delay }

// Close stops the server, dropping held calls.
func (s *LatencyServer) Close() error { return s.srv.Close() }

// LatencyStats is what a LatencyServer saw between two calls of Take.
type LatencyStats struct {
	// Requests is every call received; RateLimited those answered 429;
	// Accepted those held and answered 200 (Finals of them with the
	// complete tool call, Writes with a WriteTool call); Bad those refused
	// as malformed (400).
	Requests, RateLimited, Accepted, Finals, Writes, Bad int64
	// Starts is each accepted call's arrival, ascending.
	Starts []time.Time
	// MaxInFlight is the most accepted calls held at once.
	MaxInFlight int
	// Runs holds each run's accepted calls in arrival order, by the run
	// name its task carries (calls naming none are not kept).
	Runs map[string][]CallSpan
}

// CallSpan is one accepted call: its arrival and its answer.
type CallSpan struct{ Start, End time.Time }

// Chain is how long runs took to start their first call after their create
// returned (lead), between one call's answer and the next call's arrival
// (gaps), and from their last answer to being seen complete (tail), in no
// particular order.
func (st LatencyStats) Chain(created, reached map[string]time.Time) (lead, gaps, tail []time.Duration) {
	for name, calls := range st.Runs {
		if at, ok := created[name]; ok && len(calls) > 0 {
			lead = append(lead, calls[0].Start.Sub(at))
		}
		if at, ok := reached[name]; ok && len(calls) > 0 {
			tail = append(tail, at.Sub(calls[len(calls)-1].End))
		}
		for k := 1; k < len(calls); k++ {
			gaps = append(gaps, calls[k].Start.Sub(calls[k-1].End))
		}
	}
	return lead, gaps, tail
}

// GapsBySecond sums the gaps between one call's answer and the next call
// (as Chain counts them) by the second of the batch, counted from t0, in
// which each gap began: when the manager made runs wait.
func (st LatencyStats) GapsBySecond(t0 time.Time) []time.Duration {
	var out []time.Duration
	for _, calls := range st.Runs {
		for k := 1; k < len(calls); k++ {
			sec := max(int(calls[k-1].End.Sub(t0)/time.Second), 0)
			for len(out) <= sec {
				out = append(out, 0)
			}
			out[sec] += calls[k].Start.Sub(calls[k-1].End)
		}
	}
	return out
}

// BusiestSecond is the most accepted calls that started within any one
// second (a sliding window over Starts).
func (st LatencyStats) BusiestSecond() int {
	best, j := 0, 0
	for i := range st.Starts {
		for st.Starts[i].Sub(st.Starts[j]) >= time.Second {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// Span is from the first accepted call's start to the last's.
func (st LatencyStats) Span() time.Duration {
	if len(st.Starts) == 0 {
		return 0
	}
	return st.Starts[len(st.Starts)-1].Sub(st.Starts[0])
}

// Take returns what the server saw since the last Take (or its start) and
// starts counting afresh; MaxInFlight starts again from the calls held now.
func (s *LatencyServer) Take() LatencyStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := LatencyStats{
		Requests: s.requests.Swap(0), RateLimited: s.limited, Accepted: int64(len(s.starts)),
		Finals: s.finals, Writes: s.writes, Bad: s.bad, Starts: s.starts, MaxInFlight: s.maxInFlight, Runs: s.runs,
	}
	sort.Slice(st.Starts, func(i, j int) bool { return st.Starts[i].Before(st.Starts[j]) })
	s.starts, s.limited, s.finals, s.writes, s.bad, s.maxInFlight, s.runs = nil, 0, 0, 0, 0, s.inFlight, nil
	return st
}

// admit takes a token (true) or says the call is over the limit (false),
// and records an admitted call's start.
func (s *LatencyServer) admit(now time.Time, answer answerKind) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rate > 0 {
		s.tokens = min(s.rate, s.tokens+now.Sub(s.refilled).Seconds()*s.rate)
		s.refilled = now
		if s.tokens < 1 {
			s.limited++
			return false
		}
		s.tokens--
	}
	s.starts = append(s.starts, now)
	switch answer {
	case answerComplete:
		s.finals++
	case answerWrite:
		s.writes++
	}
	s.inFlight++
	s.maxInFlight = max(s.maxInFlight, s.inFlight)
	return true
}

// runTaskPattern finds the run name RunTask put in a call's messages.
var runTaskPattern = regexp.MustCompile(`load test task ([a-z0-9.-]+)`)

// answered records a named run's call, from its arrival to now.
func (s *LatencyServer) answered(name string, start time.Time) {
	if name == "" {
		return
	}
	end := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs == nil {
		s.runs = map[string][]CallSpan{}
	}
	s.runs[name] = append(s.runs[name], CallSpan{start, end})
}

func (s *LatencyServer) done() {
	s.mu.Lock()
	s.inFlight--
	s.mu.Unlock()
}

// chatRequest is the part of a chat-completion request the server reads.
type chatRequest struct {
	Model    string            `json:"model"`
	Messages []json.RawMessage `json:"messages"`
}

func (s *LatencyServer) handle(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	s.requests.Add(1)
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	var req chatRequest
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err == nil && (req.Model == "" || len(req.Messages) == 0) {
		err = errors.New("model and messages are required")
	}
	if err != nil {
		s.mu.Lock()
		s.bad++
		s.mu.Unlock()
		writeOpenAIError(w, http.StatusBadRequest, err.Error(), "invalid_request_error", "invalid_request")
		return
	}
	answer := answerFor(req.Messages)
	if !s.admit(now, answer) {
		w.Header().Set("Retry-After", "1")
		writeOpenAIError(w, http.StatusTooManyRequests, "Rate limit reached", "requests", "rate_limit_exceeded")
		return
	}
	defer s.done()
	name := ""
	if m := runTaskPattern.FindSubmatch(body); m != nil {
		name = string(m[1])
	}
	defer s.answered(name, now)
	if s.delay > 0 {
		t := time.NewTimer(s.delay)
		select {
		case <-r.Context().Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	writeJSONBody(w, http.StatusOK, chatCompletion(req.Model, answer, name))
}

func writeOpenAIError(w http.ResponseWriter, status int, message, typ, code string) {
	writeJSONBody(w, status, map[string]any{"error": map[string]any{"message": message, "type": typ, "param": nil, "code": code}})
}

func writeJSONBody(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

var completionIDs, toolCallIDs atomic.Int64

// answerKind is what the server answers a call with.
type answerKind int

const (
	answerText answerKind = iota
	answerComplete
	answerWrite
)

// answerFor reads a call's messages: FinalStageMarker anywhere asks for
// complete; WriteToolMarker in the first system message, with anything
// but a tool result last, asks for the write.
func answerFor(messages []json.RawMessage) answerKind {
	write := false
	for _, m := range messages {
		if bytes.Contains(m, []byte(FinalStageMarker)) {
			return answerComplete
		}
		write = write || bytes.Contains(m, []byte(WriteToolMarker))
	}
	if !write {
		return answerText
	}
	type message struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	var last message
	if json.Unmarshal(messages[len(messages)-1], &last) != nil || last.Role == "tool" {
		return answerText
	}
	for _, m := range messages {
		var msg message
		if json.Unmarshal(m, &msg) == nil && msg.Role == "system" {
			if bytes.Contains(msg.Content, []byte(WriteToolMarker)) {
				return answerWrite
			}
			return answerText
		}
	}
	return answerText
}

// chatCompletion is an OpenAI chat.completion answer: the text "ok", for
// a final call a complete tool call, for a write call a WriteTool call
// titled run; usage 100 prompt + 10 completion.
func chatCompletion(model string, answer answerKind, run string) map[string]any {
	msg := map[string]any{"role": "assistant", "content": "ok", "refusal": nil}
	finish := "stop"
	call := func(name, args string) {
		msg["content"] = nil
		msg["tool_calls"] = []any{map[string]any{
			"id": fmt.Sprintf("call_%d", toolCallIDs.Add(1)), "type": "function",
			"function": map[string]any{"name": name, "arguments": args},
		}}
		finish = "tool_calls"
	}
	switch answer {
	case answerComplete:
		call("complete", `{"output": "done"}`)
	case answerWrite:
		args, _ := json.Marshal(map[string]string{"title": run})
		call(WriteTool, string(args))
	}
	return map[string]any{
		"id":      fmt.Sprintf("chatcmpl-loadtest-%d", completionIDs.Add(1)),
		"object":  "chat.completion",
		"created": time.Now().Unix(),
		"model":   model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish}},
		"usage": map[string]any{
			"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110,
			"prompt_tokens_details":     map[string]any{"cached_tokens": 0, "audio_tokens": 0},
			"completion_tokens_details": map[string]any{"reasoning_tokens": 0},
		},
	}
}

// BareLatencyResult is one BareLatency pass.
type BareLatencyResult struct {
	N, CallsPerRun int
	// Wall is from the first call to the last answer; FirstDone when the
	// first client had its last answer.
	Wall, FirstDone time.Duration
	// Calls is the calls answered 200; Errors the answers that were not
	// (each retried, after Retry-After when the server gave one) and the
	// transport failures (each retried after 100ms).
	Calls, Errors int64
}

// bareRequest is a chat-completion body like an agent's: a system prompt, a
// task and one tool.
func bareRequest(run, call int, final bool) []byte {
	system := fmt.Sprintf("You are stage %d of a three-stage agent. Do your part of the task and answer briefly.", call+1)
	if final {
		system = FinalStageMarker + " " + system + " Call complete when the work is done."
	}
	b, _ := json.Marshal(map[string]any{
		"model": "m1",
		"messages": []any{
			map[string]any{"role": "system", "content": system},
			map[string]any{"role": "user", "content": fmt.Sprintf("load test task r-%05d", run)},
		},
		"tools": []any{map[string]any{
			"type": "function",
			"function": map[string]any{
				"name":        "complete",
				"description": "Finish the run with its output.",
				"parameters": map[string]any{
					"type":       "object",
					"properties": map[string]any{"output": map[string]any{"type": "string"}},
					"required":   []string{"output"},
				},
			},
		}},
	})
	return b
}

// BareLatency is what a client with no logic at all gets from the server at
// url (a LatencyServer's URL): n goroutines, each making callsPerRun
// sequential chat-completion calls (the last carrying FinalStageMarker),
// all starting at once, over one transport keeping n idle connections per
// host. A call answered anything but 200 is counted in Errors and made
// again, after the answer's Retry-After if it had one; it gives up on a
// call after 1000 attempts.
func BareLatency(ctx context.Context, url string, n, callsPerRun int) (BareLatencyResult, error) {
	res := BareLatencyResult{N: n, CallsPerRun: callsPerRun}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 0, n
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var (
		calls, errs atomic.Int64
		firstOnce   sync.Once
		wg          sync.WaitGroup
		errOnce     sync.Once
		firstErr    error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for call := range callsPerRun {
				if err := bareCall(ctx, hc, url, bareRequest(i, call, call == callsPerRun-1), &errs); err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("bare client %d, call %d: %w", i, call+1, err); cancel() })
					return
				}
				calls.Add(1)
			}
			firstOnce.Do(func() { res.FirstDone = time.Since(start) })
		}()
	}
	wg.Wait()
	res.Wall, res.Calls, res.Errors = time.Since(start), calls.Load(), errs.Load()
	return res, firstErr
}

func bareCall(ctx context.Context, hc *http.Client, url string, body []byte, errs *atomic.Int64) error {
	var last string
	for range 1000 {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer loadtest-key")
		wait := 100 * time.Millisecond
		resp, err := hc.Do(req)
		if err == nil {
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && rerr == nil {
				var cc struct {
					Choices []json.RawMessage `json:"choices"`
				}
				if err := json.Unmarshal(b, &cc); err != nil || len(cc.Choices) == 0 {
					return fmt.Errorf("an answer that is not a chat completion: %.200s", b)
				}
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %.200s", resp.StatusCode, b)
			if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs >= 0 {
				wait = time.Duration(secs) * time.Second
			}
		} else {
			last = err.Error()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		errs.Add(1)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	return fmt.Errorf("gave up after 1000 attempts; last: %s", last)
}
