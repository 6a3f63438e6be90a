package controllers_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/quota"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// twoCalls is two stages of one model call each, each with usage; the
// second completes the run.
const twoCalls = `
[agent]
name = "spender"
[agent.title]
enabled = false
[stages.start]
[stages.start.model]
models = [{provider = "priced", model = "m1"}]
[stages.start.transitions.finish]
condition = "llm_choice"
[[stages.start.script]]
text = "half way"
next = "finish"
usage = {prompt = 100, completion = 50}
delay_ms = %d
[stages.finish]
allow_complete = true
[stages.finish.model]
models = [{provider = "priced", model = "m1"}]
[[stages.finish.script]]
complete = true
output = "done"
usage = {prompt = 100, completion = 50}
delay_ms = %d
`

// pricedProviders prices m1 so one call costs $0.0101 (100 prompt tokens
// at $1, 50 completion at $200 per million) and reserves about $0.021 at
// worst (a few hundred bytes of prompt plus 512 framing at $1, 100
// completion tokens at $200).
const pricedProviders = `
[providers.priced]
type = "scripted"
models = ["m1"]
[providers.priced.rates.m1]
prompt = "1"
completion = "200"
max_output_tokens = 100
`

// offsetClock is the real clock shifted by a fixed offset: timers run in
// real time, and the manager reads the shifted time.
type offsetClock struct{ d time.Duration }

func (c offsetClock) Now() time.Time                  { return time.Now().Add(c.d) }
func (c offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// quotaPolicy is config/admission's quota-store policy as testenv
// installs it (unprefixed).
const quotaPolicy = "quota-store"

// waitPolicyDatabase waits until the manager has written into the quota
// admission policy whether it has a database store, and the API server
// enforces it: a spend quota is accepted (want) or refused (!want) in a
// server-side dry run.
func waitPolicyDatabase(t *testing.T, want bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var p admissionv1.ValidatingAdmissionPolicy
		if err := k8s.Get(context.Background(), types.NamespacedName{Name: quotaPolicy}, &p); err != nil {
			t.Fatal(err)
		}
		written := false
		for _, v := range p.Spec.Variables {
			written = written || (v.Name == "database" && v.Expression == fmt.Sprint(want))
		}
		probe := &arv1.AgentRunQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "policy-probe"},
			Spec: arv1.AgentRunQuotaSpec{Hard: arv1.QuotaHard{Cost: "1"}}}
		err := k8s.Create(context.Background(), probe, client.DryRunAll)
		if written && (err == nil) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the quota policy never said database=%v: variables %+v, a spend quota's dry run: %v", want, p.Spec.Variables, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func createQuota(t *testing.T, ns, name string, spec arv1.AgentRunQuotaSpec) *arv1.AgentRunQuota {
	t.Helper()
	q := &arv1.AgentRunQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	if err := k8s.Create(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	return q
}

// waitQuota polls the quota until cond holds.
func waitQuota(t *testing.T, ns, name string, timeout time.Duration, what string, cond func(*arv1.AgentRunQuota) bool) *arv1.AgentRunQuota {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var q arv1.AgentRunQuota
		if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &q); err != nil {
			t.Fatal(err)
		}
		if cond(&q) {
			return &q
		}
		if time.Now().After(deadline) {
			t.Fatalf("quota %s/%s: timed out waiting for %s; status %+v", ns, name, what, q.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func quotaWait(r *arv1.AgentRun) bool {
	return r.Status.WaitingOn != nil && r.Status.WaitingOn.Reason == arv1.WaitQuotaExceeded
}

// activeSampler watches a namespace's runs and records the most that were
// ever started and unfinished at once, event by event.
type activeSampler struct {
	mu     sync.Mutex
	phases map[string]arv1.Phase
	most   int
}

func sampleActive(t *testing.T, ns string) *activeSampler {
	t.Helper()
	w, err := watchClient(t).Watch(context.Background(), &arv1.AgentRunList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	s := &activeSampler{phases: map[string]arv1.Phase{}}
	go func() {
		for ev := range w.ResultChan() {
			r, ok := ev.Object.(*arv1.AgentRun)
			if !ok {
				continue
			}
			s.mu.Lock()
			if ev.Type == watch.Deleted {
				delete(s.phases, r.Name)
			} else {
				s.phases[r.Name] = r.Status.Phase
			}
			n := 0
			for _, p := range s.phases {
				if !p.IsUnstarted() && !p.IsTerminal() {
					n++
				}
			}
			s.most = max(s.most, n)
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *activeSampler) max() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.most
}

// TestQuotaActiveRunsHoldRunsQueued: without a database store, an
// AgentRunQuota of 2 activeRuns lets two runs work at once; the others
// stay Queued waiting on QuotaExceeded (activeRuns, no reset, no person
// needed: a finishing run lets the next start), with an Event, and all
// complete. The quota's status and kubectl get show the use.
func TestQuotaActiveRunsHoldRunsQueued(t *testing.T) {
	startManager(t, managerOpts{store: "-", quotaStatusInterval: 200 * time.Millisecond})
	ns := newNamespace(t)
	createConfigMap(t, ns, "spender", map[string]string{"agent.toml": fmt.Sprintf(twoCalls, 300, 300)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": pricedProviders})
	createQuota(t, ns, "two", arv1.AgentRunQuotaSpec{Hard: arv1.QuotaHard{ActiveRuns: ptr.To[int32](2)}})
	sampler := sampleActive(t, ns)
	for i := range 6 {
		createRun(t, ns, fmt.Sprintf("r%d", i), "spender")
	}
	var held *arv1.AgentRun
	deadline := time.Now().Add(20 * time.Second)
	for held == nil {
		for i := range 6 {
			if r := getRun(t, ns, fmt.Sprintf("r%d", i)); r.Status.Phase == arv1.PhaseQueued && quotaWait(r) {
				held = r
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no run waited Queued on the quota")
		}
		time.Sleep(20 * time.Millisecond)
	}
	w := held.Status.WaitingOn
	if w.Quota != "AgentRunQuota/"+ns+"/two" || w.Resource != arv1.QuotaActiveRuns || w.Used != "2" || w.Hard != "2" || w.NeedsAPerson || w.ResetAt != nil {
		t.Errorf("waitingOn = %+v", w)
	}
	if !strings.Contains(w.Summary, "QuotaExceeded") {
		t.Errorf("summary %q", w.Summary)
	}
	for i := range 6 {
		waitFor(t, ns, fmt.Sprintf("r%d", i), 60*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	}
	if m := sampler.max(); m != 2 {
		t.Errorf("at most %d runs were active at once, want 2 (the quota's limit, reached)", m)
	}
	evs := eventsOf(t, ns, held.Name)
	found := false
	for _, e := range evs {
		found = found || (e.Reason == string(arv1.WaitQuotaExceeded) && strings.Contains(e.Note, "activeRuns"))
	}
	if !found {
		t.Errorf("no QuotaExceeded event on %s: %+v", held.Name, evs)
	}
	q := waitQuota(t, ns, "two", 10*time.Second, "activeRuns 0/2", func(q *arv1.AgentRunQuota) bool {
		return q.Status.Used.ActiveRuns != nil && *q.Status.Used.ActiveRuns == 0 && q.Status.Summary == "activeRuns: 0/2"
	})
	if q.Status.ResetAt != nil || len(q.Status.Exceeded) != 0 {
		t.Errorf("status = %+v", q.Status)
	}
	out := kubectlOut(t, "get", "agentrunquotas", "-n", ns)
	if !strings.Contains(out, "USED/HARD") || !strings.Contains(out, "activeRuns: 0/2") {
		t.Errorf("kubectl get agentrunquotas:\n%s", out)
	}
	// kubectl describe shows each limit's hard (spec) and used (status).
	out = kubectlOut(t, "describe", "agentrunquota", "two", "-n", ns)
	if !regexp.MustCompile(`(?s)Hard:\s+Active Runs:\s+2\b.*Used:\s+Active Runs:\s+0\b`).MatchString(out) {
		t.Errorf("kubectl describe agentrunquota:\n%s", out)
	}
}

// midnightClock is a clock that reads lead before the next UTC midnight
// when the test starts.
func midnightClock(lead time.Duration) (offsetClock, time.Time) {
	now := time.Now().UTC()
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	c := offsetClock{d: midnight.Add(-lead).Sub(now)}
	return c, midnight
}

// TestQuotaSpendParksUntilTheDayResets: with a database store, a daily
// cost quota of $0.045 (one call costs $0.0101 and reserves about $0.021
// at worst): run a makes its two calls, run b its first, and b's second
// finds no room, so b parks before it (the store refused its reservation;
// no call is made) on QuotaExceeded with cost, what is used, the limit and
// the next midnight, no person needed, and an Event says so.
// A new run is held Queued on the same quota. At midnight both go on by
// themselves and complete; the quota shows the new day's use.
func TestQuotaSpendParksUntilTheDayResets(t *testing.T) {
	clk, midnight := midnightClock(25 * time.Second)
	h := startManager(t, managerOpts{store: storeDSNFor(t, "sqlite"), clock: clk, quotaPolicy: quotaPolicy, quotaStatusInterval: 200 * time.Millisecond})
	waitPolicyDatabase(t, true)
	ns := newNamespace(t)
	createConfigMap(t, ns, "spender", map[string]string{"agent.toml": fmt.Sprintf(twoCalls, 0, 0)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": pricedProviders})
	createQuota(t, ns, "daily", arv1.AgentRunQuotaSpec{Hard: arv1.QuotaHard{Cost: "0.045"}, Period: arv1.QuotaDay})
	// One run at a time, so which call finds no room does not depend on
	// how two runs' calls interleave.
	createRun(t, ns, "a", "spender")
	waitFor(t, ns, "a", 20*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	createRun(t, ns, "b", "spender")
	parked := waitFor(t, ns, "b", 20*time.Second, "parked on the quota", quotaWait)
	if clk.Now().After(midnight) {
		t.Fatal("the run parked after midnight: the machine is too slow for this test's 25 s lead")
	}
	w := parked.Status.WaitingOn
	if parked.Status.Phase != arv1.PhaseWaitingInput || w.Quota != "AgentRunQuota/"+ns+"/daily" || w.Resource != arv1.QuotaCost ||
		w.Used != "0.0303" || w.Hard != "0.045" || w.NeedsAPerson || w.ResetAt == nil || !w.ResetAt.Time.Equal(midnight) {
		t.Errorf("phase %s waitingOn = %+v (resetAt %v, want %v)", parked.Status.Phase, w, w.ResetAt, midnight)
	}
	if n := h.scripted.Calls(string(parked.UID)); n != 1 {
		t.Errorf("provider calls of the parked run = %d, want 1: the call the quota had no room for is not made", n)
	}
	// b's first answer and its second intent went to the store in one
	// write, which the quota refused; the answer is then journaled alone,
	// settling its reservation. Between the two the store holds that
	// call at its worst case (used 0.0408, one call in flight) and has
	// noted the refusal, so a status refresh may show cost exceeded at
	// 0.0408 for a moment: wait for the settled use.
	q := waitQuota(t, ns, "daily", 10*time.Second, "cost exceeded with b's answered call settled", func(q *arv1.AgentRunQuota) bool {
		return len(q.Status.Exceeded) == 1 && q.Status.Exceeded[0] == arv1.QuotaCost && q.Status.InFlight.Calls == 0
	})
	if q.Status.Summary != "cost: 0.0303/0.045" || q.Status.ResetAt == nil || !q.Status.ResetAt.Time.Equal(midnight) {
		t.Errorf("quota status = %+v", q.Status)
	}
	createRun(t, ns, "c", "spender")
	held := waitFor(t, ns, "c", 20*time.Second, "Queued on the quota", func(r *arv1.AgentRun) bool {
		return r.Status.Phase == arv1.PhaseQueued && quotaWait(r)
	})
	if hw := held.Status.WaitingOn; hw.Resource != arv1.QuotaCost || hw.ResetAt == nil || !hw.ResetAt.Time.Equal(midnight) || hw.NeedsAPerson {
		t.Errorf("the new run's wait = %+v", hw)
	}
	if !clk.Now().Before(midnight) {
		t.Fatal("midnight passed before the new run was seen held")
	}
	for _, name := range []string{parked.Name, "c"} {
		done := waitFor(t, ns, name, 60*time.Second, "Complete after midnight", phaseIs(arv1.PhaseComplete))
		if done.Status.FinishedAt.Time.Before(midnight) {
			t.Errorf("%s finished at %v, before the reset", name, done.Status.FinishedAt)
		}
	}
	// The running run that parked says so in an Event: which quota, what
	// it used of which limit, and when it goes on by itself.
	waitForEvent(t, ns, parked.Name, string(arv1.WaitQuotaExceeded),
		"AgentRunQuota/"+ns+"/daily has used $0.0303 of its $0.045 cost limit (calls in flight at their worst case); the run goes on by itself when the period resets at "+midnight.Format(time.RFC3339))
	waitQuota(t, ns, "daily", 10*time.Second, "the new day's use", func(q *arv1.AgentRunQuota) bool {
		return q.Status.PeriodStart != nil && q.Status.PeriodStart.Time.Equal(midnight) && q.Status.Summary == "cost: 0.0303/0.045"
	})
}

// TestQuotaRunningTotalNeedsARaise: a cost quota without a period parks
// the run with needsAPerson (nothing resets it); raising spec.hard.cost
// lets it go on by itself and complete.
func TestQuotaRunningTotalNeedsARaise(t *testing.T) {
	startManager(t, managerOpts{store: storeDSNFor(t, "sqlite"), quotaPolicy: quotaPolicy, quotaStatusInterval: 200 * time.Millisecond})
	waitPolicyDatabase(t, true)
	ns := newNamespace(t)
	createConfigMap(t, ns, "spender", map[string]string{"agent.toml": fmt.Sprintf(twoCalls, 0, 0)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": pricedProviders})
	q := createQuota(t, ns, "total", arv1.AgentRunQuotaSpec{Hard: arv1.QuotaHard{Cost: "0.025"}})
	createRun(t, ns, "r", "spender")
	parked := waitFor(t, ns, "r", 20*time.Second, "QuotaExceeded", quotaWait)
	if w := parked.Status.WaitingOn; !w.NeedsAPerson || w.ResetAt != nil || w.Resource != arv1.QuotaCost {
		t.Errorf("waitingOn = %+v", w)
	}
	if c := findCondition(parked, arv1.ConditionNeedsAttention); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "spec.hard.cost") {
		t.Errorf("NeedsAttention = %+v", c)
	}
	orig := q.DeepCopy()
	q.Spec.Hard.Cost = "1"
	if err := k8s.Patch(context.Background(), q, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	done := waitFor(t, ns, "r", 20*time.Second, "Complete after the raise", phaseIs(arv1.PhaseComplete))
	if done.Status.Usage.CostUSD != "0.0202" {
		t.Errorf("cost %q, want 0.0202", done.Status.Usage.CostUSD)
	}
}

// TestQuotaIntentOnlyInStatusIsNotLost: with a database store a model
// call is made only once its intent is journaled. The manager's step
// journals the run's first intent while its status write already names
// it; here that journal write is held (the journal's table locked in
// PostgreSQL) and the manager stopped, as a replica that dies there: the
// status holds an intent the journal does not, and the provider saw
// nothing. The manager that takes the run over issues it again without
// counting it lost: status.usage.lostCalls is 0, modelCalls + lostCalls
// is what the provider served, and the cost is known. The quota's ledger
// (which counts a lost call as unpriced, at its worst case) counts no
// lost call either, only the two answered calls, exactly, with nothing
// left reserved.
func TestQuotaIntentOnlyInStatusIsNotLost(t *testing.T) {
	ctx := context.Background()
	dsn := storeDSNFor(t, "postgres")
	ledger := storeReader(t, dsn)
	if err := ledger.Check(ctx); err != nil { // migrated before its table is locked
		t.Fatal(err)
	}
	h1 := startManager(t, managerOpts{store: dsn, quotaPolicy: quotaPolicy, identity: "first"})
	waitPolicyDatabase(t, true)
	ns := newNamespace(t)
	createConfigMap(t, ns, "spender", map[string]string{"agent.toml": fmt.Sprintf(twoCalls, 0, 0)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": pricedProviders})
	createQuota(t, ns, "budget", arv1.AgentRunQuotaSpec{Hard: arv1.QuotaHard{Cost: "1"}})

	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*pc)
	t.Cleanup(func() { _ = db.Close() })
	lock, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lock.Rollback() })
	// Reads go on; every journal write waits for the lock.
	if _, err := lock.ExecContext(ctx, "LOCK TABLE journal_entries IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	run := createRun(t, ns, "r", "spender")
	waitFor(t, ns, "r", 20*time.Second, "its first intent in status", func(r *arv1.AgentRun) bool { return r.Status.PendingCall != nil })
	h1.stop()
	var journaled int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM journal_entries WHERE run_uid = $1", string(run.UID)).Scan(&journaled); err != nil {
		t.Fatal(err)
	}
	if journaled != 0 || h1.scripted.Calls(string(run.UID)) != 0 {
		t.Fatalf("%d journal entries and %d provider calls as the first manager stopped; want none: only status holds the intent", journaled, h1.scripted.Calls(string(run.UID)))
	}
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}

	h2 := startManager(t, managerOpts{store: dsn, quotaPolicy: quotaPolicy, identity: "second", quotaStatusInterval: 200 * time.Millisecond})
	done := waitFor(t, ns, "r", 30*time.Second, "Complete after the takeover", phaseIs(arv1.PhaseComplete))
	u, served := done.Status.Usage, h2.scripted.Calls(string(run.UID))
	if u.LostCalls != 0 || u.ModelCalls != 2 || int(u.ModelCalls+u.LostCalls) != served || u.CostUSD != "0.0202" {
		t.Errorf("usage %+v; the provider served %d: want 2 calls, none lost, cost known", u, served)
	}
	key := quota.Key(arv1.KindAgentRunQuota, ns, "budget")
	use, err := ledger.QuotaUse(ctx, key, 0)
	if err != nil {
		t.Fatal(err)
	}
	if use.UnpricedCalls != u.LostCalls || use.Cost != 20_200_000 || use.ReservedCost != 0 || use.InFlight != 0 {
		t.Errorf("the ledger: %+v; want the two answered calls ($0.0202), no lost call (the run counts %d), nothing reserved", use, u.LostCalls)
	}
}

// pricedCall is one model call (usage as twoCalls') taking ms, that
// completes the run.
const pricedCall = `
[agent]
name = "%s"
[agent.title]
enabled = false
[stages.only]
allow_complete = true
[stages.only.model]
models = [{provider = "priced", model = "m1"}]
[[stages.only.script]]
complete = true
output = "done"
usage = {prompt = 100, completion = 50}
delay_ms = %d
`

// TestQuotaCallSettlingBelowItsWorstCaseWakesTheParked: a cost quota of
// $0.035 (a call reserves about $0.021 at worst and costs $0.0101). Run x's
// slow call is in flight when run y's call finds no room, so y parks. x's
// call settles at its cost, leaving room for y's: y goes on by itself and
// completes. Nothing about the quota's spec changes and its status is not
// refreshed meanwhile (an hour's interval), so it is the settling call's
// step that wakes y, not the quota's watch.
func TestQuotaCallSettlingBelowItsWorstCaseWakesTheParked(t *testing.T) {
	startManager(t, managerOpts{store: storeDSNFor(t, "sqlite"), quotaPolicy: quotaPolicy, quotaStatusInterval: time.Hour})
	waitPolicyDatabase(t, true)
	ns := newNamespace(t)
	createConfigMap(t, ns, "slow", map[string]string{"agent.toml": fmt.Sprintf(pricedCall, "slow", 3000)})
	createConfigMap(t, ns, "quick", map[string]string{"agent.toml": fmt.Sprintf(pricedCall, "quick", 0)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": pricedProviders})
	createQuota(t, ns, "total", arv1.AgentRunQuotaSpec{Hard: arv1.QuotaHard{Cost: "0.035"}})
	createRun(t, ns, "x", "slow")
	waitFor(t, ns, "x", 20*time.Second, "its call in flight", func(r *arv1.AgentRun) bool { return r.Status.PendingCall != nil })
	createRun(t, ns, "y", "quick")
	parked := waitFor(t, ns, "y", 20*time.Second, "parked on the quota", quotaWait)
	if parked.Status.Phase != arv1.PhaseWaitingInput || parked.Status.WaitingOn.Resource != arv1.QuotaCost {
		t.Fatalf("y: phase %s, waiting on %+v", parked.Status.Phase, parked.Status.WaitingOn)
	}
	if x := getRun(t, ns, "x"); x.Status.Phase.IsTerminal() {
		t.Fatalf("x finished (%s) before y parked: y's call found no room only while x's was in flight", x.Status.Phase)
	}
	waitFor(t, ns, "x", 20*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	done := waitFor(t, ns, "y", 20*time.Second, "Complete once x's call settled", phaseIs(arv1.PhaseComplete))
	if done.Status.Usage.CostUSD != "0.0101" {
		t.Errorf("y cost %q, want 0.0101", done.Status.Usage.CostUSD)
	}
}

func findCondition(r *arv1.AgentRun, t string) *metav1.Condition {
	for i := range r.Status.Conditions {
		if r.Status.Conditions[i].Type == t {
			return &r.Status.Conditions[i]
		}
	}
	return nil
}

// TestQuotaSpendRefusedWithoutDatabase: a manager without a database store
// says so in the quota admission policy, and a quota that limits cost,
// tokens or runs, or has a period, is refused at apply naming those
// fields; an activeRuns quota is accepted. A manager with a database
// store says it has one, and the same quota is accepted.
func TestQuotaSpendRefusedWithoutDatabase(t *testing.T) {
	ns := newNamespace(t)
	apply := func(name, spec string) (string, error) {
		f := t.TempDir() + "/q.yaml"
		manifest := "apiVersion: agentrun.dev/v1alpha1\nkind: AgentRunQuota\nmetadata:\n  name: " + name + "\n  namespace: " + ns + "\nspec:\n" + spec
		if err := os.WriteFile(f, []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		kc, err := env.Kubeconfig(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return testenv.Kubectl(kc, "apply", "-f", f)
	}
	spend := "  hard:\n    cost: \"200\"\n    tokens: 1000000\n    activeRuns: 5\n  period: Month\n  timeZone: Europe/Berlin\n"
	func() {
		m := startManager(t, managerOpts{store: "-", quotaPolicy: quotaPolicy})
		defer m.stop()
		waitPolicyDatabase(t, false)
		out, err := apply("spend", spend)
		if err == nil {
			t.Fatalf("a spend quota was accepted without a database store:\n%s", out)
		}
		for _, want := range []string{"spec.period, spec.hard.cost, spec.hard.tokens need a database store", "--store"} {
			if !strings.Contains(out, want) {
				t.Errorf("kubectl said %q; want it to contain %q", out, want)
			}
		}
		if out, err := apply("slots", "  hard:\n    activeRuns: 5\n"); err != nil {
			t.Errorf("an activeRuns quota was refused: %s", out)
		}
	}()
	startManager(t, managerOpts{store: storeDSNFor(t, "sqlite"), quotaPolicy: quotaPolicy})
	waitPolicyDatabase(t, true)
	if out, err := apply("spend", spend); err != nil {
		t.Errorf("a spend quota was refused with a database store: %s", out)
	}
}
