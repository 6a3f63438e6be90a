package loadtest_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/test/loadtest"
)

// The benchmarks each run their scenario once, whatever b.N: a scenario is
// minutes of work on a fresh control plane, and its numbers are what the
// scenario measured, reported with b.ReportMetric. See docs/benchmarks.md.

const (
	// concurrency is how many goroutines create runs (and, for the bare
	// client, do its runs) at once.
	concurrency = 32
	// idleWindow measures the API server's background writes over two of
	// its 10s lease periods.
	idleWindow = 20 * time.Second
)

// managerFlags are extra manager flags from LOADTEST_MANAGER_FLAGS
// (space-separated), passed to every manager the benchmarks start, so a new
// flag can be tried without editing them.
func managerFlags() []string { return strings.Fields(os.Getenv("LOADTEST_MANAGER_FLAGS")) }

// report is one scenario's outcome: its metrics and a table for people.
type report struct {
	metrics []metric
	rows    [][2]string
}

type metric struct {
	v    float64
	unit string
}

func (r *report) metric(v float64, unit string) { r.metrics = append(r.metrics, metric{v, unit}) }

func (r *report) row(name, format string, args ...any) {
	r.rows = append(r.rows, [2]string{name, fmt.Sprintf(format, args...)})
}

func (r *report) table() string {
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 4, 2, ' ', 0)
	for _, row := range r.rows {
		fmt.Fprintf(tw, "  %s\t%s\n", row[0], row[1])
	}
	tw.Flush()
	return sb.String()
}

// ran keeps each benchmark's last report. The testing package calls a
// benchmark with b.N = 1 first (for every -count), then again with a larger
// b.N if the first call was shorter than -benchtime: that second call
// reports the first call's numbers again instead of running minutes of the
// scenario once more.
var ran = map[string]*report{}

func scenario(b *testing.B, run func(b *testing.B, ctx context.Context, r *report)) {
	b.Helper()
	if testing.Short() {
		b.Skip("a load benchmark; skipped with -short")
	}
	r, ok := ran[b.Name()]
	if !ok || b.N == 1 {
		r = &report{}
		run(b, context.Background(), r)
		ran[b.Name()] = r
		// Without -v the testing package keeps only a benchmark's first
		// log lines, so the table goes to stdout then.
		if testing.Verbose() {
			b.Logf("\n%s", r.table())
		} else {
			fmt.Printf("%s:\n%s", b.Name(), r.table())
		}
	}
	for _, m := range r.metrics {
		b.ReportMetric(m.v, m.unit)
	}
}

// startCluster starts a control plane for one benchmark and stops it at its
// end.
func startCluster(b *testing.B) *loadtest.Cluster {
	b.Helper()
	c, err := loadtest.StartCluster()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := c.Stop(); err != nil {
			b.Logf("stopping the control plane: %v", err)
		}
	})
	return c
}

// startManager starts the manager process (with LOADTEST_MANAGER_FLAGS,
// then extra), waits until it is idle, and stops it (SIGTERM, 30s grace)
// at the benchmark's end unless it was stopped before.
func startManager(b *testing.B, ctx context.Context, c *loadtest.Cluster, extra ...string) *loadtest.Manager {
	b.Helper()
	m, err := c.StartManager(ctx, b.TempDir(), append(managerFlags(), extra...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Stop(30 * time.Second) })
	if err := m.WaitIdle(ctx, 2*time.Minute); err != nil {
		b.Fatal(err)
	}
	return m
}

// warmUp is how many runs the untimed warm-up batches have. A control
// plane's first writes of a new resource are much slower than later ones
// (the bare client ran at about half speed in its first 300 runs on a fresh
// API server), so each side, the bare client and every new manager, does
// one untimed batch in its own namespace before anything is measured.
const warmUp = 100

func warmBare(b *testing.B, ctx context.Context, c *loadtest.Cluster, r *report) {
	b.Helper()
	ns, err := c.NewNamespace(ctx, "ceiling-warmup")
	if err != nil {
		b.Fatal(err)
	}
	res, err := c.BareCeiling(ctx, ns, warmUp, concurrency)
	if err != nil {
		b.Fatal(err)
	}
	r.row("bare client warm-up", "%d runs, untimed: %.1f runs/s", warmUp, res.RunsPerSec())
}

func bareBatch(b *testing.B, ctx context.Context, c *loadtest.Cluster, n int) loadtest.CeilingResult {
	b.Helper()
	ns, err := c.NewNamespace(ctx, "ceiling")
	if err != nil {
		b.Fatal(err)
	}
	res, err := c.BareCeiling(ctx, ns, n, concurrency)
	if err != nil {
		b.Fatal(err)
	}
	return res
}

func warmOperator(b *testing.B, ctx context.Context, c *loadtest.Cluster, m *loadtest.Manager, r *report, label string) {
	b.Helper()
	res := batch(b, ctx, c, m, "warmup", loadtest.ThreeStage, warmUp, 10*time.Minute)
	r.row(label+" warm-up", "%d runs, untimed: %.1f runs/s", warmUp, res.RunsPerSec())
}

// batch sets up a namespace with the blueprint and runs a batch in it,
// failing the benchmark (with the manager's log tail) if it fails.
func batch(b *testing.B, ctx context.Context, c *loadtest.Cluster, m *loadtest.Manager, name, manifest string, n int, timeout time.Duration, tweak ...func(*loadtest.Batch)) *loadtest.BatchResult {
	b.Helper()
	ns, err := c.SetupNamespace(ctx, name, "bench", manifest)
	if err != nil {
		b.Fatal(err)
	}
	spec := loadtest.Batch{Namespace: ns, Agent: "bench", Prefix: "r", N: n, Concurrency: concurrency, Timeout: timeout, Manager: m}
	if name != "warmup" {
		profileAPIServer(&spec, name)
	}
	for _, t := range tweak {
		t(&spec)
	}
	res, err := c.RunBatch(ctx, spec)
	if err != nil {
		b.Fatalf("%s batch of %d: %v\nmanager log tail:\n%s", name, n, err, m.LogTail(3000))
	}
	return res
}

// profileAPIServer asks for a CPU profile of the API server over the batch
// when LOADTEST_APISERVER_PROFILE_DIR names a directory (the cluster must
// serve /debug/pprof: AGENTRUN_TESTENV_PROFILING=1), written there as
// NAME.pprof, with an execution trace of the same span in NAME.pprof.trace;
// LOADTEST_APISERVER_PROFILE_FOR sets its length and
// LOADTEST_APISERVER_PROFILE_AFTER its start after the batch's first create.
// A manager serving pprof (--pprof-bind-address in LOADTEST_MANAGER_FLAGS)
// is profiled over the same span too, into NAME-manager.pprof, with its
// goroutines at the span's middle in NAME-manager.pprof.goroutines.txt.
func profileAPIServer(spec *loadtest.Batch, name string) {
	dir := os.Getenv("LOADTEST_APISERVER_PROFILE_DIR")
	if dir == "" {
		return
	}
	spec.ProfileTo = filepath.Join(dir, name+".pprof")
	if spec.Manager != nil && spec.Manager.PprofURL() != "" {
		spec.ManagerProfileTo = filepath.Join(dir, name+"-manager.pprof")
	}
	if s, err := time.ParseDuration(os.Getenv("LOADTEST_APISERVER_PROFILE_FOR")); err == nil {
		spec.ProfileFor = s
	}
	if s, err := time.ParseDuration(os.Getenv("LOADTEST_APISERVER_PROFILE_AFTER")); err == nil {
		spec.ProfileAfter = s
	}
}

// checkModelCalls fails unless every run of the batch made want model calls
// (the blueprint does what the benchmark says it does).
func checkModelCalls(b *testing.B, res *loadtest.BatchResult, want int64) {
	b.Helper()
	for calls, n := range res.ModelCalls {
		if calls != want {
			b.Fatalf("%d runs made %d model calls, want %d each (all: %v)", n, calls, want, res.ModelCalls)
		}
	}
}

func secs(d time.Duration) float64 { return d.Seconds() }
func ms(s float64) float64         { return 1000 * s }

// objectsPerRun is what a finished run leaves: ConfigMaps, Events (counted
// once, through events.k8s.io/v1), Secrets, Leases and other AgentRuns.
func objectsPerRun(res *loadtest.BatchResult) float64 {
	return res.LeftPerRun(loadtest.KindConfigMaps) + res.LeftPerRun(loadtest.KindEvents) +
		res.LeftPerRun(loadtest.KindSecrets) + res.LeftPerRun(loadtest.KindLeases) + res.LeftPerRun(loadtest.KindOtherRuns)
}

// describeBatch adds a batch's rows to the table.
func describeBatch(r *report, label string, res *loadtest.BatchResult, idle float64) {
	r.row(label+": runs", "%d created by %d goroutines (creates done at %.1fs)", res.N, res.Concurrency, secs(res.CreatesDone))
	r.row(label+": throughput", "%.2f runs/s (N / (last %s - first create))", res.RunsPerSec(), res.UntilName)
	r.row(label+": reached "+res.UntilName, "first %.2fs  1%% %.2fs  half %.2fs  all %.2fs", secs(res.First()), secs(res.P1()), secs(res.Half()), secs(res.All()))
	r.row(label+": etcd writes", "%d over %.1fs = %.2f/run (%.2f/run less %.2f writes/s of idle noise)", res.Writes, secs(res.Window), res.WritesPerRun(), res.WritesPerRunLessNoise(idle), idle)
	var left []string
	for _, k := range loadtest.Kinds {
		left = append(left, fmt.Sprintf("%s %.2f", k, res.LeftPerRun(k)))
	}
	r.row(label+": left per run", "%s", strings.Join(left, ", "))
	r.row(label+": first phase seen", "%s (each run's phase in the watch's first sight of it)", phaseCounts(res.FirstPhases))
	h := res.Reconcile
	r.row(label+": reconciles", "%.0f (%.1f/run), p50 %.1fms p99 %.1fms, mean %.1fms", h.Count, h.Count/float64(res.N), ms(h.Quantile(0.5)), ms(h.Quantile(0.99)), ms(h.Sum/math.Max(h.Count, 1)))
	r.row(label+": CPU", "%s", res.CPU.PerRun(res.N))
	r.row(label+": API requests", "%s per run", res.Requests.PerRun(res.N))
	r.row(label+": API server time", "%s", res.ServerTimes.Summary(float64(res.N)/2))
	r.row(label+": manager memory", "VmRSS %.0f MiB, VmHWM %.0f MiB", loadtest.MiB(res.Memory.RSS), loadtest.MiB(res.Memory.HWM))
	r.row(label+": one run's JSON", "%d bytes, %d without managedFields", res.Size.JSON, res.Size.WithoutManagedFields)
}

// phaseCounts renders phase counts in a fixed order, "none" for no phase.
func phaseCounts(counts map[arv1.Phase]int) string {
	var out []string
	for _, p := range slices.Sorted(maps.Keys(counts)) {
		name := string(p)
		if p == "" {
			name = "none"
		}
		out = append(out, fmt.Sprintf("%s %d", name, counts[p]))
	}
	return strings.Join(out, ", ")
}

// BenchmarkRunEconomy300: a bare client's ceiling and the operator, side by
// side on one API server and taking turns (three bare passes, two operator
// passes): 300 runs each, 32 at a time; the operator's runs are three
// stages of one scripted model call each.
func BenchmarkRunEconomy300(b *testing.B) {
	scenario(b, func(b *testing.B, ctx context.Context, r *report) {
		const n = 300
		c := startCluster(b)
		idle, err := c.IdleRate(ctx, idleWindow)
		if err != nil {
			b.Fatal(err)
		}
		r.row("idle API server", "%.2f writes/s over %v (its own lease renewals)", idle, idleWindow)
		if err := c.InstallCeilingCRD(ctx); err != nil {
			b.Fatal(err)
		}
		warmBare(b, ctx, c, r)
		m := startManager(b, ctx, c)
		warmOperator(b, ctx, c, m, r, "operator")
		// The bare client and the operator take turns (bare, operator,
		// bare, operator, bare), so the ratio is not hostage to when the
		// API server happened to be warmer or the machine busier: on these
		// shared cores one 300-run bare pass ran anywhere from 75 to 125
		// runs/s within one invocation. Every pass is reported.
		var bares []loadtest.CeilingResult
		var ops []*loadtest.BatchResult
		for i := range 2 {
			bares = append(bares, bareBatch(b, ctx, c, n))
			op := batch(b, ctx, c, m, fmt.Sprintf("economy-%d", i+1), loadtest.ThreeStage, n, 10*time.Minute)
			checkModelCalls(b, op, loadtest.ThreeStageModelCalls)
			ops = append(ops, op)
		}
		bares = append(bares, bareBatch(b, ctx, c, n))
		var bareRate, opRate float64
		for _, bare := range bares {
			bareRate += bare.RunsPerSec() / float64(len(bares))
		}
		for _, op := range ops {
			opRate += op.RunsPerSec() / float64(len(ops))
		}
		ratio := opRate / bareRate

		var passes []string
		for i, bare := range bares {
			r.row(fmt.Sprintf("bare client, pass %d", i+1), "%d runs (create + %d status patches) in %.2fs: %.1f runs/s, %.2f writes/run; CPU %s", n, loadtest.CeilingStatusPatches, secs(bare.Elapsed), bare.RunsPerSec(), bare.WritesPerRun(), bare.CPU.PerRun(n))
			r.row(fmt.Sprintf("bare client, pass %d", i+1), "API requests %s per run", bare.Requests.PerRun(n))
		}
		for i, op := range ops {
			describeBatch(r, fmt.Sprintf("operator, pass %d", i+1), op, idle)
			for j, bare := range bares {
				passes = append(passes, fmt.Sprintf("op %d/bare %d %.3f", i+1, j+1, op.RunsPerSec()/bare.RunsPerSec()))
			}
		}
		r.row("ratio", "%.3f (mean operator runs/s %.1f / mean bare runs/s %.1f); pass by pass: %s", ratio, opRate, bareRate, strings.Join(passes, ", "))

		op := ops[0]
		bare := loadtest.CeilingResult{N: len(bares) * n}
		for _, p := range bares {
			bare.Writes += p.Writes
		}
		r.metric(bareRate, "bare_runs/s")
		r.metric(bare.WritesPerRun(), "bare_writes/run")
		r.metric(opRate, "runs/s")
		r.metric(ratio, "ratio")
		r.metric(op.WritesPerRun(), "writes/run")
		r.metric(idle, "idle_writes/s")
		r.metric(secs(op.First()), "first_s")
		r.metric(secs(op.P1()), "p1_s")
		r.metric(secs(op.Half()), "half_s")
		r.metric(secs(op.All()), "all_s")
		r.metric(objectsPerRun(op), "objects/run")
		r.metric(op.LeftPerRun(loadtest.KindConfigMaps), "configmaps/run")
		r.metric(op.LeftPerRun(loadtest.KindEvents), "events/run")
		r.metric(loadtest.MiB(op.Memory.RSS), "rss_MiB")
		r.metric(float64(op.Size.JSON), "run_bytes")
		r.metric(float64(op.Size.WithoutManagedFields), "run_bytes_no_mf")
		r.metric(ms(op.Reconcile.Quantile(0.5)), "reconcile_p50_ms")
		r.metric(ms(op.Reconcile.Quantile(0.99)), "reconcile_p99_ms")
	})
}

// BenchmarkBurst10k: the 300-run batch for reference, then 10,000 runs
// created at once (32 creating goroutines, as fast as the API server takes
// them) on the same manager, each batch in its own namespace.
func BenchmarkBurst10k(b *testing.B) {
	scenario(b, func(b *testing.B, ctx context.Context, r *report) {
		c := startCluster(b)
		idle, err := c.IdleRate(ctx, idleWindow)
		if err != nil {
			b.Fatal(err)
		}
		r.row("idle API server", "%.2f writes/s over %v (its own lease renewals)", idle, idleWindow)
		m := startManager(b, ctx, c)
		warmOperator(b, ctx, c, m, r, "operator")
		ref := batch(b, ctx, c, m, "ref", loadtest.ThreeStage, 300, 10*time.Minute)
		checkModelCalls(b, ref, loadtest.ThreeStageModelCalls)
		burst := batch(b, ctx, c, m, "burst", loadtest.ThreeStage, 10000, 90*time.Minute)
		checkModelCalls(b, burst, loadtest.ThreeStageModelCalls)
		ratio := burst.RunsPerSec() / ref.RunsPerSec()

		describeBatch(r, "300", ref, idle)
		describeBatch(r, "10k", burst, idle)
		r.row("ratio", "%.3f (10k runs/s / 300 runs/s)", ratio)

		r.metric(ref.RunsPerSec(), "ref_runs/s")
		r.metric(burst.RunsPerSec(), "runs/s")
		r.metric(ratio, "ratio")
		r.metric(secs(burst.First()), "first_s")
		r.metric(secs(burst.P1()), "p1_s")
		r.metric(secs(burst.Half()), "half_s")
		r.metric(secs(burst.All()), "all_s")
		r.metric(burst.WritesPerRun(), "writes/run")
		r.metric(float64(burst.FirstPhases[arv1.PhaseQueued]), "first_seen_queued")
		r.metric(objectsPerRun(burst), "objects/run")
		r.metric(loadtest.MiB(burst.Memory.RSS), "rss_MiB")
		r.metric(loadtest.MiB(burst.Memory.HWM), "hwm_MiB")
		r.metric(ms(burst.Reconcile.Quantile(0.99)), "reconcile_p99_ms")
	})
}

// BenchmarkMemory10kFinished1kActive: the manager's memory with 10,000
// finished runs and 1,000 runs waiting for a person (phase WaitingInput on
// an interaction point that never times out), after ~20s of settling.
func BenchmarkMemory10kFinished1kActive(b *testing.B) {
	scenario(b, func(b *testing.B, ctx context.Context, r *report) {
		c := startCluster(b)
		m := startManager(b, ctx, c)
		warmOperator(b, ctx, c, m, r, "operator")
		finished := batch(b, ctx, c, m, "finished", loadtest.ThreeStage, 10000, 90*time.Minute)
		checkModelCalls(b, finished, loadtest.ThreeStageModelCalls)
		active := batch(b, ctx, c, m, "active", loadtest.WaitsForAPerson, 1000, 30*time.Minute, func(s *loadtest.Batch) {
			s.Until, s.UntilName = loadtest.IsWaitingForAPerson, "WaitingInput"
		})
		time.Sleep(20 * time.Second)
		mem, err := m.Memory()
		if err != nil {
			b.Fatal(err)
		}
		// Still waiting: nothing moved them on while the manager settled.
		waiting, err := countWaiting(ctx, c, active.Namespace)
		if err != nil {
			b.Fatal(err)
		}
		if waiting != active.N {
			b.Fatalf("%d of %d runs still wait for a person after settling", waiting, active.N)
		}

		r.row("10k finished", "%.2f runs/s, all Complete at %.1fs; manager VmRSS %.0f MiB VmHWM %.0f MiB", finished.RunsPerSec(), secs(finished.All()), loadtest.MiB(finished.Memory.RSS), loadtest.MiB(finished.Memory.HWM))
		r.row("1k active", "all WaitingInput at %.1fs (%.2f runs/s)", secs(active.All()), active.RunsPerSec())
		r.row("after 20s settling", "VmRSS %.0f MiB, VmHWM %.0f MiB (%d runs waiting)", loadtest.MiB(mem.RSS), loadtest.MiB(mem.HWM), waiting)

		r.metric(loadtest.MiB(finished.Memory.RSS), "finished_rss_MiB")
		r.metric(loadtest.MiB(mem.RSS), "rss_MiB")
		r.metric(loadtest.MiB(mem.HWM), "hwm_MiB")
		r.metric(finished.RunsPerSec(), "runs/s")
	})
}

func countWaiting(ctx context.Context, c *loadtest.Cluster, ns string) (int, error) {
	n, cont := 0, ""
	for {
		var list arv1.AgentRunList
		if err := c.Client.List(ctx, &list, client.InNamespace(ns), client.Limit(500), client.Continue(cont)); err != nil {
			return 0, err
		}
		for i := range list.Items {
			if loadtest.IsWaitingForAPerson(&list.Items[i]) {
				n++
			}
		}
		if cont = list.Continue; cont == "" {
			return n, nil
		}
	}
}

// BenchmarkHungToolServer: 200 healthy runs alone on a fresh manager
// (throughput A1), then on a second fresh manager the same 200-run batch
// while 50 runs of a blueprint calling a tool on an MCP server that accepts
// connections and never answers are in flight (throughput B), then, with
// those 50 cancelled, the batch alone again on a third fresh manager (A2).
// The ratio is B over the mean of A1 and A2, so the API server's drift over
// the benchmark (it is warmer later) weighs on both sides alike.
func BenchmarkHungToolServer(b *testing.B) {
	scenario(b, func(b *testing.B, ctx context.Context, r *report) {
		const n, hung = 200, 50
		c := startCluster(b)
		idle, err := c.IdleRate(ctx, idleWindow)
		if err != nil {
			b.Fatal(err)
		}
		r.row("idle API server", "%.2f writes/s over %v (its own lease renewals)", idle, idleWindow)
		srv, err := loadtest.NewHungServer()
		if err != nil {
			b.Fatal(err)
		}
		defer srv.Close()

		alone1 := aloneBatch(b, ctx, c, r, "first manager", "alone1", n)

		m2 := startManager(b, ctx, c)
		warmOperator(b, ctx, c, m2, r, "second manager")
		hns, err := c.SetupNamespace(ctx, "hung", "bench", loadtest.CallsATool(srv.URL()))
		if err != nil {
			b.Fatal(err)
		}
		if err := c.CreateRuns(ctx, hns, "bench", "h", hung, concurrency); err != nil {
			b.Fatal(err)
		}
		// Steady: the hung server has been called and every hung run is
		// parked on it (its first listing timed out), so B measures what
		// runs depending on a dead server cost the others from then on:
		// the server's retries included, its first discovery not.
		if err := waitSteady(ctx, srv, time.Minute); err != nil {
			b.Fatalf("%v\nmanager log tail:\n%s", err, m2.LogTail(3000))
		}
		if err := waitParkedOnDeadServer(ctx, c, hns, hung, 2*time.Minute); err != nil {
			b.Fatalf("%v\nmanager log tail:\n%s", err, m2.LogTail(3000))
		}
		heldBefore := srv.Accepted()
		beside := batch(b, ctx, c, m2, "beside", loadtest.ThreeStage, n, 60*time.Minute)
		checkModelCalls(b, beside, loadtest.ThreeStageModelCalls)
		hungPhases, err := phases(ctx, c, hns)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.CancelRuns(ctx, hns, time.Minute); err != nil {
			b.Fatalf("cancelling the hung runs: %v\nmanager log tail:\n%s", err, m2.LogTail(3000))
		}
		stopStart := time.Now()
		stopErr := m2.Stop(30 * time.Second)
		stopTook := time.Since(stopStart)

		alone2 := aloneBatch(b, ctx, c, r, "third manager", "alone2", n)
		aRate := (alone1.RunsPerSec() + alone2.RunsPerSec()) / 2
		ratio := beside.RunsPerSec() / aRate
		aP99 := max(alone1.Reconcile.Quantile(0.99), alone2.Reconcile.Quantile(0.99))

		for i, a := range []*loadtest.BatchResult{alone1, alone2} {
			r.row(fmt.Sprintf("A%d: alone", i+1), "%.2f runs/s, all Complete at %.1fs, reconcile p99 %.0fms; CPU %s", a.RunsPerSec(), secs(a.All()), ms(a.Reconcile.Quantile(0.99)), a.CPU.PerRun(a.N))
		}
		r.row("hung server", "%d connections accepted before B, %d in all, none answered; the %d hung runs ended B as %v", heldBefore, srv.Accepted(), hung, hungPhases)
		describeBatch(r, "B: beside hung runs", beside, idle)
		r.row("ratio", "%.3f (B runs/s / mean A runs/s %.2f; %.3f and %.3f against each)", ratio, aRate, beside.RunsPerSec()/alone1.RunsPerSec(), beside.RunsPerSec()/alone2.RunsPerSec())
		r.row("second manager's stop", "%v after SIGTERM (%v)", stopTook.Round(time.Millisecond), errOr(stopErr, "exited by itself"))

		r.metric(aRate, "a_runs/s")
		r.metric(beside.RunsPerSec(), "b_runs/s")
		r.metric(ratio, "ratio")
		r.metric(ms(aP99), "a_reconcile_p99_ms")
		r.metric(ms(beside.Reconcile.Quantile(0.99)), "reconcile_p99_ms")
		r.metric(secs(beside.All()), "b_all_s")
		r.metric(float64(srv.Accepted()), "hung_conns")
	})
}

// aloneBatch runs the 200-run batch with nothing else going on, on a fresh
// manager it stops afterwards.
func aloneBatch(b *testing.B, ctx context.Context, c *loadtest.Cluster, r *report, label, name string, n int) *loadtest.BatchResult {
	b.Helper()
	m := startManager(b, ctx, c)
	warmOperator(b, ctx, c, m, r, label)
	res := batch(b, ctx, c, m, name, loadtest.ThreeStage, n, 10*time.Minute)
	checkModelCalls(b, res, loadtest.ThreeStageModelCalls)
	if err := m.Stop(30 * time.Second); err != nil {
		b.Logf("%s: %v", label, err)
	}
	return res
}

func errOr(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}

// waitParkedOnDeadServer waits until n runs of ns wait on NeedsSetup
// ToolServerUnavailable.
func waitParkedOnDeadServer(ctx context.Context, c *loadtest.Cluster, ns string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var list arv1.AgentRunList
		if err := c.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		parked := 0
		for _, run := range list.Items {
			if w := run.Status.WaitingOn; w != nil && w.Blocker == arv1.BlockerToolServerUnavailable {
				parked++
			}
		}
		if parked >= n {
			return nil
		}
		if time.Now().After(deadline) {
			p, _ := phases(ctx, c, ns)
			return fmt.Errorf("%d of %d runs parked on the dead server after %v: %s", parked, n, timeout, p)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// waitSteady waits until the hung server has accepted a connection and no
// new one came for 3s.
func waitSteady(ctx context.Context, srv *loadtest.HungServer, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last, since := int64(-1), time.Now()
	for {
		if a := srv.Accepted(); a != last {
			last, since = a, time.Now()
		}
		if last > 0 && time.Since(since) >= 3*time.Second {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the hung MCP server saw %d connections in %v: the runs never called it", last, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// phases counts the AgentRuns of ns by phase (and waiting reason).
func phases(ctx context.Context, c *loadtest.Cluster, ns string) (string, error) {
	var list arv1.AgentRunList
	if err := c.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return "", err
	}
	counts := map[string]int{}
	for _, run := range list.Items {
		p := string(run.Status.Phase)
		if w := run.Status.WaitingOn; w != nil {
			p += "/" + string(w.Reason)
			if w.Blocker != "" {
				p += "/" + string(w.Blocker)
			}
		}
		counts[p]++
	}
	var keys []string
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, counts[k]))
	}
	return strings.Join(parts, " "), nil
}
