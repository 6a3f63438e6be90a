package loadtest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool/mcptest"
	"github.com/agentrun-dev/agentrun-operator/internal/shards"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
	"github.com/agentrun-dev/agentrun-operator/test/loadtest"
)

// Lease timings of the replica tests: short, so a takeover happens within
// seconds, and in the order the fence needs (renew deadline < duration).
const (
	testLeaseDuration = 4 * time.Second
	testRenewDeadline = 3 * time.Second
	testRetryPeriod   = 1 * time.Second
)

// replicaFlags are a sharded replica's flags.
func replicaFlags(leaseNS, id string, n int) []string {
	return []string{
		fmt.Sprintf("--shards=%d", n), "--lease-namespace=" + leaseNS, "--replica-id=" + id,
		"--lease-duration=" + testLeaseDuration.String(), "--lease-renew-deadline=" + testRenewDeadline.String(),
		"--lease-retry-period=" + testRetryPeriod.String(),
	}
}

// pacedStages is ThreeStage with model calls of 300 ms, so a batch is
// still in flight when a replica is killed.
var pacedStages = strings.ReplaceAll(loadtest.ThreeStage, "\nusage = ", "\ndelay_ms = 300\nusage = ")

// fanOutItems is how many workers a fan-out parent of fanOut starts.
const fanOutItems = 3

// fanOut splits into three items, works each in its own child run and
// merges their outputs.
const fanOut = `
[agent]
name = "fan"
[agent.title]
enabled = false
[stages.split]
mode = "fan_out"
worker_stage = "work"
merge_stage = "merge"
max_workers = 3
[stages.split.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.split.script]]
text = "split"
items = ["one", "two", "three"]
delay_ms = 200
[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.work.script]]
text = "worked"
complete = true
output = "done {task}"
delay_ms = 300
[stages.merge]
allow_complete = true
[stages.merge.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.merge.script]]
text = "merged"
complete = true
output = "merged"
`

// writesOnce calls the write tool create_ticket once (allowed without a
// person) on the MCP server at url, then completes.
func writesOnce(url string) string {
	return fmt.Sprintf(`
[agent]
name = "writer"
[agent.title]
enabled = false
[mcp_servers.tracker]
url = %q
[tools.create_ticket]
permission = "allow"
[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.work.script]]
text = "opening"
tool_calls = [{name = "create_ticket", arguments = '{"title":"{task}"}'}]
delay_ms = 200
[[stages.work.script]]
complete = true
output = "done"
delay_ms = 200
`, url)
}

// readsSlowly calls the read tool read_doc eight times, a model call of
// 250 ms before each, so a run makes calls for a few seconds.
func readsSlowly(url string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[agent]\nname = \"reader\"\n[agent.title]\nenabled = false\n[mcp_servers.tracker]\nurl = %q\n[stages.work]\nallow_complete = true\n[stages.work.model]\nmodels = [{provider = \"demo\", model = \"scripted-1\"}]\n", url)
	for i := range 8 {
		fmt.Fprintf(&b, "[[stages.work.script]]\ntext = \"reading %d\"\ntool_calls = [{name = \"read_doc\", arguments = '{\"id\":\"d%d\"}'}]\ndelay_ms = 250\n", i, i)
	}
	b.WriteString("[[stages.work.script]]\ncomplete = true\noutput = \"read\"\n")
	return b.String()
}

// journalAudit watches a namespace's journal ConfigMaps and records every
// entry that was ever stored with two different contents under one seq.
type journalAudit struct {
	mu        sync.Mutex
	seen      map[string]string // run UID/key -> first content
	rewritten []string
	events    int
}

func auditJournals(t *testing.T, ctx context.Context, c *loadtest.Cluster, ns string) *journalAudit {
	t.Helper()
	w, err := c.Client.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns), client.MatchingLabels{arv1.LabelComponent: configmaps.Component})
	if err != nil {
		t.Fatal(err)
	}
	a := &journalAudit{seen: map[string]string{}}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
				continue
			}
			a.observe(cm)
		}
	}()
	return a
}

func (a *journalAudit) observe(cm *corev1.ConfigMap) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events++
	for k, v := range cm.Data {
		if k == configmaps.OutputKey {
			continue
		}
		id := cm.Labels[configmaps.LabelRunUID] + "/" + k
		if prev, ok := a.seen[id]; !ok {
			a.seen[id] = v
		} else if prev != v {
			if reissued(prev, v, cm.Data) {
				a.seen[id] = v
				continue
			}
			a.rewritten = append(a.rewritten, fmt.Sprintf("%s seq key %s: %s then %s", cm.Name, k, prev, v))
		}
	}
}

// reissued is the one rewrite the journal allows: an unanswered model-call
// intent issued again under its seq by whoever drives the run next, the
// same request counting at least as many dispatches lost (the store's
// supersedes).
func reissued(prev, next string, data map[string]string) bool {
	var a, b journal.Entry
	if json.Unmarshal([]byte(prev), &a) != nil || json.Unmarshal([]byte(next), &b) != nil {
		return false
	}
	_, answered := data[fmt.Sprintf("%06d", b.Seq+1)]
	return !answered && a.Kind == journal.ModelCallRequested && b.Kind == journal.ModelCallRequested &&
		a.Seq == b.Seq && a.RequestHash == b.RequestHash && b.Lost >= a.Lost
}

func (a *journalAudit) result() (entries, events int, rewritten []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.seen), a.events, append([]string(nil), a.rewritten...)
}

// shardHolders reads the shard Leases: holder by shard.
func shardHolders(ctx context.Context, c *loadtest.Cluster, leaseNS string) (map[int]string, error) {
	var leases coordinationv1.LeaseList
	if err := c.Client.List(ctx, &leases, client.InNamespace(leaseNS), client.MatchingLabels{shards.LabelLease: "shard"}); err != nil {
		return nil, err
	}
	own := shards.ReadOwnership(leases.Items, time.Now())
	return own.Holders, nil
}

// waitTakeover waits until no shard is held by dead, and every shard is
// held by one of alive; it returns how long that took from since.
func waitTakeover(t *testing.T, ctx context.Context, c *loadtest.Cluster, leaseNS, dead string, alive []string, n int, since time.Time) time.Duration {
	t.Helper()
	took, err := awaitHolders(ctx, c, leaseNS, dead, alive, n, since, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return took
}

// awaitHolders waits until each of the n shards has a live holder among
// alive (none of them dead), and returns the time since since.
func awaitHolders(ctx context.Context, c *loadtest.Cluster, leaseNS, dead string, alive []string, n int, since time.Time, limit time.Duration) (time.Duration, error) {
	for {
		holders, err := shardHolders(ctx, c, leaseNS)
		if err != nil {
			return 0, err
		}
		ok := len(holders) == n
		for _, h := range holders {
			ok = ok && h != dead && slices.Contains(alive, h)
		}
		if ok {
			return time.Since(since), nil
		}
		if time.Since(since) > limit {
			return 0, fmt.Errorf("the shards were not all held by %v within %v (%s gone): holders %v", alive, limit, dead, holders)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// whoami is the harness client's user name (an answer's spec.by must be it).
func whoami(t *testing.T, ctx context.Context, c *loadtest.Cluster) string {
	t.Helper()
	r, err := c.Kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Status.UserInfo.Username
}

// TestReplicasShareRunsAndSurviveKills: three manager processes with six
// shards drive 300 runs (paced three-stage runs, fan-out parents and runs
// that make one write through a loopback MCP server); one replica is
// killed with SIGKILL mid-flight, then a second. Every run completes, a
// write left dangling by a kill is settled the way a person would (Done if
// the server executed it, Retry if not), every fan-out item has exactly one
// child, every write ran exactly once, and no journal entry was ever
// stored twice with different contents.
func TestReplicasShareRunsAndSurviveKills(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three manager processes")
	}
	c := sharedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const nShards = 6
	leaseNS, err := c.NewNamespace(ctx, "leases")
	if err != nil {
		t.Fatal(err)
	}
	srv := mcptest.New(t, mcptest.Options{})
	ns, err := c.SetupNamespace(ctx, "replicas", "paced", pacedStages)
	if err != nil {
		t.Fatal(err)
	}
	for name, manifest := range map[string]string{"fan": fanOut, "writer": writesOnce(srv.URL())} {
		if err := c.CreateConfigMap(ctx, ns, name, map[string]string{"agent.toml": manifest}); err != nil {
			t.Fatal(err)
		}
	}
	audit := auditJournals(t, ctx, c, ns)

	ids := []string{"r1", "r2", "r3"}
	managers := map[string]*loadtest.Manager{}
	for _, id := range ids {
		m, err := c.StartManager(ctx, t.TempDir(), replicaFlags(leaseNS, id, nShards)...)
		if err != nil {
			t.Fatal(err)
		}
		managers[id] = m
		t.Cleanup(func() { _ = m.Kill() })
	}
	// All three hold their share before the batch.
	waitTakeover(t, ctx, c, leaseNS, "", ids, nShards, time.Now())

	kinds := map[string]struct {
		agent string
		n     int
	}{"p": {"paced", 200}, "f": {"fan", 20}, "w": {"writer", 80}}
	for prefix, k := range kinds {
		if err := c.CreateRuns(ctx, ns, k.agent, prefix, k.n, 16); err != nil {
			t.Fatal(err)
		}
	}
	total := 300

	terminal := func() (map[string]arv1.AgentRun, int) {
		var list arv1.AgentRunList
		if err := c.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		top, done := map[string]arv1.AgentRun{}, 0
		for _, r := range list.Items {
			if metav1.GetControllerOf(&r) != nil {
				continue
			}
			top[r.Name] = r
			if r.Status.Phase.IsTerminal() {
				done++
			}
		}
		return top, done
	}
	waitDone := func(n int) {
		for {
			if _, d := terminal(); d >= n {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("fewer than %d runs finished in time", n)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	waitDone(total / 5)
	killed1 := time.Now()
	if err := managers["r1"].Kill(); err != nil {
		t.Fatal(err)
	}
	_, doneAtKill1 := terminal()
	takeover1 := waitTakeover(t, ctx, c, leaseNS, "r1", []string{"r2", "r3"}, nShards, killed1)

	waitDone(min(total, doneAtKill1+total/5))
	killed2 := time.Now()
	if err := managers["r2"].Kill(); err != nil {
		t.Fatal(err)
	}
	_, doneAtKill2 := terminal()
	takeover2 := waitTakeover(t, ctx, c, leaseNS, "r2", []string{"r3"}, nShards, killed2)
	t.Logf("killed r1 with %d/%d runs finished: its shards taken over in %v; killed r2 with %d finished: taken over in %v (Lease duration %v)",
		doneAtKill1, total, takeover1.Round(time.Millisecond), doneAtKill2, takeover2.Round(time.Millisecond), testLeaseDuration)
	// The bound: the Lease duration for the dead replica's Leases to
	// expire, a round (a retry period) for the new owner to see it, and a
	// round more for shards the survivors hand each other as the
	// assignment changes, plus slack for a loaded machine.
	if limit := testLeaseDuration + 2*testRetryPeriod + 3*time.Second; takeover1 > limit || takeover2 > limit {
		t.Errorf("takeover took %v and %v, over the Lease duration plus two retry periods and 3s (%v)", takeover1, takeover2, limit)
	}

	// Settle what the kills left for a person, then wait for the rest.
	user := whoami(t, ctx, c)
	settled := map[string]bool{}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		top, done := terminal()
		if done == total {
			break
		}
		for name, r := range top {
			w := r.Status.WaitingOn
			if w == nil || w.Reason != arv1.WaitNeedsReconciliation || settled[name+"/"+w.Point] {
				continue
			}
			decision := arv1.DecisionRetry
			for _, call := range srv.Log() {
				if call.Executed && strings.HasPrefix(call.Key, string(r.UID)+"-") {
					decision = arv1.DecisionDone
				}
			}
			a := &arv1.AgentRunAnswer{ObjectMeta: metav1.ObjectMeta{GenerateName: "settle-", Namespace: ns},
				Spec: arv1.AgentRunAnswerSpec{Run: name, Point: w.Point, Decision: decision, By: user}}
			if decision == arv1.DecisionDone {
				a.Spec.Text = ptr.To("ticket created")
			}
			if err := c.Client.Create(ctx, a); err != nil {
				t.Fatalf("settling %s: %v", name, err)
			}
			settled[name+"/"+w.Point] = true
			t.Logf("settled %s's dangling write with %s", name, decision)
		}
		if time.Now().After(deadline) {
			var open []string
			for name, r := range top {
				if !r.Status.Phase.IsTerminal() {
					open = append(open, fmt.Sprintf("%s %s %v", name, r.Status.Phase, r.Status.WaitingOn))
				}
			}
			t.Fatalf("%d of %d runs finished; still open: %v\nlast replica's log:\n%s", done, total, open, managers["r3"].LogTail(4096))
		}
		time.Sleep(250 * time.Millisecond)
	}

	top, _ := terminal()
	// An idempotency key is the run's UID, "-", and the call's seq.
	byUID := map[string]string{}
	for name, r := range top {
		byUID[string(r.UID)] = name
	}
	executed := map[string]int{}
	for _, call := range srv.Log() {
		if i := strings.LastIndex(call.Key, "-"); call.Tool == "create_ticket" && call.Executed && i > 0 {
			executed[byUID[call.Key[:i]]]++
		}
	}
	for name, r := range top {
		if r.Status.Phase != arv1.PhaseComplete {
			t.Errorf("%s ended %s: %s", name, r.Status.Phase, r.Status.Error)
		}
		if strings.HasPrefix(name, "w-") && executed[name] != 1 {
			t.Errorf("%s's write ran %d times", name, executed[name])
		}
		if strings.HasPrefix(name, "f-") {
			var children arv1.AgentRunList
			if err := c.Client.List(ctx, &children, client.InNamespace(ns), client.MatchingLabels{arv1.LabelParentUID: string(r.UID)}); err != nil {
				t.Fatal(err)
			}
			if len(children.Items) != fanOutItems {
				names := []string{}
				for _, ch := range children.Items {
					names = append(names, ch.Name)
				}
				t.Errorf("%s has %d children, want one per item (%d): %v", name, len(children.Items), fanOutItems, names)
			}
		}
		if r.Status.Driver != "" {
			t.Errorf("finished run %s still names a driver: %q", name, r.Status.Driver)
		}
	}
	entries, events, rewritten := audit.result()
	if entries == 0 || events == 0 {
		t.Fatalf("the journal audit saw nothing (%d entries, %d events)", entries, events)
	}
	for _, r := range rewritten {
		t.Error("journal entry rewritten: " + r)
	}
	t.Logf("%d runs complete, %d writes each ran once, %d journal entries audited over %d watch events, %d dangling writes settled",
		len(top), len(executed), entries, events, len(settled))
}

// TestCutOffReplicaIssuesNoCallAfterRenewDeadline: replica a reaches the
// API server through a proxy that is then cut, so it can no longer renew
// its shard Leases. From the cut plus the renew deadline on, no call with
// its Agentrun-Replica header reaches the tool server, and replica b,
// which takes the shards over once the Leases expire, completes every run.
func TestCutOffReplicaIssuesNoCallAfterRenewDeadline(t *testing.T) {
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
	srv := mcptest.New(t, mcptest.Options{})
	ns, err := c.SetupNamespace(ctx, "cutoff", "reader", readsSlowly(srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := c.Env.StartProxy()
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	dir := t.TempDir()
	viaProxy, err := proxy.Kubeconfig(c.Kubeconfig, dir)
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.StartManager(ctx, dir, append(replicaFlags(leaseNS, "a", 2), "--kubeconfig="+viaProxy)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Kill() })
	b, err := c.StartManager(ctx, dir, replicaFlags(leaseNS, "b", 2)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Kill() })
	waitTakeover(t, ctx, c, leaseNS, "", []string{"a", "b"}, 2, time.Now())
	// Wait until each holds one shard, so a drives runs when it is cut.
	for {
		holders, err := shardHolders(ctx, c, leaseNS)
		if err != nil {
			t.Fatal(err)
		}
		if holders[0] != holders[1] && len(holders) == 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the replicas never split the shards: %v", holders)
		}
		time.Sleep(100 * time.Millisecond)
	}
	const n = 12
	if err := c.CreateRuns(ctx, ns, "reader", "r", n, 4); err != nil {
		t.Fatal(err)
	}
	byA := func() int {
		k := 0
		for _, call := range srv.Log() {
			if call.Replica == "a" {
				k++
			}
		}
		return k
	}
	for byA() < 3 {
		if ctx.Err() != nil {
			t.Fatalf("replica a made no calls; its log:\n%s", a.LogTail(4096))
		}
		time.Sleep(50 * time.Millisecond)
	}
	proxy.Cut()
	cut := time.Now()
	for {
		var list arv1.AgentRunList
		if err := c.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		done := 0
		for _, r := range list.Items {
			if r.Status.Phase == arv1.PhaseComplete {
				done++
			}
		}
		if done == n {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d of %d runs completed after a was cut off; b's log:\n%s", done, n, b.LogTail(4096))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A call a started just before its deadline reaches the server a few
	// milliseconds later; 250 ms covers that on a loaded machine.
	fence := cut.Add(testRenewDeadline + 250*time.Millisecond)
	var beforeCut, late, afterByB int
	var lastA time.Time
	for _, call := range srv.Log() {
		switch {
		case call.Replica == "a" && call.At.After(fence):
			late++
			t.Errorf("replica a called %s (key %s) %v after the cut, past the renew deadline", call.Tool, call.Key, call.At.Sub(cut).Round(time.Millisecond))
		case call.Replica == "a":
			if call.At.Before(cut) {
				beforeCut++
			}
			if call.At.After(lastA) {
				lastA = call.At
			}
		case call.Replica == "b" && call.At.After(cut.Add(testLeaseDuration)):
			afterByB++
		case call.Replica == "":
			t.Errorf("a call without the replica header: %+v", call)
		}
	}
	if beforeCut == 0 || afterByB == 0 {
		t.Errorf("calls by a before the cut: %d, by b after the Leases expired: %d; both must be some", beforeCut, afterByB)
	}
	t.Logf("a made %d calls before the cut, its last %v after it (fence at %v); b made %d calls after the Leases expired and completed all %d runs",
		beforeCut, lastA.Sub(cut).Round(time.Millisecond), testRenewDeadline, afterByB, n)
}
