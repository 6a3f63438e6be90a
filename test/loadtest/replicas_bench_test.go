package loadtest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun-operator/test/loadtest"
)

// replicaBenchRuns is the batch each replica count drives: enough that the
// cached runs show against each process's fixed cost.
const replicaBenchRuns = 3000

// replicaBenchShards is the shard count of the sharded installs (the
// Deployment's default is 4; 6 divides evenly over 2 and 3 replicas).
const replicaBenchShards = 6

// BenchmarkReplicas: the same batch of 3,000 three-stage runs driven by one
// replica (the default single-replica mode, no shards), then by 2 and by 3
// sharded replicas, each on a control plane of its own so every count
// starts from the same empty cluster. It reports runs/s and each replica's
// RSS once the batch has finished (the finished runs stay cached, divided
// among the replicas), also as growth over the replica's RSS when it was
// ready and idle (its fixed cost, which does not divide), and, for 2 and 3 replicas, the takeover time: from
// a SIGKILL of one replica until every shard has a live holder again, with
// the default Lease timings (15s duration, 10s renew deadline, 2s retry).
// On a 2-core machine throughput does not scale with replicas; memory
// divides and takeover is bounded.
func BenchmarkReplicas(b *testing.B) {
	scenario(b, func(b *testing.B, ctx context.Context, r *report) {
		for _, k := range []int{1, 2, 3} {
			// A control plane per replica count, stopped before the next.
			c, err := loadtest.StartCluster()
			if err != nil {
				b.Fatal(err)
			}
			leaseNS, err := c.NewNamespace(ctx, "leases")
			if err != nil {
				b.Fatal(err)
			}
			ids := make([]string, k)
			ms := make([]*loadtest.Manager, k)
			for i := range k {
				ids[i] = fmt.Sprintf("replica-%d", i+1)
				flags := managerFlags()
				if k > 1 {
					flags = append(flags, fmt.Sprintf("--shards=%d", replicaBenchShards), "--lease-namespace="+leaseNS, "--replica-id="+ids[i])
				}
				m, err := c.StartManager(ctx, b.TempDir(), flags...)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = m.Kill() })
				ms[i] = m
			}
			if k > 1 {
				if _, err := awaitHolders(ctx, c, leaseNS, "", ids, replicaBenchShards, time.Now(), 2*time.Minute); err != nil {
					b.Fatal(err)
				}
			}
			idle := make([]float64, k)
			for i, m := range ms {
				mem, err := m.Memory()
				if err != nil {
					b.Fatal(err)
				}
				idle[i] = loadtest.MiB(mem.RSS)
			}
			label := fmt.Sprintf("%d replica(s)", k)
			warm := replicaBatch(b, ctx, c, "warmup", warmUp)
			r.row(label+" warm-up", "%d runs, untimed: %.1f runs/s", warmUp, warm.RunsPerSec())
			res := replicaBatch(b, ctx, c, "replicas", replicaBenchRuns)
			var rss []string
			var sum, peak, peakGrowth float64
			for i, m := range ms {
				mem, err := m.Memory()
				if err != nil {
					b.Fatal(err)
				}
				v := loadtest.MiB(mem.RSS)
				rss = append(rss, fmt.Sprintf("%s %.0f MiB (%+.0f over idle)", ids[i], v, v-idle[i]))
				sum += v
				peak = max(peak, v)
				peakGrowth = max(peakGrowth, v-idle[i])
			}
			r.row(label+": throughput", "%.1f runs/s (%d runs; first %.2fs, half %.2fs, all %.2fs)", res.RunsPerSec(), res.N, secs(res.First()), secs(res.Half()), secs(res.All()))
			r.row(label+": etcd writes", "%.2f/run", res.WritesPerRun())
			r.row(label+": RSS after the batch", "%s (largest %.0f MiB, sum %.0f MiB)", strings.Join(rss, ", "), peak, sum)
			r.metric(res.RunsPerSec(), fmt.Sprintf("runs/s_%dr", k))
			r.metric(peak, fmt.Sprintf("rss_max_MiB_%dr", k))
			r.metric(peakGrowth, fmt.Sprintf("rss_growth_max_MiB_%dr", k))
			r.metric(res.WritesPerRun(), fmt.Sprintf("writes/run_%dr", k))
			if k > 1 {
				killed := time.Now()
				if err := ms[0].Kill(); err != nil {
					b.Fatal(err)
				}
				took, err := awaitHolders(ctx, c, leaseNS, ids[0], ids[1:], replicaBenchShards, killed, 2*time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				r.row(label+": takeover", "%.1fs from SIGKILL of %s until its shards had live holders (Lease duration 15s)", took.Seconds(), ids[0])
				r.metric(took.Seconds(), fmt.Sprintf("takeover_s_%dr", k))
			}
			for _, m := range ms {
				_ = m.Kill()
			}
			if err := c.Stop(); err != nil {
				b.Logf("stopping the control plane: %v", err)
			}
		}
	})
}

// replicaBatch runs a ThreeStage batch in a new namespace, whoever drives it.
func replicaBatch(b *testing.B, ctx context.Context, c *loadtest.Cluster, name string, n int) *loadtest.BatchResult {
	b.Helper()
	ns, err := c.SetupNamespace(ctx, name, "bench", loadtest.ThreeStage)
	if err != nil {
		b.Fatal(err)
	}
	res, err := c.RunBatch(ctx, loadtest.Batch{Namespace: ns, Agent: "bench", Prefix: "r", N: n, Concurrency: concurrency, Timeout: 10 * time.Minute})
	if err != nil {
		b.Fatalf("%s batch of %d: %v", name, n, err)
	}
	return res
}
