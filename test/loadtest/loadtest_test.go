package loadtest_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/agentrun-dev/agentrun-operator/test/loadtest"
)

// The unit tests share one control plane, started by the first test that
// needs it; each benchmark starts its own.
var shared struct {
	once sync.Once
	c    *loadtest.Cluster
	err  error
}

func sharedCluster(t *testing.T) *loadtest.Cluster {
	t.Helper()
	shared.once.Do(func() { shared.c, shared.err = loadtest.StartCluster() })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.c
}

func TestMain(m *testing.M) {
	// envtest logs through controller-runtime's logger, which complains
	// (with a stack) when nothing was set; the harness has nothing to say
	// there.
	ctrllog.SetLogger(logr.Discard())
	code := m.Run()
	if shared.c != nil {
		_ = shared.c.Stop()
	}
	loadtest.Cleanup()
	os.Exit(code)
}

// TestRevisionCountsWrites calibrates the revision probe: n ConfigMap
// creates and n updates move etcd's revision by exactly 2n, and n no-op
// patches (nothing changes, so nothing is stored) move it by 0. The API
// server writes on its own now and then (about 3 writes every 10s:
// its lease renewals), so a window that caught one of those is measured again; a
// window without noise must show the exact count. The idle rate is logged.
func TestRevisionCountsWrites(t *testing.T) {
	c := sharedCluster(t)
	ctx := context.Background()
	// The API server's own writes come in bursts of 3 every 10s (measured:
	// lease renewals), so the idle window is one whole period.
	rate, err := c.IdleRate(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("idle revision rate: %.2f writes/s", rate)
	if rate > 2 {
		t.Errorf("an idle API server moved the revision %.2f times a second; the probe is not reading etcd's revision", rate)
	}
	ns, err := c.NewNamespace(ctx, "calib")
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	cms := c.Kube.CoreV1().ConfigMaps(ns)
	round := 0
	measure := func(what string, want int64, writes func() error) {
		t.Helper()
		var deltas []int64
		for attempt := 0; attempt < 10; attempt++ {
			r0, err := c.Revision(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := writes(); err != nil {
				t.Fatal(err)
			}
			r1, err := c.Revision(ctx)
			if err != nil {
				t.Fatal(err)
			}
			d := r1 - r0
			if d < want {
				t.Fatalf("%s moved the revision by %d, fewer than the %d writes made", what, d, want)
			}
			if d == want {
				t.Logf("%s: revision moved by exactly %d (attempt %d; earlier windows with noise: %v)", what, d, attempt+1, deltas)
				return
			}
			deltas = append(deltas, d)
		}
		t.Fatalf("%s: revision moved by %v in ten tries, never exactly %d", what, deltas, want)
	}
	measure(fmt.Sprintf("%d creates + %d updates", n, n), 2*n, func() error {
		round++
		for i := range n {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d-%d", round, i)}, Data: map[string]string{"v": "0"}}
			got, err := cms.Create(ctx, cm, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			got.Data["v"] = "1"
			if _, err := cms.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
	measure(fmt.Sprintf("%d no-op patches", n), 0, func() error {
		for i := range n {
			if _, err := cms.Patch(ctx, fmt.Sprintf("cm-%d-%d", round, i%5), types.MergePatchType, []byte(`{"data":{"v":"1"}}`), metav1.PatchOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestBareCeilingSmall runs the bare client on a tiny batch: 5 writes per
// run (a create and four status patches), every object Complete at the end.
func TestBareCeilingSmall(t *testing.T) {
	c := sharedCluster(t)
	ctx := context.Background()
	if err := c.InstallCeilingCRD(ctx); err != nil {
		t.Fatal(err)
	}
	ns, err := c.NewNamespace(ctx, "ceiling")
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	res, err := c.BareCeiling(ctx, ns, n, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d bare runs in %v: %.1f runs/s, %d writes (%.2f/run)", n, res.Elapsed, res.RunsPerSec(), res.Writes, res.WritesPerRun())
	want := int64(n * (1 + loadtest.CeilingStatusPatches))
	// A few writes of the API server's own may fall in the window.
	if res.Writes < want || res.Writes > want+5 {
		t.Errorf("revision moved by %d, want %d (+ at most 5 of background)", res.Writes, want)
	}
	list, err := c.Dyn.Resource(loadtest.CeilingGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != n {
		t.Fatalf("%d Ceilings, want %d", len(list.Items), n)
	}
	for _, u := range list.Items {
		st, _ := u.Object["status"].(map[string]any)
		if st["phase"] != "Complete" || fmt.Sprint(st["counter"]) != fmt.Sprint(loadtest.CeilingStatusPatches) || st["stage"] != "review 3/3" {
			t.Errorf("%s status = %v, want Complete with counter %d at review 3/3", u.GetName(), st, loadtest.CeilingStatusPatches)
		}
	}
}

// TestOperatorBatchSmall builds and runs the manager as a process and
// measures a batch of five runs: all reach Complete in order, their writes,
// what they leave, the reconcile histogram and the process's memory are
// read, and SIGTERM stops it.
func TestOperatorBatchSmall(t *testing.T) {
	c := sharedCluster(t)
	ctx := context.Background()
	m, err := c.StartManager(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// A no-op once the test has stopped it with SIGTERM; kills it if the test fails first.
	defer func() { _ = m.Kill() }()
	ns, err := c.SetupNamespace(ctx, "small", "bench", loadtest.ThreeStage)
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	res, err := c.RunBatch(ctx, loadtest.Batch{Namespace: ns, Agent: "bench", Prefix: "r", N: n, Concurrency: 2, Timeout: 2 * time.Minute, Manager: m})
	if err != nil {
		t.Fatalf("%v\nmanager log:\n%s", err, m.LogTail(4000))
	}
	t.Logf("first %v, all %v, %.1f runs/s, %.1f writes/run, left %v, reconciles %v (p50 %.1fms p99 %.1fms), RSS %.0f MiB, run %d B (%d without managedFields)",
		res.First(), res.All(), res.RunsPerSec(), res.WritesPerRun(), res.Left, res.Reconcile.Count,
		1000*res.Reconcile.Quantile(0.5), 1000*res.Reconcile.Quantile(0.99), loadtest.MiB(res.Memory.RSS), res.Size.JSON, res.Size.WithoutManagedFields)
	if len(res.Reached) != n || res.Phases["Complete"] != n {
		t.Errorf("reached %d, phases %v, want %d Complete", len(res.Reached), res.Phases, n)
	}
	for i := 1; i < len(res.Reached); i++ {
		if res.Reached[i] < res.Reached[i-1] {
			t.Errorf("arrivals not sorted: %v", res.Reached)
		}
	}
	// At least the run's create, one status write per model call and the
	// final one are stored.
	if res.WritesPerRun() < 1+loadtest.ThreeStageModelCalls {
		t.Errorf("%.1f writes per run, fewer than a create and a status write per model call", res.WritesPerRun())
	}
	if res.Reconcile.Count < n {
		t.Errorf("%v reconciles of AgentRuns for %d runs", res.Reconcile.Count, n)
	}
	if res.Memory.RSS <= 0 || res.Memory.HWM < res.Memory.RSS {
		t.Errorf("memory = %+v", res.Memory)
	}
	if res.Size.JSON <= res.Size.WithoutManagedFields || res.Size.WithoutManagedFields < 500 {
		t.Errorf("run size %+v: managedFields should add to a run of at least 500 bytes", res.Size)
	}
	if err := m.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if done, _ := m.Exited(); !done {
		t.Error("the manager still runs after Stop")
	}
}

// TestQuantileInterpolates checks Quantile against values worked out by
// hand (histogram_quantile's linear interpolation) and Sub.
func TestQuantileInterpolates(t *testing.T) {
	h := loadtest.Histogram{Buckets: []loadtest.Bucket{
		{UpperBound: 0.1, Count: 10}, {UpperBound: 0.2, Count: 30}, {UpperBound: 1, Count: 90},
		{UpperBound: 2, Count: 100}, {UpperBound: math.Inf(1), Count: 100},
	}, Count: 100}
	for _, tc := range []struct{ q, want float64 }{
		{0.05, 0.05},                 // rank 5 in [0,0.1]: half way
		{0.10, 0.1},                  // rank 10: the first bucket's top
		{0.20, 0.15},                 // rank 20 in (0.1,0.2], 10 of 20
		{0.5, 0.2 + 0.8*(20.0/60.0)}, // rank 50 in (0.2,1], 20 of 60
		{0.99, 1 + 1*(9.0/10.0)},     // rank 99 in (1,2], 9 of 10
		{1, 2},                       // rank 100: the top of (1,2]
	} {
		if got := h.Quantile(tc.q); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	inInf := loadtest.Histogram{Buckets: []loadtest.Bucket{{UpperBound: 1, Count: 1}, {UpperBound: math.Inf(1), Count: 10}}}
	if got := inInf.Quantile(0.99); got != 1 {
		t.Errorf("a rank in the +Inf bucket gives %v, want the highest finite bound 1", got)
	}
	if got := (loadtest.Histogram{}).Quantile(0.5); !math.IsNaN(got) {
		t.Errorf("an empty histogram's median = %v, want NaN", got)
	}
	later := loadtest.Histogram{Buckets: []loadtest.Bucket{
		{UpperBound: 0.1, Count: 10}, {UpperBound: 0.2, Count: 30}, {UpperBound: 1, Count: 190},
		{UpperBound: 2, Count: 200}, {UpperBound: math.Inf(1), Count: 200},
	}, Count: 200, Sum: 50}
	d := later.Sub(h)
	if d.Count != 100 || d.Buckets[1].Count != 0 || d.Buckets[2].Count != 100 || math.Abs(d.Quantile(0.5)-(0.2+0.8*0.5)) > 1e-9 {
		t.Errorf("delta = %+v, median %v: the 100 new observations all fell in (0.2,1]", d, d.Quantile(0.5))
	}
}

// TestParseMetrics reads a histogram out of the text format, escapes and
// several series included.
func TestParseMetrics(t *testing.T) {
	text := `# HELP controller_runtime_reconcile_time_seconds Length of time per reconciliation per controller
# TYPE controller_runtime_reconcile_time_seconds histogram
controller_runtime_reconcile_time_seconds_bucket{controller="agentrun",le="0.005"} 3
controller_runtime_reconcile_time_seconds_bucket{controller="agentrun",le="0.01"} 7
controller_runtime_reconcile_time_seconds_bucket{controller="agentrun",le="+Inf"} 8
controller_runtime_reconcile_time_seconds_sum{controller="agentrun"} 0.5
controller_runtime_reconcile_time_seconds_count{controller="agentrun"} 8
controller_runtime_reconcile_time_seconds_bucket{controller="other",le="0.005"} 100
controller_runtime_reconcile_time_seconds_bucket{controller="other",le="0.01"} 100
controller_runtime_reconcile_time_seconds_bucket{controller="other",le="+Inf"} 100
odd_metric{path="a \"quoted\\\" value, with } brace",x="y"} 1.5e3 1700000000000
workqueue_depth{controller="agentrun",name="agentrun",priority=""} 2
workqueue_depth{controller="agentrun",name="agentrun",priority="1"} 3
`
	sc, err := loadtest.ParseMetrics([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	h := loadtest.ReconcileTime(sc)
	if len(h.Buckets) != 3 || h.Count != 8 || h.Sum != 0.5 || h.Buckets[1].Count != 7 || !math.IsInf(h.Buckets[2].UpperBound, 1) {
		t.Errorf("histogram = %+v", h)
	}
	if got := h.Quantile(0.5); math.Abs(got-(0.005+0.005*(1.0/4.0))) > 1e-12 {
		t.Errorf("median = %v", got)
	}
	if v, ok := sc.Value("odd_metric", map[string]string{"path": `a "quoted\" value, with } brace`}); !ok || v != 1500 {
		t.Errorf("odd_metric = %v %v", v, ok)
	}
	if v, _ := sc.Value("workqueue_depth", map[string]string{"controller": "agentrun"}); v != 5 {
		t.Errorf("depth summed over priorities = %v, want 5", v)
	}
	if _, err := loadtest.ParseMetrics([]byte(`broken{le="1} 2`)); err == nil {
		t.Error("an unterminated label parsed")
	}
}

// TestHungServerNeverAnswers: a request reaches the hung server, which
// reads it and answers nothing while holding the connection.
func TestHungServerNeverAnswers(t *testing.T) {
	s, err := loadtest.NewHungServer()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", strings.TrimSuffix(strings.TrimPrefix(s.URL(), "http://"), "/mcp"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 16)
	if n, err := conn.Read(buf); n != 0 || err == nil {
		t.Fatalf("read %d bytes (%q), err %v: the server answered", n, buf[:n], err)
	}
	for deadline := time.Now().Add(2 * time.Second); s.Bytes() < int64(len(req)); {
		if time.Now().After(deadline) {
			t.Fatalf("the server read %d of %d bytes", s.Bytes(), len(req))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s.Accepted() != 1 || s.Open() != 1 {
		t.Errorf("accepted %d, open %d, want 1 and 1", s.Accepted(), s.Open())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := conn.Read(buf); err == nil {
		t.Error("the connection is still open after Close")
	}
}

// TestProcMemory reads this test process's own memory.
func TestProcMemory(t *testing.T) {
	m, err := loadtest.ProcMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS < 1<<20 || m.HWM < m.RSS {
		t.Errorf("memory = %+v", m)
	}
}

// TestAPIServerMemory finds the shared control plane's kube-apiserver
// (this process's child) and reads a resident size an API server has.
func TestAPIServerMemory(t *testing.T) {
	sharedCluster(t)
	m, err := loadtest.APIServerMemory()
	if err != nil {
		t.Fatal(err)
	}
	own, err := loadtest.ProcMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS < 50<<20 || m.HWM < m.RSS || m == own {
		t.Errorf("kube-apiserver memory = %+v (this process: %+v)", m, own)
	}
}

// TestProcCPUGrowsWithWork: the CPU read from /proc moves when this
// process computes, and the control plane's processes are found as its
// children.
func TestProcCPUGrowsWithWork(t *testing.T) {
	sharedCluster(t)
	before := loadtest.CPUNow()
	// Spin until this process has used 100ms of CPU by its own clock, or
	// 5s have passed: a loaded machine may give it less than wall time.
	x, start := 0, time.Now()
	for time.Since(start) < 5*time.Second && loadtest.CPUNow().Sub(before)["harness"] < 100*time.Millisecond {
		for range 1_000_000 {
			x++
		}
	}
	after := loadtest.CPUNow()
	if d := after.Sub(before)["harness"]; d < 100*time.Millisecond {
		t.Errorf("5s of spinning (%d rounds) moved this process's CPU by %v", x, d)
	}
	for _, p := range []string{"kube-apiserver", "etcd"} {
		if after[p] <= 0 {
			t.Errorf("no CPU read for %s: %v", p, after)
		}
	}
}

// TestAPIRequestsCountWrites: a ConfigMap create shows up in the API
// server's request counters as one POST configmaps, and in its request
// times as one more POST configmaps answered.
func TestAPIRequestsCountWrites(t *testing.T) {
	c := sharedCluster(t)
	ctx := context.Background()
	ns, err := c.NewNamespace(ctx, "requests")
	if err != nil {
		t.Fatal(err)
	}
	sc0, err := c.APIServerMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := c.CreateConfigMap(ctx, ns, fmt.Sprintf("cm%d", i), map[string]string{"k": "v"}); err != nil {
			t.Fatal(err)
		}
	}
	sc1, err := c.APIServerMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := loadtest.RequestsOf(sc1).Sub(loadtest.RequestsOf(sc0))
	if d["POST configmaps"] != 3 {
		t.Errorf("POST configmaps moved by %v, want 3 (all: %v)", d["POST configmaps"], d)
	}
	if s := d.PerRun(3); !strings.Contains(s, "POST configmaps 1.00") {
		t.Errorf("per run: %q, want POST configmaps 1.00", s)
	}
	times := loadtest.ServerTimesOf(sc1).Sub(loadtest.ServerTimesOf(sc0))
	if got := times.Request["POST configmaps"]; got.Count != 3 || got.Sum <= 0 {
		t.Errorf("POST configmaps answered %v times in %vs, want 3 in more than 0 (all: %v)", got.Count, got.Sum, times.Request)
	}
	if s := times.Summary(3); !strings.Contains(s, "POST configmaps ") {
		t.Errorf("summary %q does not name POST configmaps", s)
	}
}

// TestServerTimesSub: request times are summed over the histogram's
// series by request, and what a second scrape adds is what Sub keeps.
func TestServerTimesSub(t *testing.T) {
	scrape := func(sum, count float64) loadtest.Scrape {
		t.Helper()
		sc, err := loadtest.ParseMetrics(fmt.Appendf(nil, `apiserver_request_duration_seconds_sum{verb="PUT",resource="agentruns",subresource="status",scope="resource"} %g
apiserver_request_duration_seconds_count{verb="PUT",resource="agentruns",subresource="status",scope="resource"} %g
apiserver_request_duration_seconds_sum{verb="PUT",resource="agentruns",subresource="status",scope="namespace"} 1
apiserver_request_duration_seconds_count{verb="PUT",resource="agentruns",subresource="status",scope="namespace"} 10
apiserver_flowcontrol_request_wait_duration_seconds_sum{priority_level="workload-low",flow_schema="service-accounts",execute="true"} %g
apiserver_flowcontrol_request_wait_duration_seconds_count{priority_level="workload-low",flow_schema="service-accounts",execute="true"} %g
`, sum, count, sum/10, count))
		if err != nil {
			t.Fatal(err)
		}
		return sc
	}
	before, after := loadtest.ServerTimesOf(scrape(2, 20)), loadtest.ServerTimesOf(scrape(5, 30))
	if got := before.Request["PUT agentruns/status"]; got.Sum != 3 || got.Count != 30 {
		t.Errorf("before: %+v, want both series summed (3 s over 30)", got)
	}
	d := after.Sub(before)
	if got := d.Request["PUT agentruns/status"]; got.Sum != 3 || got.Count != 10 || got.Mean() != 0.3 {
		t.Errorf("added: %+v (mean %v), want 3 s over 10 (0.3)", got, got.Mean())
	}
	if got := d.QueueWait["workload-low"]; got.Count != 10 {
		t.Errorf("queue wait added: %+v, want 10 requests", got)
	}
	if s := d.Summary(1); !strings.Contains(s, "PUT agentruns/status 300.0ms") || !strings.Contains(s, "workload-low 30.0ms over 10") {
		t.Errorf("summary %q", s)
	}
}

// TestGapsBySecond: each gap between an answer and the next call counts
// in the second its answer came, whichever run it belongs to.
func TestGapsBySecond(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	st := loadtest.LatencyStats{Runs: map[string][]loadtest.CallSpan{
		"a": {{Start: at(10), End: at(500)}, {Start: at(530), End: at(1200)}, {Start: at(1300), End: at(1800)}},
		"b": {{Start: at(20), End: at(900)}, {Start: at(940), End: at(2100)}, {Start: at(2150), End: at(2600)}},
	}}
	got := st.GapsBySecond(t0)
	want := []time.Duration{70 * time.Millisecond, 100 * time.Millisecond, 50 * time.Millisecond}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("gaps by second %v, want %v", got, want)
	}
}

// managerSeat holds the one manager process a kill test runs at a time,
// its logs in one directory: Start replaces a killed one, and the test's
// cleanup kills the last.
type managerSeat struct {
	t      *testing.T
	ctx    context.Context
	c      *loadtest.Cluster
	LogDir string
	M      *loadtest.Manager
	// Flags are passed to every manager Start starts.
	Flags []string
}

// newManagerSeat's managers log into a temporary directory, or into
// LOADTEST_LOG_DIR when it is set (kept, to read after a failure).
func newManagerSeat(t *testing.T, ctx context.Context, c *loadtest.Cluster) *managerSeat {
	dir := os.Getenv("LOADTEST_LOG_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &managerSeat{t: t, ctx: ctx, c: c, LogDir: dir}
	t.Cleanup(func() {
		if s.M != nil {
			_ = s.M.Kill()
		}
	})
	return s
}

// Start starts a manager process and returns once its workers run.
func (s *managerSeat) Start() {
	s.t.Helper()
	m, err := s.c.StartManager(s.ctx, s.LogDir, s.Flags...)
	if err != nil {
		s.t.Fatal(err)
	}
	s.M = m
}
