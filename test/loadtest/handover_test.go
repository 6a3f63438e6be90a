package loadtest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/shards"
	"github.com/agentrun-dev/agentrun-operator/test/loadtest"
)

// lingering keeps a run working for minutes: one model call a second in a
// stage whose only edge the model never chooses.
const lingering = `
[agent]
name = "lingering"
[agent.title]
enabled = false
[stages.work]
max_iterations = 300
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.work.transitions.done]
hint = "never chosen"
[[stages.work.script]]
text = "still working"
delay_ms = 1000
[stages.done]
allow_complete = true
`

// TestQueuedRunsFollowTheirShardsDriver: status.driver of runs waiting in
// line follows a hand-over of their shard as promptly as a started run's.
// Replica a drives every run of shard 1 (two started, four in line, with two
// active-run slots); replica b joins and is handed shard 1, and is killed
// as soon as its runs name it, so shard 1 goes back to a once b's Leases
// expire. After each hand-over every run, in line or not, names the new
// holder within a moment of the first one doing so. (Before, a run in line
// kept naming the old holder through the new holder's quiet spell in line,
// 5 s, and through the next hand-over too when that holder was killed
// within it.)
func TestQueuedRunsFollowTheirShardsDriver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two manager processes")
	}
	c := sharedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	leaseNS, err := c.NewNamespace(ctx, "leases")
	if err != nil {
		t.Fatal(err)
	}
	ns, err := c.SetupNamespace(ctx, "handover", "lingering", lingering)
	if err != nil {
		t.Fatal(err)
	}
	flags := func(id string) []string { return append(replicaFlags(leaseNS, id, 2), "--max-active-runs=2") }
	a, err := c.StartManager(ctx, t.TempDir(), flags("a")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Kill() })
	waitTakeover(t, ctx, c, leaseNS, "", []string{"a"}, 2, time.Now())

	// Every run in shard 1 (labelled at creation, as a parent's children
	// are): the started ones first, so they hold a's two slots.
	create := func(names ...string) {
		for _, name := range names {
			run := &arv1.AgentRun{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{shards.LabelShard: "1"}},
				Spec:       arv1.AgentRunSpec{Agent: "lingering", Task: "linger"},
			}
			if err := c.Client.Create(ctx, run); err != nil {
				t.Fatal(err)
			}
		}
	}
	list := func() []arv1.AgentRun {
		var l arv1.AgentRunList
		if err := c.Client.List(ctx, &l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	await := func(what string, limit time.Duration, ok func([]arv1.AgentRun) bool) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for {
			runs := list()
			if ok(runs) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v: %s", what, limit, describeRuns(runs))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	create("s-0", "s-1")
	await("two runs started by a", 30*time.Second, func(runs []arv1.AgentRun) bool {
		return countRuns(runs, func(r *arv1.AgentRun) bool { return r.Status.Phase == arv1.PhaseRunning && r.Status.Driver == "a" }) == 2
	})
	create("q-0", "q-1", "q-2", "q-3")
	await("four runs in line on a", 30*time.Second, func(runs []arv1.AgentRun) bool {
		return countRuns(runs, func(r *arv1.AgentRun) bool { return r.Status.Phase == arv1.PhaseQueued && r.Status.Driver == "a" }) == 4
	})

	// b joins: the even assignment hands it shard 1.
	b, err := c.StartManager(ctx, t.TempDir(), flags("b")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Kill() })
	followed := awaitDriver(t, ctx, c, leaseNS, "b", list)
	t.Logf("handed to b: %s", followed)

	// b dies at once; shard 1 goes back to a when b's Leases expire.
	if err := b.Kill(); err != nil {
		t.Fatal(err)
	}
	followed = awaitDriver(t, ctx, c, leaseNS, "a", list)
	t.Logf("handed back to a after b was killed: %s", followed)
}

// driverSlack is how much later than the first run of a shard a run may
// name the shard's new holder: a few reconciles on a loaded machine, well
// under the 5 s a run waits in line before its status says so.
const driverSlack = 2 * time.Second

// awaitDriver waits for shard 1's Lease to name holder, then for every run
// to name it in status.driver. Every run, the runs that were waiting in
// line among them, must follow within driverSlack of the first run that
// did. It returns what it saw.
func awaitDriver(t *testing.T, ctx context.Context, cl *loadtest.Cluster, leaseNS, holder string, list func() []arv1.AgentRun) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		holders, err := shardHolders(ctx, cl, leaseNS)
		if err != nil {
			t.Fatal(err)
		}
		if holders[1] == holder {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("shard 1 was not handed to %s within 30s: holders %v", holder, holders)
		}
		time.Sleep(50 * time.Millisecond)
	}
	handed := time.Now()
	queued := map[string]bool{}
	for _, r := range list() {
		if r.Status.Phase == arv1.PhaseQueued {
			queued[r.Name] = true
		}
	}
	named := map[string]time.Duration{}
	var runs []arv1.AgentRun
	for {
		runs = list()
		for i := range runs {
			if r := &runs[i]; r.Status.Driver == holder {
				if _, ok := named[r.Name]; !ok {
					named[r.Name] = time.Since(handed)
				}
			}
		}
		if len(named) == len(runs) {
			break
		}
		if time.Since(handed) > 20*time.Second {
			t.Fatalf("20s after shard 1 was handed to %s, runs still name another driver: %s", holder, describeRuns(runs))
		}
		time.Sleep(50 * time.Millisecond)
	}
	first, last, lastQueued := time.Duration(1<<62), time.Duration(0), time.Duration(0)
	for name, d := range named {
		first, last = min(first, d), max(last, d)
		if queued[name] {
			lastQueued = max(lastQueued, d)
		}
	}
	seen := fmt.Sprintf("the first run named %s %v after the Lease did, the last %v after; the %d runs in line by %v",
		holder, first.Round(time.Millisecond), last.Round(time.Millisecond), len(queued), lastQueued.Round(time.Millisecond))
	if len(queued) == 0 {
		t.Fatalf("no run was waiting in line when shard 1 was handed to %s: %s", holder, describeRuns(runs))
	}
	if last-first > driverSlack {
		t.Errorf("runs named %s up to %v after the first one did (over %v): %s; by run: %v", holder, (last - first).Round(time.Millisecond), driverSlack, seen, named)
	}
	return seen
}

func countRuns(runs []arv1.AgentRun, ok func(*arv1.AgentRun) bool) int {
	n := 0
	for i := range runs {
		if ok(&runs[i]) {
			n++
		}
	}
	return n
}

func describeRuns(runs []arv1.AgentRun) string {
	var b strings.Builder
	for _, r := range runs {
		fmt.Fprintf(&b, "%s %s driver=%q; ", r.Name, r.Status.Phase, r.Status.Driver)
	}
	return b.String()
}
