package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool/mcptest"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
)

// writeCounter counts the manager's mutating API requests by verb and
// resource, through its REST transport. With ns set it counts only writes
// into that namespace, so runs other tests left elsewhere do not count.
type writeCounter struct {
	ns     string
	mu     sync.Mutex
	counts map[string]int
	total  atomic.Int64
}

func (w *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodGet || (w.ns != "" && !strings.Contains(req.URL.Path, "/namespaces/"+w.ns+"/")) {
			return rt.RoundTrip(req)
		}
		parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
		res := parts[len(parts)-1]
		if req.Method != http.MethodPost && len(parts) >= 2 {
			res = parts[len(parts)-2]
			if parts[len(parts)-1] == "status" {
				res = parts[len(parts)-3] + "/status"
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

// settle waits until writes have stopped: the manager's write count and
// etcd's revision both unchanged for quiet, polled, so a late write (an
// Event, a trailing status write) is counted rather than cut off by a fixed
// sleep. It fails the test if they are still moving after timeout.
func (w *writeCounter) settle(t testing.TB, quiet, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	writes, rev := w.total.Load(), etcdRevision(t)
	still := start
	for {
		time.Sleep(50 * time.Millisecond)
		now := time.Now()
		if n, r := w.total.Load(), etcdRevision(t); n != writes || r != rev {
			writes, rev, still = n, r, now
		} else if now.Sub(still) >= quiet {
			return
		}
		if now.Sub(start) > timeout {
			t.Fatalf("writes never settled in %v: %d writes so far, etcd revision %d (%v)", timeout, writes, rev, w.snapshot())
		}
	}
}

// Writes settle when nothing has been written for settleQuiet (longer than
// any pause between a run's own writes: its Events are sent at once, its
// last status with the end), within settleTimeout.
const settleQuiet, settleTimeout = time.Second, 30 * time.Second

// startCountingManager runs a manager whose every write (into ns, when
// given) is counted.
func startCountingManager(t testing.TB, steps int, ns ...string) (*writeCounter, *providers.Scripted) {
	t.Helper()
	o := manager.Options{MaxConcurrentSteps: steps}
	if len(ns) > 0 {
		return countingManager(t, ns[0], o)
	}
	return countingManager(t, "", o)
}

// countingManager is startCountingManager with more options set.
func countingManager(t testing.TB, ns string, o manager.Options) (*writeCounter, *providers.Scripted) {
	t.Helper()
	wc := &writeCounter{counts: map[string]int{}, ns: ns}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(wc.wrap)
	scripted := providers.NewScripted()
	o.MetricsAddr, o.ProbeAddr, o.Scripted, o.SkipNameValidation, o.Egress, o.EgressOptions = "0", "0", scripted, true, loopbackEgress(), suiteEgressOptions()
	o.Store.DSN = storeDSN(t)
	mgr, err := manager.New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return wc, scripted
}

// etcdRevision is etcd's current revision, as the API server reports it on
// a list: every write of every kind moves it by one.
func etcdRevision(t testing.TB) int64 {
	t.Helper()
	var list corev1.ConfigMapList
	if err := k8s.List(context.Background(), &list, client.InNamespace("default"), client.Limit(1)); err != nil {
		t.Fatal(err)
	}
	rv, err := strconv.ParseInt(list.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return rv
}

// stages is a blueprint of n stages with one scripted model call each,
// titles off: n model steps and nothing else.
func stages(n int) string {
	return stagesAnswering(n, func(i int) string {
		if i == n-1 {
			return "done"
		}
		return fmt.Sprintf("step %d", i)
	})
}

// stagesAnswering is stages(n) whose stage i's scripted model answers
// text(i).
func stagesAnswering(n int, text func(i int) string) string {
	var b strings.Builder
	b.WriteString("[agent]\nname = \"steps\"\n[agent.title]\nenabled = false\n")
	for i := range n {
		fmt.Fprintf(&b, "[stages.s%d]\n[stages.s%d.model]\nmodels = [{provider = \"demo\", model = \"scripted-1\"}]\n", i, i)
		if i < n-1 {
			fmt.Fprintf(&b, "[stages.s%d.transitions.s%d]\ncondition = \"always\"\n[[stages.s%d.script]]\ntext = %q\n", i, i+1, i, text(i))
		} else {
			fmt.Fprintf(&b, "[[stages.s%d.script]]\ntext = %q\ncomplete = true\noutput = \"all done\"\n", i, text(i))
		}
	}
	return b.String()
}

// TestWritesPerStep bounds what a run costs the API server: a 3-stage run
// of 3 model calls at most 7 writes in all (the user's create, the first
// and the last status, one journal write per call, one Event), and each
// further model step 1 (its completion and the next call's intent, in one
// journal write, made by the step that made the call). With a database
// store the calls cost the API server nothing: 3 writes (the run ends
// within the second its first status write waits), 0 per further step. Writes are counted
// at the manager's transport, in the test's namespace only; the etcd
// revision delta is logged beside them.
func TestWritesPerStep(t *testing.T) {
	ns := newNamespace(t)
	wc, _ := startCountingManager(t, 16, ns)
	createConfigMap(t, ns, "three", map[string]string{"agent.toml": stages(3)})
	createConfigMap(t, ns, "six", map[string]string{"agent.toml": stages(6)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	// A first run of each blueprint snapshots it: a cost shared by every
	// later run of the same text.
	for _, agent := range []string{"three", "six"} {
		createRun(t, ns, "warm-"+agent, agent)
		waitFor(t, ns, "warm-"+agent, 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	}
	measure := func(name, agent string) (writes, etcd int64) {
		wc.settle(t, settleQuiet, settleTimeout) // the runs before have stopped writing
		base, rev := wc.total.Load(), etcdRevision(t)
		createRun(t, ns, name, agent)
		waitFor(t, ns, name, 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
		wc.settle(t, settleQuiet, settleTimeout)                 // its last writes land and are counted
		return wc.total.Load() - base + 1, etcdRevision(t) - rev // + the user's create
	}
	three, threeEtcd := measure("r3", "three")
	six, sixEtcd := measure("r6", "six")
	perStep := float64(six-three) / 3
	t.Logf("3 model steps: %d writes (etcd revision delta %d); 6 steps: %d (etcd %d); %.2f writes per further step; %v",
		three, threeEtcd, six, sixEtcd, perStep, wc.snapshot())
	maxThree, maxPerStep := int64(7), 1.0
	if suiteStore != "" {
		// The calls go to the database: the create, the status at its end
		// (it ends within the second its first write may wait), and the
		// Event.
		maxThree, maxPerStep = 3, 0
	}
	if three > maxThree {
		t.Errorf("a 3-step run cost %d writes, want at most %d", three, maxThree)
	}
	if perStep > maxPerStep {
		t.Errorf("%.2f writes per further model step, want at most %.0f", perStep, maxPerStep)
	}
}

// TestWritesPerToolCall bounds what one tool call costs in API writes: one
// journal write, for a read and for a write alike (the step that made the
// model call journals its completion with the tool call's intent, so a
// write is on record before it starts, and the tool's step journals its
// result with the next call's intent). Runs differing only in how many
// calls one answer makes are measured side by side; the difference is the
// calls' own cost.
func TestWritesPerToolCall(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	ns := newNamespace(t)
	wc, _ := startCountingManager(t, 16, ns)
	manifest := func(tool string, calls int) string {
		var cs []string
		for i := range calls {
			arg := "id"
			if tool == "create_ticket" {
				arg = "title"
			}
			cs = append(cs, fmt.Sprintf(`{name = %q, arguments = '{"%s":"x%d"}'}`, tool, arg, i))
		}
		return strings.Replace(toolAgent(srv.URL(), "", "[tools.create_ticket]\npermission = \"allow\""), "[[stages.work.script]]\ncomplete = true",
			"[[stages.work.script]]\ntext = \"working\"\ntool_calls = ["+strings.Join(cs, ", ")+"]\n[[stages.work.script]]\ncomplete = true", 1)
	}
	const many = 7
	tools := map[string]string{"read": "read_doc", "write": "create_ticket"}
	for kind, tool := range tools {
		createConfigMap(t, ns, kind+"-1", map[string]string{"agent.toml": manifest(tool, 1)})
		createConfigMap(t, ns, kind+"-n", map[string]string{"agent.toml": manifest(tool, many)})
	}
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	measure := func(name, agent string) int64 {
		createRun(t, ns, "warm-"+name, agent) // snapshots the blueprint
		waitFor(t, ns, "warm-"+name, 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
		wc.settle(t, settleQuiet, settleTimeout)
		before := wc.total.Load()
		createRun(t, ns, name, agent)
		waitFor(t, ns, name, 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
		wc.settle(t, settleQuiet, settleTimeout)
		return wc.total.Load() - before
	}
	for _, kind := range []string{"read", "write"} {
		one, lots := measure(kind+"-one", kind+"-1"), measure(kind+"-many", kind+"-n")
		perCall := float64(lots-one) / (many - 1)
		t.Logf("%s (%s): one answer with 1 call: %d writes; with %d: %d; %.2f writes per tool call", kind, tools[kind], one, many, lots, perCall)
		if perCall > 1 {
			t.Errorf("%s: %.2f writes per tool call, want at most 1", kind, perCall)
		}
	}
	if srv.Executed("read_doc") != 2*(1+many) || srv.Executed("create_ticket") != 2*(1+many) {
		t.Errorf("executed read_doc %d, create_ticket %d times; want %d each", srv.Executed("read_doc"), srv.Executed("create_ticket"), 2*(1+many))
	}
	t.Logf("%v", wc.snapshot())
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
		wc.settle(b, settleQuiet, settleTimeout)
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
