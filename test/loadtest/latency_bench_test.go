package loadtest_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/test/loadtest"
)

// The latency benchmarks: runs whose model calls take as long as real ones,
// against a loopback OpenAI-compatible server (loadtest.LatencyServer),
// compared with a bare client making the same calls to the same server in
// the same process run. See docs/benchmarks.md.

// envInt is the integer in env name, or def.
func envInt(b *testing.B, name string, def int) int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// envDuration is the Go duration in env name, or def.
func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		b.Fatalf("%s=%q: want a Go duration", name, v)
	}
	return d
}

// envTOML is the TOML in env name (a literal \n is a line break), or def.
func envTOML(name, def string) string {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def
	}
	return strings.ReplaceAll(v, `\n`, "\n")
}

// setupBlockers are the waits that never clear by themselves: a latency
// batch whose run shows one fails at once rather than at its timeout.
var setupBlockers = []arv1.SetupBlocker{
	arv1.BlockerProviderConfigInvalid, arv1.BlockerProviderConfigMissing, arv1.BlockerProviderMissing,
	arv1.BlockerSecretMissing, arv1.BlockerSecretKeyMissing, arv1.BlockerAuthFailed, arv1.BlockerForbidden,
	arv1.BlockerEgressRefused, arv1.BlockerBlueprintMissing, arv1.BlockerCreditsExhausted,
}

// latencyRun is one operator batch of LatencyBlueprint against a server, in
// a namespace of its own, with every wait its runs showed.
type latencyRun struct {
	name   string
	srv    *loadtest.LatencyServer
	ns     string
	res    *loadtest.BatchResult
	waits  *loadtest.BlockerWatch
	server loadtest.LatencyStats
	// dbPID, if set, is the database server whose CPU the batch samples;
	// create, if set, creates the runs (Batch.Create).
	dbPID  int
	create func(context.Context, loadtest.Batch) (map[string]time.Time, error)
}

// prepareLatency makes the namespace (LatencyBlueprint, providers.toml
// naming srv with extra in its table, the key's Secret).
func prepareLatency(ctx context.Context, c *loadtest.Cluster, name string, srv *loadtest.LatencyServer, extra string) (*latencyRun, error) {
	return prepareLatencyOf(ctx, c, name, srv, extra, loadtest.LatencyBlueprint)
}

// prepareLatencyOf is prepareLatency with another blueprint.
func prepareLatencyOf(ctx context.Context, c *loadtest.Cluster, name string, srv *loadtest.LatencyServer, extra, manifest string) (*latencyRun, error) {
	ns, err := c.SetupLatencyNamespace(ctx, name, "bench", manifest, loadtest.LatencyProvidersTOML(srv.BaseURL(), extra))
	if err != nil {
		return nil, err
	}
	return &latencyRun{name: name, srv: srv, ns: ns, waits: loadtest.NewBlockerWatch()}, nil
}

// run runs the batch of n, failing early when a run waits on a blocker
// that never clears. The server's counters are taken before and after, so
// lr.server is this batch's (when nothing else calls the server meanwhile).
func (lr *latencyRun) run(ctx context.Context, c *loadtest.Cluster, m *loadtest.Manager, n int, timeout time.Duration) error {
	lr.srv.Take()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stuck := make(chan string, 1)
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for _, bl := range setupBlockers {
				if k := lr.waits.Ever(bl); k > 0 {
					hint := ""
					if bl == arv1.BlockerProviderConfigInvalid {
						hint = "; if the manager does not know a key of the provider table yet, leave it out (LOADTEST_SKIP_RPM=1 skips BenchmarkRateLimited300's requests_per_minute batch)"
					}
					stuck <- fmt.Sprintf("%d runs wait on NeedsSetup %s, which does not clear by itself (waits seen: %s)%s", k, bl, lr.waits, hint)
					cancel()
					return
				}
			}
		}
	}()
	spec := loadtest.Batch{Namespace: lr.ns, Agent: "bench", Prefix: "r", N: n, Concurrency: concurrency, Timeout: timeout, Manager: m, Observe: lr.waits.Observe,
		DatabasePID: lr.dbPID, Create: lr.create}
	profileAPIServer(&spec, lr.name)
	res, err := c.RunBatch(ctx, spec)
	lr.server = lr.srv.Take()
	select {
	case why := <-stuck:
		return fmt.Errorf("%s batch of %d: %s (batch: %v)", lr.name, n, why, err)
	default:
	}
	if err != nil {
		return fmt.Errorf("%s batch of %d: %w (waits seen: %s)", lr.name, n, err, lr.waits)
	}
	lr.res = res
	return nil
}

// latencyBatch is prepareLatency and run, failing the benchmark with the
// manager's log tail.
func latencyBatch(b *testing.B, ctx context.Context, c *loadtest.Cluster, m *loadtest.Manager, name string, srv *loadtest.LatencyServer, extra string, n int, timeout time.Duration) *latencyRun {
	b.Helper()
	lr, err := prepareLatency(ctx, c, name, srv, extra)
	if err != nil {
		b.Fatal(err)
	}
	if err := lr.run(ctx, c, m, n, timeout); err != nil {
		b.Fatalf("%v\nmanager log tail:\n%s", err, m.LogTail(3000))
	}
	checkModelCalls(b, lr.res, loadtest.LatencyModelCalls)
	return lr
}

func newLatencyServer(b *testing.B, delay time.Duration, rate int) *loadtest.LatencyServer {
	b.Helper()
	srv, err := loadtest.NewLatencyServer(delay, rate)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Close() })
	return srv
}

func bareLatency(b *testing.B, ctx context.Context, srv *loadtest.LatencyServer, n int) (loadtest.BareLatencyResult, loadtest.LatencyStats) {
	b.Helper()
	return bareLatencyCalls(b, ctx, srv, n, loadtest.LatencyModelCalls)
}

// bareLatencyCalls is bareLatency with calls calls per client.
func bareLatencyCalls(b *testing.B, ctx context.Context, srv *loadtest.LatencyServer, n, calls int) (loadtest.BareLatencyResult, loadtest.LatencyStats) {
	b.Helper()
	srv.Take()
	res, err := loadtest.BareLatency(ctx, srv.URL(), n, calls)
	st := srv.Take()
	if err != nil {
		b.Fatal(err)
	}
	if st.Finals != int64(n) {
		b.Fatalf("bare client: the server answered %d final calls, want %d", st.Finals, n)
	}
	return res, st
}

// durQuantile is the q-quantile of ds (0 when empty); ds is sorted.
func durQuantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(int(q*float64(len(ds))), len(ds)-1)]
}

// runDurations is each run's time from its create returning to its first
// sight at the batch's phase: what a run waited, whatever the harness did
// around it.
func runDurations(res *loadtest.BatchResult) []time.Duration {
	var ds []time.Duration
	for name, at := range res.ReachedAt {
		if created, ok := res.CreatedAt[name]; ok {
			ds = append(ds, at.Sub(created))
		}
	}
	return ds
}

// slowest describes the k runs seen complete last: when each was created,
// each call's span at the server, and when it was seen complete, in
// seconds from the batch's first create (LOADTEST_SLOWEST=k: where the
// wall went).
func slowest(res *loadtest.BatchResult, st loadtest.LatencyStats, k int) []string {
	t0 := res.FirstCreate
	names := slices.Collect(maps.Keys(res.ReachedAt))
	slices.SortFunc(names, func(a, b string) int { return res.ReachedAt[b].Compare(res.ReachedAt[a]) })
	var out []string
	for _, name := range names[:min(k, len(names))] {
		var line strings.Builder
		fmt.Fprintf(&line, "%s created %.3f", name, res.CreatedAt[name].Sub(t0).Seconds())
		for _, c := range st.Runs[name] {
			fmt.Fprintf(&line, ", call %.3f-%.3f", c.Start.Sub(t0).Seconds(), c.End.Sub(t0).Seconds())
		}
		fmt.Fprintf(&line, ", seen %.3f", res.ReachedAt[name].Sub(t0).Seconds())
		out = append(out, line.String())
	}
	return out
}

// cpuFloor is the shortest wall this machine allows the batch: the CPU
// the API server, etcd, the manager and the harness (with its model
// server) used from the first create to the last Complete, if every core
// had been busy throughout.
func cpuFloor(res *loadtest.BatchResult) float64 {
	return secs(res.CPUToLast.Total()) / float64(runtime.NumCPU())
}

func apiServerMsPerRun(res *loadtest.BatchResult) float64 {
	return float64(res.CPU["kube-apiserver"].Microseconds()) / 1000 / float64(res.N)
}

// serverRow describes what the server saw over one pass.
func serverRow(st loadtest.LatencyStats) string {
	return fmt.Sprintf("%d requests, %d accepted (%d final), %d answered 429, %d malformed; busiest second %d call starts, at most %d in flight; call starts spanned %.2fs",
		st.Requests, st.Accepted, st.Finals, st.RateLimited, st.Bad, st.BusiestSecond(), st.MaxInFlight, secs(st.Span()))
}

// latencyOptions shape a latency scenario.
type latencyOptions struct {
	// n is the default run count (LOADTEST_N replaces it); timeout bounds
	// the operator's batch; skipSecond leaves out the second bare pass.
	n          int
	timeout    time.Duration
	skipSecond bool
	// store is the runs' store (storeConfigMaps, storePostgres,
	// storeSQLite; "": ConfigMaps, as the manager's default).
	store string
	// kubectlStreams, if above 0, creates the runs with the real kubectl in
	// that many parallel streams instead of the harness's client.
	kubectlStreams int
	// targets adds issue 47's targets for Latency1000Kubectl to the table.
	targets bool
}

// latencyScenario: bare client, operator, bare client again (unless
// skipSecond), N runs of 3 calls each, on one server answering after D.
func latencyScenario(b *testing.B, o latencyOptions) {
	scenario(b, func(b *testing.B, ctx context.Context, r *report) {
		n := envInt(b, "LOADTEST_N", o.n)
		d := envDuration(b, "LOADTEST_LATENCY", 2*time.Second)
		extra := envTOML("LOADTEST_PROVIDER_EXTRA", "")
		skipSecond := o.skipSecond && os.Getenv("LOADTEST_BARE_TWICE") != "1"
		c := startCluster(b)
		st := setupStore(b, ctx, o.store)
		m := startManager(b, ctx, c, st.flags...)
		r.row("store", "%s", st.describe)
		load0 := loadAverage()
		warmOperator(b, ctx, c, m, r, "operator")
		srv := newLatencyServer(b, d, 0)
		r.row("server", "%s, every call held %v, no rate limit; %d runs of %d calls; provider table extra: %q", srv.URL(), d, n, loadtest.LatencyModelCalls, extra)

		bare1, bst1 := bareLatency(b, ctx, srv, n)
		lr, err := prepareLatency(ctx, c, "latency", srv, extra)
		if err != nil {
			b.Fatal(err)
		}
		lr.dbPID = st.dbPID
		if o.kubectlStreams > 0 {
			if lr.create, err = c.KubectlCreate(ctx, o.kubectlStreams); err != nil {
				b.Fatal(err)
			}
		}
		if err := lr.run(ctx, c, m, n, o.timeout); err != nil {
			b.Fatalf("%v\nmanager log tail:\n%s", err, m.LogTail(3000))
		}
		checkModelCalls(b, lr.res, loadtest.LatencyModelCalls)
		op := lr
		load1 := loadAverage()
		bares := []loadtest.BareLatencyResult{bare1}
		bsts := []loadtest.LatencyStats{bst1}
		if !skipSecond {
			bare2, bst2 := bareLatency(b, ctx, srv, n)
			bares, bsts = append(bares, bare2), append(bsts, bst2)
		}

		var bareWall float64
		for i, bare := range bares {
			bareWall += secs(bare.Wall) / float64(len(bares))
			r.row(fmt.Sprintf("bare client, pass %d", i+1), "%d clients x %d calls: wall %.2fs, first client done %.2fs, %d calls, %d errors retried", n, bare.CallsPerRun, secs(bare.Wall), secs(bare.FirstDone), bare.Calls, bare.Errors)
			r.row(fmt.Sprintf("bare client, pass %d: server", i+1), "%s", serverRow(bsts[i]))
		}
		if skipSecond {
			r.row("bare client, pass 2", "skipped (set LOADTEST_BARE_TWICE=1 to run it): the mean is pass 1 alone")
		}
		r.row("load average", "%s at the start, %s after the operator's batch, %s at the end (1, 5, 15 minutes)", load0, load1, loadAverage())
		res := op.res
		opWall := secs(res.All())
		ratio := bareWall / opWall
		incomplete := res.N - len(res.Reached)
		creator := fmt.Sprintf("%d goroutines of the harness's client", res.Concurrency)
		if o.kubectlStreams > 0 {
			creator = fmt.Sprintf("the real kubectl, %d `kubectl create -f -` streams", o.kubectlStreams)
		}
		r.row("operator", "%d runs created by %s (creates done at %.2fs); first Complete %.2fs, half %.2fs, all (wall) %.2fs", n, creator, secs(res.CreatesDone), secs(res.First()), secs(res.Half()), opWall)
		r.row("operator: server", "%s", serverRow(op.server))
		lead, gaps, tail := op.server.Chain(res.CreatedAt, res.ReachedAt)
		r.row("operator: chain", "first call after the create returned p50 %.0fms p99 %.0fms (%d runs); next call after an answer p50 %.0fms p99 %.0fms (%d gaps); seen Complete after the last answer p50 %.0fms p99 %.0fms",
			ms(durQuantile(lead, 0.5).Seconds()), ms(durQuantile(lead, 0.99).Seconds()), len(lead), ms(durQuantile(gaps, 0.5).Seconds()), ms(durQuantile(gaps, 0.99).Seconds()), len(gaps),
			ms(durQuantile(tail, 0.5).Seconds()), ms(durQuantile(tail, 0.99).Seconds()))
		if k, _ := strconv.Atoi(os.Getenv("LOADTEST_SLOWEST")); k > 0 {
			for _, line := range slowest(res, op.server, k) {
				r.row("operator: slowest", "%s", line)
			}
		}
		r.row("operator: waits seen", "%s", op.waits)
		r.row("operator: runs not Complete", "%d", incomplete)
		r.row("operator: etcd writes", "%d = %.2f/run", res.Writes, res.WritesPerRun())
		r.row("operator: CPU", "%s", res.CPU.PerRun(res.N))
		floor := cpuFloor(res)
		r.row("operator: CPU floor", "%.2fs: the four processes' %.1fs of CPU from the first create to the last Complete, spread over %d cores (%.0f%% of the operator's wall; a wall near it is bound by this machine's cores)", floor, secs(res.CPUToLast.Total()), runtime.NumCPU(), 100*floor/opWall)
		r.row("operator: API requests", "%s per run", res.Requests.PerRun(res.N))
		r.row("operator: manager memory", "VmRSS %.0f MiB, VmHWM %.0f MiB", loadtest.MiB(res.Memory.RSS), loadtest.MiB(res.Memory.HWM))
		h := res.Reconcile
		q := res.QueueWait
		w := res.WakeWait
		r.row("operator: reconciles", "%.0f (%.1f/run), p50 %.1fms p99 %.1fms; waited in the queue p50 %.1fms p99 %.1fms; %.0f woken by the manager waited p50 %.1fms p99 %.1fms", h.Count, h.Count/float64(res.N), ms(h.Quantile(0.5)), ms(h.Quantile(0.99)), ms(q.Quantile(0.5)), ms(q.Quantile(0.99)), w.Count, ms(w.Quantile(0.5)), ms(w.Quantile(0.99)))
		r.row("ratio", "%.3f (mean bare wall %.2fs / operator wall %.2fs: the operator's throughput as a fraction of the bare client's)", ratio, bareWall, opWall)
		if st.dbPID != 0 {
			r.row("operator: database CPU", "%.2f ms/run (the postmaster's process tree)", float64(res.CPU[loadtest.DatabaseCPU].Microseconds())/1000/float64(res.N))
		}
		if o.kubectlStreams > 0 {
			machineCeilings(b, ctx, c, m, r, lr, n, d, bareWall)
		}
		if o.targets {
			r.row("targets", "ratio %.3f (>= 0.6: %s), first Complete %.2fs (<= 9s: %s), manager VmHWM %.0f MiB (<= 256: %s)",
				ratio, verdict(ratio >= 0.6), secs(res.First()), verdict(res.First() <= 9*time.Second), loadtest.MiB(res.Memory.HWM), verdict(loadtest.MiB(res.Memory.HWM) <= 256))
		}

		var bareBusiest float64
		for _, st := range bsts {
			bareBusiest += float64(st.BusiestSecond()) / float64(len(bsts))
		}
		r.metric(bareWall, "bare_wall_s")
		r.metric(opWall, "wall_s")
		r.metric(ratio, "ratio")
		r.metric(secs(res.First()), "first_s")
		r.metric(float64(op.server.BusiestSecond()), "busiest_calls/s")
		r.metric(bareBusiest, "bare_busiest_calls/s")
		r.metric(float64(op.server.MaxInFlight), "max_in_flight")
		r.metric(res.WritesPerRun(), "writes/run")
		r.metric(apiServerMsPerRun(res), "apiserver_ms/run")
		r.metric(floor, "cpu_floor_s")
		r.metric(loadtest.MiB(res.Memory.HWM), "hwm_MiB")
		r.metric(float64(incomplete), "incomplete")
		if o.kubectlStreams > 0 || o.store != "" {
			r.metric(secs(res.CreatesDone), "creates_s")
			r.metric(loadtest.MiB(res.Memory.RSS), "rss_MiB")
			if st.dbPID != 0 {
				r.metric(float64(res.CPU[loadtest.DatabaseCPU].Microseconds())/1000/float64(res.N), "database_ms/run")
			}
		}
	})
}

// BenchmarkLatency300: 300 runs of LatencyBlueprint (3 calls, each held D =
// 2s by the server) against a bare client making the same 900 calls from
// 300 goroutines, before and after.
func BenchmarkLatency300(b *testing.B) {
	latencyScenario(b, latencyOptions{n: 300, timeout: 20 * time.Minute})
}

// BenchmarkLatency1000: the same with 1,000 runs.
func BenchmarkLatency1000(b *testing.B) {
	latencyScenario(b, latencyOptions{n: 1000, timeout: 30 * time.Minute})
}

// BenchmarkLatency5000: the same with 5,000 runs, one bare pass (before).
func BenchmarkLatency5000(b *testing.B) {
	latencyScenario(b, latencyOptions{n: 5000, timeout: 90 * time.Minute, skipSecond: true})
}

// latencyPair runs two batches of n at once on one manager, each in its
// own namespace against its own server, failing the benchmark if either
// fails.
func latencyPair(b *testing.B, ctx context.Context, c *loadtest.Cluster, m *loadtest.Manager, name1 string, srv1 *loadtest.LatencyServer, name2 string, srv2 *loadtest.LatencyServer, n int, timeout time.Duration) (*latencyRun, *latencyRun) {
	b.Helper()
	var pair []*latencyRun
	for _, p := range []struct {
		name string
		srv  *loadtest.LatencyServer
	}{{name1, srv1}, {name2, srv2}} {
		lr, err := prepareLatency(ctx, c, p.name, p.srv, "")
		if err != nil {
			b.Fatal(err)
		}
		pair = append(pair, lr)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, lr := range pair {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = lr.run(ctx, c, m, n, timeout)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatalf("%v\nmanager log tail:\n%s", err, m.LogTail(3000))
		}
	}
	for _, lr := range pair {
		checkModelCalls(b, lr.res, loadtest.LatencyModelCalls)
	}
	return pair[0], pair[1]
}

// rateLimit is the server's limit in BenchmarkRateLimited300 (calls/s, and
// the bucket's capacity).
const rateLimit = 50

// BenchmarkRateLimited300: a server limited to 50 calls/s (429 with
// Retry-After: 1 beyond it), answering after D (default 0).
//   - alone: 300 runs against an unlimited server (same D).
//   - (a) 300 runs against the limited server, no limit in providers.toml,
//     and at the same time (c) the alone batch again beside it, against an
//     unlimited server of its own.
//   - (b) 300 runs against a fresh limited server with requests_per_minute =
//     3000 in the provider's table (LOADTEST_SKIP_RPM=1 skips it).
func BenchmarkRateLimited300(b *testing.B) {
	scenario(b, func(b *testing.B, ctx context.Context, r *report) {
		n := envInt(b, "LOADTEST_N", 300)
		d := envDuration(b, "LOADTEST_RATE_LATENCY", 0)
		rpmExtra := envTOML("LOADTEST_RPM_EXTRA", "requests_per_minute = 3000")
		const timeout = 20 * time.Minute
		calls := n * loadtest.LatencyModelCalls
		bound := 1.3 * float64(calls) / rateLimit
		c := startCluster(b)
		m := startManager(b, ctx, c)
		warmOperator(b, ctx, c, m, r, "operator")
		r.row("servers", "calls held %v; the limited ones allow %d calls/s (bucket of %d), 429 + Retry-After: 1 beyond", d, rateLimit, rateLimit)

		alone := latencyBatch(b, ctx, c, m, "alone", newLatencyServer(b, d, 0), "", n, timeout)

		// (a) and (c) at once, each against its own server.
		la, lc := latencyPair(b, ctx, c, m, "limited", newLatencyServer(b, d, rateLimit), "beside", newLatencyServer(b, d, 0), n, timeout)
		// The control: (c) again beside a batch as big as (a) on an
		// unlimited server, so what the limit costs (c) is told from what
		// as many other runs on the same cores cost it.
		var lcc *latencyRun
		if os.Getenv("LOADTEST_SKIP_CONTROL") != "1" {
			_, lcc = latencyPair(b, ctx, c, m, "control", newLatencyServer(b, d, 0), "beside-control", newLatencyServer(b, d, 0), n, timeout)
		}

		var lb *latencyRun
		skipRPM := os.Getenv("LOADTEST_SKIP_RPM") == "1"
		if !skipRPM {
			lb = latencyBatch(b, ctx, c, m, "rpm", newLatencyServer(b, d, rateLimit), rpmExtra, n, timeout)
		}

		aWall, aloneWall, besideWall := secs(la.res.All()), secs(alone.res.All()), secs(lc.res.All())
		within := "within"
		if aWall > bound {
			within = "OVER"
		}
		ratio := besideWall / aloneWall
		r.row("alone", "%d runs, unlimited server: wall %.2fs (first Complete %.2fs); server: %s", n, aloneWall, secs(alone.res.First()), serverRow(alone.server))
		r.row("(a) no client limit", "%d runs, limited server: wall %.2fs, %s the bound 1.3 x %d/%d = %.1fs; first Complete %.2fs", n, aWall, within, calls, rateLimit, bound, secs(la.res.First()))
		r.row("(a) server", "%s", serverRow(la.server))
		r.row("(a) runs ever ProviderFailed", "%d (waits seen: %s)", la.waits.Ever(arv1.BlockerProviderFailed), la.waits)
		r.row("(a) CPU", "%s (over (a)'s window, (c)'s work included)", la.res.CPU.PerRun(n))
		r.row("(c) beside (a)", "%d runs, unlimited server: wall %.2fs (first Complete %.2fs); runs ever ProviderFailed %d (waits seen: %s)", n, besideWall, secs(lc.res.First()), lc.waits.Ever(arv1.BlockerProviderFailed), lc.waits)
		r.row("(c) server", "%s", serverRow(lc.server))
		r.row("(c) ratio", "%.3f (beside wall %.2fs / alone wall %.2fs)", ratio, besideWall, aloneWall)
		// The wall also counts the harness creating (a)'s runs beside (c)'s
		// on the same API server: each run's own time, create to Complete,
		// says whether the limited provider slowed the other one's runs.
		ad, cd := runDurations(alone.res), runDurations(lc.res)
		perRun := secs(durQuantile(cd, 0.5)) / secs(durQuantile(ad, 0.5))
		r.row("(c) per run", "create to Complete p50 %.2fs p99 %.2fs beside, %.2fs %.2fs alone: p50 ratio %.3f, p99 ratio %.3f",
			secs(durQuantile(cd, 0.5)), secs(durQuantile(cd, 0.99)), secs(durQuantile(ad, 0.5)), secs(durQuantile(ad, 0.99)),
			perRun, secs(durQuantile(cd, 0.99))/secs(durQuantile(ad, 0.99)))
		r.metric(perRun, "c_per_run_ratio")
		if lcc != nil {
			ccd := runDurations(lcc.res)
			control := secs(durQuantile(cd, 0.5)) / secs(durQuantile(ccd, 0.5))
			r.row("(c) beside the control", "create to Complete p50 %.2fs p99 %.2fs beside %d runs on an unlimited server: p50 ratio to alone %.3f; (c) beside (a) against it %.3f (1: the limit itself slows (c) no more than any %d runs do)",
				secs(durQuantile(ccd, 0.5)), secs(durQuantile(ccd, 0.99)), n, secs(durQuantile(ccd, 0.5))/secs(durQuantile(ad, 0.5)), control, n)
			r.metric(control, "c_vs_control_ratio")
		} else {
			r.row("(c) beside the control", "skipped (LOADTEST_SKIP_CONTROL=1)")
		}
		if lb != nil {
			bWall := secs(lb.res.All())
			bWithin := "within"
			if bWall > bound {
				bWithin = "OVER"
			}
			r.row("(b) "+rpmExtra, "%d runs, limited server: wall %.2fs, %s the bound %.1fs; %d answered 429 (target 0); runs ever ProviderFailed %d (waits seen: %s)", n, bWall, bWithin, bound, lb.server.RateLimited, lb.waits.Ever(arv1.BlockerProviderFailed), lb.waits)
			r.row("(b) server", "%s", serverRow(lb.server))
			// (b) runs alone, so its writes and CPU are its own: what waiting
			// on a limit costs a run.
			bd := runDurations(lb.res)
			r.row("(b) cost", "first Complete %.2fs, runs' create to Complete p50 %.2fs p99 %.2fs; etcd writes %.2f/run; CPU %s; API requests %s per run",
				secs(lb.res.First()), secs(durQuantile(bd, 0.5)), secs(durQuantile(bd, 0.99)), lb.res.WritesPerRun(), lb.res.CPU.PerRun(n), lb.res.Requests.PerRun(n))
			r.metric(secs(durQuantile(bd, 0.5)), "b_run_p50_s")
			r.metric(lb.res.WritesPerRun(), "b_writes/run")
			r.metric(secs(lb.res.First()), "b_first_s")
			r.metric(bWall, "b_wall_s")
			r.metric(float64(lb.server.RateLimited), "b_429")
			r.metric(float64(lb.waits.Ever(arv1.BlockerProviderFailed)), "b_provider_failed_runs")
		} else {
			r.row("(b) client-side limit", "skipped (LOADTEST_SKIP_RPM=1)")
		}

		r.metric(aWall, "a_wall_s")
		r.metric(bound, "a_bound_s")
		r.metric(float64(la.server.RateLimited), "a_429")
		r.metric(float64(la.waits.Ever(arv1.BlockerProviderFailed)), "a_provider_failed_runs")
		r.metric(aloneWall, "c_alone_wall_s")
		r.metric(besideWall, "c_beside_wall_s")
		r.metric(ratio, "c_ratio")
		r.metric(float64(lc.waits.Ever(arv1.BlockerProviderFailed)), "c_provider_failed_runs")
	})
}

// BenchmarkSecretFix1000: 1,000 runs of a one-stage scripted blueprint
// spread over 10 providers, each needing its own Secret s0..s9, none of
// which exists: all park on NeedsSetup SecretMissing. Then s1 is created;
// reported: how long each of its 100 runs took to move (p50, p99, max;
// target p99 <= 1s), and how many of the other 900 changed (their
// resourceVersion) within 5s of the fix (target 0).
func BenchmarkSecretFix1000(b *testing.B) {
	scenario(b, func(b *testing.B, ctx context.Context, r *report) {
		const secrets = 10
		n := envInt(b, "LOADTEST_N", 1000)
		n -= n % secrets
		if n == 0 {
			b.Fatalf("LOADTEST_N must be at least %d", secrets)
		}
		per := n / secrets
		c := startCluster(b)
		m := startManager(b, ctx, c)
		warmOperator(b, ctx, c, m, r, "operator")
		fail := func(format string, args ...any) {
			b.Helper()
			b.Fatalf("%s\nmanager log tail:\n%s", fmt.Sprintf(format, args...), m.LogTail(3000))
		}

		ns, err := c.NewNamespace(ctx, "secretfix")
		if err != nil {
			b.Fatal(err)
		}
		if err := c.CreateConfigMap(ctx, ns, "bench", map[string]string{"agent.toml": loadtest.SecretFixBlueprint}); err != nil {
			b.Fatal(err)
		}
		if err := c.CreateConfigMap(ctx, ns, loadtest.ProvidersConfigMap, map[string]string{"providers.toml": loadtest.SecretFixProvidersTOML(secrets)}); err != nil {
			b.Fatal(err)
		}
		wctx, stopAll := context.WithCancel(ctx)
		defer stopAll()
		events, stop, err := c.WatchRuns(wctx, ns)
		if err != nil {
			b.Fatal(err)
		}
		defer stop()
		secretOf := map[string]int{}
		for i := range n {
			secretOf[loadtest.RunName("r", i)] = i % secrets
		}
		last := map[string]*arv1.AgentRun{}
		observe := func(ev watch.Event) *arv1.AgentRun {
			if ev.Type == watch.Error {
				fail("the AgentRun watch failed: %v", ev.Object)
			}
			run, ok := ev.Object.(*arv1.AgentRun)
			if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
				return nil
			}
			if _, ours := secretOf[run.Name]; !ours {
				return nil
			}
			last[run.Name] = run
			if run.Status.Phase.IsTerminal() && run.Status.Phase != arv1.PhaseComplete {
				fail("run %s ended %s: %s", run.Name, run.Status.Phase, run.Status.Error)
			}
			return run
		}
		parked := func(run *arv1.AgentRun) bool {
			w := run.Status.WaitingOn
			return run.Status.Phase == arv1.PhaseWaitingInput && w != nil && w.Reason == arv1.WaitNeedsSetup && w.Blocker == arv1.BlockerSecretMissing
		}
		moved := func(run *arv1.AgentRun) bool {
			return run.Status.Phase != arv1.PhaseWaitingInput || run.Status.WaitingOn == nil
		}

		// Park them all.
		start := time.Now()
		created := make(chan error, 1)
		go func() {
			created <- c.CreateRunsWith(wctx, ns, "bench", "r", n, concurrency, func(i int, run *arv1.AgentRun) {
				run.Spec.Model = fmt.Sprintf("p%d/m1", i%secrets)
			})
		}()
		parkDeadline := time.After(15 * time.Minute)
		for creating := true; ; {
			count := 0
			for _, run := range last {
				if parked(run) {
					count++
				}
			}
			if !creating && count == n {
				break
			}
			select {
			case err := <-created:
				creating = false
				if err != nil {
					b.Fatal(err)
				}
			case ev, ok := <-events:
				if !ok {
					b.Fatal("the AgentRun watch ended early")
				}
				observe(ev)
			case <-parkDeadline:
				fail("%d of %d runs parked on SecretMissing after 15m; waits: %s", count, n, summarize(last))
			}
		}
		parkedIn := time.Since(start)
		// Let trailing writes land, still draining the watch.
		settle := time.After(3 * time.Second)
	settling:
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					b.Fatal("the AgentRun watch ended early")
				}
				observe(ev)
			case <-settle:
				break settling
			}
		}
		before, err := resourceVersions(ctx, c, ns)
		if err != nil {
			b.Fatal(err)
		}

		fixed := time.Now()
		if err := c.CreateSecret(ctx, ns, "s1", map[string]string{"api-key": "k1"}); err != nil {
			b.Fatal(err)
		}
		var after map[string]string // every run's resourceVersion 5s after the fix
		movedAt := map[string]time.Duration{}
		othersSeen := map[string]bool{}
		window := time.After(5 * time.Second)
		deadline := time.After(2 * time.Minute)
		for windowOpen := true; windowOpen || len(movedAt) < per; {
			select {
			case ev, ok := <-events:
				if !ok {
					b.Fatal("the AgentRun watch ended early")
				}
				at := time.Since(fixed)
				run := observe(ev)
				if run == nil {
					continue
				}
				if secretOf[run.Name] != 1 {
					if windowOpen && newer(run.ResourceVersion, before[run.Name]) {
						othersSeen[run.Name] = true
					}
					continue
				}
				if _, done := movedAt[run.Name]; !done && moved(run) {
					movedAt[run.Name] = at
				}
			case <-window:
				windowOpen = false
				if after, err = resourceVersions(ctx, c, ns); err != nil {
					b.Fatal(err)
				}
			case <-deadline:
				fail("%d of %d runs of s1 moved within 2m of the fix", len(movedAt), per)
			}
		}
		othersChanged := 0
		for name, rv := range before {
			if secretOf[name] != 1 && after[name] != rv {
				othersChanged++
			}
		}
		// The s1 runs go on to Complete (a failure there fails the
		// benchmark); the others stay parked.
		completeBy := time.After(5 * time.Minute)
		for {
			done := 0
			for name, run := range last {
				if secretOf[name] == 1 && run.Status.Phase == arv1.PhaseComplete {
					done++
				}
			}
			if done == per {
				break
			}
			select {
			case ev, ok := <-events:
				if !ok {
					b.Fatal("the AgentRun watch ended early")
				}
				observe(ev)
			case <-completeBy:
				fail("%d of %d runs of s1 Complete 5m after the fix; waits: %s", done, per, summarize(last))
			}
		}

		ds := make([]time.Duration, 0, len(movedAt))
		for _, d := range movedAt {
			ds = append(ds, d)
		}
		slices.Sort(ds)
		q := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))+0.999999)-1)] }
		p50, p99, worst := q(0.5), q(0.99), ds[len(ds)-1]
		verdict := "met"
		if p99 > time.Second {
			verdict = "MISSED"
		}
		r.row("parked", "%d runs over %d Secrets (%d each), all on NeedsSetup SecretMissing %.1fs after the first create", n, secrets, per, secs(parkedIn))
		r.row("s1 runs moved", "%d: p50 %v, p99 %v, max %v after the Secret's create (target p99 <= 1s: %s)", len(movedAt), p50.Round(time.Millisecond), p99.Round(time.Millisecond), worst.Round(time.Millisecond), verdict)
		r.row("other runs changed", "%d of %d within 5s of the fix by resourceVersion (%d updates seen in the watch; target 0)", othersChanged, n-per, len(othersSeen))
		r.metric(ms(p50.Seconds()), "p50_ms")
		r.metric(ms(p99.Seconds()), "p99_ms")
		r.metric(ms(worst.Seconds()), "max_ms")
		r.metric(float64(othersChanged), "others_changed")
	})
}

// newer reports whether resourceVersion rv is later than old (etcd's
// resourceVersions are revisions; anything unparsable counts as a change).
func newer(rv, old string) bool {
	a, errA := strconv.ParseInt(rv, 10, 64)
	o, errO := strconv.ParseInt(old, 10, 64)
	if errA != nil || errO != nil {
		return rv != old
	}
	return a > o
}

func resourceVersions(ctx context.Context, c *loadtest.Cluster, ns string) (map[string]string, error) {
	out := map[string]string{}
	cont := ""
	for {
		var list arv1.AgentRunList
		if err := c.Client.List(ctx, &list, client.InNamespace(ns), client.Limit(500), client.Continue(cont)); err != nil {
			return nil, err
		}
		for _, run := range list.Items {
			out[run.Name] = run.ResourceVersion
		}
		if cont = list.Continue; cont == "" {
			return out, nil
		}
	}
}

// summarize counts runs by phase and wait.
func summarize(runs map[string]*arv1.AgentRun) string {
	counts := map[string]int{}
	for _, run := range runs {
		k := string(run.Status.Phase)
		if w := run.Status.WaitingOn; w != nil {
			k += "/" + string(w.Reason)
			if w.Blocker != "" {
				k += "/" + string(w.Blocker)
			}
		}
		counts[k]++
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, counts[k]))
	}
	return strings.Join(parts, " ")
}

// machineCeilings measures, with m stopped so that nothing else writes, what
// this machine allows any operator: the API floor of the runs of lr (their
// create, two status writes and an Event, as apiFloor writes them; three
// calls of d leave no interval write), and the same kubectl streams
// creating n more runs. The run created last cannot be Complete before
// those creates plus its calls, which caps the ratio whatever the
// operator does; the rows say by how much. It comes after everything
// measured with the manager.
func machineCeilings(b *testing.B, ctx context.Context, c *loadtest.Cluster, m *loadtest.Manager, r *report, lr *latencyRun, n int, d time.Duration, bareWall float64) {
	b.Helper()
	if err := m.Stop(30 * time.Second); err != nil {
		b.Fatal(err)
	}
	const idleSpan = 5 * time.Second
	cpu0 := loadtest.CPUNow()
	time.Sleep(idleSpan)
	idle := loadtest.CPUNow().Sub(cpu0)
	idleMsPerSec := float64(idle.ControlPlane().Microseconds()) / 1000 / idleSpan.Seconds()
	floor, err := measureAPIFloor(ctx, c, lr.ns, false, idleMsPerSec, 0)
	if err != nil {
		b.Fatal(err)
	}
	res := lr.res
	op := float64(res.CPU.ControlPlane().Microseconds()) / 1000 / float64(res.N)
	floorMs := ms(floor.cpuPerRun.Seconds())
	r.row("API floor", "a bare client writing what %d of the runs show (their create, 2 status writes with their own status, an Event; manager stopped): %.1f ms of kube-apiserver + etcd CPU a run less idle (%.1f ms/s), %.2f writes/run; the operator's runs %.1f ms a run, idle included; %d runs at the floor alone hold this machine's %d cores %.2fs",
		floor.runs, floorMs, idleMsPerSec, floor.writesPerRun, op, n, runtime.NumCPU(), floorMs*float64(n)/1000/float64(runtime.NumCPU()))
	r.metric(floorMs, "apifloor_ms/run")

	ns, err := c.NewNamespace(ctx, "kubectl-alone")
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	at, err := lr.create(ctx, loadtest.Batch{Namespace: ns, Agent: "none", Prefix: "alone", N: n})
	if err != nil {
		b.Fatal(err)
	}
	var last time.Duration
	for _, t := range at {
		last = max(last, t.Sub(start))
	}
	least := secs(last) + float64(loadtest.LatencyModelCalls)*d.Seconds()
	r.row("kubectl alone", "the same streams create %d more runs in %.2fs with the manager stopped; the last of them could not be Complete before %.2fs (its %d calls of %v after it), so no operator's ratio could pass %.3f here",
		n, secs(last), least, loadtest.LatencyModelCalls, d, bareWall/least)
	r.metric(secs(last), "kubectl_alone_s")
	r.metric(bareWall/least, "ratio_ceiling")
}
