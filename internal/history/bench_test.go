package history_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/history"
	"github.com/agentrun-dev/agentrun-operator/internal/history/historyclient"
	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
)

// benchRecords archived runs in 20 namespaces over 29 days, three ledger
// rows each (one in ten runs with an unpriced call).
const benchRecords = 100_000

// benchArchive is the database the benchmark's history server reads.
type benchArchive struct {
	dsn   string
	store *sqlstore.Store
}

var (
	benchOnce sync.Once
	bench     benchArchive
	benchErr  error
)

// seedArchive fills a new database with benchRecords records, their
// labels and ledger rows, in a few statements (as a restored archive would
// be, not through Archive one by one).
func seedArchive(ctx context.Context) (benchArchive, error) {
	db, err := pg.CreateDatabase(ctx)
	if err != nil {
		return benchArchive{}, err
	}
	st, err := sqlstore.Open(sqlstore.Config{DSN: db.DSN})
	if err != nil {
		return benchArchive{}, err
	}
	if err := st.Check(ctx); err != nil {
		return benchArchive{}, err
	}
	// A record as the manager writes one: the whole run, with a prompt.
	tmpl := &arv1.AgentRun{
		TypeMeta:   metav1.TypeMeta{APIVersion: arv1.GroupVersion.String(), Kind: "AgentRun"},
		ObjectMeta: metav1.ObjectMeta{Name: "NAME_", Namespace: "NS_", UID: types.UID("UID_"), Labels: map[string]string{"team": "TEAM_", "app": "bench"}},
		Spec:       arv1.AgentRunSpec{Agent: "AGENT_", Task: strings.Repeat("Summarise the incident report and list the follow-ups. ", 20)},
		Status:     arv1.AgentRunStatus{Phase: "PHASE_", Model: "model-1", Usage: arv1.Usage{PromptTokens: 3000, CompletionTokens: 600, TotalTokens: 3600, ModelCalls: 3, CostUSD: "0.000015", CostPricedUSD: "0.000015"}},
	}
	doc, err := json.Marshal(tmpl)
	if err != nil {
		return benchArchive{}, err
	}
	summary, err := json.Marshal(sqlstore.RecordSummary{Metadata: tmpl.ObjectMeta,
		Status: sqlstore.SummaryStatus{Phase: tmpl.Status.Phase, Model: tmpl.Status.Model, Usage: tmpl.Status.Usage}})
	if err != nil {
		return benchArchive{}, err
	}
	// fill makes a run's document of a template's.
	fill := func(tmpl string) string {
		return fmt.Sprintf(`replace(replace(replace(replace(replace(replace(%s, 'NAME_', 'run-' || i), 'NS_', 'bench-' || (i %% 20)), 'UID_', 'uid-' || i), 'TEAM_', tm), 'AGENT_', 'agent-' || (i %% 5)), 'PHASE_', p)`, tmpl)
	}
	now := time.Now().UnixMicro()
	stmts := []string{
		fmt.Sprintf(`INSERT INTO archived_runs (run_uid, namespace, name, agent, phase, parent, labels, created_at, finished_at, archived_at,
			prompt_tokens, completion_tokens, total_tokens, model_calls, lost_calls, cost_nano_usd, priced_nano_usd, unpriced_calls, model, record, children, output, summary)
		SELECT 'uid-' || i, 'bench-' || (i %% 20), 'run-' || i, 'agent-' || (i %% 5), p, '', '{"app":"bench","team":"' || tm || '"}', t - 60000000, t, t,
			3000, 600, 3600, 3, 0, 15000, 15000, 0, 'model-1', %s, '[]', '"done"', %s
		FROM (SELECT i, %d - i::bigint * 25000000 AS t, CASE WHEN i %% 3 = 0 THEN 'Error' ELSE 'Complete' END AS p,
			CASE WHEN i %% 2 = 0 THEN 'x' ELSE 'y' END AS tm FROM generate_series(1, %d) i) s`, fill("$1"), fill("$2"), now, benchRecords),
		`INSERT INTO archived_run_labels (run_uid, namespace, label_key, label_value)
		SELECT run_uid, namespace, 'team', CASE WHEN labels LIKE '%"x"%' THEN 'x' ELSE 'y' END FROM archived_runs
		UNION ALL SELECT run_uid, namespace, 'app', 'bench' FROM archived_runs`,
		`INSERT INTO call_ledger (run_uid, seq, namespace, agent, provider, model, at, prompt_tokens, completion_tokens, total_tokens, cost_nano_usd)
		SELECT run_uid, 2 * k + 1, namespace, agent, 'p', 'model-' || k, finished_at - k * 1000000, 1000, 200, 1200,
			CASE WHEN k = 0 AND right(run_uid, 1) = '0' THEN NULL ELSE 5000 END
		FROM archived_runs, generate_series(0, 2) k`,
		// The ledger's daily rollup, as the store keeps it (and as
		// migration 00009 fills it from an existing ledger).
		`INSERT INTO call_ledger_daily (day, namespace, agent, model, slot, calls, prompt_tokens, completion_tokens, total_tokens, priced_nano_usd, unpriced_calls)
		SELECT (at / 86400000000) * 86400000000, namespace, agent, model, substr(run_uid, 1, 1), COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), SUM(total_tokens),
			COALESCE(SUM(cost_nano_usd), 0), SUM(CASE WHEN cost_nano_usd IS NULL THEN 1 ELSE 0 END)
		FROM call_ledger GROUP BY 1, 2, 3, 4, 5`,
		// A steady archive is vacuumed: autovacuum would otherwise run
		// on the fresh rows during the measurements.
		`VACUUM ANALYZE`,
	}
	for i, q := range stmts {
		var args []any
		if i == 0 {
			args = []any{string(doc), string(summary)}
		}
		if _, err := st.DB().ExecContext(ctx, q, args...); err != nil {
			return benchArchive{}, fmt.Errorf("seeding: %w", err)
		}
	}
	return benchArchive{dsn: db.DSN, store: st}, nil
}

// startServerProcess runs the history server as its own process on the
// seeded database and points the APIService at it; the returned function
// points it back at the suite's server and stops the process.
func startServerProcess(ctx context.Context, dsn string) (int, func(), error) {
	ln, p, err := history.Listen("127.0.0.1:0")
	if err != nil {
		return 0, nil, err
	}
	_ = ln.Close()
	cmd := exec.Command(os.Args[0], "--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(p), "--store="+dsn,
		"--authentication-kubeconfig="+serverKubeconfig, "--authorization-kubeconfig="+serverKubeconfig, "--kubeconfig="+serverKubeconfig,
		"--cert-secret=agentrun-history-cert", "--cert-secret-namespace="+systemNS, "--service=agentrun-history")
	cmd.Env = append(os.Environ(), serveEnv+"=1")
	if p := os.Getenv("BENCH_SERVER_CPUPROFILE"); p != "" {
		cmd.Env = append(cmd.Env, "HISTORY_CPUPROFILE="+p)
	}
	if err := cmd.Start(); err != nil {
		return 0, nil, err
	}
	dyn := dynamic.NewForConfigOrDie(env.Config)
	point := func(to int) error {
		_, err := dyn.Resource(apiServices).Patch(ctx, history.APIServiceName, types.MergePatchType, fmt.Appendf(nil, `{"spec":{"service":{"port":%d}}}`, to), metav1.PatchOptions{})
		return err
	}
	stop := func() {
		_ = point(port)
		// SIGTERM lets the server stop by itself (and write its profile).
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	if err := point(p); err != nil {
		stop()
		return 0, nil, err
	}
	return cmd.Process.Pid, stop, nil
}

// timed runs fn n times and returns the latencies, sorted.
func timed(b *testing.B, n int, fn func() error) []time.Duration {
	b.Helper()
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if err := fn(); err != nil {
			b.Fatal(err)
		}
		out = append(out, time.Since(start))
	}
	slices.Sort(out)
	return out
}

func p99(d []time.Duration) float64 {
	i := int(math.Ceil(0.99*float64(len(d)))) - 1
	return float64(d[i].Microseconds()) / 1000
}

// rssMiB reads the process's resident and peak resident memory.
func rssMiB(pid int) (rss, peak float64) {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			peak = kb / 1024
		}
	}
	return rss, peak
}

// treeCPU is the CPU time (user and system, in clock ticks of 10 ms) of
// this process and its descendants (the API server, etcd, PostgreSQL and
// its backends, the history server), by command name; the history
// server (this binary again) is counted as "history-server".
func treeCPU(server int) map[string]float64 {
	type proc struct {
		comm string
		ppid int
		cpu  float64
	}
	procs := map[int]proc{}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime(14) stime(15)
		text := string(data)
		open, closing := strings.IndexByte(text, '('), strings.LastIndexByte(text, ')')
		if open < 0 || closing < 0 {
			continue
		}
		f := strings.Fields(text[closing+2:])
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		procs[pid] = proc{comm: text[open+1 : closing], ppid: ppid, cpu: ut + st}
	}
	self := os.Getpid()
	under := func(pid int) bool {
		for i := 0; i < 10 && pid > 1; i++ {
			if pid == self {
				return true
			}
			pid = procs[pid].ppid
		}
		return false
	}
	out := map[string]float64{}
	for pid, p := range procs {
		switch {
		case pid == server:
			out["history-server"] += p.cpu
		case pid == self:
			out["client (bench)"] += p.cpu
		case under(pid):
			out[p.comm] += p.cpu
		}
	}
	return out
}

// BenchmarkHistory100k: with 100,000 archived records, one namespace's
// page of 500 with a label and a field selector through the aggregated
// API (p99 over 200 requests; target 100 ms) and the database's own time
// for the same query; the 30-day cost report of every namespace (target
// 1 s) and its database time; the history server's resident memory after
// the load (target 128 MiB).
func BenchmarkHistory100k(b *testing.B) {
	ctx := context.Background()
	benchOnce.Do(func() {
		start := time.Now()
		bench, benchErr = seedArchive(ctx)
		b.Logf("seeded %d records in %s", benchRecords, time.Since(start).Round(time.Millisecond))
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	pid, stop, err := startServerProcess(ctx, bench.dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	c, err := historyclient.New(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	page := metav1.ListOptions{Limit: 500, LabelSelector: "team=x", FieldSelector: "status.phase=Error"}
	deadline := time.Now().Add(time.Minute)
	for {
		l, err := c.ListRecords(ctx, "bench-4", page)
		if err == nil && len(l.Items) == 500 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the benchmark's server never answered through the APIService: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The same page as kubectl asks for it: a Table (rows' objects as
	// metadata), decoded as kubectl decodes it.
	raw := kubernetes.NewForConfigOrDie(env.Config).CoreV1().RESTClient()
	tablePage := func() error {
		body, err := raw.Get().AbsPath("/apis/history.agentrun.dev/v1alpha1/namespaces/bench-4/agentrunrecords").
			Param("limit", "500").Param("labelSelector", "team=x").Param("fieldSelector", "status.phase=Error").
			SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json").
			Do(ctx).Raw()
		if err != nil {
			return err
		}
		var t metav1.Table
		if err := json.Unmarshal(body, &t); err != nil {
			return err
		}
		if len(t.Rows) != 500 || t.Continue == "" {
			return fmt.Errorf("the Table page has %d rows (continue %q), want 500 and a continue token", len(t.Rows), t.Continue)
		}
		return nil
	}
	q := sqlstore.RecordQuery{Namespace: "bench-4", Phase: []sqlstore.FieldTerm{{Value: "Error"}},
		Labels: []sqlstore.LabelTerm{{Key: "team", Op: sqlstore.LabelIn, Values: []string{"x"}}}, Limit: 501}
	costs := metav1.ListOptions{FieldSelector: "spec.since=30d"}
	cq := sqlstore.CostQuery{From: time.Now().Add(-30 * 24 * time.Hour).UnixMicro(), To: time.Now().UnixMicro(),
		By: []sqlstore.CostDimension{sqlstore.ByNamespace, sqlstore.ByAgent, sqlstore.ByModel, sqlstore.ByDay}}
	if os.Getenv("EXPLAIN") != "" {
		for _, stmt := range []string{
			`EXPLAIN ANALYZE SELECT r.run_uid, r.record FROM archived_runs r WHERE r.namespace = 'bench-4' AND r.phase = 'Error' AND EXISTS (SELECT 1 FROM archived_run_labels l WHERE l.run_uid = r.run_uid AND l.label_key = 'team' AND l.namespace = 'bench-4' AND l.label_value IN ('x')) ORDER BY r.finished_at DESC, r.run_uid DESC LIMIT 501`,
			`EXPLAIN ANALYZE SELECT r.run_uid, r.summary FROM archived_runs r WHERE r.namespace = 'bench-4' AND r.phase = 'Error' AND EXISTS (SELECT 1 FROM archived_run_labels l WHERE l.run_uid = r.run_uid AND l.label_key = 'team' AND l.namespace = 'bench-4' AND l.label_value IN ('x')) ORDER BY r.finished_at DESC, r.run_uid DESC LIMIT 501`,
			// What ListRecords asks within a namespace: the label term
			// checked run by run (OFFSET 0 keeps the EXISTS a filter).
			`EXPLAIN ANALYZE SELECT r.run_uid, r.summary FROM archived_runs r WHERE r.namespace = 'bench-4' AND r.phase = 'Error' AND EXISTS (SELECT 1 FROM archived_run_labels l WHERE l.run_uid = r.run_uid AND l.label_key = 'team' AND l.namespace = 'bench-4' AND l.label_value IN ('x') OFFSET 0) ORDER BY r.finished_at DESC, r.run_uid DESC LIMIT 501`,
			// A label no run of the namespace has: every Error run of it is checked.
			`EXPLAIN ANALYZE SELECT r.run_uid, r.summary FROM archived_runs r WHERE r.namespace = 'bench-4' AND r.phase = 'Error' AND EXISTS (SELECT 1 FROM archived_run_labels l WHERE l.run_uid = r.run_uid AND l.label_key = 'team' AND l.namespace = 'bench-4' AND l.label_value IN ('y') OFFSET 0) ORDER BY r.finished_at DESC, r.run_uid DESC LIMIT 501`,
			// The cost report's shape: whole days from the rollup, the
			// partial days at the ends from the ledger.
			fmt.Sprintf(`EXPLAIN ANALYZE SELECT c.namespace, c.agent, c.model, c.day, SUM(c.calls), SUM(c.total_tokens) FROM (
				SELECT day, namespace, agent, model, calls, total_tokens FROM call_ledger_daily WHERE day >= %[1]d AND day < %[2]d
				UNION ALL SELECT (at / 86400000000) * 86400000000, namespace, agent, model, 1, total_tokens FROM call_ledger WHERE at >= %[3]d AND at < %[1]d
				UNION ALL SELECT (at / 86400000000) * 86400000000, namespace, agent, model, 1, total_tokens FROM call_ledger WHERE at >= %[2]d AND at < %[4]d
				) c GROUP BY 1, 2, 3, 4`, (cq.From/86400000000+1)*86400000000, cq.To/86400000000*86400000000, cq.From, cq.To),
		} {
			rows, err := bench.store.DB().QueryContext(ctx, stmt)
			if err != nil {
				b.Fatal(err)
			}
			for rows.Next() {
				var line string
				_ = rows.Scan(&line)
				fmt.Fprintln(os.Stderr, "PLAN", line)
			}
			_ = rows.Close()
		}
	}
	// The report covers every call (all within 30 days), unpriced ones
	// counted apart.
	all, err := c.CostReport(ctx, "", costs)
	if err != nil {
		b.Fatal(err)
	}
	var calls, unpriced int64
	for _, r := range all.Items {
		calls, unpriced = calls+r.Status.Calls, unpriced+r.Status.UnpricedCalls
	}
	if calls != 3*benchRecords || unpriced != benchRecords/10 {
		b.Fatalf("the cost report counts %d calls, %d unpriced; want %d and %d", calls, unpriced, 3*benchRecords, benchRecords/10)
	}
	b.ResetTimer()
	for range b.N {
		before := treeCPU(pid)
		table := timed(b, 200, tablePage)
		after := treeCPU(pid)
		if os.Getenv("BENCH_CPU") != "" {
			// Where a Table page's CPU goes, per request (clock ticks
			// are 10 ms; backends that ended are not counted).
			for comm, t := range after {
				if d := (t - before[comm]) * 10 / 200; d > 0 {
					fmt.Fprintf(os.Stderr, "CPU per Table page: %-16s %5.1f ms\n", comm, d)
				}
			}
		}
		api := timed(b, 200, func() error { _, err := c.ListRecords(ctx, "bench-4", page); return err })
		db := timed(b, 200, func() error { _, err := bench.store.ListRecords(ctx, q); return err })
		sq := q
		sq.Summaries = true
		tableDB := timed(b, 200, func() error { _, err := bench.store.ListRecords(ctx, sq); return err })
		report := timed(b, 10, func() error { _, err := c.CostReport(ctx, "", costs); return err })
		reportDB := timed(b, 10, func() error { _, err := bench.store.CostReport(ctx, cq); return err })
		b.ReportMetric(p99(table), "table-page-p99-ms")
		b.ReportMetric(float64(table[len(table)/2].Microseconds())/1000, "table-page-p50-ms")
		b.ReportMetric(p99(tableDB), "table-page-db-p99-ms")
		b.ReportMetric(p99(api), "page-p99-ms")
		b.ReportMetric(p99(db), "page-db-p99-ms")
		b.ReportMetric(float64(report[len(report)-1].Microseconds())/1000, "cost30d-max-ms")
		b.ReportMetric(float64(reportDB[len(reportDB)-1].Microseconds())/1000, "cost30d-db-max-ms")
	}
	b.StopTimer()
	rss, peak := rssMiB(pid)
	b.ReportMetric(rss, "server-rss-MiB")
	b.ReportMetric(peak, "server-peak-rss-MiB")
}
