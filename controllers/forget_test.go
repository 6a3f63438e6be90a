package controllers_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/controllers"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
)

// Blueprints of TestRunsLeaveNothingInMemory, one per way a run ends.
// Every call is instant but the slow one's, which runs are cancelled or
// deleted in the middle of.
var (
	// endsComplete: one call that completes the run.
	endsComplete = stages(1)
	// endsRefused: one call the provider refuses for good (a 400): Error.
	endsRefused = scriptedStage("refused", `error = {status = 400, message = "this request cannot be served"}`)
	// endsOutOfTurns: a stage whose model never takes its way out, out of
	// iterations after two calls: Error.
	endsOutOfTurns = strings.Replace(scriptedStage("turns", `text = "still thinking"`), "[stages.only]\n",
		"[stages.only]\nmax_iterations = 2\n[stages.only.transitions.never]\ncondition = \"llm_choice\"\n", 1) +
		"[stages.never]\n[stages.never.model]\nmodels = [{provider = \"demo\", model = \"scripted-1\"}]\n"
	// endsMidCall: a call that takes a minute.
	endsMidCall = scriptedStage("slow", "text = \"done\"\ncomplete = true\ndelay_ms = 60000")
)

func scriptedStage(name, script string) string {
	return fmt.Sprintf("[agent]\nname = %q\n[agent.title]\nenabled = false\n[stages.only]\n[stages.only.model]\nmodels = [{provider = \"demo\", model = \"scripted-1\"}]\n[[stages.only.script]]\n%s\n", name, script)
}

// endings is how many runs end each way.
type endings struct {
	complete, refused, outOfTurns, cancelled, deleted int
	// recreated of the deleted runs are created again under their name
	// at once, and complete.
	recreated int
}

func (e endings) total() int {
	return e.complete + e.refused + e.outOfTurns + e.cancelled + e.deleted
}

// TestRunsLeaveNothingInMemory drives 1,000 runs through every way a run
// ends (Complete; Error, refused by the provider or out of iterations;
// Cancelled mid-call; deleted mid-call, 50 of them created again at once
// under the same name, which then complete) and proves the manager keeps
// nothing of any of them in memory afterwards, in any holder of per-run
// state, and that its heap is back to its idle figure. The hand-over of a
// shard to another replica is TestShardHandedOverLeavesNoRunState's.
//
// Memory is the Go heap after a full collection, not RSS: the manager runs
// in the test's process, whose RSS also holds the test's own allocations
// and heap the runtime has not returned to the system yet. Two figures:
// live bytes (HeapAlloc), and spans in use (HeapInuse), which also counts
// the room left free in spans a burst filled and that still hold a live
// object. With the finished runs still there, the live heap must be within
// 5 MiB of idle (it holds their cache stubs); once they are deleted too,
// both figures must. The log lines the suite keeps in memory (logSink) are
// taken out of every figure.
func TestRunsLeaveNothingInMemory(t *testing.T) {
	var r *controllers.AgentRunReconciler
	ns := newNamespace(t)
	startBareManager(t, ns, func(rec *controllers.AgentRunReconciler) { r = rec })
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	for name, bp := range map[string]string{"complete": endsComplete, "refused": endsRefused, "turns": endsOutOfTurns, "slow": endsMidCall} {
		createConfigMap(t, ns, name, map[string]string{"agent.toml": bp})
	}
	w := &forgetWorld{t: t, r: r, ns: ns}

	// A few runs of every kind first, so what the manager builds once
	// (clients, parsed blueprints, metric series, caches' first objects)
	// is in the idle figure; then they go.
	start := time.Now()
	w.drive("warm", endings{complete: 10, refused: 5, outOfTurns: 5, cancelled: 5, deleted: 5, recreated: 2})
	w.deleteAll()
	t.Logf("warm-up: %v", time.Since(start).Round(time.Millisecond))
	idle := w.heap()

	start = time.Now()
	n := endings{complete: 350, refused: 100, outOfTurns: 100, cancelled: 200, deleted: 250, recreated: 50}
	if n.total() != 1000 {
		t.Fatalf("%d runs, want 1000", n.total())
	}
	left := w.drive("run", n)
	t.Logf("1,000 runs (and %d created again) ended and were forgotten in %v", n.recreated, time.Since(start).Round(time.Millisecond))
	if t.Failed() {
		return
	}
	finished := w.heap()
	w.deleteAll()
	deleted := w.heap()
	t.Logf("heap (MiB, live / in use): idle %s; the runs ended and forgotten, %d finished ones still cached %s; the runs deleted too %s; RSS %s",
		idle, left, finished.since(idle), deleted.since(idle), rss())
	if d := finished.live - idle.live; d > 5<<20 || d < -5<<20 {
		t.Errorf("live heap %+.1f MiB off its idle figure (%.1f MiB) once the runs ended and were forgotten, want within 5 MiB", mib(d), mib(idle.live))
	}
	for _, d := range []int64{deleted.live - idle.live, deleted.inUse - idle.inUse} {
		if d > 5<<20 || d < -5<<20 {
			t.Errorf("heap %+.1f MiB off its idle figure (%s) once the runs were deleted, want within 5 MiB", mib(d), idle)
		}
	}
}

// forgetWorld is the namespace TestRunsLeaveNothingInMemory drives runs in,
// and the manager's reconciler.
type forgetWorld struct {
	t  *testing.T
	r  *controllers.AgentRunReconciler
	ns string
}

// drive creates the runs, ends each the way it is meant to, waits for
// every one to have ended so, and then for the manager to keep nothing of
// any of them. It returns how many runs are left (finished).
func (w *forgetWorld) drive(prefix string, n endings) int {
	t := w.t
	t.Helper()
	set := &runSet{uids: map[string]types.UID{}, want: map[string]arv1.Phase{}}
	// The runs to stop mid-call first: their calls are in flight while
	// the others run.
	cancelled, deleted := names(prefix+"-cancel", n.cancelled), names(prefix+"-delete", n.deleted)
	parallel(slices.Concat(cancelled, deleted), func(name string) { w.add(set, name, "slow", arv1.PhaseCancelled) })
	var fast []func()
	for _, g := range []struct {
		agent string
		n     int
		phase arv1.Phase
	}{{"complete", n.complete, arv1.PhaseComplete}, {"refused", n.refused, arv1.PhaseError}, {"turns", n.outOfTurns, arv1.PhaseError}} {
		for _, name := range names(prefix+"-"+g.agent, g.n) {
			fast = append(fast, func() { w.add(set, name, g.agent, g.phase) })
		}
	}
	created := make(chan struct{})
	go func() {
		defer close(created)
		parallel(fast, func(fn func()) { fn() })
	}()
	w.waitInCall(slices.Concat(cancelled, deleted), set)
	parallel(cancelled, func(name string) {
		run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name}}
		if err := k8s.Patch(context.Background(), run, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))); err != nil {
			t.Errorf("cancelling %s: %v", name, err)
		}
	})
	parallel(deleted, func(name string) { w.deleteMidCall(set, name, slices.Contains(deleted[:n.recreated], name)) })
	<-created
	if t.Failed() {
		return 0
	}
	set.mu.Lock()
	defer set.mu.Unlock()
	w.waitEnded(set.want)
	w.waitForgotten(slices.Concat(set.old, slices.Collect(maps.Values(set.uids))))
	w.waitJournalsGone(set.old)
	return len(set.want)
}

// waitJournalsGone waits until no journal object of the deleted runs is
// left (the manager deletes them when it sees the run go, and the garbage
// collector would).
func (w *forgetWorld) waitJournalsGone(uids []types.UID) {
	w.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left []string
		for _, uid := range uids {
			var cms corev1.ConfigMapList
			if err := k8s.List(context.Background(), &cms, client.InNamespace(w.ns), client.MatchingLabels{configmaps.LabelRunUID: string(uid)}); err != nil {
				w.t.Fatal(err)
			}
			for _, cm := range cms.Items {
				left = append(left, cm.Name)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%d journal objects of deleted runs are left: %s", len(left), strings.Join(first(left, 5), ", "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runSet is the runs drive made: each one's UID, the phase each is to
// end in, and the UIDs of those deleted.
type runSet struct {
	mu   sync.Mutex
	uids map[string]types.UID
	want map[string]arv1.Phase
	old  []types.UID
}

func (s *runSet) uid(name string) types.UID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.uids[name]
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// add creates a run of agent that is to end in phase.
func (w *forgetWorld) add(set *runSet, name, agent string, phase arv1.Phase) {
	uid, err := w.create(name, agent)
	if err != nil {
		w.t.Errorf("creating %s: %v", name, err)
		return
	}
	set.mu.Lock()
	defer set.mu.Unlock()
	set.uids[name], set.want[name] = uid, phase
}

// deleteMidCall deletes a run whose call is in flight, and creates it
// again at once if recreate (the manager may then see the new run before
// it handles the old one's deletion).
func (w *forgetWorld) deleteMidCall(set *runSet, name string, recreate bool) {
	ctx := context.Background()
	run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name, UID: set.uid(name)}}
	if err := k8s.Delete(ctx, run); err != nil {
		w.t.Errorf("deleting %s: %v", name, err)
	}
	// The manager deletes the run's journal itself before it drives the
	// successor: the garbage collector's deletion may come after the
	// successor's first write, and the journal (named after the run) would
	// stand in its way.
	set.mu.Lock()
	delete(set.want, name)
	delete(set.uids, name)
	set.old = append(set.old, run.UID)
	set.mu.Unlock()
	if recreate {
		w.add(set, name, "complete", arv1.PhaseComplete)
	}
}

// create makes a run of agent and returns its UID.
func (w *forgetWorld) create(name, agent string) (types.UID, error) {
	run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name}, Spec: arv1.AgentRunSpec{Agent: agent, Task: "task of " + name}}
	err := k8s.Create(context.Background(), run)
	return run.UID, err
}

// waitInCall waits until every named run's call is in flight.
func (w *forgetWorld) waitInCall(names []string, set *runSet) {
	w.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for _, name := range names {
		uid := set.uid(name)
		for !slices.Contains(w.r.HeldFor(uid), "executor") {
			if time.Now().After(deadline) {
				w.t.Fatalf("%s: its call is not in flight (held by %v)", name, w.r.HeldFor(uid))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// waitEnded waits until every run in want has ended in its phase.
func (w *forgetWorld) waitEnded(want map[string]arv1.Phase) {
	w.t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for {
		var list arv1.AgentRunList
		if err := k8s.List(context.Background(), &list, client.InNamespace(w.ns)); err != nil {
			w.t.Fatal(err)
		}
		var wrong, open []string
		ended := 0
		for i := range list.Items {
			run := &list.Items[i]
			p, ok := want[run.Name]
			switch {
			case !ok:
				wrong = append(wrong, run.Name+" is still there")
			case run.Status.Phase == p:
				ended++
			case run.Status.Phase.IsTerminal():
				wrong = append(wrong, fmt.Sprintf("%s ended %s (%s), want %s", run.Name, run.Status.Phase, run.Status.Error, p))
			default:
				open = append(open, fmt.Sprintf("%s %s (%s)", run.Name, run.Status.Phase, strings.Join(w.r.HeldFor(run.UID), ", ")))
			}
		}
		if len(wrong) == 0 && ended == len(want) {
			return
		}
		if len(wrong) > 0 || time.Now().After(deadline) {
			w.t.Fatalf("%d of %d runs ended as they should; %s; not ended: %s", ended, len(want), strings.Join(first(wrong, 5), "; "), strings.Join(first(open, 5), "; "))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitForgotten waits until the manager keeps nothing of any of the runs,
// nor of any other (it watches only the test's namespace).
func (w *forgetWorld) waitForgotten(uids []types.UID) {
	w.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var held []string
		for _, uid := range uids {
			if h := w.r.HeldFor(uid); len(h) > 0 {
				held = append(held, fmt.Sprintf("%s: %s", uid, strings.Join(h, ", ")))
			}
		}
		n := w.r.RunsInMemory()
		if len(held) == 0 && n == 0 {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%d runs still held in memory (%d in all), e.g. %s", len(held), n, strings.Join(first(held, 5), "; "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// deleteAll deletes every run of the namespace and waits until the
// manager's cache holds none and it keeps nothing of any.
func (w *forgetWorld) deleteAll() {
	w.t.Helper()
	ctx := context.Background()
	if err := k8s.DeleteAllOf(ctx, &arv1.AgentRun{}, client.InNamespace(w.ns)); err != nil {
		w.t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for cachedRuns(w.t, w.ns) > 0 || w.r.RunsInMemory() > 0 {
		if time.Now().After(deadline) {
			w.t.Fatalf("after deleting every run: %d cached, %d held in memory", cachedRuns(w.t, w.ns), w.r.RunsInMemory())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The blueprint snapshots the runs shared (no run owns one, so the
	// garbage collector leaves them to the manager's sweep) and any journal
	// not deleted yet: nothing of the manager's, but the API server's
	// memory.
	if err := k8s.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(w.ns), client.HasLabels{arv1.LabelComponent}); err != nil && !apierrors.IsNotFound(err) {
		w.t.Fatal(err)
	}
}

// heapFigures are the Go heap's live bytes (HeapAlloc) and its spans in
// use (HeapInuse, which also counts the free room left in spans that hold
// a live object) after a full collection, less the suite's in-memory log.
type heapFigures struct{ live, inUse int64 }

func (h heapFigures) String() string { return fmt.Sprintf("%.1f / %.1f", mib(h.live), mib(h.inUse)) }

// since is h and its difference from base.
func (h heapFigures) since(base heapFigures) string {
	return fmt.Sprintf("%s (%+.1f / %+.1f)", h, mib(h.live-base.live), mib(h.inUse-base.inUse))
}

func (w *forgetWorld) heap() heapFigures {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	log := int64(logSink.capacity())
	return heapFigures{live: int64(m.HeapAlloc) - log, inUse: int64(m.HeapInuse) - log}
}

// cachedRuns is how many runs of ns the manager's cache holds, as its
// agentrun_runs gauge reads them.
func cachedRuns(t *testing.T, ns string) int {
	t.Helper()
	n, _ := gaugeSum(t, "agentrun_runs", ns)
	return int(n)
}

// gaugeSum sums the gauge name's series of namespace ns ("": every
// series) as the manager's metrics endpoint would show them; found says
// whether any was there.
func gaugeSum(t *testing.T, name, ns string) (sum float64, found bool) {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			in := ns == ""
			for _, l := range m.GetLabel() {
				in = in || (l.GetName() == "namespace" && l.GetValue() == ns)
			}
			if in {
				sum, found = sum+m.GetGauge().GetValue(), true
			}
		}
	}
	return sum, found
}

// startBareManager starts a manager that keeps nothing per run for the
// test's sake (no reconcile counts, an uncounted scripted provider) and
// hands its reconciler to got.
func startBareManager(t *testing.T, ns string, got func(*controllers.AgentRunReconciler)) {
	t.Helper()
	// Only the test's namespace: runs other tests left behind are not
	// this manager's to hold.
	mgr, err := manager.New(env.Config, manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true, Namespaces: []string{ns},
		Egress: loopbackEgress(), EgressOptions: suiteEgressOptions(),
		OnReconciler: got,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// parallel calls fn with each item, eight at a time.
func parallel[T any](items []T, fn func(T)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, it := range items {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(it)
		}()
	}
	wg.Wait()
}

func first(s []string, n int) []string { return s[:min(len(s), n)] }

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// rss is the process's resident set after returning free heap to the
// system (for the log: it holds the test's own memory too).
func rss() string {
	debug.FreeOSMemory()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err == nil {
				return fmt.Sprintf("%.1f MiB", float64(kb)/1024)
			}
		}
	}
	return "unknown"
}
