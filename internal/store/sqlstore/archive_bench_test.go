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
	const runs, calls, workers = 100, 30, 16
	srv, err := postgres.Start(postgres.Options{Durable: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Stop() })
	ctx := context.Background()
	db, err := srv.CreateDatabase(ctx)
	if err != nil {
		b.Fatal(err)
	}
	s := open(b, db.DSN) // closed before the server stops (cleanups run last first)
	d0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	finished := func() []*arv1.AgentRun {
		out := make([]*arv1.AgentRun, runs)
		for i := range out {
			r := newRun()
			r.Labels = map[string]string{"team": "a", "app": "bench"}
			var es []journal.Entry
			for c := range calls {
				es = append(es, call(int64(2*c), d0.Add(time.Duration(c)*time.Second), "m1", ptr.To[int64](1000))...)
			}
			if err := s.Append(ctx, r, es...); err != nil {
				b.Fatal(err)
			}
			r.Status = arv1.AgentRunStatus{Phase: arv1.PhaseComplete, FinishedAt: ptr.To(metav1.NewTime(d0.Add(time.Minute))),
				Usage: arv1.Usage{ModelCalls: calls, CostPricedUSD: "0.00003"}}
			out[i] = r
		}
		return out
	}
	burst := func(rs []*arv1.AgentRun) (time.Duration, []time.Duration) {
		var mu sync.Mutex
		var each []time.Duration
		next := make(chan *arv1.AgentRun, len(rs))
		for _, r := range rs {
			next <- r
		}
		close(next)
		start := time.Now()
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for r := range next {
					t0 := time.Now()
					if err := s.Archive(ctx, &store.Record{Run: r}); err != nil {
						b.Error(err)
					}
					mu.Lock()
					each = append(each, time.Since(t0))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return time.Since(start), each
	}
	burst(finished()) // untimed: the first burst on a new database is slower
	walls := map[string][]time.Duration{}
	latencies := map[string][]time.Duration{}
	for range b.N {
		for _, path := range []string{"transaction", "one statement", "transaction", "one statement"} {
			rs := finished()
			if path == "transaction" {
				sqlstore.SetBeforeCommit(s, func() {}) // every archive takes the transaction
			}
			wall, each := burst(rs)
			sqlstore.SetBeforeCommit(s, nil)
			walls[path] = append(walls[path], wall)
			latencies[path] = append(latencies[path], each...)
		}
	}
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
	for _, path := range []string{"transaction", "one statement"} {
		fmt.Printf("  %-14s walls %v, mean %v; each archive p50 %v p99 %v\n", path, walls[path], mean(walls[path]).Round(time.Millisecond),
			q(latencies[path], 0.5).Round(100*time.Microsecond), q(latencies[path], 0.99).Round(100*time.Microsecond))
	}
	tx, one := mean(walls["transaction"]), mean(walls["one statement"])
	b.ReportMetric(float64(tx.Microseconds())/1000, "tx_wall_ms")
	b.ReportMetric(float64(one.Microseconds())/1000, "one_statement_wall_ms")
	b.ReportMetric(float64(tx)/float64(one), "tx_over_one_statement")
}
