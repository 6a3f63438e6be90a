package loadtest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/test/loadtest"
)

// BenchmarkUpgradeBacklog: a cluster upgrading from ConfigMap journals to
// PostgreSQL. A manager on ConfigMaps (the default) runs a backlog of
// finished runs (LOADTEST_BACKLOG, 500, of 20 chained calls); it is
// stopped, and a manager on PostgreSQL starts beside them: it archives
// every one, importing its journal. New runs (100 of 3 calls held 500 ms)
// are created as it starts, and the same batch again once the backlog is
// archived, each beside a bare client making the same calls. Reports how
// long the backlog took to archive, and the new runs' times and ratio
// while it was archived and after: what an upgrade holds new work back by.
// LOADTEST_REPLICAS=k (default 1) upgrades to k sharded replicas
// (--shards=4, the Deployment's default) instead of one: each replica's
// shard labeller then writes every old run once, which brings it back to
// the work queue at normal priority.
func BenchmarkUpgradeBacklog(b *testing.B) {
	scenario(b, func(b *testing.B, ctx context.Context, r *report) {
		const n, calls, backlogCalls = 100, 3, 20
		backlog := envInt(b, "LOADTEST_BACKLOG", 500)
		replicas := envInt(b, "LOADTEST_REPLICAS", 1)
		c := startCluster(b)

		old := startManager(b, ctx, c)
		fast := newLatencyServer(b, 0, 0)
		done, err := prepareLatencyOf(ctx, c, "backlog", fast, "", loadtest.ChainBlueprint(backlogCalls, ""))
		if err != nil {
			b.Fatal(err)
		}
		if err := done.run(ctx, c, old, backlog, 15*time.Minute); err != nil {
			b.Fatalf("the backlog: %v\nmanager log tail:\n%s", err, old.LogTail(3000))
		}
		if err := old.Stop(30 * time.Second); err != nil {
			b.Fatal(err)
		}
		r.row("backlog", "%d runs of %d chained calls finished on ConfigMaps (no --store), by a manager then stopped", backlog, backlogCalls)

		srv := newLatencyServer(b, 500*time.Millisecond, 0)
		bare1, _ := bareLatencyCalls(b, ctx, srv, n, calls)
		st := setupStore(b, ctx, storePostgres)
		started := time.Now()
		m := startUpgraded(b, ctx, c, replicas, st.flags)
		// The watcher stops with the benchmark, whichever way it ends.
		wctx, stopWatching := context.WithCancel(ctx)
		defer stopWatching()
		archived := make(chan time.Duration, 1)
		go func() { archived <- waitArchived(wctx, c, done.ns, backlog, started) }()

		during, err := prepareLatency(ctx, c, "during", srv, "")
		if err != nil {
			b.Fatal(err)
		}
		if err := during.run(ctx, c, m, n, 10*time.Minute); err != nil {
			b.Fatalf("new runs during the backlog: %v\nmanager log tail:\n%s", err, m.LogTail(3000))
		}
		took := <-archived
		if took < 0 {
			b.Fatalf("the backlog was not archived in 15 minutes\nmanager log tail:\n%s", m.LogTail(3000))
		}
		after, err := prepareLatency(ctx, c, "after", srv, "")
		if err != nil {
			b.Fatal(err)
		}
		if err := after.run(ctx, c, m, n, 10*time.Minute); err != nil {
			b.Fatalf("new runs after the backlog: %v", err)
		}
		bare2, _ := bareLatencyCalls(b, ctx, srv, n, calls)
		bare := (secs(bare1.Wall) + secs(bare2.Wall)) / 2

		r.row("backlog archived", "every run Archived=True %.1fs after the %d manager(s) on PostgreSQL started (%.0f runs/s, %.0f journal entries/s imported)",
			secs(took), replicas, float64(backlog)/secs(took), float64(backlog*2*backlogCalls)/secs(took))
		r.row("bare client", "%d clients x %d calls of 500ms: wall %.2fs, then %.2fs", n, calls, secs(bare1.Wall), secs(bare2.Wall))
		for _, b := range []struct {
			label string
			lr    *latencyRun
		}{{"new runs, while archived", during}, {"new runs, after", after}} {
			res := b.lr.res
			r.row(b.label, "first Complete %.2fs, half %.2fs, all %.2fs; ratio %.3f; waits seen: %s", secs(res.First()), secs(res.Half()), secs(res.All()), bare/secs(res.All()), b.lr.waits)
		}
		r.metric(secs(took), "backlog_archived_s")
		r.metric(bare/secs(during.res.All()), "ratio_during")
		r.metric(bare/secs(after.res.All()), "ratio_after")
		r.metric(secs(during.res.First()), "first_complete_during_s")
	})
}

// upgradeShards is the shard count of a sharded upgrade: the
// Deployment's default.
const upgradeShards = 4

// startUpgraded starts the managers on the database (storeFlags): one,
// or k sharded replicas; it returns the first (the batches' manager) and
// stops them all when the benchmark ends. Sharded replicas are started
// together and not waited for, as a rollout starts them.
func startUpgraded(b *testing.B, ctx context.Context, c *loadtest.Cluster, k int, storeFlags []string) *loadtest.Manager {
	b.Helper()
	var leaseNS string
	if k > 1 {
		var err error
		if leaseNS, err = c.NewNamespace(ctx, "leases"); err != nil {
			b.Fatal(err)
		}
	}
	var first *loadtest.Manager
	for i := range k {
		flags := append(managerFlags(), storeFlags...)
		if k > 1 {
			flags = append(flags, fmt.Sprintf("--shards=%d", upgradeShards), "--lease-namespace="+leaseNS, fmt.Sprintf("--replica-id=replica-%d", i+1))
		}
		m, err := c.StartManager(ctx, b.TempDir(), flags...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = m.Stop(30 * time.Second) })
		if first == nil {
			first = m
		}
	}
	return first
}

// waitArchived is how long after start every one of the n runs of ns
// showed Archived=True, polled every second (a list of the whole
// backlog); -1 after 15 minutes, or once ctx ends.
func waitArchived(ctx context.Context, c *loadtest.Cluster, ns string, n int, start time.Time) time.Duration {
	for time.Since(start) < 15*time.Minute && ctx.Err() == nil {
		var runs arv1.AgentRunList
		if err := c.Client.List(ctx, &runs, client.InNamespace(ns)); err == nil {
			k := 0
			for i := range runs.Items {
				if meta.IsStatusConditionTrue(runs.Items[i].Status.Conditions, arv1.ConditionArchived) {
					k++
				}
			}
			if k == n {
				return time.Since(start)
			}
		} else {
			fmt.Printf("listing the backlog: %v\n", err)
		}
		time.Sleep(time.Second)
	}
	return -1
}
