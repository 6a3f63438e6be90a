package loadtest_test

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/money"
	"github.com/agentrun-dev/agentrun-operator/internal/quota"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv/postgres"
	"github.com/agentrun-dev/agentrun-operator/test/loadtest"
)

// quotaSpender makes two model calls of 150 ms each, 100 prompt and 50
// completion tokens each: at quotaRates a call costs $0.0071 and a run
// $0.0142, so about 70 runs fit in $1.00.
const quotaSpender = `
[agent]
name = "spender"
[agent.title]
enabled = false
[stages.start]
[stages.start.model]
models = [{provider = "priced", model = "m1"}]
[stages.start.transitions.finish]
condition = "always"
[[stages.start.script]]
text = "half way"
usage = {prompt = 100, completion = 50}
delay_ms = 150
[stages.finish]
allow_complete = true
[stages.finish.model]
models = [{provider = "priced", model = "m1"}]
[[stages.finish.script]]
complete = true
output = "done"
usage = {prompt = 100, completion = 50}
delay_ms = 150
`

// quotaRates price m1 at $1 (prompt) and $140 (completion) per million
// tokens, with answers of at most 100 tokens: a call reserves about
// $0.0155 at worst (its prompt's bytes plus framing, and 100 completion
// tokens).
const quotaRates = `
[providers.priced]
type = "scripted"
models = ["m1"]
[providers.priced.rates.m1]
prompt = "1"
completion = "140"
max_output_tokens = 100
`

// inFlightBound is the most the calls in flight may cost on top of a cost
// quota (nano-USD): one call per active run, each at quotaRates' worst
// case (100 completion tokens at $140, and a prompt well under 4096
// tokens at $1, per million).
const inFlightBound = 20 * (100*140_000 + 4096*1_000)

// zoneAtNoon is an Etc/GMT zone where it is about noon at now, so the
// day cannot end while the test runs.
func zoneAtNoon(now time.Time) (string, *time.Location) {
	off := 12 - now.UTC().Hour() // hours east of UTC
	name := "UTC"
	switch {
	case off > 0:
		name = fmt.Sprintf("Etc/GMT-%d", off)
	case off < 0:
		name = fmt.Sprintf("Etc/GMT+%d", -off)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return name, loc
}

// activeWatch follows the runs of some namespaces and records the most
// that were ever started and unfinished at once, event by event (one
// watch's events come in the API server's order).
type activeWatch struct {
	mu     sync.Mutex
	phases map[string]arv1.Phase
	most   int
}

func watchActive(t *testing.T, ctx context.Context, c *loadtest.Cluster, nss ...string) *activeWatch {
	t.Helper()
	a := &activeWatch{phases: map[string]arv1.Phase{}}
	// One watch over every namespace: two streams would each be in order,
	// but not with each other, and a run's end seen late on one would
	// count it with the run its slot let start on the other.
	w, err := c.Client.Watch(ctx, &arv1.AgentRunList{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if r, ok := ev.Object.(*arv1.AgentRun); ok && slices.Contains(nss, r.Namespace) {
				a.observe(ev.Type, r)
			}
		}
	}()
	return a
}

func (a *activeWatch) observe(typ watch.EventType, r *arv1.AgentRun) {
	a.mu.Lock()
	defer a.mu.Unlock()
	key := r.Namespace + "/" + r.Name
	if typ == watch.Deleted {
		delete(a.phases, key)
	} else {
		a.phases[key] = r.Status.Phase
	}
	n := 0
	for _, p := range a.phases {
		if !p.IsUnstarted() && !p.IsTerminal() {
			n++
		}
	}
	a.most = max(a.most, n)
}

func (a *activeWatch) max() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.most
}

// journaled is what the runs' journals say they used, as their
// statuses fold it: the priced cost of answered calls (nano-USD), their
// prompt and completion tokens, and the calls lost with a killed replica.
type journaled struct{ cost, tokens, lost int64 }

func journaledUse(t *testing.T, runs []arv1.AgentRun) journaled {
	t.Helper()
	var j journaled
	for _, r := range runs {
		u := r.Status.Usage
		if u.CostPricedUSD != "" {
			c, err := money.ParseUSD(u.CostPricedUSD)
			if err != nil {
				t.Fatalf("%s's priced cost %q: %v", r.Name, u.CostPricedUSD, err)
			}
			j.cost += int64(c)
		}
		j.tokens += u.PromptTokens + u.CompletionTokens
		j.lost += u.LostCalls
	}
	return j
}

// Each lost call counts at its worst case: 100 completion tokens at $140
// and its prompt's bytes plus 512 framing at $1 per million, the prompt
// of these runs' calls between 0 and 3584 bytes.
const (
	lostCostMin, lostCostMax     = 100*140_000 + 512*1_000, 100*140_000 + 4096*1_000
	lostTokensMin, lostTokensMax = 100 + 512, 100 + 4096
)

// checkLedger compares the database's ledger with the journals: every
// answered call exactly (to the nano-dollar and the token), and on top of
// them the lost calls the ledger counted (as unpriced), each at its worst
// case. It never counts less than the journals' answered calls, and once
// every run completed (final) it counts exactly the lost calls the runs'
// status.usage.lostCalls sum to: both count a dispatch lost when its
// reissue says so (its Lost goes up), neither an intent only a dead
// replica's status held (never sent: with a database every intent is
// journaled before its call). Before then the ledger may count more: a
// lost call is counted when its reissue is refused, and journaled only
// once the reissue fits.
func checkLedger(t *testing.T, when string, u store.QuotaUse, j journaled, final bool) bool {
	t.Helper()
	n := u.UnpricedCalls
	okCost := u.Cost >= j.cost+n*lostCostMin && u.Cost <= j.cost+n*lostCostMax
	okTokens := u.Tokens >= j.tokens+n*lostTokensMin && u.Tokens <= j.tokens+n*lostTokensMax
	if !okCost || !okTokens || (final && n != j.lost) || (n == 0 && (u.Cost != j.cost || u.Tokens != j.tokens)) {
		t.Errorf("%s: the ledger says $%s, %d tokens, %d lost calls counted; the journals $%s and %d tokens answered and %d calls lost",
			when, money.NanoUSD(u.Cost), u.Tokens, n, money.NanoUSD(j.cost), j.tokens, j.lost)
		return false
	}
	return true
}

// lostIntents lists the journals of the runs with an intent that counts
// lost dispatches, entry by entry (kind, seq, call, lost, time).
func lostIntents(ctx context.Context, dsn string) string {
	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return err.Error()
	}
	db := stdlib.OpenDB(*pc)
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT j.name, e.seq, e.entry FROM journal_entries e JOIN run_journals j ON j.run_uid = e.run_uid
		WHERE e.run_uid IN (SELECT run_uid FROM journal_entries WHERE entry LIKE '%"lost"%') ORDER BY j.name, e.seq`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var name, entry string
		var seq int64
		if err := rows.Scan(&name, &seq, &entry); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "%s seq %d: %.300s\n", name, seq, entry)
	}
	return b.String()
}

// TestQuotaSharedAcrossReplicas: three manager replicas (six shards) on
// one PostgreSQL store drive 300 runs in two namespaces that share a
// ClusterAgentRunQuota of $1.00 a day and 20 active runs; the model is
// priced so about 70 runs fit. A replica is killed with SIGKILL mid-batch.
// Once the spend is used up: it is at least $0.95 and at most $1.00 plus
// what the calls in flight could cost; the ledger in the database equals
// what the runs' journals say they used, to the nano-dollar and the token,
// and counts the lost calls their status.usage.lostCalls sum to;
// every run not complete waits on QuotaExceeded with the quota's next
// midnight (cost) or no reset (activeRuns), needing no person; nothing is
// reserved. Then the quota is raised and every run completes; at no
// moment the watch saw were more than 20 runs active, nor did more than 20
// runs (and at least one) have their calls answered at once by the call
// ledger, and no reservation or hold is left.
func TestQuotaSharedAcrossReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three manager processes and PostgreSQL")
	}
	began := time.Now()
	c := sharedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	_, db := postgres.ForTest(t, postgres.Options{})
	ledger, err := sqlstore.Open(sqlstore.Config{DSN: db.DSN})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ledger.Close() })

	const nShards, perNS, activeLimit = 6, 150, 20
	leaseNS, err := c.NewNamespace(ctx, "leases")
	if err != nil {
		t.Fatal(err)
	}
	team := fmt.Sprintf("quota-%d", time.Now().UnixNano())
	var nss []string
	for range 2 {
		ns, err := c.NewNamespace(ctx, "quota")
		if err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string]map[string]string{"spender": {"agent.toml": quotaSpender}, loadtest.ProvidersConfigMap: {"providers.toml": quotaRates}} {
			if err := c.CreateConfigMap(ctx, ns, name, data); err != nil {
				t.Fatal(err)
			}
		}
		labelNamespace(t, ctx, c, ns, "team", team)
		nss = append(nss, ns)
	}

	ids := []string{"r1", "r2", "r3"}
	managers := map[string]*loadtest.Manager{}
	for _, id := range ids {
		m, err := c.StartManager(ctx, t.TempDir(), append(replicaFlags(leaseNS, id, nShards),
			"--store="+db.DSN, "--quota-store-policy=quota-store", "--quota-status-interval=500ms")...)
		if err != nil {
			t.Fatal(err)
		}
		managers[id] = m
		t.Cleanup(func() { _ = m.Kill() })
	}
	waitTakeover(t, ctx, c, leaseNS, "", ids, nShards, time.Now())

	zone, loc := zoneAtNoon(time.Now())
	now := time.Now().In(loc)
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, loc)
	q := &arv1.ClusterAgentRunQuota{ObjectMeta: metav1.ObjectMeta{Name: team}, Spec: arv1.ClusterAgentRunQuotaSpec{
		Hard:   arv1.QuotaHard{Cost: "1.00", ActiveRuns: ptr.To[int32](activeLimit)},
		Period: arv1.QuotaDay, TimeZone: zone,
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": team}},
	}}
	createWhenAccepted(t, ctx, c, q)
	key := quota.Key(arv1.KindClusterAgentRunQuota, "", team)
	period := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, loc).UnixMicro()
	active := watchActive(t, ctx, c, nss...)

	for _, ns := range nss {
		if err := c.CreateRuns(ctx, ns, "spender", "s", perNS, 16); err != nil {
			t.Fatal(err)
		}
	}
	total := 2 * perNS
	list := func() []arv1.AgentRun {
		var all []arv1.AgentRun
		for _, ns := range nss {
			var l arv1.AgentRunList
			if err := c.Client.List(ctx, &l, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			all = append(all, l.Items...)
		}
		return all
	}
	count := func(runs []arv1.AgentRun, f func(*arv1.AgentRun) bool) int {
		n := 0
		for i := range runs {
			if f(&runs[i]) {
				n++
			}
		}
		return n
	}
	waitUntil := func(what string, limit time.Duration, cond func([]arv1.AgentRun) bool) []arv1.AgentRun {
		deadline := time.Now().Add(limit)
		for {
			runs := list()
			if cond(runs) {
				return runs
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				u, _ := ledger.QuotaUse(ctx, key, period)
				holders, _ := ledger.QuotaHolders(ctx, key)
				t.Fatalf("timed out waiting for %s: %d complete, %d waiting on the quota of %d; the ledger: %+v, holders %v; reservations:\n%s\nthe runs not complete:\n%s", what,
					count(runs, loadtest.IsComplete), count(runs, waitsOnQuota), len(runs), u, holders, reservations(ctx, db.DSN, runs), unfinished(runs, managers))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// Mid-batch: a third of what fits has completed.
	waitUntil("20 runs complete", 2*time.Minute, func(runs []arv1.AgentRun) bool { return count(runs, loadtest.IsComplete) >= 20 })
	killed := time.Now()
	if err := managers["r1"].Kill(); err != nil {
		t.Fatal(err)
	}
	waitTakeover(t, ctx, c, leaseNS, "r1", []string{"r2", "r3"}, nShards, killed)

	// The spend is used up: every run is complete or waits on the quota,
	// and nothing is in flight.
	var use store.QuotaUse
	runs := waitUntil("the quota used up", 3*time.Minute, func(runs []arv1.AgentRun) bool {
		if count(runs, func(r *arv1.AgentRun) bool { return loadtest.IsComplete(r) || waitsOnQuota(r) }) != total {
			return false
		}
		use, err = ledger.QuotaUse(ctx, key, period)
		return err == nil && use.InFlight == 0 && use.ReservedCost == 0
	})
	usedUp := time.Since(began)
	completeAtCap := count(runs, loadtest.IsComplete)
	spentAtCap := use.Cost
	// Every call reserved its worst case within the limit before it was
	// made, and a lost one counts its reservation: the spend stays within
	// $1.00, inside the bound of $1.00 plus the calls in flight.
	if use.Cost < 950_000_000 || use.Cost > 1_000_000_000 {
		t.Errorf("spend $%s: want at least $0.95 and at most $1.00 (the calls in flight could have added $%s)", money.NanoUSD(use.Cost), money.NanoUSD(inFlightBound))
	}
	if !checkLedger(t, "once the quota was used up", use, journaledUse(t, runs), false) {
		t.Logf("the journals with lost calls:\n%s", lostIntents(ctx, db.DSN))
	}
	waitingOn := map[arv1.QuotaResource]int{}
	for i := range runs {
		r := &runs[i]
		if loadtest.IsComplete(r) {
			continue
		}
		w := r.Status.WaitingOn
		waitingOn[w.Resource]++
		truthful := w.Quota == key && !w.NeedsAPerson
		switch w.Resource {
		case arv1.QuotaCost:
			truthful = truthful && w.ResetAt != nil && w.ResetAt.Time.Equal(midnight)
		case arv1.QuotaActiveRuns:
			truthful = truthful && w.ResetAt == nil
		default:
			truthful = false
		}
		if !truthful {
			t.Errorf("%s/%s (%s) waits on %+v; want %s's cost until %v or its activeRuns", r.Namespace, r.Name, r.Status.Phase, w, key, midnight)
		}
	}

	// Raised: everything completes, never more than 20 at once.
	orig := q.DeepCopy()
	q.Spec.Hard.Cost = "100"
	if err := c.Client.Patch(ctx, q, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	runs = waitUntil("every run complete after the raise", 3*time.Minute, func(runs []arv1.AgentRun) bool {
		return count(runs, loadtest.IsComplete) == total
	})
	if m := active.max(); m > activeLimit {
		t.Errorf("%d runs were active at once in status; the quota allows %d", m, activeLimit)
	}
	answering, err := mostAnsweringAtOnce(ctx, db.DSN, nss)
	if err != nil {
		t.Fatal(err)
	}
	if answering > activeLimit || answering == 0 {
		t.Errorf("%d runs were answered calls at once by the call ledger; want between 1 and the quota's %d", answering, activeLimit)
	}
	// What runs that ended on a replica as it died still hold is given
	// back by the quota's sweep (every 6 refreshes: 3 s here).
	use, err = ledger.QuotaUse(ctx, key, period)
	if err != nil {
		t.Fatal(err)
	}
	heldAtEnd := use.ActiveRuns
	deadline := time.Now().Add(30 * time.Second)
	for use.ActiveRuns != 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		if use, err = ledger.QuotaUse(ctx, key, period); err != nil {
			t.Fatal(err)
		}
	}
	final := journaledUse(t, runs)
	if !checkLedger(t, "once every run completed", use, final, true) {
		t.Logf("the journals with lost calls:\n%s", lostIntents(ctx, db.DSN))
	}
	holders, err := ledger.QuotaHolders(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if use.ReservedCost != 0 || use.ReservedTokens != 0 || use.InFlight != 0 || use.ActiveRuns != 0 || len(holders) != 0 {
		t.Errorf("left over once every run completed: %+v, holders %v", use, holders)
	}
	t.Logf("%d runs on 3 replicas (one killed mid-batch): %d completed within $1.00 (spent $%s) in %v, the others waiting on %v; all completed after the raise (spent $%s, %d tokens; %d calls lost in handovers, %d of them counted at their worst case) at %v; at most %d active at once in status and %d answering at once in the call ledger; %d activeRuns slots still held as the last run completed, given back by the sweep",
		total, completeAtCap, money.NanoUSD(spentAtCap), usedUp.Round(time.Second), waitingOn, money.NanoUSD(use.Cost), use.Tokens, final.lost, use.UnpricedCalls, time.Since(began).Round(time.Second), active.max(), answering, heldAtEnd)
}

// mostAnsweringAtOnce is the most runs of the namespaces whose answered
// calls overlapped at once, by the call ledger: a run's first and last
// answers fall within its hold of an activeRuns slot (taken before its
// first call, given back after it ended), so no more runs than the
// quota's activeRuns can overlap. Status alone cannot show it: a run that
// ends within its first second may never show Running there, and with
// every run so quick the watch of status sees none active.
func mostAnsweringAtOnce(ctx context.Context, dsn string, nss []string) (int, error) {
	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return 0, err
	}
	db := stdlib.OpenDB(*pc)
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT MIN(at), MAX(at) FROM call_ledger WHERE namespace = ANY($1) GROUP BY run_uid`, nss)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	for rows.Next() {
		var first, last int64
		if err := rows.Scan(&first, &last); err != nil {
			return 0, err
		}
		edges = append(edges, edge{first, 1}, edge{last, -1})
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	// At one instant a run starting counts before one ending: both held
	// their slots then.
	slices.SortFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			return cmp.Compare(a.at, b.at)
		}
		return cmp.Compare(b.delta, a.delta)
	})
	n, most := 0, 0
	for _, e := range edges {
		n += e.delta
		most = max(most, n)
	}
	return most, nil
}

// reservations lists the calls holding a reservation, with their runs'
// state, to say why one was left.
func reservations(ctx context.Context, dsn string, runs []arv1.AgentRun) string {
	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return err.Error()
	}
	db := stdlib.OpenDB(*pc)
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT namespace, name, seq, resource, amount FROM quota_reservations ORDER BY name, seq")
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var ns, name, resource string
		var seq, amount int64
		if err := rows.Scan(&ns, &name, &seq, &resource, &amount); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "%s/%s seq %d %s %d:", ns, name, seq, resource, amount)
		for _, r := range runs {
			if r.Namespace == ns && r.Name == name {
				fmt.Fprintf(&b, " %s driver %q waiting %+v pending %+v", r.Status.Phase, r.Status.Driver, r.Status.WaitingOn, r.Status.PendingCall)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// unfinished describes the runs not complete: their status, and what
// each replica logged of them last.
func unfinished(runs []arv1.AgentRun, managers map[string]*loadtest.Manager) string {
	var b strings.Builder
	for i := range runs {
		r := &runs[i]
		if loadtest.IsComplete(r) {
			continue
		}
		fmt.Fprintf(&b, "%s/%s %s (uid %s) driver %q waiting %+v pending %+v\n", r.Namespace, r.Name, r.Status.Phase, r.UID, r.Status.Driver, r.Status.WaitingOn, r.Status.PendingCall)
		for _, id := range slices.Sorted(maps.Keys(managers)) {
			for _, line := range managers[id].LogLines(`"`+r.Name+`"`, 8) {
				fmt.Fprintf(&b, "  %s: %.600s\n", id, line)
			}
		}
	}
	return b.String()
}

// labelNamespace sets a label on a namespace.
func labelNamespace(t *testing.T, ctx context.Context, c *loadtest.Cluster, ns, key, value string) {
	t.Helper()
	var n corev1.Namespace
	if err := c.Client.Get(ctx, client.ObjectKey{Name: ns}, &n); err != nil {
		t.Fatal(err)
	}
	orig := n.DeepCopy()
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[key] = value
	if err := c.Client.Patch(ctx, &n, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}

// createWhenAccepted creates a spend quota once the admission policy
// accepts it: a manager with a database store writes that it has one into
// the policy, which ships saying none has.
func createWhenAccepted(t *testing.T, ctx context.Context, c *loadtest.Cluster, q client.Object) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.Client.Create(ctx, q)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the quota was never accepted: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func waitsOnQuota(r *arv1.AgentRun) bool {
	return r.Status.WaitingOn != nil && r.Status.WaitingOn.Reason == arv1.WaitQuotaExceeded
}
