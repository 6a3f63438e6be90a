package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool/mcptest"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
)

// writeCounter counts the manager's mutating API requests by verb and
// resource, through its REST transport.
type writeCounter struct {
	mu     sync.Mutex
	counts map[string]int
	total  atomic.Int64
}

func (w *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet {
			parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
			res := parts[len(parts)-1]
			if req.Method == http.MethodPost && len(parts) > 0 {
				res = parts[len(parts)-1]
			} else if len(parts) >= 2 {
				res = parts[len(parts)-2] + "/" + parts[len(parts)-1]
				if parts[len(parts)-1] == "status" {
					res = parts[len(parts)-3] + "/status"
				} else {
					res = parts[len(parts)-2]
				}
			}
			resp, err := rt.RoundTrip(req)
			if err == nil && resp.StatusCode == http.StatusConflict {
				// A stale write the API server refused: it stored nothing
				// (counted apart, so a loaded machine's cache lag does not
				// read as extra writes).
				res = "conflicts"
			}
			w.mu.Lock()
			w.counts[req.Method+" "+res]++
			w.mu.Unlock()
			if res != "conflicts" {
				w.total.Add(1)
			}
			return resp, err
		}
		return rt.RoundTrip(req)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (w *writeCounter) snapshot() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for k, v := range w.counts {
		out[k] = v
	}
	return out
}

// startCountingManager runs a manager whose every write is counted.
func startCountingManager(t testing.TB, steps int) (*writeCounter, *providers.Scripted) {
	t.Helper()
	wc := &writeCounter{counts: map[string]int{}}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(wc.wrap)
	scripted := providers.NewScripted()
	mgr, err := manager.New(cfg, manager.Options{MetricsAddr: "0", ProbeAddr: "0", MaxConcurrentSteps: steps, Scripted: scripted, SkipNameValidation: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return wc, scripted
}

// TestWritesPerStep bounds what one model step costs in API writes: the
// intent and the completion (one small create each) and at most two status
// writes. The counts are logged for the closing note.
func TestWritesPerStep(t *testing.T) {
	wc, _ := startCountingManager(t, 16)
	ns := newNamespace(t)
	createConfigMap(t, ns, "triple", map[string]string{"agent.toml": threeStage})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	time.Sleep(300 * time.Millisecond)
	base := wc.total.Load()
	createRun(t, ns, "r", "triple")
	run := waitFor(t, ns, "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	time.Sleep(500 * time.Millisecond) // let trailing writes land
	writes := wc.total.Load() - base
	steps := run.Status.Usage.ModelCalls
	// Fixed per run: finalizer, blueprint snapshot, output object, and a
	// few events.
	t.Logf("%d model steps cost %d writes in all: %v", steps, writes, wc.snapshot())
	perStep := float64(writes) / float64(steps)
	t.Logf("writes per step (including the run's fixed cost): %.2f", perStep)
	if max := 4*steps + 10; writes > max {
		t.Errorf("%d writes for %d steps, want at most %d (4 per step + 10 fixed)", writes, steps, max)
	}
}

// TestWritesPerToolCall bounds what one tool call costs in API writes: its
// intent and completion (one small create each) and at most two status
// writes. Two runs differing only in how many calls one answer makes are
// measured side by side; the difference is the calls' own cost.
func TestWritesPerToolCall(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	wc, _ := startCountingManager(t, 16)
	ns := newNamespace(t)
	manifest := func(calls int) string {
		var cs []string
		for i := range calls {
			cs = append(cs, fmt.Sprintf(`{name = "read_doc", arguments = '{"id":"d%d"}'}`, i))
		}
		return strings.Replace(toolAgent(srv.URL(), "", ""), "[[stages.work.script]]\ncomplete = true",
			"[[stages.work.script]]\ntext = \"reading\"\ntool_calls = ["+strings.Join(cs, ", ")+"]\n[[stages.work.script]]\ncomplete = true", 1)
	}
	const many = 7
	createConfigMap(t, ns, "one", map[string]string{"agent.toml": manifest(1)})
	createConfigMap(t, ns, "many", map[string]string{"agent.toml": manifest(many)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	time.Sleep(300 * time.Millisecond)
	measure := func(name, agent string) int64 {
		before := wc.total.Load()
		createRun(t, ns, name, agent)
		waitFor(t, ns, name, 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
		time.Sleep(500 * time.Millisecond)
		return wc.total.Load() - before
	}
	one, lots := measure("one", "one"), measure("many", "many")
	if srv.Executed("read_doc") != 1+many {
		t.Fatalf("read_doc executed %d times, want %d", srv.Executed("read_doc"), 1+many)
	}
	perCall := float64(lots-one) / (many - 1)
	t.Logf("one answer with 1 tool call: %d writes; with %d: %d; %.2f writes per tool call (%v)", one, many, lots, perCall, wc.snapshot())
	if perCall > 4 {
		t.Errorf("%.2f writes per tool call, want at most 4 (intent, completion, two status writes)", perCall)
	}
}

// BenchmarkFanOut200 measures one parent converging over 200 workers
// (max_workers 50) and the API writes per child.
func BenchmarkFanOut200(b *testing.B) {
	wc, _ := startCountingManager(b, 64)
	for i := 0; b.Loop(); i++ {
		ns := newNamespace(b)
		ctx := context.Background()
		createConfigMap(b, ns, "fan", map[string]string{"agent.toml": fanOutBlueprint(200, 50, "continue", 1, 0)})
		createConfigMap(b, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
		before := wc.total.Load()
		start := time.Now()
		createRun(b, ns, "p", "fan")
		for {
			r := &arv1.AgentRun{}
			if err := k8s.Get(ctx, keyOf(ns, "p"), r); err == nil && r.Status.Phase.IsTerminal() {
				if r.Status.Phase != arv1.PhaseComplete {
					b.Fatalf("parent ended %s: %s", r.Status.Phase, r.Status.Error)
				}
				break
			}
			if time.Since(start) > 5*time.Minute {
				b.Fatal("200 workers did not converge in 5 minutes")
			}
			time.Sleep(20 * time.Millisecond)
		}
		elapsed := time.Since(start)
		writes := wc.total.Load() - before
		b.ReportMetric(elapsed.Seconds(), "s/converge")
		b.ReportMetric(float64(writes)/200, "writes/child")
		fmt.Printf("1 parent x 200 workers: converged in %v, %d writes (%.1f per child)\n", elapsed.Round(time.Millisecond), writes, float64(writes)/200)
	}
}

// BenchmarkToolCalls50x4 runs 50 runs at once, each making one answer with
// 4 MCP read calls, beside 50 runs of the same two turns with no calls, and
// reports the tool calls' own cost: time to converge and API writes per
// call, as the difference between the two batches measured side by side.
func BenchmarkToolCalls50x4(b *testing.B) {
	const runs, calls = 50, 4
	srv := mcptest.New(b, mcptest.Options{})
	wc, _ := startCountingManager(b, 64)
	manifest := func(withCalls bool) string {
		if !withCalls {
			// The same two model turns, moving through two stages instead.
			return `[agent]
name = "plain"
[agent.title]
enabled = false
[stages.work]
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.work.transitions.fin]
condition = "always"
[[stages.work.script]]
text = "reading"
[stages.fin]
allow_complete = true
[stages.fin.model]
models = [{provider = "demo", model = "scripted-1"}]
`
		}
		var cs []string
		for i := range calls {
			cs = append(cs, fmt.Sprintf(`{name = "read_doc", arguments = '{"id":"d%d"}'}`, i))
		}
		step := "[[stages.work.script]]\ntext = \"reading\"\ntool_calls = [" + strings.Join(cs, ", ") + "]\n"
		return strings.Replace(toolAgent(srv.URL(), "", ""), "[[stages.work.script]]\ncomplete = true", step+"[[stages.work.script]]\ncomplete = true", 1)
	}
	batch := func(ns, agent string) (time.Duration, int64) {
		before, start := wc.total.Load(), time.Now()
		for i := range runs {
			createRun(b, ns, fmt.Sprintf("%s-%d", agent, i), agent)
		}
		for i := range runs {
			for {
				r := &arv1.AgentRun{}
				if err := k8s.Get(context.Background(), keyOf(ns, fmt.Sprintf("%s-%d", agent, i)), r); err == nil && r.Status.Phase.IsTerminal() {
					if r.Status.Phase != arv1.PhaseComplete {
						b.Fatalf("%s ended %s: %s", r.Name, r.Status.Phase, r.Status.Error)
					}
					break
				}
				if time.Since(start) > 5*time.Minute {
					b.Fatal("runs did not converge in 5 minutes")
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		elapsed := time.Since(start)
		time.Sleep(500 * time.Millisecond)
		return elapsed, wc.total.Load() - before
	}
	for b.Loop() {
		ns := newNamespace(b)
		createConfigMap(b, ns, "tools", map[string]string{"agent.toml": manifest(true)})
		createConfigMap(b, ns, "plain", map[string]string{"agent.toml": manifest(false)})
		createConfigMap(b, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
		plainTook, plainWrites := batch(ns, "plain")
		toolsTook, toolsWrites := batch(ns, "tools")
		perCall := float64(toolsWrites-plainWrites) / (runs * calls)
		b.ReportMetric(toolsTook.Seconds(), "s/converge")
		b.ReportMetric(toolsTook.Seconds()/plainTook.Seconds(), "x-plain-time")
		b.ReportMetric(perCall, "writes/toolcall")
		fmt.Printf("%d runs x %d tool calls: %v (the same turns without calls: %v, ratio %.2f); %d vs %d writes, %.2f per tool call\n",
			runs, calls, toolsTook.Round(time.Millisecond), plainTook.Round(time.Millisecond), toolsTook.Seconds()/plainTook.Seconds(), toolsWrites, plainWrites, perCall)
	}
}
