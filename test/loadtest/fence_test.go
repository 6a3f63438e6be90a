package loadtest_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/shards"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv/postgres"
	"github.com/agentrun-dev/agentrun-operator/test/loadtest"
)

// fenceAudit records, from inside PostgreSQL, every journal write with the
// shard fences stored at that moment, and every change of a fence: the
// test's triggers, not the manager, so what they show is what the store
// held, in its own order.
const fenceAudit = `
CREATE TABLE audit_appends (id bigserial PRIMARY KEY, run_uid text NOT NULL, seq bigint NOT NULL, fences jsonb NOT NULL);
CREATE TABLE audit_fences (id bigserial PRIMARY KEY, lease text NOT NULL, created bigint NOT NULL, transitions bigint NOT NULL);
CREATE FUNCTION audit_append() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO audit_appends (run_uid, seq, fences) VALUES (NEW.run_uid, NEW.seq,
		(SELECT COALESCE(jsonb_object_agg(lease, jsonb_build_array(created, transitions)), '{}'::jsonb) FROM shard_fences));
	RETURN NEW;
END $$;
CREATE FUNCTION audit_fence() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO audit_fences (lease, created, transitions) VALUES (NEW.lease, NEW.created, NEW.transitions);
	RETURN NEW;
END $$;
CREATE TRIGGER audit_append AFTER INSERT OR UPDATE ON journal_entries FOR EACH ROW EXECUTE FUNCTION audit_append();
CREATE TRIGGER audit_fence AFTER INSERT OR UPDATE ON shard_fences FOR EACH ROW EXECUTE FUNCTION audit_fence();
`

// slowStages is ThreeStage with model calls of 800 ms, so runs are in
// flight when their replica is killed.
var slowStages = strings.ReplaceAll(loadtest.ThreeStage, "\nusage = ", "\ndelay_ms = 800\nusage = ")

// TestShardTakerRecordsItsFenceBeforeAppending: one replica drives every
// shard of runs journaled in PostgreSQL and is killed with SIGKILL while
// their calls are in flight; a second replica takes the shards over and
// completes the runs. Every journal write after the kill (all the second
// replica's) found the store's fence of its run's shard already at the
// second replica's hold: the new holder recorded its fence before it
// appended for any of the shard's runs. Then, with every run finished and
// nothing left to journal, the second replica is killed and a third takes
// the shards: the store records the third's hold for every shard without
// any journal write, so the fence comes from taking the shard
// (DriveShard's RaiseFence), not from a first append.
func TestShardTakerRecordsItsFenceBeforeAppending(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three manager processes and PostgreSQL")
	}
	c := sharedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	_, pdb := postgres.ForTest(t, postgres.Options{})
	st, err := sqlstore.Open(sqlstore.Config{DSN: pdb.DSN})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Check(ctx); err != nil { // migrated: the audit's triggers go on its tables
		t.Fatal(err)
	}
	db := st.DB()
	if _, err := db.ExecContext(ctx, fenceAudit); err != nil {
		t.Fatal(err)
	}

	const nShards, nRuns = 2, 24
	leaseNS, err := c.NewNamespace(ctx, "leases")
	if err != nil {
		t.Fatal(err)
	}
	ns, err := c.SetupNamespace(ctx, "fence", "slow", slowStages)
	if err != nil {
		t.Fatal(err)
	}
	start := func(id string) *loadtest.Manager {
		// Scoped to the test's namespaces: runs other tests left in the
		// shared cluster (finished, their journals in ConfigMaps) would
		// otherwise be labelled, read and archived first, and hold the
		// replica past the waits below.
		m, err := c.StartManager(ctx, t.TempDir(), append(replicaFlags(leaseNS, id, nShards), "--store="+pdb.DSN, "--namespaces="+ns+","+leaseNS)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Kill() })
		return m
	}
	r1 := start("r1")
	waitTakeover(t, ctx, c, leaseNS, "", []string{"r1"}, nShards, time.Now())
	if err := c.CreateRuns(ctx, ns, "slow", "f", nRuns, 8); err != nil {
		t.Fatal(err)
	}
	// Killed with every run journaled and none finished: calls in flight.
	waitAudit(t, ctx, "every run's first intent journaled", func() bool {
		return count(t, db, "SELECT COUNT(DISTINCT run_uid) FROM audit_appends") == nRuns
	})
	first := fencesOf(t, ctx, c, leaseNS, "r1", nShards)
	if err := r1.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // a commit the dead process sent lands
	killedAt := count(t, db, "SELECT COALESCE(MAX(id), 0) FROM audit_appends")

	r2 := start("r2")
	waitTakeover(t, ctx, c, leaseNS, "r1", []string{"r2"}, nShards, time.Now())
	runs := waitRuns(t, ctx, c, ns, nRuns)
	second := fencesOf(t, ctx, c, leaseNS, "r2", nShards)
	shardOf := map[string]int{}
	for _, r := range runs {
		shardOf[string(r.UID)] = shards.Labelled(&r)
	}

	rows, err := db.QueryContext(ctx, "SELECT id, run_uid, seq, fences FROM audit_appends WHERE id > $1 ORDER BY id", killedAt)
	if err != nil {
		t.Fatal(err)
	}
	after := map[int]int{}
	for rows.Next() {
		var id, seq int64
		var uid, fences string
		if err := rows.Scan(&id, &uid, &seq, &fences); err != nil {
			t.Fatal(err)
		}
		s := shardOf[uid]
		want := second[s]
		var stored map[string][2]int64
		if err := json.Unmarshal([]byte(fences), &stored); err != nil {
			t.Fatal(err)
		}
		got, ok := stored[want.Lease]
		if !ok || got != [2]int64{want.Created, want.Transitions} {
			t.Errorf("append %d (run %s seq %d, shard %d) after the kill found the store's fence of %s at %v (present %v); want the new hold %+v (the killed one's %+v)",
				id, uid, seq, s, want.Lease, got, ok, want, first[s])
		}
		after[s]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	_ = rows.Close()
	for s := range nShards {
		if after[s] == 0 {
			t.Errorf("no journal write for shard %d's runs after the kill: nothing checked there", s)
		}
		if !first[s].Older(second[s]) {
			t.Errorf("shard %d: the new hold %+v is not newer than the killed one's %+v", s, second[s], first[s])
		}
	}
	t.Logf("after the kill the new holder journaled %d entries on shard 0 and %d on shard 1, each with its fence already stored (killed hold %+v, new %+v)", after[0], after[1], first, second)

	// Nothing left to journal: the third holder's fence can only come
	// from taking the shards.
	time.Sleep(time.Second)
	before := count(t, db, "SELECT COUNT(*) FROM audit_appends")
	if err := r2.Kill(); err != nil {
		t.Fatal(err)
	}
	start("r3")
	waitTakeover(t, ctx, c, leaseNS, "r2", []string{"r3"}, nShards, time.Now())
	third := fencesOf(t, ctx, c, leaseNS, "r3", nShards)
	waitAudit(t, ctx, "the third holder's fences stored", func() bool {
		for _, f := range third {
			var created, transitions int64
			err := db.QueryRowContext(ctx, "SELECT created, transitions FROM shard_fences WHERE lease = $1", f.Lease).Scan(&created, &transitions)
			if err != nil || created != f.Created || transitions != f.Transitions {
				return false
			}
		}
		return true
	})
	if n := count(t, db, "SELECT COUNT(*) FROM audit_appends"); n != before {
		t.Errorf("%d journal writes after the runs finished; want none (the fence must come from the shard's take)", n-before)
	}
}

// fencesOf is the fence of each shard's Lease as holder holds it.
func fencesOf(t *testing.T, ctx context.Context, c *loadtest.Cluster, leaseNS, holder string, n int) map[int]store.Fence {
	t.Helper()
	out := map[int]store.Fence{}
	for s := range n {
		var l coordinationv1.Lease
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: leaseNS, Name: shards.LeaseName(s)}, &l); err != nil {
			t.Fatal(err)
		}
		if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != holder {
			t.Fatalf("shard %d's Lease is held by %q, want %q", s, h, holder)
		}
		out[s] = store.Fence{Lease: leaseNS + "/" + l.Name, Created: l.CreationTimestamp.Unix(), Transitions: int64(ptr.Deref(l.Spec.LeaseTransitions, 0))}
	}
	return out
}

// count is the one number query returns.
func count(t *testing.T, db *sql.DB, query string) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(query).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitAudit polls cond for up to a minute.
func waitAudit(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitRuns waits until the namespace's n runs are complete.
func waitRuns(t *testing.T, ctx context.Context, c *loadtest.Cluster, ns string, n int) []arv1.AgentRun {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var l arv1.AgentRunList
		if err := c.Client.List(ctx, &l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if countRuns(l.Items, loadtest.IsComplete) == n {
			return l.Items
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("timed out waiting for %d runs complete: %d are", n, countRuns(l.Items, loadtest.IsComplete))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
