package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/shards"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// Sharding is how this replica shares the runs with others: the number of
// shards and the coordinator of their Leases (nil with one shard, the
// default: this replica drives every run, as before sharding).
type Sharding struct {
	Shards int
	Owns   func(shard int) bool
}

// sharded reports whether runs are divided among replicas.
func (r *AgentRunReconciler) sharded() bool { return r.shards.Shards > 1 }

// drives reports whether this replica drives the run now: always with one
// shard; with several, while it holds the run's shard's Lease.
func (r *AgentRunReconciler) drives(run *arv1.AgentRun) bool {
	if !r.sharded() {
		return true
	}
	s := shards.Labelled(run)
	return s >= 0 && r.shards.Owns(s)
}

// handedOver reports whether the run's status names another replica as
// its driver: its shard changed hands, and this replica has just put it in
// line, afresh. Its record follows at once, as a started run's does on its
// first reconcile here, instead of after the quiet spell in line that spares
// a new run's status writes (the write is due anyway, for status.driver).
func (r *AgentRunReconciler) handedOver(run *arv1.AgentRun) bool {
	d := run.Status.Driver
	return d != "" && d != r.identity
}

// fenceOf is what ends a run's steps early: the hold on its shard's Lease
// (nil with one shard: only the pool's own stop).
func (r *AgentRunReconciler) fenceOf(run *arv1.AgentRun) context.Context {
	if !r.sharded() {
		return nil
	}
	return r.shardCaches.Fence(shards.Labelled(run))
}

// DriveShard is the shards.Coordinator's Drive: it runs while this replica
// holds the shard's Lease. It starts a cache of the shard's runs, watches
// it like the manager's own, and when the Lease ends stops every step of
// the shard's runs and forgets them here. A replica that lost a shard
// starts nothing for it (drives() is false from the moment the Lease
// ends).
func (r *AgentRunReconciler) DriveShard(ctx context.Context, shard int) {
	log := ctrl.Log.WithName("shards").WithValues("shard", shard)
	c, synced, err := r.shardCaches.Open(ctx, shard, r.scheme)
	if err != nil {
		log.Error(err, "Starting the shard's cache")
		return
	}
	if !synced {
		return
	}
	defer r.dropShard(c)
	defer r.shardCaches.Release(shard)
	if err := r.watchShard(c); err != nil {
		log.Error(err, "Watching the shard's runs")
		return
	}
	if f, ok := store.FenceFrom(ctx); ok {
		// An older holder's appends are refused from now on
		// (store.Fencer). A run of the shard driven here before this
		// records the fence with its first append: the appends carry it.
		if err := r.journals.RaiseFence(ctx, f); err != nil {
			log.Info("Recording this hold's fence in the store failed; the first append of the shard's runs records it", "error", err.Error())
		}
	}
	r.seedShard(ctx, c)
	r.labels.Kick()
	<-ctx.Done()
}

// shareLimits gives this replica the share of every provider limit that
// its shards are of all shards: replicas holding the shards between them
// hold the whole limit between them, and a replica that takes a dead
// one's shards over takes its share too.
func (r *AgentRunReconciler) shareLimits(held int) {
	r.limiter.SetShare(float64(max(held, 1)) / float64(r.shards.Shards))
}

// watchShard makes the controller watch a shard cache's runs as it
// watches the manager's: their own changes, and their children's.
func (r *AgentRunReconciler) watchShard(c cache.Cache) error {
	inf, err := c.GetInformer(context.Background(), &arv1.AgentRun{})
	if err != nil {
		return err
	}
	if _, err := inf.AddEventHandler(r.runs.Handler(r.wake)); err != nil {
		return err
	}
	own := handler.EnqueueRequestForOwner(r.scheme, r.mapper, &arv1.AgentRun{}, handler.OnlyControllerOwner())
	if err := r.ctrl.Watch(source.Kind[client.Object](c, &arv1.AgentRun{}, finishedLast{&handler.EnqueueRequestForObject{}}, runChanged())); err != nil {
		return err
	}
	return r.ctrl.Watch(source.Kind[client.Object](c, &arv1.AgentRun{}, own, childChanged{}))
}

// finishedLast enqueues a shard cache's runs as the manager's own cache
// does, except for their arrival in it: a finished run is queued at low
// priority, whenever it arrives (in the first list, or labelled into the
// shard later, as every run finished before sharding was turned on is: an
// upgrade's backlog, to archive), and a run not finished at the normal
// one, even in the first list, where the manager's cache puts it low: it
// is a run in flight taken over from another replica, or a new one. What
// a finished run still needs (its archive, its retention) then waits
// behind them.
type finishedLast struct {
	*handler.EnqueueRequestForObject
}

func (h finishedLast) Create(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	run, ok := e.Object.(*arv1.AgentRun)
	pq, prioritized := q.(priorityqueue.PriorityQueue[reconcile.Request])
	if !ok || !prioritized {
		h.EnqueueRequestForObject.Create(ctx, e, q)
		return
	}
	var priority *int
	if run.Status.Phase.IsTerminal() {
		priority = ptr.To(handler.LowPriority)
	}
	pq.AddWithOpts(priorityqueue.AddOpts{Priority: priority}, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(run)})
}

// runChanged is what wakes a run about itself: a new generation (spec),
// labels, annotations, or deletion; never its own status writes.
func runChanged() predicate.Predicate {
	return predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{},
		predicate.LabelChangedPredicate{}, deletionPredicate{})
}

// seedShard puts the shard's working runs in line for admission, in order.
func (r *AgentRunReconciler) seedShard(ctx context.Context, c cache.Cache) {
	var list arv1.AgentRunList
	if err := c.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	r.queue.Enqueue(list.Items)
}

// dropShard forgets what this replica kept in memory of a shard it no
// longer drives (its runs' steps have stopped with the fence). The runs go
// on with whichever replica takes the shard, from their journals.
func (r *AgentRunReconciler) dropShard(c cache.Cache) {
	var list arv1.AgentRunList
	if err := c.List(context.Background(), &list, client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	for i := range list.Items {
		run := &list.Items[i]
		r.pool.Cancel(run.UID)
		r.forgetLocal(types.NamespacedName{Namespace: run.Namespace, Name: run.Name}, run.UID)
	}
}
