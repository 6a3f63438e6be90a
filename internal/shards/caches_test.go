package shards

import (
	"context"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// TestOpenedShardCacheFindsItsRunsForItsFirstEvents: a shard cache that
// Open returned is already read by Get, so a reconcile queued by its
// first list (a handler added to it, as the controller's watch is) finds
// the run, and a taken-over run is driven. Before, the cache was held only
// after the controller watched it: a reconcile that came first found no
// run, took it for another replica's, and nothing queued it again (two of
// six runs handed over kept naming the dead replica as their driver in
// TestQueuedRunsFollowTheirShardsDriver). Once released, it is not read.
func TestOpenedShardCacheFindsItsRunsForItsFirstEvents(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scheme, c, ns := clientInNamespace(t, ctx, "caches-")
	const runs = 20
	for i := range runs {
		run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, GenerateName: "taken-", Labels: map[string]string{LabelShard: "1"}},
			Spec: arv1.AgentRunSpec{Agent: "a", Task: "t"}}
		if i%2 == 1 {
			run.Labels[LabelShard] = "0" // another shard's: not in this cache
		}
		if err := c.Create(ctx, run); err != nil {
			t.Fatal(err)
		}
	}

	caches := NewCaches(CacheConfig{Rest: env.Config, Namespaces: map[string]cache.Config{ns.Name: {}}})
	sc, ok, err := caches.Open(ctx, 1, scheme)
	if err != nil || !ok {
		t.Fatalf("opening shard 1's cache: synced %v, %v", ok, err)
	}
	inf, err := sc.GetInformer(ctx, &arv1.AgentRun{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	found, missed := 0, []string{}
	seen := make(chan struct{}, runs)
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		run := obj.(*arv1.AgentRun)
		err := caches.Get(ctx, client.ObjectKeyFromObject(run), &arv1.AgentRun{})
		mu.Lock()
		if err == nil {
			found++
		} else {
			missed = append(missed, run.Name+": "+err.Error())
		}
		mu.Unlock()
		seen <- struct{}{}
	}}); err != nil {
		t.Fatal(err)
	}
	for range runs / 2 {
		select {
		case <-seen:
		case <-time.After(30 * time.Second):
			t.Fatalf("the cache's first list did not reach the handler")
		}
	}
	mu.Lock()
	if found != runs/2 || len(missed) != 0 {
		t.Errorf("the cache's first events: %d runs found through Get, missed %v; want all %d", found, missed, runs/2)
	}
	mu.Unlock()
	if caches.Fence(1).Err() != nil {
		t.Error("an opened shard's fence has ended")
	}

	caches.Release(1)
	var l arv1.AgentRunList
	if err := c.List(ctx, &l, client.InNamespace(ns.Name), client.MatchingLabels{LabelShard: "1"}); err != nil || len(l.Items) == 0 {
		t.Fatalf("listing shard 1's runs: %d, %v", len(l.Items), err)
	}
	if err := caches.Get(ctx, client.ObjectKeyFromObject(&l.Items[0]), &arv1.AgentRun{}); !apierrors.IsNotFound(err) {
		t.Errorf("a released shard's run read through the caches: %v; want not found", err)
	}
	if caches.Fence(1).Err() == nil {
		t.Error("a released shard's fence has not ended")
	}
}
