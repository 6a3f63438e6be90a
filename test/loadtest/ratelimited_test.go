package loadtest_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/test/loadtest"
)

// waitRecorder follows every AgentRun of a namespace (c.WatchRuns) and
// keeps what each run ever showed: every wait, each RateLimited status in
// full, and when it first showed Complete.
type waitRecorder struct {
	ns   string
	stop func()
	done chan struct{}

	mu          sync.Mutex
	events      int
	waits       map[string]map[string]int // run -> "Reason" or "Reason/Blocker" -> statuses seen
	rateLimited []rateObservation
	completeAt  map[string]time.Time
	err         error
}

// rateObservation is one status with waitingOn.reason RateLimited.
type rateObservation struct {
	run   string
	phase arv1.Phase
	wait  arv1.WaitingOn
	at    time.Time
}

func recordWaits(t *testing.T, ctx context.Context, c *loadtest.Cluster, ns string) *waitRecorder {
	t.Helper()
	events, stop, err := c.WatchRuns(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	w := &waitRecorder{ns: ns, stop: stop, done: make(chan struct{}), waits: map[string]map[string]int{}, completeAt: map[string]time.Time{}}
	go func() {
		defer close(w.done)
		for ev := range events {
			at := time.Now()
			if ev.Type == watch.Error {
				w.mu.Lock()
				w.err = fmt.Errorf("the AgentRun watch of %s failed: %v", ns, ev.Object)
				w.mu.Unlock()
				continue
			}
			r, ok := ev.Object.(*arv1.AgentRun)
			if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
				continue
			}
			w.mu.Lock()
			w.events++
			if r.Status.Phase == arv1.PhaseComplete {
				if _, seen := w.completeAt[r.Name]; !seen {
					w.completeAt[r.Name] = at
				}
			}
			if wo := r.Status.WaitingOn; wo != nil {
				key := string(wo.Reason)
				if wo.Blocker != "" {
					key += "/" + string(wo.Blocker)
				}
				if w.waits[r.Name] == nil {
					w.waits[r.Name] = map[string]int{}
				}
				w.waits[r.Name][key]++
				if wo.Reason == arv1.WaitRateLimited {
					w.rateLimited = append(w.rateLimited, rateObservation{run: r.Name, phase: r.Status.Phase, wait: *wo.DeepCopy(), at: at})
				}
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { _ = w.Stop() })
	return w
}

// Stop ends the watch (idempotent) and returns its error, if any.
func (w *waitRecorder) Stop() error {
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// runsEver is how many runs ever showed a wait whose key satisfies match.
func (w *waitRecorder) runsEver(match func(key string) bool) (int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var names []string
	for run, keys := range w.waits {
		for k := range keys {
			if match(k) {
				names = append(names, run)
				break
			}
		}
	}
	sort.Strings(names)
	return len(names), names
}

// summary counts runs per wait key, sorted.
func (w *waitRecorder) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	counts := map[string]int{}
	for _, keys := range w.waits {
		for k := range keys {
			counts[k]++
		}
	}
	if len(counts) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %d runs", k, counts[k])
	}
	return b.String()
}

// lastComplete is when the last of the runs first showed Complete.
func (w *waitRecorder) lastComplete() (time.Time, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var last time.Time
	for _, at := range w.completeAt {
		if at.After(last) {
			last = at
		}
	}
	return last, len(w.completeAt)
}

func (w *waitRecorder) rateObservations() []rateObservation {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]rateObservation(nil), w.rateLimited...)
}

// checkNoSetupWaits fails the test for every run that ever showed
// NeedsSetup (ProviderFailed or any other blocker): a rate limit is never
// a setup problem.
func checkNoSetupWaits(t *testing.T, part string, w *waitRecorder) {
	t.Helper()
	if k, names := w.runsEver(func(key string) bool { return strings.HasSuffix(key, "/"+string(arv1.BlockerProviderFailed)) }); k > 0 {
		t.Errorf("%s: %d runs showed blocker ProviderFailed for a rate limit: %v (waits seen: %s)", part, k, names, w.summary())
	}
	if k, names := w.runsEver(func(key string) bool { return strings.HasPrefix(key, string(arv1.WaitNeedsSetup)) }); k > 0 {
		t.Errorf("%s: %d runs showed a NeedsSetup wait: %v (waits seen: %s)", part, k, names, w.summary())
	}
}

// TestRateLimitsAreAHealthyWait: one manager, three namespaces with a
// loopback OpenAI-compatible server each (200 ms a call).
//
//   - (a) The server takes 10 calls/s and answers 429 + Retry-After: 1
//     above it; 60 runs of LatencyBlueprint (180 calls, 18 s of the
//     server's rate, so calls are held well past the 5 s after which a
//     hold shows) all complete; while they ran at least one showed
//     phase WaitingInput with waitingOn RateLimited, needsAPerson false,
//     provider llm, model m1 and a retryAt; none ever showed NeedsSetup
//     (ProviderFailed or any other blocker); the server did answer 429s,
//     so the test exercised them, but fewer than a quarter of the calls:
//     the manager learned the rate from the first refusals instead of
//     sending every held call again when each pause ended.
//   - (c) Meanwhile 20 runs against an unlimited server complete within
//     30 s of their creation and never show RateLimited: a rate-limited
//     provider never holds back another's runs.
//   - (b) Then 40 runs against a fresh server with the same limit, whose
//     providers.toml says requests_per_minute = 600 (10/s): all complete,
//     and the server answered no 429 at all (the operator kept to the
//     limit on its own side); the first run's last call is answered
//     within a third of the batch (runs under way go first).
func TestRateLimitsAreAHealthyWait(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and a manager process")
	}
	c := sharedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const (
		delay    = 200 * time.Millisecond
		rate     = 10 // calls/s of the limited servers
		nA, nB   = 60, 40
		nC       = 20
		cBound   = 30 * time.Second
		batchMax = 3 * time.Minute
	)

	m, err := c.StartManager(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Kill() })

	newServer := func(rate int) *loadtest.LatencyServer {
		t.Helper()
		s, err := loadtest.NewLatencyServer(delay, rate)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	setup := func(prefix string, s *loadtest.LatencyServer, extra string) string {
		t.Helper()
		ns, err := c.SetupLatencyNamespace(ctx, prefix, "bench", loadtest.LatencyBlueprint, loadtest.LatencyProvidersTOML(s.BaseURL(), extra))
		if err != nil {
			t.Fatal(err)
		}
		return ns
	}

	// (a) and (c), concurrently.
	srvA, srvC := newServer(rate), newServer(0)
	tapA := newCallTap(t, srvA.URL())
	nsA, err := c.SetupLatencyNamespace(ctx, "limited", "bench", loadtest.LatencyBlueprint, loadtest.LatencyProvidersTOML(tapA.BaseURL(), ""))
	if err != nil {
		t.Fatal(err)
	}
	nsC := setup("unlimited", srvC, "")
	recA, recC := recordWaits(t, ctx, c, nsA), recordWaits(t, ctx, c, nsC)
	srvA.Take()
	srvC.Take()
	startA := time.Now()
	if err := c.CreateRunsWith(ctx, nsA, "bench", "r", nA, 8, nil); err != nil {
		t.Fatal(err)
	}
	startC := time.Now()
	if err := c.CreateRunsWith(ctx, nsC, "bench", "r", nC, 8, nil); err != nil {
		t.Fatal(err)
	}
	// Waited for longer than the bound, so (a) is still reported when (c)
	// misses it; the bound is asserted below.
	runsC := chainAwaitComplete(t, ctx, c, m, nsC, nC, batchMax)
	lastC, _ := recC.lastComplete()
	tookC := lastC.Sub(startC)
	if lastC.IsZero() {
		tookC = time.Since(startC)
	}
	doneAAtC := 0
	if runs, err := chainListRuns(ctx, c, nsA); err == nil {
		for _, r := range runs {
			if r.Status.Phase == arv1.PhaseComplete {
				doneAAtC++
			}
		}
	}
	runsA := chainAwaitComplete(t, ctx, c, m, nsA, nA, batchMax)
	lastA, _ := recA.lastComplete()
	tookA := lastA.Sub(startA)
	if lastA.IsZero() {
		tookA = time.Since(startA)
	}
	stA, stC := srvA.Take(), srvC.Take()
	refusedA := rateLimitedCounter(t, ctx, m)
	if refusedA != float64(stA.RateLimited) {
		t.Errorf("(a) agentrun_model_call_rate_limited_total{provider=\"llm\"} = %v, want the %d 429s the server answered", refusedA, stA.RateLimited)
	}
	if err := recA.Stop(); err != nil {
		t.Error(err)
	}
	if err := recC.Stop(); err != nil {
		t.Error(err)
	}

	obsA := recA.rateObservations()
	good, withRetryAt, bad := 0, 0, 0
	shownRuns := map[string]bool{}
	for _, o := range obsA {
		shownRuns[o.run] = true
		ok := !o.wait.NeedsAPerson && o.wait.Provider == "llm" && o.wait.Model == "m1" && o.phase == arv1.PhaseWaitingInput
		if ok {
			good++
		} else {
			bad++
			if bad <= 5 {
				t.Errorf("(a) %s showed RateLimited with phase %s, needsAPerson %v, provider %q, model %q (want WaitingInput, false, llm, m1)",
					o.run, o.phase, o.wait.NeedsAPerson, o.wait.Provider, o.wait.Model)
			}
		}
		if o.wait.RetryAt != nil {
			withRetryAt++
		}
	}
	var example string
	if len(obsA) > 0 {
		o := obsA[0]
		example = fmt.Sprintf("%s %v after creation: %s %q retryAt %v (in %v)", o.run, o.at.Sub(startA).Round(time.Millisecond), o.phase, o.wait.Summary, o.wait.RetryAt, func() time.Duration {
			if o.wait.RetryAt == nil {
				return 0
			}
			return o.wait.RetryAt.Sub(o.at).Round(time.Millisecond)
		}())
	}
	t.Logf("(a) %d runs against a %d/s server: all Complete %v after creation; server %d requests, %d accepted, %d answered 429, busiest second %d, max in flight %d; RateLimited shown in %d statuses of %d runs (%d with retryAt); waits seen: %s; first: %s",
		len(runsA), rate, tookA.Round(time.Millisecond), stA.Requests, stA.Accepted, stA.RateLimited, stA.BusiestSecond(), stA.MaxInFlight, len(obsA), len(shownRuns), withRetryAt, recA.summary(), example)
	t.Logf("(c) %d runs against an unlimited server, created while (a) ran: all Complete %v after creation (bound %v), when %d/%d of (a) were; server %d accepted, %d 429; waits seen: %s",
		len(runsC), tookC.Round(time.Millisecond), cBound, doneAAtC, nA, stC.Accepted, stC.RateLimited, recC.summary())

	// How long the calls were held, as the provider saw them.
	holdsA := tapA.holds(startA, delay)
	over5, over7 := 0, 0
	var long []string
	for _, h := range holdsA {
		if h.wait > 5*time.Second {
			over5++
		}
		if h.wait > 7*time.Second {
			over7++
			if !shownRuns[h.run] {
				long = append(long, fmt.Sprintf("%s call %d held %v (%d refusals, %v from its first attempt)", h.run, h.call, h.wait.Round(time.Millisecond), h.refusals, h.fromFirst.Round(time.Millisecond)))
			}
		}
	}
	var top []string
	for _, h := range holdsA[:min(5, len(holdsA))] {
		top = append(top, fmt.Sprintf("%s#%d %v/%d refusals", h.run, h.call, h.wait.Round(time.Millisecond), h.refusals))
	}
	t.Logf("(a) calls seen through the tap: %d; held > 5s: %d, > 7s: %d; longest: %s", len(holdsA), over5, over7, strings.Join(top, ", "))

	if good == 0 {
		t.Errorf("(a) no run ever showed waitingOn RateLimited (needsAPerson false, provider llm, model m1) while %d calls were held by %d 429s, %d of them for more than 5s (waits seen: %s)", nA*loadtest.LatencyModelCalls, stA.RateLimited, over5, recA.summary())
	}
	// A call held for well over 5 s must have shown on its run.
	if len(long) > 0 {
		if len(long) > 8 {
			long = append(long[:8], "...")
		}
		t.Errorf("(a) %d calls were held over 7s by the provider's 429s and their runs never showed RateLimited: %s", len(long), strings.Join(long, "; "))
	}
	if len(obsA) > 0 && withRetryAt == 0 {
		t.Errorf("(a) none of the %d RateLimited statuses had a retryAt, though the provider said when to retry", len(obsA))
	}
	checkNoSetupWaits(t, "(a)", recA)
	if stA.RateLimited == 0 {
		t.Errorf("(a) the server answered no 429: the test proved nothing about them")
	}
	if callsA := nA * loadtest.LatencyModelCalls; stA.RateLimited > int64(callsA/4) {
		t.Errorf("(a) the server answered %d 429s to %d calls (more than a quarter): the manager did not learn its rate", stA.RateLimited, callsA)
	}
	if stA.Accepted != int64(nA*loadtest.LatencyModelCalls) {
		t.Errorf("(a) the server accepted %d calls, want %d (3 per run)", stA.Accepted, nA*loadtest.LatencyModelCalls)
	}
	if tookC > cBound {
		t.Errorf("(c) the unlimited namespace's runs took %v, over %v", tookC, cBound)
	}
	if k, names := recC.runsEver(func(key string) bool { return key == string(arv1.WaitRateLimited) }); k > 0 {
		t.Errorf("(c) %d runs of the unlimited provider showed RateLimited: %v", k, names)
	}
	checkNoSetupWaits(t, "(c)", recC)
	if stC.RateLimited != 0 || stC.Accepted != int64(nC*loadtest.LatencyModelCalls) {
		t.Errorf("(c) server: %d accepted, %d 429; want %d and 0", stC.Accepted, stC.RateLimited, nC*loadtest.LatencyModelCalls)
	}

	// (b) after: the same limit, declared in providers.toml.
	srvB := newServer(rate)
	nsB := setup("declared", srvB, fmt.Sprintf("requests_per_minute = %d", rate*60))
	recB := recordWaits(t, ctx, c, nsB)
	srvB.Take()
	startB := time.Now()
	if err := c.CreateRunsWith(ctx, nsB, "bench", "r", nB, 8, nil); err != nil {
		t.Fatal(err)
	}
	runsB := chainAwaitComplete(t, ctx, c, m, nsB, nB, batchMax)
	lastB, _ := recB.lastComplete()
	tookB := lastB.Sub(startB)
	if lastB.IsZero() {
		tookB = time.Since(startB)
	}
	stB := srvB.Take()
	if err := recB.Stop(); err != nil {
		t.Error(err)
	}
	t.Logf("(b) %d runs with requests_per_minute = %d against a %d/s server: all Complete %v after creation; server %d requests, %d accepted, %d answered 429, busiest second %d, max in flight %d; RateLimited shown in %d statuses; waits seen: %s",
		len(runsB), rate*60, rate, tookB.Round(time.Millisecond), stB.Requests, stB.Accepted, stB.RateLimited, stB.BusiestSecond(), stB.MaxInFlight, len(recB.rateObservations()), recB.summary())
	if stB.RateLimited != 0 {
		t.Errorf("(b) the server answered %d 429s though providers.toml declared its limit; want 0", stB.RateLimited)
	}
	if got := rateLimitedCounter(t, ctx, m); got != refusedA {
		t.Errorf("(b) agentrun_model_call_rate_limited_total{provider=\"llm\"} went from %v to %v with no 429 answered", refusedA, got)
	}
	if stB.Accepted != int64(nB*loadtest.LatencyModelCalls) {
		t.Errorf("(b) the server accepted %d calls, want %d", stB.Accepted, nB*loadtest.LatencyModelCalls)
	}
	// Runs under way go first: the first run's last call is answered early
	// in the batch, not behind every other run's calls as in arrival order.
	firstDone := tookB
	for _, calls := range stB.Runs {
		if len(calls) == loadtest.LatencyModelCalls {
			firstDone = min(firstDone, calls[len(calls)-1].End.Sub(startB))
		}
	}
	t.Logf("(b) the first run's last call was answered %v after creation", firstDone.Round(time.Millisecond))
	if firstDone > tookB/3 {
		t.Errorf("(b) the first run's last call was answered %v after creation, over a third of the batch's %v: runs under way did not go ahead of new runs", firstDone.Round(time.Millisecond), tookB.Round(time.Millisecond))
	}
	checkNoSetupWaits(t, "(b)", recB)
	for _, o := range recB.rateObservations() {
		if o.wait.NeedsAPerson || o.wait.Provider != "llm" || o.wait.Model != "m1" || o.phase != arv1.PhaseWaitingInput {
			t.Errorf("(b) %s showed RateLimited with phase %s, needsAPerson %v, provider %q, model %q", o.run, o.phase, o.wait.NeedsAPerson, o.wait.Provider, o.wait.Model)
			break
		}
	}
}

// callTap is a reverse proxy in front of a LatencyServer that records, per
// run (read from the task in the request), when each call attempt arrived
// and how it was answered, so a call's hold can be measured from outside.
type callTap struct {
	srv *httptest.Server

	mu    sync.Mutex
	byRun map[string][]tapAttempt
	// aborted counts requests whose body never arrived whole.
	aborted int
}

type tapAttempt struct {
	at     time.Time
	status int
}

var tapTask = regexp.MustCompile(`load test task ([a-z0-9]+-[0-9]{5})`)

func newCallTap(t *testing.T, target string) *callTap {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	// A call dropped by a killed manager is the point, not news.
	rp.ErrorLog = log.New(io.Discard, "", 0)
	tap := &callTap{byRun: map[string][]tapAttempt{}}
	tap.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		body, err := io.ReadAll(r.Body)
		if err != nil {
			// The client went away while sending (a killed manager): the
			// call never reaches the server.
			tap.mu.Lock()
			tap.aborted++
			tap.mu.Unlock()
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		rp.ServeHTTP(sw, r)
		run := "?"
		if m := tapTask.FindSubmatch(body); m != nil {
			run = string(m[1])
		}
		tap.mu.Lock()
		tap.byRun[run] = append(tap.byRun[run], tapAttempt{at: at, status: sw.status})
		tap.mu.Unlock()
	}))
	t.Cleanup(tap.srv.Close)
	return tap
}

// BaseURL is what a providers.toml names.
func (tap *callTap) BaseURL() string { return tap.srv.URL + "/v1" }

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// callHold is one model call as the provider saw it: the refusals before
// it was accepted, and how long the run waited for it.
type callHold struct {
	run      string
	call     int
	refusals int
	// fromFirst is from its first attempt to the accepted one; wait is
	// from the run's previous answer (or, for its first call, from the
	// batch's start) to the accepted attempt: how long the call was held,
	// give or take the manager's milliseconds between two calls.
	fromFirst, wait time.Duration
}

// holds splits each run's attempts into calls (a call ends with its 200)
// and measures each; answer is how long an accepted call takes to answer.
func (tap *callTap) holds(start time.Time, answer time.Duration) []callHold {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	var out []callHold
	for run, atts := range tap.byRun {
		atts = append([]tapAttempt(nil), atts...)
		sort.Slice(atts, func(i, j int) bool { return atts[i].at.Before(atts[j].at) })
		prev, first, refusals, call := start, time.Time{}, 0, 0
		for _, a := range atts {
			if first.IsZero() {
				first = a.at
			}
			if a.status != http.StatusOK {
				refusals++
				continue
			}
			call++
			out = append(out, callHold{run: run, call: call, refusals: refusals, fromFirst: a.at.Sub(first), wait: a.at.Sub(prev)})
			prev, first, refusals = a.at.Add(answer), time.Time{}, 0
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].wait > out[j].wait })
	return out
}

// perRun is how many calls of each run reached the server and were not
// refused (429, 400): answered, or dropped by a client that went away.
func (tap *callTap) perRun() map[string]int64 {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	out := map[string]int64{}
	for run, atts := range tap.byRun {
		for _, a := range atts {
			if a.status != http.StatusTooManyRequests && a.status != http.StatusBadRequest {
				out[run]++
			}
		}
	}
	return out
}

// rateLimitedCounter reads the manager's count of refused model calls of
// provider "llm" (0 before the first).
func rateLimitedCounter(t *testing.T, ctx context.Context, m *loadtest.Manager) float64 {
	t.Helper()
	sc, err := m.Scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := sc.Value("agentrun_model_call_rate_limited_total", map[string]string{"provider": "llm"})
	return v
}
