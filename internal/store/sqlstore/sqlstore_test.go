package sqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv/postgres"
)

// pg is the package's PostgreSQL server (Debian's postgresql package,
// started in a temporary directory on a loopback port).
var pg *postgres.Server

func TestMain(m *testing.M) {
	var err error
	pg, err = postgres.Start(postgres.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = pg.Stop()
	os.Exit(code)
}

// backend is one database the tests run against.
type backend struct {
	name string
	// dsn makes a new, empty database.
	dsn func(t *testing.T) string
}

func backends() []backend {
	return []backend{
		{"postgres", func(t *testing.T) string {
			d, err := pg.CreateDatabase(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return d.DSN
		}},
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "agentrun.db") }},
	}
}

// eachBackend runs fn against each database.
func eachBackend(t *testing.T, fn func(t *testing.T, dsn string)) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) { fn(t, b.dsn(t)) })
	}
}

func open(t testing.TB, dsn string) *sqlstore.Store {
	t.Helper()
	s, err := sqlstore.Open(sqlstore.Config{DSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

var runCount atomic.Int64

func newRun() *arv1.AgentRun {
	n := runCount.Add(1)
	return &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: fmt.Sprintf("run-%d", n), UID: types.UID(fmt.Sprintf("uid-%d-%d", time.Now().UnixNano(), n)),
		CreationTimestamp: metav1.NewTime(time.Unix(1_700_000_000, 0)),
	}, Spec: arv1.AgentRunSpec{Agent: "a"}}
}

var at = time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)

func intent(seq int64, lost int) journal.Entry {
	return journal.Entry{Seq: seq, Kind: journal.ModelCallRequested, At: at, Stage: "s", Provider: "p", Model: "m", RequestHash: "h", Lost: lost}
}

func answer(seq, call int64, text string, cost *int64) journal.Entry {
	return journal.Entry{Seq: seq, Kind: journal.ModelCallCompleted, At: at, Call: call, Response: &journal.Response{Text: text},
		Usage: &journal.Usage{Prompt: 10, Completion: 5}, CostNanoUSD: cost}
}

// TestJournalRoundTrip: what one process appends (with an output) another
// reads back exactly, in seq order.
func TestJournalRoundTrip(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		a, run := open(t, dsn), newRun()
		if es, err := a.Load(ctx, run, true); err != nil || len(es) != 0 {
			t.Fatalf("Load of a new run = %v, %v", es, err)
		}
		must(t, a.Append(ctx, run, intent(0, 0)))
		must(t, a.AppendWithOutput(ctx, run, "the output\x00with a NUL", answer(1, 0, "done", ptr.To[int64](42)), intent(2, 0)))
		b := open(t, dsn)
		es, err := b.Load(ctx, run, false)
		must(t, err)
		if len(es) != 3 || es[1].Response.Text != "done" || es[2].Seq != 2 {
			t.Fatalf("read back %+v", es)
		}
		out, ok, err := b.Output(ctx, store.RefOf(run))
		if err != nil || !ok || out != "the output\x00with a NUL" {
			t.Fatalf("output = %q %v %v", out, ok, err)
		}
	})
}

// TestRetriedAppendAndTakenSeq: an append whose earlier attempt was stored
// (a process that never saw its answer) succeeds again and writes nothing
// new; other content under a stored seq is ErrSeqTaken, and the writer
// reads the journal afresh.
func TestRetriedAppendAndTakenSeq(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		a, b, run := open(t, dsn), open(t, dsn), newRun()
		must(t, a.Append(ctx, run, intent(0, 0), answer(1, 0, "x", nil)))
		// b has loaded the run as empty (it saw it created), so it does not
		// know of a's append: the same entries are recognised.
		_, err := b.Load(ctx, run, true)
		must(t, err)
		must(t, b.Append(ctx, run, intent(0, 0), answer(1, 0, "x", nil)))
		c := open(t, dsn)
		_, err = c.Load(ctx, run, true)
		must(t, err)
		if err := c.Append(ctx, run, intent(0, 0), answer(1, 0, "other", nil)); !errors.Is(err, store.ErrSeqTaken) {
			t.Fatalf("other content under seq 1: %v, want ErrSeqTaken", err)
		}
		es, err := c.Load(ctx, run, true) // read afresh despite empty
		must(t, err)
		if len(es) != 2 || es[1].Response.Text != "x" {
			t.Fatalf("after ErrSeqTaken the journal reads %+v", es)
		}
		if n := count(t, a, "SELECT count(*) FROM journal_entries WHERE run_uid = $1", run.UID); n != 2 {
			t.Fatalf("%d rows stored, want 2", n)
		}
		// The same on a run whose journal is registered (a step's append
		// between two calls, one statement on PostgreSQL): d, e and f read
		// the two entries, d appends an intent, e's other content under
		// its seq is refused; f, which never saw e's answer stored,
		// appends it again and is recognised; the ledger counts it once.
		d, e, f := open(t, dsn), open(t, dsn), open(t, dsn)
		for _, s := range []*sqlstore.Store{d, e, f} {
			_, err := s.Load(ctx, run, false)
			must(t, err)
		}
		must(t, d.Append(ctx, run, intent(2, 0)))
		if err := e.Append(ctx, run, intent(2, 1)); !errors.Is(err, store.ErrSeqTaken) {
			t.Fatalf("other content under seq 2 of a registered journal: %v, want ErrSeqTaken", err)
		}
		_, err = f.Load(ctx, run, false)
		must(t, err)
		_, err = e.Load(ctx, run, false)
		must(t, err)
		must(t, e.Append(ctx, run, answer(3, 2, "w", nil)))
		must(t, f.Append(ctx, run, answer(3, 2, "w", nil)))
		if err := f.Append(ctx, run, answer(3, 2, "v", nil)); !errors.Is(err, store.ErrSeqTaken) {
			t.Fatalf("other content under seq 3, known in memory: %v, want ErrSeqTaken", err)
		}
		if n := count(t, a, "SELECT count(*) FROM journal_entries WHERE run_uid = $1", run.UID); n != 4 {
			t.Fatalf("%d rows stored, want 4", n)
		}
		if n := count(t, a, "SELECT count(*) FROM call_ledger WHERE run_uid = $1 AND seq = 3", run.UID); n != 1 {
			t.Fatalf("%d ledger rows for the answer at seq 3, want 1", n)
		}
	})
}

// TestIntentIssuedAgain: an unanswered model intent issued again under
// its seq, counting the lost dispatch, replaces the stored one; an older
// view of it cannot.
func TestIntentIssuedAgain(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		a, run := open(t, dsn), newRun()
		must(t, a.Append(ctx, run, intent(0, 0)))
		b := open(t, dsn)
		_, err := b.Load(ctx, run, false)
		must(t, err)
		must(t, b.Append(ctx, run, intent(0, 1)))
		// a still holds lost 0 and issues it with lost 1 too: stored
		// differently now (b's), so a's copy is stale.
		if err := a.Append(ctx, run, journal.Entry{Seq: 0, Kind: journal.ModelCallRequested, At: at.Add(time.Second), Stage: "s", Provider: "p", Model: "m", RequestHash: "h", Lost: 1}); !errors.Is(err, store.ErrSeqTaken) {
			t.Fatalf("a stale reissue: %v, want ErrSeqTaken", err)
		}
		es, err := open(t, dsn).Load(ctx, run, false)
		must(t, err)
		if len(es) != 1 || es[0].Lost != 1 {
			t.Fatalf("stored %+v, want the intent with lost 1", es)
		}
	})
}

// TestFencing: once a replica's newer hold of a shard's Lease has written,
// no append of an older hold commits, on any run of the shard, including
// appends started while the newer hold was being recorded.
func TestFencing(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		old := store.WithFence(ctx, store.Fence{Lease: "system/agentrun-shard-0", Created: 100, Transitions: 3})
		newer := store.WithFence(ctx, store.Fence{Lease: "system/agentrun-shard-0", Created: 100, Transitions: 4})
		a, b := open(t, dsn), open(t, dsn)
		runs := make([]*arv1.AgentRun, 8)
		for i := range runs {
			runs[i] = newRun()
			must(t, a.Append(old, runs[i], intent(0, 0)))
		}
		var wg sync.WaitGroup
		var fencedAt atomic.Int64  // when b's first fenced write returned
		var late atomic.Int64      // a's appends begun after that which committed
		var running sync.WaitGroup // each of a's appenders until its first commit (or end)
		running.Add(len(runs))
		stop := make(chan struct{})
		for i := range runs {
			wg.Add(1)
			go func(run *arv1.AgentRun) {
				defer wg.Done()
				var first sync.Once
				defer first.Do(running.Done)
				for seq := int64(1); ; seq++ {
					select {
					case <-stop:
						return
					default:
					}
					begun := time.Now().UnixNano()
					err := a.Append(old, run, answer(seq, seq-1, "a", nil))
					if err == nil {
						first.Do(running.Done)
					}
					if err == nil && fencedAt.Load() != 0 && begun > fencedAt.Load() {
						late.Add(1)
					}
					if err != nil {
						if !errors.Is(err, store.ErrFenced) && !errors.Is(err, store.ErrSeqTaken) {
							t.Errorf("a's append: %v", err)
						}
						return
					}
				}
			}(runs[i])
		}
		// Once a's appends run on every run, b's newer hold writes.
		running.Wait()
		other := newRun()
		must(t, b.Append(newer, other, intent(0, 0)))
		fencedAt.Store(time.Now().UnixNano())
		// Each of a's appenders stops at its first fenced append; those
		// still going after a while are stopped.
		ended := make(chan struct{})
		go func() { wg.Wait(); close(ended) }()
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
			close(stop)
			<-ended
		}
		if n := late.Load(); n > 0 {
			t.Fatalf("%d appends of the older hold committed after the newer hold wrote", n)
		}
		if err := a.Append(old, newRun(), intent(0, 0)); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("an older hold's append on a new run: %v, want ErrFenced", err)
		}
		// A Lease created again starts its transitions over, and is newer.
		recreated := store.WithFence(ctx, store.Fence{Lease: "system/agentrun-shard-0", Created: 200, Transitions: 0})
		must(t, a.Append(recreated, newRun(), intent(0, 0)))
		if err := b.Append(newer, newRun(), intent(0, 0)); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("the old Lease's hold after it was created again: %v, want ErrFenced", err)
		}
	})
}

// TestCorruptJournal: a journal missing an entry, one whose row does not
// decode, and one shorter than the run's status are CorruptErrors naming
// the run and the seq, never the stored text.
func TestCorruptJournal(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		gap, bad, short := newRun(), newRun(), newRun()
		must(t, s.Append(ctx, gap, intent(0, 0), answer(1, 0, "secret text", nil), intent(2, 0)))
		must(t, s.Append(ctx, bad, intent(0, 0), answer(1, 0, "secret text", nil)))
		must(t, s.Append(ctx, short, intent(0, 0)))
		exec(t, s, "DELETE FROM journal_entries WHERE run_uid = $1 AND seq = 1", gap.UID)
		exec(t, s, "UPDATE journal_entries SET entry = '{\"seq\": 1, secret text' WHERE run_uid = $1 AND seq = 1", bad.UID)
		short.Status.Usage.ModelCalls = 3
		short.Status.PendingCall = &arv1.PendingCall{Seq: 6}
		for _, tc := range []struct {
			run      *arv1.AgentRun
			key, why string
		}{{gap, "000001", "entry 1 is missing"}, {bad, "000001", "does not decode"}, {short, "", "holds 1 entries but the run's status records a pending call at seq 6"}} {
			_, err := open(t, dsn).Load(ctx, tc.run, false)
			var ce *store.CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, store.ErrCorrupt) || ce.Key != tc.key || !strings.Contains(ce.Problem, tc.why) || !strings.Contains(ce.Object, tc.run.Name) {
				t.Fatalf("%s: Load = %v, want a CorruptError at key %q saying %q", tc.run.Name, err, tc.key, tc.why)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Fatalf("the error shows stored text: %v", err)
			}
		}
	})
}

// TestArchive: a finished run's record is stored once whatever the
// retries, with unknown cost kept unknown (NULL), its journal imported
// when the database did not hold it, and its calls in the ledger; the
// sweep removes records older than the retention with their journals.
func TestArchive(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		run := newRun()
		run.Labels = map[string]string{"team": "x"}
		run.Status = arv1.AgentRunStatus{Phase: arv1.PhaseComplete, FinishedAt: ptr.To(metav1.NewTime(at)), Model: "m",
			Usage: arv1.Usage{PromptTokens: 20, CompletionTokens: 10, TotalTokens: 30, ModelCalls: 2, CostUSD: "unknown", CostPricedUSD: "0.000000042", UnpricedCalls: 1}}
		out := "final"
		rec := &store.Record{Run: run, Output: &out, Entries: []journal.Entry{intent(0, 0), answer(1, 0, "a", ptr.To[int64](42)), intent(2, 0), answer(3, 2, "b", nil)},
			Children: []store.ChildRecord{{Name: "w0", UID: "c0", Phase: arv1.PhaseComplete}}}
		must(t, s.Archive(ctx, rec))
		must(t, s.Archive(ctx, rec)) // a retry
		if n := count(t, s, "SELECT count(*) FROM archived_runs WHERE run_uid = $1", run.UID); n != 1 {
			t.Fatalf("%d archive rows, want 1", n)
		}
		if n := count(t, s, "SELECT count(*) FROM archived_runs WHERE run_uid = $1 AND cost_nano_usd IS NULL AND priced_nano_usd = 42 AND unpriced_calls = 1", run.UID); n != 1 {
			t.Fatal("unknown cost was not kept unknown beside its priced part")
		}
		if n := count(t, s, "SELECT count(*) FROM call_ledger WHERE run_uid = $1 AND model = 'm'", run.UID); n != 2 {
			t.Fatalf("%d ledger rows, want 2", n)
		}
		if n := count(t, s, "SELECT count(*) FROM call_ledger WHERE run_uid = $1 AND cost_nano_usd IS NULL", run.UID); n != 1 {
			t.Fatalf("%d unpriced ledger rows, want 1", n)
		}
		got, gotOut, err := s.ArchivedRun(ctx, run.UID)
		must(t, err)
		if got.Status.Usage.CostUSD != "unknown" || got.Labels["team"] != "x" || gotOut == nil || *gotOut != "final" {
			t.Fatalf("read back %+v %v", got.Status.Usage, gotOut)
		}
		es, err := s.Entries(ctx, store.RefOf(run))
		if err != nil || len(es) != 4 {
			t.Fatalf("imported journal: %d entries, %v", len(es), err)
		}
		if n, err := s.Sweep(ctx, at, 100); err != nil || n != 0 {
			t.Fatalf("sweeping before its finish: %d, %v", n, err)
		}
		if n, err := s.Sweep(ctx, at.Add(time.Second), 100); err != nil || n != 1 {
			t.Fatalf("sweeping after its finish: %d, %v", n, err)
		}
		if n := count(t, s, "SELECT count(*) FROM journal_entries WHERE run_uid = $1", run.UID); n != 0 {
			t.Fatalf("%d journal rows left after the sweep", n)
		}
	})
}

// TestArchiveImportsALongJournal: a journal kept on ConfigMaps until its
// run's archive is imported whole, in as many statements as its length
// takes, and an archive again that brings more entries adds only those.
func TestArchiveImportsALongJournal(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		run := newRun()
		run.Status = arv1.AgentRunStatus{Phase: arv1.PhaseComplete, FinishedAt: ptr.To(metav1.NewTime(at)), Model: "m"}
		var entries []journal.Entry
		for call := range int64(1251) { // 2,502 entries: three statements of at most 1,000 rows
			entries = append(entries, intent(2*call, 0), answer(2*call+1, 2*call, fmt.Sprintf("answer %d", call), ptr.To(call)))
		}
		must(t, s.Archive(ctx, &store.Record{Run: run, Entries: entries[:1200]}))
		if n := count(t, s, "SELECT count(*) FROM journal_entries WHERE run_uid = $1", run.UID); n != 1200 {
			t.Fatalf("%d journal rows after the first archive, want 1200", n)
		}
		must(t, s.Archive(ctx, &store.Record{Run: run, Entries: entries}))
		got, err := s.Entries(ctx, store.RefOf(run))
		must(t, err)
		if len(got) != len(entries) {
			t.Fatalf("%d entries read back, want %d", len(got), len(entries))
		}
		for i, e := range got {
			if e.Seq != int64(i) || e.Kind != entries[i].Kind || (e.Response != nil) != (entries[i].Response != nil) ||
				(e.Response != nil && e.Response.Text != entries[i].Response.Text) {
				t.Fatalf("entry %d read back as %+v, want %+v", i, e, entries[i])
			}
		}
		if n := count(t, s, "SELECT count(*) FROM call_ledger WHERE run_uid = $1", run.UID); n != 1251 {
			t.Fatalf("%d ledger rows, want one a call (1251)", n)
		}
	})
}

// TestDeletedRunsJournalIsSwept: a run deleted before it was archived
// leaves its journal; once marked, the sweep removes it after the
// retention, and an archived run's mark changes nothing.
func TestDeletedRunsJournalIsSwept(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		gone, kept := newRun(), newRun()
		must(t, s.Append(ctx, gone, intent(0, 0)))
		must(t, s.Append(ctx, kept, intent(0, 0)))
		kept.Status = arv1.AgentRunStatus{Phase: arv1.PhaseComplete, FinishedAt: ptr.To(metav1.NewTime(time.Now().Add(time.Hour)))}
		must(t, s.Archive(ctx, &store.Record{Run: kept}))
		marked := time.Now()
		must(t, s.Deleted(ctx, gone.UID))
		must(t, s.Deleted(ctx, kept.UID))
		if n, err := s.Sweep(ctx, marked.Add(-time.Minute), 100); err != nil || n != 0 {
			t.Fatalf("sweeping before the deletion: %d, %v", n, err)
		}
		if n := count(t, s, "SELECT count(*) FROM journal_entries WHERE run_uid = $1", gone.UID); n != 1 {
			t.Fatalf("%d journal rows of the deleted run before its retention, want 1", n)
		}
		if n, err := s.Sweep(ctx, time.Now().Add(time.Minute), 100); err != nil || n != 1 {
			t.Fatalf("sweeping after the deletion: %d, %v (want the deleted run's journal only)", n, err)
		}
		if n := count(t, s, "SELECT count(*) FROM journal_entries WHERE run_uid = $1", gone.UID); n != 0 {
			t.Fatalf("%d journal rows of the deleted run left after the sweep", n)
		}
		if n := count(t, s, "SELECT count(*) FROM journal_entries WHERE run_uid = $1", kept.UID); n != 1 {
			t.Fatalf("%d journal rows of the archived run, want 1 (its archive keeps it until it is swept by its finish)", n)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func exec(t *testing.T, s *sqlstore.Store, q string, uid types.UID) {
	t.Helper()
	if s.Kind() == sqlstore.KindSQLite {
		q = strings.ReplaceAll(q, "$1", "?1")
	}
	if _, err := s.DB().Exec(q, string(uid)); err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, s *sqlstore.Store, q string, uid types.UID) int {
	t.Helper()
	if s.Kind() == sqlstore.KindSQLite {
		q = strings.ReplaceAll(q, "$1", "?1")
	}
	var n int
	if err := s.DB().QueryRow(q, string(uid)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFenceWaitsForAppendsInFlight: a newer hold is recorded only after
// every append of the older hold that had checked the fence has committed
// (the shared lock on the fence's row), so a takeover that loads the
// journal after recording its hold sees them all.
func TestFenceWaitsForAppendsInFlight(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		old := store.WithFence(ctx, store.Fence{Lease: "system/agentrun-shard-1", Created: 100, Transitions: 1})
		newer := store.WithFence(ctx, store.Fence{Lease: "system/agentrun-shard-1", Created: 100, Transitions: 2})
		a, b, run := open(t, dsn), open(t, dsn), newRun()
		must(t, a.Append(old, run, intent(0, 0)))
		checked, release := make(chan struct{}), make(chan struct{})
		sqlstore.SetBeforeCommit(a, func() { close(checked); <-release })
		aDone := make(chan error, 1)
		go func() { aDone <- a.Append(old, run, answer(1, 0, "a", nil)) }()
		<-checked
		bDone := make(chan error, 1)
		go func() { bDone <- b.Append(newer, newRun(), intent(0, 0)) }()
		select {
		case err := <-bDone:
			t.Fatalf("the newer hold was recorded (%v) while an older hold's append that had checked the fence was in flight", err)
		case <-time.After(500 * time.Millisecond):
		}
		close(release)
		must(t, <-aDone)
		must(t, <-bDone)
		es, err := open(t, dsn).Load(ctx, run, false)
		if err != nil || len(es) != 2 {
			t.Fatalf("the older hold's append: %d entries, %v", len(es), err)
		}
	})
}

// TestRaisedFenceRefusesOlderHolds: a replica that takes a shard records
// its fence before it appends anything (RaiseFence), and from then on an
// older holder's append is ErrFenced, while the new holder's go through.
func TestRaisedFenceRefusesOlderHolds(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		oldF := store.Fence{Lease: "system/agentrun-shard-2", Created: 100, Transitions: 1}
		newF := store.Fence{Lease: "system/agentrun-shard-2", Created: 100, Transitions: 2}
		old, taker, run := open(t, dsn), open(t, dsn), newRun()
		must(t, old.Append(store.WithFence(ctx, oldF), run, intent(0, 0)))
		must(t, taker.RaiseFence(ctx, newF))
		if err := old.Append(store.WithFence(ctx, oldF), run, answer(1, 0, "late", nil)); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("the older hold's append after the newer hold was raised: %v, want ErrFenced", err)
		}
		must(t, taker.Append(store.WithFence(ctx, newF), run, answer(1, 0, "taker", nil)))
		// Raising an older fence again changes nothing.
		must(t, open(t, dsn).RaiseFence(ctx, oldF))
		if err := old.Append(store.WithFence(ctx, oldF), newRun(), intent(0, 0)); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("after an older fence was raised again: %v, want ErrFenced", err)
		}
	})
}

// TestBusyPoolIsNotAnOutage: more appends at once than the pool has
// connections, each transaction held 300 ms, queue for longer than the
// operation bound (1 s) while the database answers every one: none may
// read as the database being away (a thousand runs created at once parked
// on StoreUnavailable so in BenchmarkLatency1000Kubectl). A transaction
// that never ends, though, still makes the appends waiting behind it
// unavailable within the bound.
func TestBusyPoolIsNotAnOutage(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s, err := sqlstore.Open(sqlstore.Config{DSN: dsn, MaxConns: 1, OpTimeout: time.Second})
		must(t, err)
		t.Cleanup(func() { _ = s.Close() })
		must(t, s.Check(ctx))
		sqlstore.SetBeforeCommit(s, func() {
			time.Sleep(300 * time.Millisecond) // the database taking its time to answer, not a wait for a result
		})
		const n = 8
		errs := make(chan error, n)
		for range n {
			go func() { errs <- s.Append(ctx, newRun(), intent(0, 0)) }()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Errorf("an append behind %d others of 300 ms each, with a 1 s bound: %v", n-1, err)
			}
		}

		// A transaction that never ends: the next append gives up.
		stuck, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		sqlstore.SetBeforeCommit(s, func() { once.Do(func() { close(stuck) }); <-release })
		go func() { _ = s.Append(ctx, newRun(), intent(0, 0)) }()
		<-stuck
		start := time.Now()
		err = s.Append(ctx, newRun(), intent(0, 0))
		close(release)
		var ue *store.UnavailableError
		if !errors.As(err, &ue) {
			t.Fatalf("an append behind a transaction that never ends = %v, want the store unavailable", err)
		}
		if waited := time.Since(start); waited > 3*time.Second {
			t.Errorf("the append behind a transaction that never ends gave up after %v, want about the 1 s bound", waited)
		}
	})
}
