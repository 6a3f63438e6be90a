package loadtest_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool/mcptest"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv/postgres"
	"github.com/agentrun-dev/agentrun-operator/test/loadtest"
)

const (
	// outageCalls is how many model calls a run of
	// TestLongRunsSurviveKillsAndStoreOutages makes, each held
	// outageCallDelay by the server.
	outageCalls     = 30
	outageCallDelay = 150 * time.Millisecond
	// outageHold is how long PostgreSQL stays away each time.
	outageHold = 20 * time.Second
	// outageWave is how many runs each wave creates, outageWriters of
	// them making a write through the MCP server.
	outageWave    = 10
	outageWriters = 3
)

// storeWaits records, from a watch of the namespace, when each run entered
// and left waitingOn StoreUnavailable, whether a person was ever asked for
// it, and when each run first needed a person to settle a dangling write.
type storeWaits struct {
	mu             sync.Mutex
	in             map[string]bool
	events         []storeWaitEvent
	needsAPerson   []string
	reconciliation map[string]time.Time
	// states is each run's phase and wait as they changed, for the
	// timeline a failure shows.
	states map[string][]runState
}

// runState is a run's phase and wait from when the watch showed it.
type runState struct {
	at    time.Time
	state string
}

type storeWaitEvent struct {
	at    time.Time
	run   string
	enter bool
}

func newStoreWaits() *storeWaits {
	return &storeWaits{in: map[string]bool{}, reconciliation: map[string]time.Time{}, states: map[string][]runState{}}
}

// follow records the runs the watch shows until ctx ends.
func (w *storeWaits) follow(ctx context.Context, events <-chan watch.Event) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			if r, isRun := ev.Object.(*arv1.AgentRun); isRun && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				w.observe(r, time.Now())
			}
		}
	}
}

func (w *storeWaits) observe(r *arv1.AgentRun, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wo := r.Status.WaitingOn
	waiting := wo != nil && wo.Reason == arv1.WaitStoreUnavailable
	if waiting && wo.NeedsAPerson {
		w.needsAPerson = append(w.needsAPerson, fmt.Sprintf("%s at %s: %s (remedy %q)", r.Name, at.Format("15:04:05.000"), wo.StoreError, wo.Remedy))
	}
	if wo != nil && wo.Reason == arv1.WaitNeedsReconciliation {
		if _, seen := w.reconciliation[r.Name]; !seen {
			w.reconciliation[r.Name] = at
		}
	}
	state := string(r.Status.Phase)
	if wo != nil {
		state += "/" + describeWait(wo)
	}
	if h := w.states[r.Name]; len(h) == 0 || h[len(h)-1].state != state {
		w.states[r.Name] = append(h, runState{at: at, state: state})
	}
	if waiting != w.in[r.Name] {
		w.in[r.Name] = waiting
		w.events = append(w.events, storeWaitEvent{at: at, run: r.Name, enter: waiting})
	}
}

// outageWindow is a span PostgreSQL was away.
type outageWindow struct {
	name     string
	from, to time.Time
}

// during says, of the runs in flight when the outage began (seen, and
// not finished), which showed StoreUnavailable before it ended and which
// did not; and, of the runs waiting on it when the database came back,
// how long the last took to go on (allWentOn false when one never did).
func (w *storeWaits) during(o outageWindow) (showed, didNot []string, wentOn time.Duration, allWentOn bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for run, h := range w.states {
		last := ""
		for _, st := range h {
			if st.at.After(o.from) {
				break
			}
			last = st.state
		}
		if last == "" || strings.HasPrefix(last, string(arv1.PhaseComplete)) {
			continue
		}
		waited := false
		for _, e := range w.events {
			waited = waited || (e.run == run && e.enter && !e.at.After(o.to))
		}
		if waited {
			showed = append(showed, run)
		} else {
			didNot = append(didNot, run)
		}
	}
	waiting := map[string]bool{}
	for _, e := range w.events {
		if e.at.After(o.to) {
			break
		}
		waiting[e.run] = e.enter
	}
	allWentOn = true
	for run, in := range waiting {
		if !in {
			continue
		}
		left := false
		for _, e := range w.events {
			if e.run == run && !e.enter && e.at.After(o.to) {
				wentOn, left = max(wentOn, e.at.Sub(o.to)), true
				break
			}
		}
		allWentOn = allWentOn && left
	}
	sort.Strings(showed)
	sort.Strings(didNot)
	return showed, didNot, wentOn, allWentOn
}

// timeline is each run's states, in seconds from t0.
func (w *storeWaits) timeline(t0 time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var lines []string
	for run, h := range w.states {
		var parts []string
		for _, st := range h {
			parts = append(parts, fmt.Sprintf("%.1f %s", st.at.Sub(t0).Seconds(), st.state))
		}
		lines = append(lines, run+": "+strings.Join(parts, ", "))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestLongRunsSurviveKillsAndStoreOutages: runs of 30 chained model calls
// (150 ms each, against a loopback OpenAI-compatible server) keep their
// journal in PostgreSQL; three of each wave of ten also make one write
// through a loopback MCP server that counts executions by idempotency key.
// A wave is created, the manager is killed with SIGKILL mid-chain and
// restarted; a second wave, and PostgreSQL is frozen with SIGSTOP for 20 s;
// a third, and PostgreSQL is shut down for 20 s and started again. Every run
// completes (none ends in Error); every call the provider served is in some
// run's usage (Σ modelCalls + lostCalls covers it, globally and run by
// run); no write runs twice and every writer's runs once; and during each
// outage runs showed waitingOn StoreUnavailable with needsAPerson false and
// went on by themselves once the database was back. A write the kill left
// dangling is settled as a person would (Done if the server executed it,
// Retry if not); a database outage must leave none.
func TestLongRunsSurviveKillsAndStoreOutages(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, a control plane and two manager processes")
	}
	c := sharedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	pg, db := postgres.ForTest(t, postgres.Options{})
	srv, err := loadtest.NewLatencyServer(outageCallDelay, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	tap := newCallTap(t, srv.URL())
	tools := mcptest.New(t, mcptest.Options{})
	ns, err := c.SetupLatencyNamespace(ctx, "storekill", "chain", loadtest.ChainBlueprint(outageCalls, ""), loadtest.LatencyProvidersTOML(tap.BaseURL(), ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CreateConfigMap(ctx, ns, "writer", map[string]string{"agent.toml": loadtest.ChainBlueprint(outageCalls, tools.URL())}); err != nil {
		t.Fatal(err)
	}
	waits := newStoreWaits()
	events, stopWatch, err := c.WatchRuns(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer stopWatch()
	go waits.follow(ctx, events)

	seat := newManagerSeat(t, ctx, c)
	// Its manager watches this test's namespace only: one watching the
	// shared cluster also archives the finished ConfigMap-journal runs
	// earlier tests left, and those archives held its reconcilers in the
	// stopped database, it seems: a run here once showed its wait only
	// after the outage.
	seat.Flags = []string{"--store=" + db.DSN, "--namespaces=" + ns}
	seat.Start()
	srv.Take() // count from the batch on
	t0 := time.Now()
	wave := func(name string) {
		t.Helper()
		if err := c.CreateRunsWith(ctx, ns, "chain", name, outageWave-outageWriters, outageWave, nil); err != nil {
			t.Fatal(err)
		}
		if err := c.CreateRunsWith(ctx, ns, "writer", name+"w", outageWriters, outageWriters, nil); err != nil {
			t.Fatal(err)
		}
		// Every run of the wave is in its chain before anything happens to
		// it.
		waitCallsReached(t, tap, []string{name, name + "w"}, []int{outageWave - outageWriters, outageWriters}, 3, time.Minute)
	}

	wave("a")
	killedAt := time.Now()
	if err := seat.M.Kill(); err != nil {
		t.Fatal(err)
	}
	seat.Start()
	t.Logf("killed the manager %v after the first create; the next one ran its workers %v later", killedAt.Sub(t0).Round(time.Millisecond), time.Since(killedAt).Round(time.Millisecond))

	wave("b")
	paused := outageWindow{name: "SIGSTOP", from: time.Now()}
	if err := pg.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(outageHold) // the outage itself, not a wait for a result
	if err := pg.Resume(); err != nil {
		t.Fatal(err)
	}
	paused.to = time.Now()

	wave("c")
	down := outageWindow{name: "restart", from: time.Now()}
	pg.Down()
	time.Sleep(outageHold) // the outage itself
	if err := pg.Up(); err != nil {
		t.Fatal(err)
	}
	down.to = time.Now()

	settled := map[string]arv1.AnswerDecision{}
	runs := awaitSettlingDanglingWrites(t, ctx, c, seat, ns, tools, 3*outageWave, settled, 4*time.Minute)
	wall := time.Since(t0)
	checkOutageAccounting(t, runs, srv.Take(), tap)
	checkWritesOnce(t, runs, tools)

	for _, o := range []outageWindow{paused, down} {
		showed, didNot, wentOn, allWentOn := waits.during(o)
		started := tap.startedBetween(o.from.Add(time.Second), o.to)
		t.Logf("PostgreSQL %s outage %.1fs to %.1fs: of the runs in flight, %d showed StoreUnavailable (%s), %d did not (%s); %d calls reached the provider from 1s into it to its end; the last waiting run went on %v after the database was back",
			o.name, o.from.Sub(t0).Seconds(), o.to.Sub(t0).Seconds(), len(showed), strings.Join(showed, " "), len(didNot), strings.Join(didNot, " "), started, wentOn.Round(time.Millisecond))
		if len(showed) == 0 || len(didNot) > 0 {
			t.Errorf("during the %s outage (%v) %d of the %d runs in flight did not show waitingOn StoreUnavailable: %v", o.name, outageHold, len(didNot), len(showed)+len(didNot), didNot)
		}
		if started > 0 {
			t.Errorf("%d model calls reached the provider while the database was away (%s, from 1s into it): a call started whose intent could not be recorded", started, o.name)
		}
		if !allWentOn {
			t.Errorf("after the %s outage a run waiting on StoreUnavailable never went on", o.name)
		}
	}
	if t.Failed() {
		t.Logf("the runs' states (seconds from the first create):\n%s\nmanager log tail:\n%s", waits.timeline(t0), seat.M.LogTail(8000))
	}
	waits.mu.Lock()
	for _, s := range waits.needsAPerson {
		t.Errorf("StoreUnavailable with needsAPerson true (the database only went away): %s", s)
	}
	for run, at := range waits.reconciliation {
		if at.After(paused.from) {
			t.Errorf("%s needed a person for a dangling write at %s, after the first database outage began (%s): an outage must leave no write dangling",
				run, at.Format("15:04:05.000"), paused.from.Format("15:04:05.000"))
		}
	}
	waits.mu.Unlock()
	t.Logf("%d runs Complete %v after the first create; dangling writes settled after the kill: %v", len(runs), wall.Round(time.Millisecond), settled)
}

// waitCallsReached waits until each of counts[i] runs of prefixes[i] has
// had at least k calls reach the provider.
func waitCallsReached(t *testing.T, tap *callTap, prefixes []string, counts []int, k int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		reached := tap.perRun()
		short := 0
		for i, p := range prefixes {
			for j := range counts[i] {
				if reached[loadtest.RunName(p, j)] < k {
					short++
				}
			}
		}
		if short == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d runs of %v had not made %d calls %v after their create", short, prefixes, k, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// awaitSettlingDanglingWrites waits until n runs of ns are Complete,
// failing at once when one ends otherwise. A run waiting on
// NeedsReconciliation (a write a kill left dangling) is answered as a
// person would: Done if the tool server executed a call with the run's
// idempotency key, Retry if not; settled records the decisions.
func awaitSettlingDanglingWrites(t *testing.T, ctx context.Context, c *loadtest.Cluster, seat *managerSeat, ns string, tools *mcptest.Server, n int, settled map[string]arv1.AnswerDecision, timeout time.Duration) map[string]arv1.AgentRun {
	t.Helper()
	user := whoami(t, ctx, c)
	deadline := time.Now().Add(timeout)
	for {
		runs, err := chainListRuns(ctx, c, ns)
		if err != nil {
			t.Fatal(err)
		}
		complete := 0
		var open []string
		for name, r := range runs {
			switch {
			case r.Status.Phase == arv1.PhaseComplete:
				complete++
			case r.Status.Phase.IsTerminal():
				t.Fatalf("%s ended %s: %s\nmanager log tail:\n%s", name, r.Status.Phase, r.Status.Error, seat.M.LogTail(6000))
			default:
				open = append(open, fmt.Sprintf("%s %s %s", name, r.Status.Phase, describeWait(r.Status.WaitingOn)))
				settleDanglingWrite(t, ctx, c, &r, tools, user, settled)
			}
		}
		if complete >= n {
			return runs
		}
		if time.Now().After(deadline) {
			sort.Strings(open)
			t.Fatalf("%d of %d runs Complete after %v; still open: %v\nmanager log tail:\n%s", complete, n, timeout, open, seat.M.LogTail(6000))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// settleDanglingWrite answers a run waiting on NeedsReconciliation once.
func settleDanglingWrite(t *testing.T, ctx context.Context, c *loadtest.Cluster, r *arv1.AgentRun, tools *mcptest.Server, user string, settled map[string]arv1.AnswerDecision) {
	t.Helper()
	w := r.Status.WaitingOn
	if w == nil || w.Reason != arv1.WaitNeedsReconciliation {
		return
	}
	if _, done := settled[r.Name+"/"+w.Point]; done {
		return
	}
	decision := arv1.DecisionRetry
	for _, call := range tools.Log() {
		if call.Executed && strings.HasPrefix(call.Key, string(r.UID)+"-") {
			decision = arv1.DecisionDone
		}
	}
	a := &arv1.AgentRunAnswer{ObjectMeta: metav1.ObjectMeta{GenerateName: "settle-", Namespace: r.Namespace},
		Spec: arv1.AgentRunAnswerSpec{Run: r.Name, Point: w.Point, Decision: decision, By: user}}
	if decision == arv1.DecisionDone {
		a.Spec.Text = ptr.To("ticket created")
	}
	if err := c.Client.Create(ctx, a); err != nil {
		t.Fatalf("settling %s: %v", r.Name, err)
	}
	settled[r.Name+"/"+w.Point] = decision
}

// checkOutageAccounting: every run made exactly outageCalls completed calls,
// and every call the provider served is counted in some run's usage, in
// all and run by run.
func checkOutageAccounting(t *testing.T, runs map[string]arv1.AgentRun, st loadtest.LatencyStats, tap *callTap) {
	t.Helper()
	var sumCalls, sumLost int64
	lostHist := map[int64]int{}
	reached := tap.perRun()
	for name, r := range runs {
		u := r.Status.Usage
		sumCalls += u.ModelCalls
		sumLost += u.LostCalls
		lostHist[u.LostCalls]++
		if u.ModelCalls != outageCalls {
			t.Errorf("%s: usage.modelCalls = %d, want %d (lostCalls %d)", name, u.ModelCalls, outageCalls, u.LostCalls)
		}
		if got := reached[name]; got > u.ModelCalls+u.LostCalls {
			t.Errorf("%s: %d of its calls reached the provider, more than modelCalls %d + lostCalls %d", name, got, u.ModelCalls, u.LostCalls)
		}
	}
	t.Logf("provider: %d requests, %d served (%d final, %d writes asked), %d refused; Σ modelCalls %d, Σ lostCalls %d (runs by lostCalls: %v)",
		st.Requests, st.Accepted, st.Finals, st.Writes, st.Bad+st.RateLimited, sumCalls, sumLost, lostHist)
	if st.Bad != 0 || st.RateLimited != 0 {
		t.Errorf("the provider refused %d malformed calls and limited %d; want none", st.Bad, st.RateLimited)
	}
	if st.Accepted > sumCalls+sumLost {
		t.Errorf("the provider served %d calls, more than Σ(modelCalls + lostCalls) = %d + %d: %d served calls are in no run's usage",
			st.Accepted, sumCalls, sumLost, st.Accepted-sumCalls-sumLost)
	} else if st.Accepted < sumCalls+sumLost {
		// An intent journaled before a kill whose request never left the
		// dying manager is counted lost but was never served: "possibly
		// lost" is the contract.
		t.Logf("%d calls counted lost never reached the provider", sumCalls+sumLost-st.Accepted)
	}
	if reached["?"] != 0 {
		t.Errorf("%d calls reached the provider with no run's task in them", reached["?"])
	}
}

// checkWritesOnce: no idempotency key was executed twice, and every
// writer run's write was executed exactly once.
func checkWritesOnce(t *testing.T, runs map[string]arv1.AgentRun, tools *mcptest.Server) {
	t.Helper()
	byUID := map[string]string{}
	for name, r := range runs {
		byUID[string(r.UID)] = name
	}
	perKey, perRun := map[string]int{}, map[string]int{}
	calls := 0
	for _, call := range tools.Log() {
		if call.Tool != loadtest.WriteTool {
			continue
		}
		calls++
		if !call.Executed {
			continue
		}
		perKey[call.Key]++
		if i := strings.LastIndex(call.Key, "-"); i > 0 {
			perRun[byUID[call.Key[:i]]]++
		}
	}
	for key, k := range perKey {
		if k > 1 {
			t.Errorf("the write with idempotency key %q was executed %d times", key, k)
		}
	}
	writers := 0
	for name := range runs {
		if !isWriterRun(name) {
			continue
		}
		writers++
		if perRun[name] != 1 {
			t.Errorf("%s's write was executed %d times, want once", name, perRun[name])
		}
	}
	if perRun[""] != 0 {
		t.Errorf("%d writes were executed under a key of no run", perRun[""])
	}
	t.Logf("%d writer runs, %d write calls reached the tool server, %d executed", writers, calls, len(perKey))
}

// isWriterRun: writer runs are named <wave>w-NNNNN.
func isWriterRun(name string) bool {
	prefix, _, _ := strings.Cut(name, "-")
	return strings.HasSuffix(prefix, "w")
}

// startedBetween is how many calls reached the provider between from and to.
func (tap *callTap) startedBetween(from, to time.Time) int {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	n := 0
	for _, atts := range tap.byRun {
		for _, a := range atts {
			if a.at.After(from) && a.at.Before(to) {
				n++
			}
		}
	}
	return n
}
