package sqlstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
)

// TestHistoryReads: the history API's queries mean the same on both
// databases: label terms, field terms, newest-first pages that continue
// after a cursor, the purge of one record, and a cost report that counts
// unpriced calls apart.
func TestHistoryReads(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			s, err := sqlstore.Open(sqlstore.Config{DSN: b.dsn(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s.Close() }()
			base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
			for i := range 6 {
				team := []string{"x", "y", ""}[i%3]
				labels := map[string]string{}
				if team != "" {
					labels["team"] = team
				}
				run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("r%d", i), UID: types.UID(fmt.Sprintf("u%d", i)), Labels: labels}}
				run.Spec.Agent = "agent"
				run.Status.Phase = []arv1.Phase{arv1.PhaseComplete, arv1.PhaseError}[i%2]
				run.Status.FinishedAt = ptr.To(metav1.NewTime(base.Add(time.Duration(i/2) * time.Hour)))
				var cost *int64
				if i != 5 {
					cost = ptr.To(int64(1000 * (i + 1)))
				}
				entries := []journal.Entry{
					{Seq: 0, Kind: journal.ModelCallRequested, At: base, Provider: "p", Model: "m"},
					{Seq: 1, Kind: journal.ModelCallCompleted, At: base.Add(time.Duration(i) * 24 * time.Hour), Call: 0, Usage: &journal.Usage{Prompt: 10, Completion: 1}, CostNanoUSD: cost},
				}
				if err := s.Archive(ctx, &store.Record{Run: run, Entries: entries}); err != nil {
					t.Fatal(err)
				}
			}
			names := func(q sqlstore.RecordQuery) string {
				rows, err := s.ListRecords(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				out := ""
				for _, r := range rows {
					out += r.Name + " "
				}
				return out
			}
			for _, c := range []struct {
				q    sqlstore.RecordQuery
				want string
			}{
				{sqlstore.RecordQuery{Namespace: "ns"}, "r5 r4 r3 r2 r1 r0 "},
				{sqlstore.RecordQuery{Labels: []sqlstore.LabelTerm{{Key: "team", Op: sqlstore.LabelIn, Values: []string{"x"}}}}, "r3 r0 "},
				{sqlstore.RecordQuery{Labels: []sqlstore.LabelTerm{{Key: "team", Op: sqlstore.LabelNotIn, Values: []string{"x"}}}}, "r5 r4 r2 r1 "},
				{sqlstore.RecordQuery{Labels: []sqlstore.LabelTerm{{Key: "team", Op: sqlstore.LabelNotExists}}}, "r5 r2 "},
				{sqlstore.RecordQuery{Phase: []sqlstore.FieldTerm{{Value: string(arv1.PhaseError)}}, Labels: []sqlstore.LabelTerm{{Key: "team", Op: sqlstore.LabelExists}}}, "r3 r1 "},
				{sqlstore.RecordQuery{FinishedAfter: base.Add(30 * time.Minute).UnixMicro(), FinishedBefore: base.Add(90 * time.Minute).UnixMicro()}, "r3 r2 "},
				{sqlstore.RecordQuery{After: &sqlstore.RecordCursor{FinishedAt: base.Add(time.Hour).UnixMicro(), UID: "u3"}, Limit: 2}, "r2 r1 "},
				// Within a namespace, label terms are checked run by run.
				{sqlstore.RecordQuery{Namespace: "ns", Labels: []sqlstore.LabelTerm{{Key: "team", Op: sqlstore.LabelIn, Values: []string{"x", "y"}}}, Limit: 3}, "r4 r3 r1 "},
				{sqlstore.RecordQuery{Namespace: "ns", Labels: []sqlstore.LabelTerm{{Key: "team", Op: sqlstore.LabelNotIn, Values: []string{"x"}}}}, "r5 r4 r2 r1 "},
				{sqlstore.RecordQuery{Namespace: "ns", Phase: []sqlstore.FieldTerm{{Value: string(arv1.PhaseError)}}, Labels: []sqlstore.LabelTerm{{Key: "team", Op: sqlstore.LabelExists}}}, "r3 r1 "},
				{sqlstore.RecordQuery{Namespace: "ns", Labels: []sqlstore.LabelTerm{{Key: "team", Op: sqlstore.LabelNotExists}}, Summaries: true}, "r5 r2 "},
				{sqlstore.RecordQuery{Namespace: "other", Labels: []sqlstore.LabelTerm{{Key: "team", Op: sqlstore.LabelExists}}}, ""},
			} {
				if got := names(c.q); got != c.want {
					t.Errorf("%+v: got %q, want %q", c.q, got, c.want)
				}
			}
			report := func() []sqlstore.CostRow {
				rows, err := s.CostReport(ctx, sqlstore.CostQuery{From: base.UnixMicro(), To: base.Add(30 * 24 * time.Hour).UnixMicro(), By: []sqlstore.CostDimension{sqlstore.ByAgent}})
				if err != nil {
					t.Fatal(err)
				}
				return rows
			}
			want := sqlstore.CostRow{Agent: "agent", Calls: 6, PromptTokens: 60, CompletionTokens: 6, TotalTokens: 66, PricedNanoUSD: 15000, UnpricedCalls: 1}
			if got := report(); len(got) != 1 || got[0] != want {
				t.Errorf("cost report: %+v, want %+v", got, want)
			}
			if found, err := s.DeleteRecord(ctx, "u5"); err != nil || !found {
				t.Fatal(found, err)
			}
			want = sqlstore.CostRow{Agent: "agent", Calls: 5, PromptTokens: 50, CompletionTokens: 5, TotalTokens: 55, PricedNanoUSD: 15000}
			if got := report(); len(got) != 1 || got[0] != want {
				t.Errorf("cost report after the purge: %+v, want %+v", got, want)
			}
			if got := names(sqlstore.RecordQuery{Labels: []sqlstore.LabelTerm{{Key: "team", Op: sqlstore.LabelNotExists}}}); got != "r2 " {
				t.Errorf("after the purge: %q", got)
			}
			days, err := s.CostReport(ctx, sqlstore.CostQuery{From: base.UnixMicro(), To: base.Add(3 * 24 * time.Hour).UnixMicro(), By: []sqlstore.CostDimension{sqlstore.ByDay}})
			if err != nil || len(days) != 3 || days[1].Day != base.Add(24*time.Hour).Truncate(24*time.Hour).UnixMicro() {
				t.Errorf("by day: %+v %v", days, err)
			}
			k1, err1 := s.HistoryKey(ctx)
			k2, err2 := s.HistoryKey(ctx)
			if err1 != nil || err2 != nil || len(k1) != 32 || string(k1) != string(k2) {
				t.Errorf("history key: %v %v, stable %v", err1, err2, string(k1) == string(k2))
			}
		})
	}
}

// TestLiveJournal: the journal of a run not archived is found by name, the
// newest of that name; an archived run's is not, nor a deleted run's.
func TestLiveJournal(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		archived, live, deleted := newRun(), newRun(), newRun()
		live.Name, deleted.Name = archived.Name, "deleted-"+archived.Name
		must(t, s.Append(ctx, archived, intent(0, 0)))
		archived.Status = arv1.AgentRunStatus{Phase: arv1.PhaseComplete, FinishedAt: ptr.To(metav1.NewTime(time.Now()))}
		must(t, s.Archive(ctx, &store.Record{Run: archived}))
		if uid, ok, err := s.LiveJournal(ctx, "ns", archived.Name); err != nil || ok {
			t.Fatalf("an archived run's journal is live: %q %v %v", uid, ok, err)
		}
		must(t, s.Append(ctx, live, intent(0, 0)))
		if uid, ok, err := s.LiveJournal(ctx, "ns", live.Name); err != nil || !ok || uid != string(live.UID) {
			t.Fatalf("the live run of a reused name: %q %v %v, want %s", uid, ok, err, live.UID)
		}
		must(t, s.Append(ctx, deleted, intent(0, 0)))
		must(t, s.Deleted(ctx, deleted.UID))
		if uid, ok, err := s.LiveJournal(ctx, "ns", deleted.Name); err != nil || ok {
			t.Fatalf("a deleted run's journal is live: %q %v %v", uid, ok, err)
		}
	})
}
