package loadtest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/testenv/postgres"
	"github.com/agentrun-dev/agentrun-operator/test/loadtest"
)

// The stores benchmarks (issue 47): what a run costs the control plane
// when its journal lives in ConfigMaps, in PostgreSQL or in SQLite. See
// docs/benchmarks.md.

// The stores a benchmark can run the manager on (--store).
const (
	storeConfigMaps = "configmaps"
	storePostgres   = "postgres"
	storeSQLite     = "sqlite"
)

// storeSetup is one store for a manager: its flags, the database server
// to sample (PostgreSQL's postmaster; 0 when the store has no process of
// its own) and what to call it in a report.
type storeSetup struct {
	kind     string
	flags    []string
	dbPID    int
	describe string
}

// setupStore makes a store of kind for one manager: nothing for
// ConfigMaps ("" too), a database on a PostgreSQL server of its own
// (startPostgres), a file in a temporary directory for SQLite.
func setupStore(b *testing.B, ctx context.Context, kind string) storeSetup {
	b.Helper()
	switch kind {
	case "", storeConfigMaps:
		return storeSetup{kind: storeConfigMaps, describe: "ConfigMaps (no --store: the manager's default)"}
	case storePostgres:
		pg := startPostgres(b, os.Getenv("LOADTEST_POSTGRES_DURABLE") != "0")
		db, err := pg.CreateDatabase(ctx)
		if err != nil {
			b.Fatal(err)
		}
		durability := "durable (fsync and synchronous commit on)"
		if os.Getenv("LOADTEST_POSTGRES_DURABLE") == "0" {
			durability = "NOT durable (LOADTEST_POSTGRES_DURABLE=0: fsync and synchronous commit off)"
		}
		return storeSetup{kind: kind, flags: []string{"--store=" + db.DSN}, dbPID: pg.PID(),
			describe: fmt.Sprintf("PostgreSQL (%s), %s, 127.0.0.1:%d, database %s of its own; its CPU is the postmaster's process tree", postgresVersion(), durability, pg.Port, db.Name)}
	case storeSQLite:
		path := filepath.Join(b.TempDir(), "agentrun.db")
		return storeSetup{kind: kind, flags: []string{"--store=sqlite:" + path},
			describe: "SQLite, a file in a temporary directory; it is a library inside the manager process, so its CPU is the manager's"}
	default:
		b.Fatalf("unknown store %q: want %s, %s or %s", kind, storeConfigMaps, storePostgres, storeSQLite)
		return storeSetup{}
	}
}

// startPostgres starts a PostgreSQL server (Debian's package, in a
// temporary directory), durable unless LOADTEST_POSTGRES_DURABLE=0 (to
// tell what the commits' flushes cost), and stops it at the benchmark's
// end.
func startPostgres(b *testing.B, durable bool) *postgres.Server {
	b.Helper()
	pg, err := postgres.Start(postgres.Options{Durable: durable})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pg.Stop() })
	return pg
}

// postgresVersion names the PostgreSQL binaries the harness runs.
func postgresVersion() string {
	dir, err := postgres.BinDir()
	if err != nil {
		return "unknown version"
	}
	return filepath.Base(filepath.Dir(dir))
}

// loadAverage is /proc/loadavg's 1, 5 and 15 minute load averages: the
// machine is shared, so each figure is reported beside it.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// perCall is d in milliseconds per call of calls.
func perCall(d time.Duration, calls int) float64 {
	return float64(d.Microseconds()) / 1000 / float64(calls)
}

// BenchmarkLongRun: 100 runs of 30 chained model calls, each held 500 ms by
// a loopback OpenAI-compatible server, on each store in turn (ConfigMaps,
// PostgreSQL, SQLite; LOADTEST_STORES picks some), each on a control plane
// and a manager of its own with default flags, between two passes of a
// bare client making the same calls to the same server. Reports per store
// the etcd writes per run, the API server's and etcd's CPU per call, the
// database's, the manager's, the ratio to the bare client and the
// manager's memory. LOADTEST_N, LOADTEST_CALLS and LOADTEST_LATENCY
// replace 100, 30 and 500ms.
func BenchmarkLongRun(b *testing.B) {
	scenario(b, func(b *testing.B, ctx context.Context, r *report) {
		o := longRun{
			n:     envInt(b, "LOADTEST_N", 100),
			calls: envInt(b, "LOADTEST_CALLS", 30),
			delay: envDuration(b, "LOADTEST_LATENCY", 500*time.Millisecond),
		}
		kinds := []string{storeConfigMaps, storePostgres, storeSQLite}
		if v := os.Getenv("LOADTEST_STORES"); v != "" {
			kinds = strings.Split(v, ",")
		}
		r.row("runs", "%d runs of %d chained model calls (loadtest.ChainBlueprint), each call held %v by the server; per store a control plane and a manager of its own, default flags %q",
			o.n, o.calls, o.delay, strings.Join(managerFlags(), " "))
		for _, kind := range kinds {
			o.backend(b, ctx, r, kind)
		}
	})
}

// longRun is one BenchmarkLongRun: n runs of calls calls held delay each.
type longRun struct {
	n, calls int
	delay    time.Duration
}

// longRunTimeout bounds one store's operator batch.
const longRunTimeout = 15 * time.Minute

// backend measures one store: a fresh control plane, its idle writes, the
// manager on the store with its warm-up, then bare client, operator, bare
// client.
func (o longRun) backend(b *testing.B, ctx context.Context, r *report, kind string) {
	b.Helper()
	c, err := loadtest.StartCluster()
	if err != nil {
		b.Fatal(err)
	}
	// Stopped before the next store's: the CPU sample sums every API
	// server and etcd of the harness.
	defer func() { _ = c.Stop() }()
	cpu0 := loadtest.CPUNow()
	idle, err := c.IdleRate(ctx, idleWindow)
	if err != nil {
		b.Fatal(err)
	}
	idleCPU := loadtest.CPUNow().Sub(cpu0)
	st := setupStore(b, ctx, kind)
	m, err := c.StartManager(ctx, b.TempDir(), append(managerFlags(), st.flags...)...)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = m.Stop(30 * time.Second) }()
	if err := m.WaitIdle(ctx, 2*time.Minute); err != nil {
		b.Fatal(err)
	}
	r.row(kind+": store", "%s", st.describe)
	// What the control plane spends on its own, with no client but the
	// harness's revision reads: part of every window's CPU.
	idleMsPerSec := float64(idleCPU.ControlPlane().Microseconds()) / 1000 / idleWindow.Seconds()
	r.row(kind+": idle API server", "%.2f writes/s and %.1f ms/s of kube-apiserver + etcd CPU over %v before the manager started", idle, idleMsPerSec, idleWindow)
	warmOperator(b, ctx, c, m, r, kind)
	dbIdle := o.databaseIdle(b, st)

	srv := newLatencyServer(b, o.delay, 0)
	load0 := loadAverage()
	bare1, _ := bareLatencyCalls(b, ctx, srv, o.n, o.calls)
	lr, err := prepareLatencyOf(ctx, c, "longrun-"+kind, srv, "", loadtest.ChainBlueprint(o.calls, ""))
	if err != nil {
		b.Fatal(err)
	}
	lr.dbPID = st.dbPID
	if err := lr.run(ctx, c, m, o.n, longRunTimeout); err != nil {
		b.Fatalf("%s: %v\nmanager log tail:\n%s", kind, err, m.LogTail(3000))
	}
	checkModelCalls(b, lr.res, int64(o.calls))
	load1 := loadAverage()
	bare2, _ := bareLatencyCalls(b, ctx, srv, o.n, o.calls)
	load2 := loadAverage()
	o.report(r, kind, st, lr, idle, idleMsPerSec, dbIdle, [2]loadtest.BareLatencyResult{bare1, bare2}, [3]string{load0, load1, load2})
	// The API server's side of the bare client, with the manager stopped
	// (it would drive the copies).
	if err := m.Stop(30 * time.Second); err != nil {
		b.Fatal(err)
	}
	floor, err := measureAPIFloor(ctx, c, lr.ns, true, idleMsPerSec, idle)
	if err != nil {
		b.Fatal(err)
	}
	o.reportFloor(r, kind, lr.res, floor, idleMsPerSec)
}

// reportFloor sets the operator's kube-apiserver + etcd CPU per run
// beside the API floor's (apiFloor), both less what they spend idle.
func (o longRun) reportFloor(r *report, kind string, res *loadtest.BatchResult, floor apiFloor, idleMsPerSec float64) {
	spent := res.CPU.ControlPlane() - time.Duration(idleMsPerSec*res.Window.Seconds()*float64(time.Millisecond))
	opPerRun := ms(spent.Seconds()) / float64(o.n)
	floorPerRun := ms(floor.cpuPerRun.Seconds())
	r.row(kind+": API floor", "a bare client writing what %d of the runs show (their create, 3 status writes with their own status, an Event; manager stopped): %.1f ms of kube-apiserver + etcd CPU a run less idle (%.2f ms/call), %.2f writes/run; the operator %.1f ms a run less idle: %.2fx the floor",
		floor.runs, floorPerRun, floorPerRun/float64(o.calls), floor.writesPerRun, opPerRun, opPerRun/floorPerRun)
	r.metric(floorPerRun/float64(o.calls), "apifloor_ms/call_"+kind)
	r.metric(opPerRun/floorPerRun, "api_vs_floor_"+kind)
}

// databaseIdle is the database server's own CPU over 5 s with the manager
// idle (its background processes), in ms/s; 0 without a server.
func (o longRun) databaseIdle(b *testing.B, st storeSetup) float64 {
	b.Helper()
	if st.dbPID == 0 {
		return 0
	}
	const span = 5 * time.Second
	d0, err := loadtest.TreeCPU(st.dbPID)
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(span)
	d1, err := loadtest.TreeCPU(st.dbPID)
	if err != nil {
		b.Fatal(err)
	}
	return float64((d1 - d0).Milliseconds()) / span.Seconds()
}

// report adds one store's rows and metrics.
func (o longRun) report(r *report, kind string, st storeSetup, lr *latencyRun, idle, idleCPU, dbIdle float64, bares [2]loadtest.BareLatencyResult, loads [3]string) {
	res := lr.res
	calls := o.n * o.calls
	bareWall := (secs(bares[0].Wall) + secs(bares[1].Wall)) / 2
	opWall := secs(res.All())
	ratio := bareWall / opWall
	writes := res.WritesPerRunLessNoise(idle)
	api, etcd := res.CPU["kube-apiserver"], res.CPU["etcd"]
	controlPlane := perCall(api+etcd, calls)
	manager := perCall(res.CPU["manager"], calls)
	r.row(kind+": bare client", "%d clients x %d calls: wall %.2fs, then %.2fs (mean %.2fs); load average %s before, %s after", o.n, o.calls, secs(bares[0].Wall), secs(bares[1].Wall), bareWall, loads[0], loads[2])
	r.row(kind+": operator", "first Complete %.2fs, half %.2fs, all (wall) %.2fs; creates done at %.2fs; load average %s after", secs(res.First()), secs(res.Half()), opWall, secs(res.CreatesDone), loads[1])
	lead, gaps, tail := lr.server.Chain(res.CreatedAt, res.ReachedAt)
	r.row(kind+": chain", "first call after the create p50 %.0fms p99 %.0fms; next call after an answer p50 %.0fms p99 %.0fms mean %.1fms (%d gaps: %.2fs a run); seen Complete after the last answer p50 %.0fms p99 %.0fms",
		ms(durQuantile(lead, 0.5).Seconds()), ms(durQuantile(lead, 0.99).Seconds()), ms(durQuantile(gaps, 0.5).Seconds()), ms(durQuantile(gaps, 0.99).Seconds()),
		ms(durMean(gaps).Seconds()), len(gaps), durMean(gaps).Seconds()*float64(o.calls-1),
		ms(durQuantile(tail, 0.5).Seconds()), ms(durQuantile(tail, 0.99).Seconds()))
	r.row(kind+": gaps by second", "%s", gapSeconds(lr.server.GapsBySecond(res.FirstCreate), o.n))
	r.row(kind+": reconciles", "%.0f (%.1f/run), p50 %.1fms p99 %.1fms; waited in the queue p50 %.1fms p99 %.1fms; %.0f woken by the manager waited p50 %.1fms p99 %.1fms",
		res.Reconcile.Count, res.Reconcile.Count/float64(o.n), ms(res.Reconcile.Quantile(0.5)), ms(res.Reconcile.Quantile(0.99)),
		ms(res.QueueWait.Quantile(0.5)), ms(res.QueueWait.Quantile(0.99)), res.WakeWait.Count, ms(res.WakeWait.Quantile(0.5)), ms(res.WakeWait.Quantile(0.99)))
	r.row(kind+": server", "%s", serverRow(lr.server))
	r.row(kind+": waits seen", "%s", lr.waits)
	r.row(kind+": etcd writes", "%d over %.1fs = %.2f/run, %.2f/run less %.2f writes/s of idle noise = %.3f/call", res.Writes, secs(res.Window), res.WritesPerRun(), writes, idle, writes/float64(o.calls))
	toLast := perCall(res.CPUToLast.ControlPlane(), calls)
	idlePart := idleCPU * res.Window.Seconds() / float64(calls)
	r.row(kind+": API server + etcd CPU", "%.2f ms/call (kube-apiserver %.2f, etcd %.2f) over the batch and its settle (%.1fs), of which %.2f ms/call is what they spend idle over as long; %.2f ms/call to the last Complete",
		controlPlane, perCall(api, calls), perCall(etcd, calls), secs(res.Window), idlePart, toLast)
	switch {
	case st.dbPID != 0:
		r.row(kind+": database CPU", "%.2f ms/call (the postmaster's process tree, its backends and reaped children included; %.1f ms/s when idle)", perCall(res.CPU[loadtest.DatabaseCPU], calls), dbIdle)
	case kind == storeSQLite:
		r.row(kind+": database CPU", "inside the manager's (SQLite runs in its process)")
	default:
		r.row(kind+": database CPU", "none (the journal is in etcd: its cost is the API server's and etcd's)")
	}
	r.row(kind+": manager CPU", "%.2f ms/call", manager)
	r.row(kind+": CPU", "%s", res.CPU.PerRun(res.N))
	r.row(kind+": API requests", "%s per run", res.Requests.PerRun(res.N))
	r.row(kind+": API server time", "%s", res.ServerTimes.Summary(float64(res.N)/2))
	r.row(kind+": left per run", "ConfigMaps %.2f, Events %.2f", res.LeftPerRun(loadtest.KindConfigMaps), res.LeftPerRun(loadtest.KindEvents))
	r.row(kind+": manager memory", "VmRSS %.0f MiB, VmHWM %.0f MiB", loadtest.MiB(res.Memory.RSS), loadtest.MiB(res.Memory.HWM))
	r.row(kind+": ratio", "%.3f (mean bare wall %.2fs / operator wall %.2fs)", ratio, bareWall, opWall)
	if kind == storePostgres {
		r.row(kind+": targets", "etcd writes %.2f/run (<= 6 per %d-call run: %s), API server + etcd %.2f ms/call (<= 1.0: %s), ratio %.3f (>= 0.9: %s)",
			writes, o.calls, verdict(writes <= 6), controlPlane, verdict(controlPlane <= 1.0), ratio, verdict(ratio >= 0.9))
	}
	r.metric(writes, "writes/run_"+kind)
	r.metric(controlPlane, "apiserver_etcd_ms/call_"+kind)
	r.metric(controlPlane-idlePart, "apiserver_etcd_less_idle_ms/call_"+kind)
	if st.dbPID != 0 {
		r.metric(perCall(res.CPU[loadtest.DatabaseCPU], calls), "database_ms/call_"+kind)
	}
	r.metric(manager, "manager_ms/call_"+kind)
	r.metric(ratio, "ratio_"+kind)
	r.metric(opWall, "wall_s_"+kind)
	r.metric(bareWall, "bare_wall_s_"+kind)
	r.metric(loadtest.MiB(res.Memory.RSS), "rss_MiB_"+kind)
	r.metric(loadtest.MiB(res.Memory.HWM), "hwm_MiB_"+kind)
}

// durMean is the mean of ds (0 when empty).
func durMean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// verdict says whether a target was met.
func verdict(met bool) string {
	if met {
		return "met"
	}
	return "MISSED"
}

// BenchmarkLatency1000Kubectl: BenchmarkLatency1000's scenario (1,000 runs
// of three calls held 2 s each, against the bare client) on a PostgreSQL
// store, the runs created by the real kubectl in 8 parallel `kubectl
// create -f -` streams, as people and GitOps tools create them.
// LOADTEST_STORE picks another store (configmaps, sqlite).
func BenchmarkLatency1000Kubectl(b *testing.B) {
	store := os.Getenv("LOADTEST_STORE")
	if store == "" {
		store = storePostgres
	}
	latencyScenario(b, latencyOptions{n: 1000, timeout: 30 * time.Minute, store: store, kubectlStreams: 8, targets: true})
}

// gapSeconds shows, for each second of the batch, the gaps between an
// answer and the next call that began in it, per run (ms), the seconds
// with the most first: where a run's gap time is spent.
func gapSeconds(by []time.Duration, n int) string {
	idx := make([]int, len(by))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return by[idx[a]] > by[idx[b]] })
	var parts []string
	for _, i := range idx[:min(len(idx), 6)] {
		parts = append(parts, fmt.Sprintf("second %d: %.0fms", i, ms(by[i].Seconds())/float64(n)))
	}
	return strings.Join(parts, ", ") + " a run"
}
