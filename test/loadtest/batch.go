package loadtest

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/eventsink"
)

// Batch describes one batch of AgentRuns for RunBatch.
type Batch struct {
	// Namespace must hold the blueprint ConfigMap and the provider config
	// (SetupNamespace does both).
	Namespace string
	// Agent is the blueprint ConfigMap the runs name.
	Agent string
	// Prefix names the runs Prefix-00000, Prefix-00001, ...
	Prefix string
	// N runs are created by Concurrency goroutines (default 32).
	N, Concurrency int
	// Until is the state a run must reach (default: phase Complete) and
	// UntilName says it in reports. A run that ends in a terminal phase
	// before reaching it fails the batch.
	Until     func(*arv1.AgentRun) bool
	UntilName string
	// Timeout bounds the whole batch (default 10 minutes).
	Timeout time.Duration
	// Settle is how long after the last run reached Until the writes, the
	// reconcile histogram and the objects left are still counted (default
	// a second past the longest an Event gives way to the runs' writes), so
	// trailing writes (events, a last status) land in the window.
	Settle time.Duration
	// Manager, if set, is scraped before and after for the reconcile
	// histogram and read for its memory at the end.
	Manager *Manager
	// ProfileTo, if set, receives a CPU profile of the API server over the
	// batch's first ProfileFor (default 10s); the API server must serve
	// /debug/pprof (AGENTRUN_TESTENV_PROFILING=1).
	ProfileTo  string
	ProfileFor time.Duration
	// ProfileAfter delays the profile's start from the first create (to
	// profile a batch's end alone).
	ProfileAfter time.Duration
	// ManagerProfileTo, if set, receives a CPU profile of the manager over
	// the same span, and ManagerProfileTo + ".goroutines.txt" a dump of
	// its goroutines at the span's middle (where its runs wait); the
	// manager must serve pprof (--pprof-bind-address).
	ManagerProfileTo string
	// Observe, if set, is given every run of the namespace the batch's
	// watch sees, as it sees it.
	Observe func(*arv1.AgentRun)
	// DatabasePID, if set, is a database server whose process tree's CPU
	// (TreeCPU) is sampled with the others, as DatabaseCPU.
	DatabasePID int
	// Create, if set, creates the batch's runs instead of the harness's
	// own client (N runs named RunName(Prefix, i), task RunTask(name), of
	// Agent), returning when each create returned; KubectlCreate is one.
	Create func(ctx context.Context, b Batch) (map[string]time.Time, error)
}

// cpuNow samples the processes the batch measures.
func (b Batch) cpuNow() CPUSample {
	s := CPUNow(b.Manager)
	if b.DatabasePID != 0 {
		if d, err := TreeCPU(b.DatabasePID); err == nil {
			s[DatabaseCPU] = d
		}
	}
	return s
}

// BatchResult is what RunBatch measured.
type BatchResult struct {
	Batch
	// FirstCreate is when the first create was sent; every duration below
	// is measured from it.
	FirstCreate time.Time
	// CreatesDone is when the last create returned; CreatedAt when each
	// run's did.
	CreatesDone time.Duration
	CreatedAt   map[string]time.Time
	// Reached holds each run's time to reach Until, ascending, as first
	// seen through the watch.
	Reached []time.Duration
	// ReachedAt is when each run was first seen at Until.
	ReachedAt map[string]time.Time
	// Writes is the etcd revision's movement from just before the first
	// create to Settle after the last run reached Until; Window is that
	// window's length.
	Writes int64
	Window time.Duration
	// Phases counts the runs' last phase seen through the watch, and
	// ModelCalls their last status.usage.modelCalls.
	Phases     map[arv1.Phase]int
	ModelCalls map[int64]int
	// FirstPhases counts the runs' phase when the watch first showed them
	// (their creation, for a watch started before it): a run in line reads
	// Queued from the start.
	FirstPhases map[arv1.Phase]int
	// Left is the objects in the namespace at the end minus those before
	// the first create (the batch's own AgentRuns not counted).
	Left ObjectCounts
	// Reconcile is the AgentRun controller's reconcile-time histogram over
	// the window (zero without Manager), and Memory the manager's at its
	// end.
	Reconcile Histogram
	// QueueWait is how long runs waited in the work queue for a worker
	// over the batch, and WakeWait how long runs the manager woke waited
	// for their reconcile to start.
	QueueWait Histogram
	WakeWait  Histogram
	Memory    Memory
	// CPU is what each process used over the window, and Requests what
	// the API server was asked. CPUToLast is what each process used from
	// the first create until the last run was seen at Until: the work
	// inside the wall, without what Settle adds after it (held Events,
	// idle processes).
	CPU       CPUSample
	CPUToLast CPUSample
	Requests  Requests
	// ServerTimes is how long the API server took to answer them.
	ServerTimes ServerTimes
	// Size is the first run's size once it reached Until.
	Size RunSize
}

// RunName is the i-th run's name in a batch with prefix.
func RunName(prefix string, i int) string { return fmt.Sprintf("%s-%05d", prefix, i) }

// SetupNamespace creates a namespace with the blueprint ConfigMap agent
// (key agent.toml) and the scripted provider config.
func (c *Cluster) SetupNamespace(ctx context.Context, prefix, agent, manifest string) (string, error) {
	return c.setupNamespaceWith(ctx, prefix, agent, manifest, ProvidersTOML)
}

// setupNamespaceWith creates a namespace with the blueprint ConfigMap agent
// and a provider config holding providersTOML.
func (c *Cluster) setupNamespaceWith(ctx context.Context, prefix, agent, manifest, providersTOML string) (string, error) {
	ns, err := c.NewNamespace(ctx, prefix)
	if err != nil {
		return "", err
	}
	if err := c.CreateConfigMap(ctx, ns, agent, map[string]string{"agent.toml": manifest}); err != nil {
		return "", err
	}
	if err := c.CreateConfigMap(ctx, ns, ProvidersConfigMap, map[string]string{"providers.toml": providersTOML}); err != nil {
		return "", err
	}
	return ns, nil
}

// CreateRuns creates n AgentRuns named RunName(prefix, i) of blueprint agent
// in ns from concurrency goroutines.
func (c *Cluster) CreateRuns(ctx context.Context, ns, agent, prefix string, n, concurrency int) error {
	return c.CreateRunsWith(ctx, ns, agent, prefix, n, concurrency, nil)
}

// createRunsTimed is CreateRuns that records when each create returned.
func (c *Cluster) createRunsTimed(ctx context.Context, b Batch) (map[string]time.Time, error) {
	var mu sync.Mutex
	at := make(map[string]time.Time, b.N)
	err := Parallel(ctx, b.N, b.Concurrency, func(ctx context.Context, i int) error {
		name := RunName(b.Prefix, i)
		run := &arv1.AgentRun{
			ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: name},
			Spec:       arv1.AgentRunSpec{Agent: b.Agent, Task: RunTask(name)},
		}
		if err := c.Client.Create(ctx, run); err != nil {
			return fmt.Errorf("creating AgentRun %s/%s: %w", b.Namespace, name, err)
		}
		mu.Lock()
		at[name] = time.Now()
		mu.Unlock()
		return nil
	})
	return at, err
}

// RunTask is the task of a batch's run name: it names the run, so a
// loopback provider can tell which run a call is for.
func RunTask(name string) string { return "load test task " + name }

// CancelRuns sets spec.cancel on every AgentRun of ns and waits until all
// of them have ended.
func (c *Cluster) CancelRuns(ctx context.Context, ns string, timeout time.Duration) error {
	var list arv1.AgentRunList
	if err := c.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return err
	}
	for i := range list.Items {
		run := &list.Items[i]
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))
		if err := c.Client.Patch(ctx, run, patch); err != nil {
			return fmt.Errorf("cancelling %s/%s: %w", ns, run.Name, err)
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		if err := c.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		open := 0
		for _, run := range list.Items {
			if !run.Status.Phase.IsTerminal() {
				open++
			}
		}
		if open == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d runs in %s had not ended %v after their cancel", open, len(list.Items), ns, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// IsComplete is the default Until: phase Complete.
func IsComplete(r *arv1.AgentRun) bool { return r.Status.Phase == arv1.PhaseComplete }

// IsWaitingForAPerson is an Until for runs that stop at a person: phase
// WaitingInput on an interaction point.
func IsWaitingForAPerson(r *arv1.AgentRun) bool {
	return r.Status.Phase == arv1.PhaseWaitingInput && r.Status.WaitingOn != nil && r.Status.WaitingOn.Reason == arv1.WaitInteractionPoint
}

// runWatch follows the namespace's AgentRuns from a resourceVersion taken
// before the batch, and records when each of the batch's runs first reached
// the target.
type runWatch struct {
	want    map[string]bool
	until   func(*arv1.AgentRun) bool
	reached map[string]time.Time
	last    map[string]*arv1.AgentRun
	failed  *arv1.AgentRun
	// firstPhase is each run's phase when the watch first showed it.
	firstPhase map[string]arv1.Phase
	// also is Batch.Observe.
	also func(*arv1.AgentRun)
}

// RunBatch creates the batch's runs and follows them through a watch of
// the namespace's AgentRuns started before the first create, until every
// run reached Until (see BatchResult for what is measured). It fails when a
// run ends in another terminal phase, or at Timeout, naming the phases seen.
func (c *Cluster) RunBatch(ctx context.Context, b Batch) (*BatchResult, error) {
	b = b.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, b.Timeout)
	defer cancel()
	res := &BatchResult{Batch: b}

	w := &runWatch{want: map[string]bool{}, until: b.Until, reached: map[string]time.Time{}, last: map[string]*arv1.AgentRun{}, firstPhase: map[string]arv1.Phase{}, also: b.Observe}
	for i := range b.N {
		w.want[RunName(b.Prefix, i)] = true
	}
	before, err := c.CountObjects(ctx, b.Namespace, w.want)
	if err != nil {
		return nil, err
	}
	events, stopWatch, err := c.watchRuns(ctx, b.Namespace)
	if err != nil {
		return nil, err
	}
	defer stopWatch()

	marks, err := c.markBatch(ctx, b)
	if err != nil {
		return nil, err
	}
	res.FirstCreate = time.Now()
	marks.cpu = b.cpuNow()
	if b.ProfileTo != "" {
		// Not cancelled with the batch: a profile longer than the batch
		// still arrives.
		for kind, path := range map[string]string{"profile": b.ProfileTo, "trace": b.ProfileTo + ".trace"} {
			go func() {
				time.Sleep(b.ProfileAfter)
				c.profileAPIServer(context.WithoutCancel(ctx), kind, path, b.ProfileFor)
			}()
		}
	}
	if b.ManagerProfileTo != "" && b.Manager != nil {
		go b.Manager.profile(context.WithoutCancel(ctx), b.ManagerProfileTo, b.ProfileAfter, b.ProfileFor)
	}
	created := make(chan error, 1)
	go func() {
		var err error
		if b.Create != nil {
			res.CreatedAt, err = b.Create(ctx, b)
		} else {
			res.CreatedAt, err = c.createRunsTimed(ctx, b)
		}
		res.CreatesDone = time.Since(res.FirstCreate)
		created <- err
	}()
	if err := w.follow(ctx, b, events, created); err != nil {
		return nil, err
	}
	res.CPUToLast = b.cpuNow().Sub(marks.cpu)
	lastAt := res.reached(w)
	select {
	case <-time.After(time.Until(lastAt.Add(b.Settle))):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := c.measureBatch(ctx, b, res, marks); err != nil {
		return nil, err
	}
	res.tally(w)
	after, err := c.CountObjects(ctx, b.Namespace, w.want)
	if err != nil {
		return nil, err
	}
	res.Left = after.Sub(before)
	if res.Size, err = c.AgentRunSize(ctx, b.Namespace, RunName(b.Prefix, 0)); err != nil {
		return nil, err
	}
	return res, nil
}

// withDefaults fills in the batch's unset knobs.
func (b Batch) withDefaults() Batch {
	if b.Concurrency <= 0 {
		b.Concurrency = 32
	}
	if b.Until == nil {
		b.Until, b.UntilName = IsComplete, "Complete"
	}
	if b.Timeout <= 0 {
		b.Timeout = 10 * time.Minute
	}
	if b.Settle <= 0 {
		b.Settle = eventsink.DefaultGiveWayFor + time.Second
	}
	return b
}

// batchMarks are the counters read before a batch, subtracted from the
// same read after it.
type batchMarks struct {
	hist, queue, wake Histogram
	rev               int64
	cpu               CPUSample
	req               Requests
	times             ServerTimes
}

// markBatch reads the manager's histograms and the API server's request
// counters and revision before the batch (the CPU is read by RunBatch,
// right at the first create).
func (c *Cluster) markBatch(ctx context.Context, b Batch) (batchMarks, error) {
	var m batchMarks
	if b.Manager != nil {
		sc, err := b.Manager.Scrape(ctx)
		if err != nil {
			return m, fmt.Errorf("scraping the manager before the batch: %w", err)
		}
		m.hist, m.queue, m.wake = ReconcileTime(sc), QueueWait(sc), WakeWait(sc)
	}
	// Before the first create, not after: scraping the API server's
	// /metrics takes it about 0.1 s and some CPU, which are the harness's,
	// not the batch's.
	sc, err := c.APIServerMetrics(ctx)
	if err != nil {
		return m, err
	}
	m.req, m.times = RequestsOf(sc), ServerTimesOf(sc)
	m.rev, err = c.Revision(ctx)
	return m, err
}

// follow reads the watch until every run reached Until and every create
// is done; it fails on a create's error, a run that ended otherwise, the
// watch ending, or the batch's timeout.
func (w *runWatch) follow(ctx context.Context, b Batch, events <-chan watch.Event, created <-chan error) error {
	creating := true
	for creating || len(w.reached) < b.N {
		select {
		case err := <-created:
			creating = false
			if err != nil {
				return err
			}
		case ev, ok := <-events:
			if !ok {
				return fmt.Errorf("the watch of AgentRuns in %s ended early; %s", b.Namespace, w.summary(b))
			}
			if err := w.observe(ev, time.Now()); err != nil {
				return fmt.Errorf("%w; %s", err, w.summary(b))
			}
			if w.failed != nil {
				r := w.failed
				return fmt.Errorf("run %s/%s ended %s (error %q) before reaching %s; %s", r.Namespace, r.Name, r.Status.Phase, r.Status.Error, b.UntilName, w.summary(b))
			}
		case <-ctx.Done():
			return fmt.Errorf("batch timed out after %v: %d of %d runs reached %s; %s", b.Timeout, len(w.reached), b.N, b.UntilName, w.summary(b))
		}
	}
	return nil
}

// reached records when each run reached Until, and returns the last time.
func (r *BatchResult) reached(w *runWatch) time.Time {
	var lastAt time.Time
	r.ReachedAt = w.reached
	for _, t := range w.reached {
		r.Reached = append(r.Reached, t.Sub(r.FirstCreate))
		if t.After(lastAt) {
			lastAt = t
		}
	}
	sort.Slice(r.Reached, func(i, j int) bool { return r.Reached[i] < r.Reached[j] })
	return lastAt
}

// measureBatch reads what the batch cost: writes, CPU, API requests, and
// the manager's reconcile and queue times and memory.
func (c *Cluster) measureBatch(ctx context.Context, b Batch, res *BatchResult, marks batchMarks) error {
	rev1, err := c.Revision(ctx)
	if err != nil {
		return err
	}
	res.Writes, res.Window = rev1-marks.rev, time.Since(res.FirstCreate)
	res.CPU = b.cpuNow().Sub(marks.cpu)
	sc, err := c.APIServerMetrics(ctx)
	if err != nil {
		return err
	}
	res.Requests = RequestsOf(sc).Sub(marks.req)
	res.ServerTimes = ServerTimesOf(sc).Sub(marks.times)
	if b.Manager != nil {
		sc, err := b.Manager.Scrape(ctx)
		if err != nil {
			return fmt.Errorf("scraping the manager after the batch: %w", err)
		}
		res.Reconcile = ReconcileTime(sc).Sub(marks.hist)
		res.QueueWait = QueueWait(sc).Sub(marks.queue)
		res.WakeWait = WakeWait(sc).Sub(marks.wake)
		if res.Memory, err = b.Manager.Memory(); err != nil {
			return err
		}
	}
	return nil
}

// tally counts the runs' first and last phases and their model calls.
func (r *BatchResult) tally(w *runWatch) {
	r.Phases, r.ModelCalls, r.FirstPhases = map[arv1.Phase]int{}, map[int64]int{}, map[arv1.Phase]int{}
	for _, p := range w.firstPhase {
		r.FirstPhases[p]++
	}
	for _, run := range w.last {
		r.Phases[run.Status.Phase]++
		r.ModelCalls[int64(run.Status.Usage.ModelCalls)]++
	}
}

// watchRuns watches the AgentRuns of ns from the current resourceVersion,
// resuming on its own when the API server closes the watch.
func (c *Cluster) watchRuns(ctx context.Context, ns string) (<-chan watch.Event, func(), error) {
	var list arv1.AgentRunList
	if err := c.Client.List(ctx, &list, client.InNamespace(ns), client.Limit(1)); err != nil {
		return nil, nil, fmt.Errorf("listing AgentRuns in %s: %w", ns, err)
	}
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.AllowWatchBookmarks = true
		return c.Client.Watch(ctx, &arv1.AgentRunList{}, client.InNamespace(ns), &client.ListOptions{Raw: &o})
	}}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, lw)
	if err != nil {
		return nil, nil, fmt.Errorf("watching AgentRuns in %s: %w", ns, err)
	}
	return rw.ResultChan(), rw.Stop, nil
}

func (w *runWatch) observe(ev watch.Event, at time.Time) error {
	switch ev.Type {
	case watch.Added, watch.Modified:
	case watch.Error:
		return fmt.Errorf("the AgentRun watch failed: %v", apierrors.FromObject(ev.Object))
	default: // bookmarks, deletions
		return nil
	}
	r, ok := ev.Object.(*arv1.AgentRun)
	if !ok {
		return fmt.Errorf("the AgentRun watch sent a %T", ev.Object)
	}
	if w.also != nil {
		w.also(r)
	}
	if !w.want[r.Name] {
		return nil
	}
	w.last[r.Name] = r
	if _, seen := w.firstPhase[r.Name]; !seen {
		w.firstPhase[r.Name] = r.Status.Phase
	}
	if _, done := w.reached[r.Name]; done {
		return nil
	}
	if w.until(r) {
		w.reached[r.Name] = at
		return nil
	}
	if r.Status.Phase.IsTerminal() && w.failed == nil {
		w.failed = r
	}
	return nil
}

// summary says which phases the runs were last seen in.
func (w *runWatch) summary(b Batch) string {
	counts := map[string]int{}
	for name := range w.want {
		if r, ok := w.last[name]; ok {
			p := string(r.Status.Phase)
			if p == "" {
				p = "(no phase yet)"
			}
			if r.Status.WaitingOn != nil {
				p += "/" + string(r.Status.WaitingOn.Reason)
			}
			counts[p]++
		} else {
			counts["(never seen)"]++
		}
	}
	var parts []string
	for _, k := range sortedKeys(counts) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, counts[k]))
	}
	return fmt.Sprintf("last phases seen of the %d runs: %s", b.N, strings.Join(parts, " "))
}

// At is the time by which the fraction frac (0 < frac <= 1) of the runs had
// reached Until: the ceil(frac*N)-th arrival.
func (r *BatchResult) At(frac float64) time.Duration {
	if len(r.Reached) == 0 {
		return 0
	}
	k := int(math.Ceil(frac*float64(len(r.Reached)))) - 1
	return r.Reached[min(max(k, 0), len(r.Reached)-1)]
}

// First is At(0): when the first run reached Until.
func (r *BatchResult) First() time.Duration { return r.At(0) }

// P1 is At(1%).
func (r *BatchResult) P1() time.Duration { return r.At(0.01) }

// Half is At(50%).
func (r *BatchResult) Half() time.Duration { return r.At(0.5) }

// All is At(100%): when the last run reached Until.
func (r *BatchResult) All() time.Duration { return r.At(1) }

// RunsPerSec is N / (last arrival - first create).
func (r *BatchResult) RunsPerSec() float64 { return float64(r.N) / r.All().Seconds() }

// WritesPerRun is the revision delta over the window per run (the run's
// own create included, the background noise too; see Noise).
func (r *BatchResult) WritesPerRun() float64 { return float64(r.Writes) / float64(r.N) }

// WritesPerRunLessNoise subtracts idleRate's expected background writes over
// the window.
func (r *BatchResult) WritesPerRunLessNoise(idleRate float64) float64 {
	return (float64(r.Writes) - Noise(idleRate, r.Window)) / float64(r.N)
}

// LeftPerRun is Left[kind] / N.
func (r *BatchResult) LeftPerRun(kind string) float64 { return float64(r.Left[kind]) / float64(r.N) }

// profileAPIServer writes the API server's pprof endpoint kind
// ("profile": CPU; "trace": an execution trace, where its requests wait)
// over d to path. A failure is only logged: a profile is a diagnostic,
// not a result.
func (c *Cluster) profileAPIServer(ctx context.Context, kind, path string, d time.Duration) {
	if d <= 0 {
		d = 10 * time.Second
	}
	body, err := c.Kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/"+kind).
		Param("seconds", fmt.Sprint(int(d.Seconds()))).Timeout(d + 30*time.Second).DoRaw(ctx)
	if err == nil {
		err = os.WriteFile(path, body, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "the API server's %s: %v\n", kind, err)
	}
}
