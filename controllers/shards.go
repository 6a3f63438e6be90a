package controllers

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/shards"
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

// shardOf is a run's shard: its label, fixed when it was created (a child
// gets its parent's). -1 when it has none yet.
func shardOf(run *arv1.AgentRun) int {
	v, err := strconv.Atoi(run.Labels[shards.LabelShard])
	if err != nil {
		return -1
	}
	return v
}

// drives reports whether this replica drives the run now: always with one
// shard; with several, while it holds the run's shard's Lease.
func (r *AgentRunReconciler) drives(run *arv1.AgentRun) bool {
	if !r.sharded() {
		return true
	}
	s := shardOf(run)
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

// shardCaches are the informer caches of the shards this replica drives:
// each holds only its shard's runs (a label selector), so the runs' memory
// divides among the replicas. They read runs as one client.Reader.
type shardCaches struct {
	mu     sync.RWMutex
	shards map[int]drivenShard
}

// drivenShard is a shard this replica drives: its runs' cache, and the
// context that ends when the hold on its Lease does (the fence of its
// runs' steps).
type drivenShard struct {
	cache cache.Cache
	fence context.Context
}

func newShardCaches() *shardCaches { return &shardCaches{shards: map[int]drivenShard{}} }

func (s *shardCaches) each() []cache.Cache {
	s.mu.RLock()
	defer s.mu.RUnlock()
	keys := make([]int, 0, len(s.shards))
	for k := range s.shards {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]cache.Cache, 0, len(keys))
	for _, k := range keys {
		out = append(out, s.shards[k].cache)
	}
	return out
}

// fence is the shard's context, or a done one if this replica does not
// drive it.
func (s *shardCaches) fence(shard int) context.Context {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if d, ok := s.shards[shard]; ok {
		return d.fence
	}
	return doneContext
}

var doneContext = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// fenceOf is what ends a run's steps early: the hold on its shard's Lease
// (nil with one shard: only the pool's own stop).
func (r *AgentRunReconciler) fenceOf(run *arv1.AgentRun) context.Context {
	if !r.sharded() {
		return nil
	}
	return r.shardCaches.fence(shardOf(run))
}

// Get finds the run in the cache of whichever owned shard holds it.
func (s *shardCaches) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	for _, c := range s.each() {
		if err := c.Get(ctx, key, obj, opts...); err == nil || !isNotFound(err) {
			return err
		}
	}
	return notFound(key)
}

// List lists the runs of every owned shard.
func (s *shardCaches) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	out, ok := list.(*arv1.AgentRunList)
	if !ok {
		return fmt.Errorf("shard caches hold AgentRuns only, not %T", list)
	}
	out.Items = nil
	for _, c := range s.each() {
		var part arv1.AgentRunList
		if err := c.List(ctx, &part, opts...); err != nil {
			return err
		}
		out.Items = append(out.Items, part.Items...)
	}
	return nil
}

// driveShard runs while this replica holds the shard's Lease: it starts a
// cache of the shard's runs, watches it like the manager's own, and when
// the Lease ends stops every step of the shard's runs and forgets them
// here. A replica that lost a shard starts nothing for it (drives() is
// false from the moment the Lease ends).
func (r *AgentRunReconciler) driveShard(ctx context.Context, shard int) {
	log := ctrl.Log.WithName("shards").WithValues("shard", shard)
	c, err := newShardCache(r.restConfig, r.scheme, shard, r.namespaces)
	if err == nil {
		err = SetupRunIndexes(ctx, c)
	}
	if err != nil {
		log.Error(err, "Starting the shard's cache")
		return
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return
	}
	if err := r.watchShard(c); err != nil {
		log.Error(err, "Watching the shard's runs")
		return
	}
	r.shardCaches.mu.Lock()
	r.shardCaches.shards[shard] = drivenShard{cache: c, fence: ctx}
	r.shareLimits(len(r.shardCaches.shards))
	r.shardCaches.mu.Unlock()
	r.seedShard(ctx, c)
	r.labels.kick()
	<-ctx.Done()
	r.shardCaches.mu.Lock()
	delete(r.shardCaches.shards, shard)
	r.shareLimits(len(r.shardCaches.shards))
	r.shardCaches.mu.Unlock()
	r.dropShard(c)
}

// shareLimits gives this replica the share of every provider limit that
// its shards are of all shards: replicas holding the shards between them
// hold the whole limit between them, and a replica that takes a dead
// one's shards over takes its share too.
func (r *AgentRunReconciler) shareLimits(held int) {
	r.limiter.SetShare(float64(max(held, 1)) / float64(r.shards.Shards))
}

// newShardCache is an informer cache of one shard's runs.
func newShardCache(cfg *rest.Config, scheme *runtime.Scheme, shard int, namespaces []string) (cache.Cache, error) {
	sel := labels.SelectorFromSet(labels.Set{shards.LabelShard: strconv.Itoa(shard)})
	return cache.New(cfg, cache.Options{Scheme: scheme, DefaultNamespaces: CacheNamespaces(namespaces), ByObject: map[client.Object]cache.ByObject{
		&arv1.AgentRun{}: {Label: sel, Transform: FinishedRunTransform()},
	}})
}

// CacheNamespaces restricts a cache to the namespaces of a
// namespace-scoped install (nil: every namespace). The manager's cache and
// the shard caches use it alike.
func CacheNamespaces(namespaces []string) map[string]cache.Config {
	if len(namespaces) == 0 {
		return nil
	}
	only := make(map[string]cache.Config, len(namespaces))
	for _, ns := range namespaces {
		only[ns] = cache.Config{}
	}
	return only
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
	if err := r.ctrl.Watch(source.Kind[client.Object](c, &arv1.AgentRun{}, &handler.EnqueueRequestForObject{}, runChanged())); err != nil {
		return err
	}
	return r.ctrl.Watch(source.Kind[client.Object](c, &arv1.AgentRun{}, own, childChanged{}))
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
	r.admission.Enqueue(working(list.Items)...)
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

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

func notFound(key client.ObjectKey) error {
	return apierrors.NewNotFound(arv1.GroupVersion.WithResource("agentruns").GroupResource(), key.Name)
}

// labeler gives runs their shard. A run created without one (by a person
// or a GitOps tool) is labelled by the replica that drives the shard its
// UID hashes to, and so joins that shard's cache; a run whose shard has no
// driver right now is labelled once one takes it (the shard's Drive kicks
// the labeler). Children are created with their parent's label, so a run
// tree stays in one shard; a child without one (made before sharding was
// turned on) gets its parent's once the parent has one. A label out of
// range (the shard count was lowered) is folded into range, the same way
// for the whole tree. The label costs each top-level run one write, with
// more than one shard only.
type labeler struct {
	r     *AgentRunReconciler
	kicks chan struct{}
}

func newLabeler(r *AgentRunReconciler) *labeler {
	return &labeler{r: r, kicks: make(chan struct{}, 1)}
}

// kick asks for a look at the runs without a shard in range (one appeared
// or got its label, or this replica took a shard).
func (l *labeler) kick() {
	select {
	case l.kicks <- struct{}{}:
	default:
	}
}

func (l *labeler) NeedLeaderElection() bool { return false }

// Start watches the runs without a shard in range and labels those of
// shards this replica drives.
func (l *labeler) Start(ctx context.Context) error {
	r := l.r
	inRange := make([]string, r.shards.Shards)
	for i := range inRange {
		inRange[i] = strconv.Itoa(i)
	}
	req, err := labels.NewRequirement(shards.LabelShard, selection.NotIn, inRange)
	if err != nil {
		return err
	}
	c, err := cache.New(r.restConfig, cache.Options{Scheme: r.scheme, DefaultNamespaces: CacheNamespaces(r.namespaces), ByObject: map[client.Object]cache.ByObject{
		&arv1.AgentRun{}: {Label: labels.NewSelector().Add(*req), Transform: cache.TransformStripManagedFields()},
	}})
	if err != nil {
		return err
	}
	inf, err := c.GetInformer(ctx, &arv1.AgentRun{})
	if err != nil {
		return err
	}
	kick := func(any) { l.kick() }
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: kick, DeleteFunc: kick}); err != nil {
		return err
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.kicks:
			l.labelAll(ctx, c)
		}
	}
}

// labelAll labels the runs whose shard this replica drives.
func (l *labeler) labelAll(ctx context.Context, c cache.Cache) {
	var list arv1.AgentRunList
	if err := c.List(ctx, &list); err != nil {
		return
	}
	for i := range list.Items {
		run := &list.Items[i]
		shard, ok := l.shardFor(ctx, run)
		if !ok || !l.r.shards.Owns(shard) {
			continue
		}
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, shards.LabelShard, strconv.Itoa(shard))
		if err := l.r.client.Patch(ctx, run, client.RawPatch(types.MergePatchType, patch)); client.IgnoreNotFound(err) != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Labelling a run with its shard", "AgentRun", client.ObjectKeyFromObject(run))
			time.AfterFunc(time.Second, l.kick)
		}
	}
}

// shardFor is the shard a run without one in range belongs to; ok is
// false for a child whose parent has none yet.
func (l *labeler) shardFor(ctx context.Context, run *arv1.AgentRun) (int, bool) {
	n := l.r.shards.Shards
	if s := shardOf(run); s >= 0 {
		return s % n, true
	}
	owner := metav1.GetControllerOf(run)
	if owner == nil || owner.Kind != "AgentRun" {
		return shards.Of(run.UID, n), true
	}
	var parent arv1.AgentRun
	if err := l.r.reader.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: owner.Name}, &parent); err != nil {
		return 0, false
	}
	if s := shardOf(&parent); s >= 0 && s < n {
		return s, true
	}
	return 0, false
}
