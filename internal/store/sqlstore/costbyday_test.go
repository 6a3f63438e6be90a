package sqlstore_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
)

// ledgerRow is one call_ledger row as the tests sum it.
type ledgerRow struct {
	ns, agent, model       string
	slot                   string // the rollup's slot: its run UID's first character
	at, prompt, completion int64
	total                  int64
	cost                   *int64
	inRollup               bool
}

func ledgerRows(t *testing.T, s *sqlstore.Store) []ledgerRow {
	t.Helper()
	rows, err := s.DB().Query("SELECT run_uid, namespace, agent, model, at, prompt_tokens, completion_tokens, total_tokens, cost_nano_usd, in_rollup FROM call_ledger")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	var out []ledgerRow
	for rows.Next() {
		var r ledgerRow
		var uid string
		if err := rows.Scan(&uid, &r.ns, &r.agent, &r.model, &r.at, &r.prompt, &r.completion, &r.total, &r.cost, &r.inRollup); err != nil {
			t.Fatal(err)
		}
		r.slot = uid[:1]
		out = append(out, r)
	}
	must(t, rows.Err())
	return out
}

const day = int64(24 * time.Hour / time.Microsecond)

// sumLedger is the cost report of [from, to) by namespace, agent, model
// and day, summed here from the ledger's rows one by one.
func sumLedger(rows []ledgerRow, from, to int64) []sqlstore.CostRow {
	var calls []sqlstore.CostRow
	for _, r := range rows {
		if r.at < from || r.at >= to {
			continue
		}
		c := sqlstore.CostRow{Namespace: r.ns, Agent: r.agent, Model: r.model, Day: r.at / day * day, Calls: 1,
			PromptTokens: r.prompt, CompletionTokens: r.completion, TotalTokens: r.total}
		if r.cost == nil {
			c.UnpricedCalls = 1
		} else {
			c.PricedNanoUSD = *r.cost
		}
		calls = append(calls, c)
	}
	return sumRows(calls)
}

// rollup reads call_ledger_daily, every row, its slots summed, in
// sumLedger's order.
func rollup(t *testing.T, s *sqlstore.Store) []sqlstore.CostRow {
	t.Helper()
	var all []sqlstore.CostRow
	for _, rows := range rollupSlots(t, s) {
		all = append(all, rows...)
	}
	return sumRows(all)
}

// rollupSlots reads call_ledger_daily by slot, each in sumLedger's order.
func rollupSlots(t *testing.T, s *sqlstore.Store) map[string][]sqlstore.CostRow {
	t.Helper()
	rows, err := s.DB().Query(`SELECT slot, namespace, agent, model, day, calls, prompt_tokens, completion_tokens, total_tokens, priced_nano_usd, unpriced_calls
		FROM call_ledger_daily`)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	bySlot := map[string][]sqlstore.CostRow{}
	for rows.Next() {
		var slot string
		var r sqlstore.CostRow
		if err := rows.Scan(&slot, &r.Namespace, &r.Agent, &r.Model, &r.Day, &r.Calls, &r.PromptTokens, &r.CompletionTokens, &r.TotalTokens, &r.PricedNanoUSD, &r.UnpricedCalls); err != nil {
			t.Fatal(err)
		}
		bySlot[slot] = append(bySlot[slot], r)
	}
	must(t, rows.Err())
	for slot, rs := range bySlot {
		if sorted := sumRows(rs); len(sorted) != len(rs) {
			t.Fatalf("slot %q holds a group twice: %+v", slot, rs)
		} else {
			bySlot[slot] = sorted
		}
	}
	return bySlot
}

// sumRows sums rows of the same group, in sumLedger's order.
func sumRows(rows []sqlstore.CostRow) []sqlstore.CostRow {
	byKey := map[string]*sqlstore.CostRow{}
	for _, r := range rows {
		k := fmt.Sprintf("%s/%s/%s/%d", r.Namespace, r.Agent, r.Model, r.Day)
		g := byKey[k]
		if g == nil {
			g = &sqlstore.CostRow{Namespace: r.Namespace, Agent: r.Agent, Model: r.Model, Day: r.Day}
			byKey[k] = g
		}
		g.Calls += r.Calls
		g.PromptTokens += r.PromptTokens
		g.CompletionTokens += r.CompletionTokens
		g.TotalTokens += r.TotalTokens
		g.PricedNanoUSD += r.PricedNanoUSD
		g.UnpricedCalls += r.UnpricedCalls
	}
	var out []sqlstore.CostRow
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		out = append(out, *byKey[k])
	}
	return out
}

// rollupMatchesLedger: each slot of call_ledger_daily holds exactly the
// sums of the ledger's rows marked in it whose run falls in that slot, no
// group with no call left.
func rollupMatchesLedger(t *testing.T, s *sqlstore.Store, when string) {
	t.Helper()
	rolled := map[string][]ledgerRow{}
	for _, r := range ledgerRows(t, s) {
		if r.inRollup {
			rolled[r.slot] = append(rolled[r.slot], r)
		}
	}
	got := rollupSlots(t, s)
	for _, slot := range slices.Sorted(maps.Keys(got)) {
		if _, ok := rolled[slot]; !ok {
			t.Fatalf("%s: slot %q of the daily rollup holds %+v, and no rolled-up call of the ledger is in it", when, slot, got[slot])
		}
	}
	for slot, rows := range rolled {
		if want := sumLedger(rows, 0, 1<<62); !slices.Equal(got[slot], want) {
			t.Fatalf("%s: slot %q of the daily rollup\n%+v\ndiffers from the ledger's sums\n%+v", when, slot, got[slot], want)
		}
	}
}

// call is a model call answered at when, of model, priced cost (nil:
// unknown).
func call(seq int64, when time.Time, model string, cost *int64) []journal.Entry {
	return []journal.Entry{
		{Seq: seq, Kind: journal.ModelCallRequested, At: when, Stage: "s", Provider: "p", Model: model, RequestHash: "h"},
		{Seq: seq + 1, Kind: journal.ModelCallCompleted, At: when, Call: seq, Response: &journal.Response{Text: "t"},
			Usage: &journal.Usage{Prompt: 100 + seq, Completion: 7}, CostNanoUSD: cost},
	}
}

// TestCostByDayFollowsTheLedger: a run's calls enter the daily rollup the
// cost report reads when the run is archived, with its agent (an append,
// retried or not, leaves the rollup alone), leave it when its record is
// deleted or swept, in the same transactions; and the report of any
// range, whole days or not, archived runs and runs in flight, equals the
// ledger's own sums with unknown cost counted apart.
func TestCostByDayFollowsTheLedger(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		d0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
		all := []sqlstore.CostDimension{sqlstore.ByNamespace, sqlstore.ByAgent, sqlstore.ByModel, sqlstore.ByDay}
		// reportsMatchLedger: reports of ranges ending inside days and on
		// their bounds equal the ledger's sums.
		reportsMatchLedger := func(when string) {
			t.Helper()
			ledger := ledgerRows(t, s)
			for _, r := range []struct{ from, to time.Duration }{
				{0, 72 * time.Hour}, {time.Hour, 71 * time.Hour}, {3 * time.Hour, 24 * time.Hour}, {24 * time.Hour, 48 * time.Hour},
				{23 * time.Hour, 25*time.Hour + time.Minute}, {2 * time.Hour, 2*time.Hour + 1}, {-48 * time.Hour, 1000 * time.Hour},
			} {
				from, to := d0.Add(r.from).UnixMicro(), d0.Add(r.to).UnixMicro()
				got, err := s.CostReport(ctx, sqlstore.CostQuery{From: from, To: to, By: all})
				must(t, err)
				if want := sumLedger(ledger, from, to); !slices.Equal(got, want) {
					t.Errorf("%s: report of [%s, %s): %+v, want %+v", when, r.from, r.to, got, want)
				}
			}
		}
		calls := func(models ...string) []journal.Entry {
			var entries []journal.Entry
			for i, when := range []time.Duration{2 * time.Hour, 23*time.Hour + 59*time.Minute, 24 * time.Hour, 30 * time.Hour, 50 * time.Hour} {
				cost := ptr.To(int64(1000 * (i + 1)))
				if i == 1 {
					cost = nil
				}
				entries = append(entries, call(int64(2*i), d0.Add(when), models[i%len(models)], cost)...)
			}
			return entries
		}
		live, inFlight := newRun(), newRun()
		live.Spec.Agent = "researcher"
		entries := calls("m1", "m2")
		must(t, s.Append(ctx, live, entries[:4]...))
		must(t, s.Append(ctx, live, entries[4:]...))
		must(t, s.Append(ctx, inFlight, calls("m1")...))
		must(t, s.Append(ctx, live, entries[4:]...)) // a retry of a committed append
		rollupMatchesLedger(t, s, "after appends")
		if got := rollup(t, s); len(got) != 0 {
			t.Fatalf("calls of runs not archived are in the rollup: %+v", got)
		}
		reportsMatchLedger("runs in flight")

		live.Status = arv1.AgentRunStatus{Phase: arv1.PhaseComplete, FinishedAt: ptr.To(metav1.NewTime(d0.Add(51 * time.Hour)))}
		must(t, s.Archive(ctx, &store.Record{Run: live}))
		must(t, s.Archive(ctx, &store.Record{Run: live})) // a retry
		rollupMatchesLedger(t, s, "after the run's archive")
		if got := rollup(t, s); len(got) != 5 {
			t.Fatalf("the archived run's groups: %+v, want 5 (m1 on three days, m2 on two)", got)
		}
		for _, r := range rollup(t, s) {
			if r.Agent != "researcher" {
				t.Fatalf("after the archive: a group of agent %q: %+v", r.Agent, r)
			}
		}
		// Archived again with another agent (its spec was edited after
		// the end, say): its calls move to that agent's groups, and back.
		for _, agent := range []string{"reviewer", "researcher"} {
			live.Spec.Agent = agent
			must(t, s.Archive(ctx, &store.Record{Run: live}))
			rollupMatchesLedger(t, s, "after an archive under agent "+agent)
			got := rollup(t, s)
			if len(got) != 5 {
				t.Fatalf("after an archive under agent %s: %+v, want 5 groups", agent, got)
			}
			for _, r := range got {
				if r.Agent != agent {
					t.Fatalf("after an archive under agent %s: a group of agent %q: %+v", agent, r.Agent, r)
				}
			}
		}
		reportsMatchLedger("one run archived, one in flight")

		imported := newRun()
		imported.Namespace, imported.Spec.Agent = "other", "writer"
		imported.Status = arv1.AgentRunStatus{Phase: arv1.PhaseError, FinishedAt: ptr.To(metav1.NewTime(d0.Add(26 * time.Hour)))}
		must(t, s.Archive(ctx, &store.Record{Run: imported, Entries: slices.Concat(call(0, d0.Add(25*time.Hour), "m1", nil), call(2, d0.Add(25*time.Hour), "m1", ptr.To[int64](5)))}))
		must(t, s.Archive(ctx, &store.Record{Run: imported}))
		rollupMatchesLedger(t, s, "after a record archived with its journal")
		reportsMatchLedger("a record archived with its journal")

		byAgent, err := s.CostReport(ctx, sqlstore.CostQuery{From: d0.Add(time.Hour).UnixMicro(), To: d0.Add(60 * time.Hour).UnixMicro(),
			By: []sqlstore.CostDimension{sqlstore.ByAgent}, Namespace: "ns"})
		must(t, err)
		tokens := int64(100 + 102 + 104 + 106 + 108)
		want := []sqlstore.CostRow{
			{Calls: 5, PromptTokens: tokens, CompletionTokens: 35, TotalTokens: tokens + 35, PricedNanoUSD: 1000 + 3000 + 4000 + 5000, UnpricedCalls: 1},
			{Agent: "researcher", Calls: 5, PromptTokens: tokens, CompletionTokens: 35, TotalTokens: tokens + 35, PricedNanoUSD: 1000 + 3000 + 4000 + 5000, UnpricedCalls: 1},
		}
		if !slices.Equal(byAgent, want) {
			t.Errorf("by agent in ns: %+v, want %+v", byAgent, want)
		}

		found, err := s.DeleteRecord(ctx, string(live.UID))
		if err != nil || !found {
			t.Fatal(found, err)
		}
		rollupMatchesLedger(t, s, "after a record's deletion")
		reportsMatchLedger("after a record's deletion")
		if got, err := s.CostReport(ctx, sqlstore.CostQuery{From: 0, To: d0.Add(1000 * time.Hour).UnixMicro(), Namespace: "ns", Agent: "researcher", By: all}); err != nil || len(got) != 0 {
			t.Fatalf("the deleted record's calls are still reported: %+v %v", got, err)
		}
		if n, err := s.Sweep(ctx, d0.Add(100*time.Hour), 100); err != nil || n != 1 {
			t.Fatalf("sweep: %d %v", n, err)
		}
		rollupMatchesLedger(t, s, "after a sweep")
		if got := rollup(t, s); len(got) != 0 {
			t.Fatalf("groups left after every archived record went: %+v", got)
		}
		reportsMatchLedger("after a sweep")
	})
}

// TestCostByDayMigrationRollsUpTheLedger: a database whose ledger was
// written before the rollup existed gets its archived runs' calls (an
// agent written) summed by the migration, unpriced calls counted apart;
// calls of runs in flight stay out, and the report counts every call.
func TestCostByDayMigrationRollsUpTheLedger(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		must(t, sqlstore.MigrateTo(ctx, s, 6))
		for i := range 40 {
			cost := "NULL"
			if i%7 != 0 {
				cost = fmt.Sprint(10 * i)
			}
			_, err := s.DB().ExecContext(ctx, fmt.Sprintf(`INSERT INTO call_ledger (run_uid, seq, namespace, agent, provider, model, at, prompt_tokens, completion_tokens, total_tokens, cost_nano_usd)
				VALUES ('u%d', %d, 'ns%d', '%s', 'p', 'm%d', %d, %d, 3, %d, %s)`, i%5, i, i%2, []string{"a1", "a2", ""}[i%3], i%2, 1_795_000_000_000_000+int64(i)*3*3600*1_000_000, i, i+3, cost))
			must(t, err)
		}
		must(t, s.Check(ctx))
		rollupMatchesLedger(t, s, "after the migration")
		if got := rollup(t, s); len(got) < 10 {
			t.Fatalf("%d groups rolled up from 40 calls over 5 days", len(got))
		}
		var pending int
		must(t, s.DB().QueryRowContext(ctx, "SELECT count(*) FROM call_ledger WHERE in_rollup = 0 AND agent = ''").Scan(&pending))
		if pending != 13 {
			t.Fatalf("%d calls of runs in flight (agent \"\") left out of the rollup, want 13", pending)
		}
		got, err := s.CostReport(ctx, sqlstore.CostQuery{From: 0, To: 1_796_000_000_000_000, By: []sqlstore.CostDimension{sqlstore.ByNamespace, sqlstore.ByAgent, sqlstore.ByModel, sqlstore.ByDay}})
		must(t, err)
		if want := sumLedger(ledgerRows(t, s), 0, 1_796_000_000_000_000); !slices.Equal(got, want) {
			t.Fatalf("the report after the migration: %+v, want %+v", got, want)
		}
	})
}

// TestFirstArchiveMatchesTheTransaction: on PostgreSQL a run's first
// archive is one statement. It stores what the transaction stores for a
// twin run (the record, its labels, its calls moved into the rollup under
// its agent); for a run archived already it stores nothing, and Archive
// then replaces the record through the transaction.
func TestFirstArchiveMatchesTheTransaction(t *testing.T) {
	ctx := context.Background()
	s := open(t, backends()[0].dsn(t))
	d0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	newFinished := func() *arv1.AgentRun {
		r := newRun()
		r.Labels = map[string]string{"team": "a", "app": "x"}
		r.Spec.Agent = "writer"
		must(t, s.Append(ctx, r, slices.Concat(call(0, d0.Add(time.Hour), "m1", ptr.To[int64](10)), call(2, d0.Add(25*time.Hour), "m2", nil))...))
		r.Status = arv1.AgentRunStatus{Phase: arv1.PhaseComplete, FinishedAt: ptr.To(metav1.NewTime(d0.Add(26 * time.Hour))),
			Usage: arv1.Usage{ModelCalls: 2, PromptTokens: 202, CompletionTokens: 14, TotalTokens: 216, CostPricedUSD: "0.00000001", UnpricedCalls: 1}}
		return r
	}
	// stored is what the database holds of a run, its UID and name left
	// out: its record's columns, its labels, its ledger rows.
	stored := func(uid string) string {
		t.Helper()
		var out []string
		query := func(q string) {
			rows, err := s.DB().Query(q, uid)
			must(t, err)
			defer func() { _ = rows.Close() }()
			cols, err := rows.Columns()
			must(t, err)
			for rows.Next() {
				vals := make([]any, len(cols))
				ptrs := make([]any, len(cols))
				for i := range vals {
					ptrs[i] = &vals[i]
				}
				must(t, rows.Scan(ptrs...))
				out = append(out, fmt.Sprint(vals...))
			}
			must(t, rows.Err())
		}
		query(`SELECT namespace, agent, phase, labels, finished_at, prompt_tokens, completion_tokens, total_tokens, model_calls, lost_calls,
			cost_nano_usd, priced_nano_usd, unpriced_calls, model FROM archived_runs WHERE run_uid = $1`)
		query("SELECT namespace, label_key, label_value FROM archived_run_labels WHERE run_uid = $1 ORDER BY label_key")
		query("SELECT namespace, agent, model, at, cost_nano_usd, in_rollup FROM call_ledger WHERE run_uid = $1 ORDER BY at")
		return strings.Join(out, "\n")
	}

	one, twin := newFinished(), newFinished()
	first, err := sqlstore.FirstArchive(ctx, s, &store.Record{Run: one})
	must(t, err)
	if !first {
		t.Fatal("the first archive of a run with no record was not stored by the one statement")
	}
	sqlstore.SetBeforeCommit(s, func() {}) // the twin through the transaction
	must(t, s.Archive(ctx, &store.Record{Run: twin}))
	sqlstore.SetBeforeCommit(s, nil)
	if got, want := stored(string(one.UID)), stored(string(twin.UID)); got != want || !strings.Contains(got, "writer") {
		t.Fatalf("the one statement stored\n%s\nthe transaction\n%s", got, want)
	}
	rollupMatchesLedger(t, s, "after the one statement and the transaction")
	if got := rollup(t, s); len(got) != 2 {
		t.Fatalf("the rollup: %+v, want 2 groups (m1 and m2 of agent writer, both runs in each)", got)
	}

	before := stored(string(one.UID))
	one.Spec.Agent, one.Labels = "reviewer", map[string]string{"team": "b"}
	first, err = sqlstore.FirstArchive(ctx, s, &store.Record{Run: one})
	must(t, err)
	if first || stored(string(one.UID)) != before {
		t.Fatalf("a run archived already was stored again by the one statement (%v):\n%s", first, stored(string(one.UID)))
	}
	must(t, s.Archive(ctx, &store.Record{Run: one}))
	if got := stored(string(one.UID)); !strings.Contains(got, "reviewer") || strings.Contains(got, "writer") || strings.Contains(got, "app") {
		t.Fatalf("archived again under agent reviewer and new labels, the run holds\n%s", got)
	}
	rollupMatchesLedger(t, s, "after an archive again")
}
