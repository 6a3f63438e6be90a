package sqlstore_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv/postgres"
)

// BenchmarkArchiveBurst: 100 runs of 30 answered calls each end together
// and are archived by 16 workers at once, as a batch's end reconciles do,
// on a durable PostgreSQL (fsync and synchronous commit on). Passes take
// turns after an untimed burst: the archive's transaction (the path of
// an archive again), then the one statement of a first archive, twice
// each, on fresh runs.
// Reports each path's wall for the burst and its archives' p50 and p99,
// and the transaction's wall over the one statement's.
func BenchmarkArchiveBurst(b *testing.B) {
	const runs, calls = 100, 30
	s := durableStore(b)
	ctx := context.Background()
	// finished are runs whose journal the database holds, as a run driven
	// on a database store leaves it.
	finished := func() []*store.Record {
		out := make([]*store.Record, runs)
		for i := range out {
			r := newRun()
			es := journalOf(calls)
			if err := s.Append(ctx, r, es...); err != nil {
				b.Fatal(err)
			}
			finish(r, calls)
			out[i] = &store.Record{Run: r}
		}
		return out
	}
	archiveBurst(b, s, finished()) // untimed: the first burst on a new database is slower
	bursts := &burstTimes{}
	for range b.N {
		for _, path := range []string{"transaction", "one statement", "transaction", "one statement"} {
			recs := finished()
			if path == "transaction" {
				sqlstore.SetBeforeCommit(s, func() {}) // every archive takes the transaction
			}
			bursts.add(path, archiveBurst(b, s, recs))
			sqlstore.SetBeforeCommit(s, nil)
		}
	}
	tx, one := bursts.print("transaction", "one statement")
	b.ReportMetric(float64(tx.Microseconds())/1000, "tx_wall_ms")
	b.ReportMetric(float64(one.Microseconds())/1000, "one_statement_wall_ms")
	b.ReportMetric(float64(tx)/float64(one), "tx_over_one_statement")
}

// BenchmarkArchiveImport: 100 finished runs whose 100-call journals (200
// entries) are on ConfigMaps, as a manager started on a database beside
// runs that finished before it finds them, archived by 16 workers at once
// on a durable PostgreSQL: the archive imports each journal. Passes take
// turns after an untimed burst: a row a statement (the import before 6
// December 2026), then 1,000 rows a statement, twice each, on fresh runs.
// Reports each path's wall and its archives' p50 and p99, and the first's
// wall over the second's.
func BenchmarkArchiveImport(b *testing.B) {
	const runs, calls = 100, 100
	s := durableStore(b)
	onConfigMaps := func() []*store.Record {
		out := make([]*store.Record, runs)
		for i := range out {
			r := newRun()
			finish(r, calls)
			out[i] = &store.Record{Run: r, Entries: journalOf(calls)}
		}
		return out
	}
	archiveBurst(b, s, onConfigMaps()) // untimed
	bursts := &burstTimes{}
	for range b.N {
		for _, rows := range []int{1, 1000, 1, 1000} {
			recs := onConfigMaps()
			sqlstore.SetImportRows(s, rows)
			bursts.add(fmt.Sprintf("%d rows", rows), archiveBurst(b, s, recs))
		}
	}
	sqlstore.SetImportRows(s, 0)
	one, batched := bursts.print("1 rows", "1000 rows")
	b.ReportMetric(float64(one.Microseconds())/1000, "row_a_statement_wall_ms")
	b.ReportMetric(float64(batched.Microseconds())/1000, "batched_wall_ms")
	b.ReportMetric(float64(one)/float64(batched), "row_a_statement_over_batched")
}

// durableStore opens a store on a database of its own on a PostgreSQL
// server with fsync and synchronous commit on, stopped after the benchmark.
func durableStore(b *testing.B) *sqlstore.Store {
	_, db := postgres.ForTest(b, postgres.Options{Durable: true})
	return open(b, db.DSN) // closed before the server stops (cleanups run last first)
}

var benchDay = time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)

// journalOf is a journal of calls answered and priced calls, a second apart.
func journalOf(calls int) []journal.Entry {
	var es []journal.Entry
	for c := range calls {
		es = append(es, call(int64(2*c), benchDay.Add(time.Duration(c)*time.Second), "m1", ptr.To[int64](1000))...)
	}
	return es
}

// finish makes r a finished run of calls calls, with labels.
func finish(r *arv1.AgentRun, calls int64) {
	r.Labels = map[string]string{"team": "a", "app": "bench"}
	r.Status = arv1.AgentRunStatus{Phase: arv1.PhaseComplete, FinishedAt: ptr.To(metav1.NewTime(benchDay.Add(time.Hour))),
		Usage: arv1.Usage{ModelCalls: calls, CostPricedUSD: "0.00003"}}
}

// burst is one burst's wall and each archive's time.
type burst struct {
	wall time.Duration
	each []time.Duration
}

// archiveBurst archives recs with 16 workers at once.
func archiveBurst(b *testing.B, s *sqlstore.Store, recs []*store.Record) burst {
	ctx := context.Background()
	var mu sync.Mutex
	var each []time.Duration
	next := make(chan *store.Record, len(recs))
	for _, r := range recs {
		next <- r
	}
	close(next)
	start := time.Now()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for rec := range next {
				t0 := time.Now()
				if err := s.Archive(ctx, rec); err != nil {
					b.Error(err)
				}
				mu.Lock()
				each = append(each, time.Since(t0))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return burst{wall: time.Since(start), each: each}
}

// burstTimes are the bursts of each path.
type burstTimes struct {
	walls, each map[string][]time.Duration
}

func (t *burstTimes) add(path string, b burst) {
	if t.walls == nil {
		t.walls, t.each = map[string][]time.Duration{}, map[string][]time.Duration{}
	}
	t.walls[path] = append(t.walls[path], b.wall)
	t.each[path] = append(t.each[path], b.each...)
}

// print prints each path's walls and archive p50 and p99, and returns
// the two paths' mean walls.
func (t *burstTimes) print(a, b string) (time.Duration, time.Duration) {
	mean := func(ds []time.Duration) time.Duration {
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		return sum / time.Duration(len(ds))
	}
	q := func(ds []time.Duration, p float64) time.Duration {
		sorted := slices.Clone(ds)
		slices.Sort(sorted)
		return sorted[int(p*float64(len(sorted)-1))]
	}
	for _, path := range []string{a, b} {
		fmt.Printf("  %-14s walls %v, mean %v; each archive p50 %v p99 %v\n", path, t.walls[path], mean(t.walls[path]).Round(time.Millisecond),
			q(t.each[path], 0.5).Round(100*time.Microsecond), q(t.each[path], 0.99).Round(100*time.Microsecond))
	}
	return mean(t.walls[a]), mean(t.walls[b])
}
