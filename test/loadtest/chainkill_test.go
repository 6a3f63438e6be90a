package loadtest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/test/loadtest"
)

// chainModelCalls is how many model calls a run of chainBlueprint makes.
const chainModelCalls = 5

// chainBlueprint is LatencyBlueprint stretched to five stages, s1..s5, of
// one call each to m1 of provider llm, moving on by always edges: every
// call's answer is followed by another call the journal alone decides, so
// the whole run is one chain of continuations. s5's system prompt holds
// FinalStageMarker, so the LatencyServer answers it with the complete tool
// call and the run completes after exactly five calls.
const chainBlueprint = `
[agent]
name = "chain"
[agent.title]
enabled = false

[stages.s1]
system_prompt = "You are stage 1 of 5. Answer briefly."
[stages.s1.model]
models = [{provider = "llm", model = "m1"}]
[stages.s1.transitions.s2]
condition = "always"

[stages.s2]
system_prompt = "You are stage 2 of 5. Answer briefly."
[stages.s2.model]
models = [{provider = "llm", model = "m1"}]
[stages.s2.transitions.s3]
condition = "always"

[stages.s3]
system_prompt = "You are stage 3 of 5. Answer briefly."
[stages.s3.model]
models = [{provider = "llm", model = "m1"}]
[stages.s3.transitions.s4]
condition = "always"

[stages.s4]
system_prompt = "You are stage 4 of 5. Answer briefly."
[stages.s4.model]
models = [{provider = "llm", model = "m1"}]
[stages.s4.transitions.s5]
condition = "always"

[stages.s5]
system_prompt = "[final stage] You are stage 5 of 5. Review the work, then call complete."
allow_complete = true
[stages.s5.model]
models = [{provider = "llm", model = "m1"}]
`

// chainListRuns lists the AgentRuns of ns by name.
func chainListRuns(ctx context.Context, c *loadtest.Cluster, ns string) (map[string]arv1.AgentRun, error) {
	var list arv1.AgentRunList
	if err := c.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	out := make(map[string]arv1.AgentRun, len(list.Items))
	for _, r := range list.Items {
		out[r.Name] = r
	}
	return out, nil
}

// chainAwaitComplete polls ns until n runs are Complete, and returns them.
// On the timeout, or when a run ends otherwise, it fails the test with the
// open runs' phases and waits and the manager's log tail.
func chainAwaitComplete(t *testing.T, ctx context.Context, c *loadtest.Cluster, m *loadtest.Manager, ns string, n int, timeout time.Duration) map[string]arv1.AgentRun {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		runs, err := chainListRuns(ctx, c, ns)
		if err != nil {
			t.Fatal(err)
		}
		complete := 0
		var open, failed []string
		for name, r := range runs {
			switch {
			case r.Status.Phase == arv1.PhaseComplete:
				complete++
			case r.Status.Phase.IsTerminal():
				failed = append(failed, fmt.Sprintf("%s %s: %s", name, r.Status.Phase, r.Status.Error))
			default:
				open = append(open, fmt.Sprintf("%s %s %s", name, r.Status.Phase, describeWait(r.Status.WaitingOn)))
			}
		}
		sort.Strings(open)
		sort.Strings(failed)
		if len(failed) > 0 {
			t.Fatalf("%d runs ended other than Complete: %v\nmanager log tail:\n%s", len(failed), failed, m.LogTail(6000))
		}
		if complete >= n {
			return runs
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if len(open) > 20 {
				open = append(open[:20], "...")
			}
			t.Fatalf("%d of %d runs of %s Complete after %v; still open: %v\nmanager log tail:\n%s", complete, n, ns, timeout, open, m.LogTail(6000))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// describeWait renders a waitingOn for a failure message.
func describeWait(w *arv1.WaitingOn) string {
	if w == nil {
		return "-"
	}
	s := string(w.Reason)
	if w.Blocker != "" {
		s += "/" + string(w.Blocker)
	}
	if w.Provider != "" {
		s += fmt.Sprintf(" (%s/%s, needsAPerson %v, retryAt %v)", w.Provider, w.Model, w.NeedsAPerson, w.RetryAt)
	}
	return s
}

// TestKillingTheManagerMidChain: runs of five chained model calls of 400 ms
// each against a loopback OpenAI-compatible server (30 created up front, 5
// more after each restart so that every kill finds chains in flight), while
// the manager is killed with SIGKILL six times at random moments (0.3–1.5 s
// after each new manager started its workers), plus once while a manager
// was still starting. The last manager completes every run. Each run made
// exactly five completed calls and counts at most one lost call per kill;
// every request the provider accepted is a completed call or one counted
// as possibly lost (no completed call was ever sent again), globally and
// run by run; and at least one kill landed while a call was in flight, so
// the test proved something.
func TestKillingTheManagerMidChain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and seven manager processes")
	}
	c := sharedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	const (
		kills      = 6
		initial    = 30 // runs created before the first kill
		perRestart = 5  // runs created after each restart, so every kill finds chains in flight
		n          = initial + kills*perRestart
		callDelay  = 400 * time.Millisecond
		finalLimit = 3 * time.Minute
	)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed>>7|1))
	t.Logf("seed %d", seed)

	srv, err := loadtest.NewLatencyServer(callDelay, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	// The tap counts, per run, the calls that reached the server.
	tap := newCallTap(t, srv.URL())
	ns, err := c.SetupLatencyNamespace(ctx, "chainkill", "chain", chainBlueprint, loadtest.LatencyProvidersTOML(tap.BaseURL(), ""))
	if err != nil {
		t.Fatal(err)
	}
	seat := newManagerSeat(t, ctx, c)
	seat.Start()
	srv.Take() // count from the batch on
	t0 := time.Now()
	if err := c.CreateRunsWith(ctx, ns, "chain", "r", initial, 8, nil); err != nil {
		t.Fatal(err)
	}
	created := initial

	totalKills := 0
	var killLog []string
	for k := 1; k <= kills; k++ {
		sleep := 300*time.Millisecond + time.Duration(rng.Int64N(int64(1200*time.Millisecond)))
		time.Sleep(sleep)
		runs, err := chainListRuns(ctx, c, ns)
		if err != nil {
			t.Fatal(err)
		}
		done := 0
		for _, r := range runs {
			if r.Status.Phase == arv1.PhaseComplete {
				done++
			}
		}
		if err := seat.M.Kill(); err != nil {
			t.Fatal(err)
		}
		totalKills++
		killLog = append(killLog, fmt.Sprintf("#%d at %v (%v after ready, %d/%d complete)", k, time.Since(t0).Round(time.Millisecond), sleep.Round(time.Millisecond), done, created))

		if k == kills/2 {
			// Once, kill a manager that has not started its workers yet:
			// the next one must not be confused by a predecessor that
			// never got to drive anything.
			early, cancelEarly := context.WithTimeout(ctx, time.Duration(100+rng.IntN(400))*time.Millisecond)
			em, err := c.StartManager(early, seat.LogDir)
			cancelEarly()
			switch {
			case err == nil:
				// It was ready before the deadline: kill it all the same.
				_ = em.Kill()
				killLog = append(killLog, "early kill landed after the manager was ready")
			case ctx.Err() != nil:
				t.Fatal(err)
			default:
				killLog = append(killLog, fmt.Sprintf("early kill before workers started (%v)", err))
			}
			totalKills++
		}
		seat.Start()
		if err := c.CreateRunsWith(ctx, ns, "chain", "w"+fmt.Sprint(k), perRestart, perRestart, nil); err != nil {
			t.Fatal(err)
		}
		created += perRestart
	}
	t.Logf("kills: %s", strings.Join(killLog, "; "))

	runs := chainAwaitComplete(t, ctx, c, seat.M, ns, n, finalLimit)
	wall := time.Since(t0)
	st := srv.Take()

	var sumCalls, sumLost int64
	withLost := 0
	lostHist := map[int64]int{}
	for name, r := range runs {
		u := r.Status.Usage
		sumCalls += u.ModelCalls
		sumLost += u.LostCalls
		lostHist[u.LostCalls]++
		if u.LostCalls > 0 {
			withLost++
			if u.CostUSD != "unknown" {
				t.Errorf("%s lost %d calls but its cost is %q, want unknown", name, u.LostCalls, u.CostUSD)
			}
		}
		if r.Status.Phase != arv1.PhaseComplete {
			t.Errorf("%s is %s, want Complete", name, r.Status.Phase)
		}
		if u.ModelCalls != chainModelCalls {
			t.Errorf("%s: usage.modelCalls = %d, want %d (lostCalls %d)", name, u.ModelCalls, chainModelCalls, u.LostCalls)
		}
		if u.LostCalls > int64(totalKills) {
			t.Errorf("%s: usage.lostCalls = %d, more than the %d kills", name, u.LostCalls, totalKills)
		}
	}
	if len(runs) != n {
		t.Errorf("%d runs in %s, want %d", len(runs), ns, n)
	}
	t.Logf("%d runs Complete %v after creation; %d kills; server: %d requests, %d accepted, %d final, %d 429, %d bad; Σ modelCalls %d, Σ lostCalls %d, runs with lostCalls > 0: %d (histogram %v)",
		n, wall.Round(time.Millisecond), totalKills, st.Requests, st.Accepted, st.Finals, st.RateLimited, st.Bad, sumCalls, sumLost, withLost, lostHist)

	if st.Bad != 0 || st.RateLimited != 0 {
		t.Errorf("the server refused %d malformed calls and limited %d; want none", st.Bad, st.RateLimited)
	}
	// Every request the provider served is a completed call or one counted
	// as possibly lost: a completed call sent again would make accepted
	// exceed the sum.
	if want := sumCalls + sumLost; st.Accepted != want {
		if st.Accepted > want {
			t.Errorf("the server accepted %d calls, more than Σ(modelCalls + lostCalls) = %d + %d = %d: %d calls were sent that no run accounts for (a completed call sent again?)",
				st.Accepted, sumCalls, sumLost, want, st.Accepted-want)
		} else {
			// An intent journaled and lost before its request left the
			// dying manager is counted lost but never reached the server:
			// "possibly lost" is the contract, so this is not a failure.
			t.Logf("the server accepted %d calls, fewer than Σ(modelCalls + lostCalls) = %d + %d = %d (%d counted lost never reached the provider: a kill between the intent's write and the send?)",
				st.Accepted, sumCalls, sumLost, want, want-st.Accepted)
		}
	}
	// The same, run by run: a run's calls that reached the server are its
	// completed calls and at most its lost ones.
	reached := tap.perRun()
	var short []string
	for name, r := range runs {
		u := r.Status.Usage
		switch got, want := reached[name], u.ModelCalls+u.LostCalls; {
		case got > want:
			t.Errorf("%s: %d of its calls reached the server, more than modelCalls %d + lostCalls %d", name, got, u.ModelCalls, u.LostCalls)
		case got < want:
			short = append(short, fmt.Sprintf("%s (%d reached, %d+%d counted)", name, got, u.ModelCalls, u.LostCalls))
		}
	}
	var sumReached int64
	for _, k := range reached {
		sumReached += k
	}
	tap.mu.Lock()
	aborted := tap.aborted
	tap.mu.Unlock()
	if sumReached != st.Accepted || aborted > 0 {
		t.Logf("note: the tap forwarded %d calls the server did not refuse, the server counted %d accepted; %d requests were cut off while being sent", sumReached, st.Accepted, aborted)
	}
	if reached["?"] != 0 {
		t.Errorf("%d calls reached the server with no run's task in them", reached["?"])
	}
	if len(short) > 0 {
		sort.Strings(short)
		t.Logf("runs counting a lost call that never reached the server: %s", strings.Join(short, ", "))
	}
	if st.Finals < n {
		t.Errorf("the server answered %d final calls for %d runs", st.Finals, n)
	}
	if sumLost < 1 {
		t.Errorf("no run counted a lost call after %d kills: no kill landed while a call was in flight, so the test proved nothing", totalKills)
	}
}
