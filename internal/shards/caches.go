package shards

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// Labelled is the shard a run's label names, fixed when it was created (a
// child gets its parent's); -1 when it has none yet.
func Labelled(run metav1.Object) int {
	v, err := strconv.Atoi(run.GetLabels()[LabelShard])
	if err != nil {
		return -1
	}
	return v
}

// CacheConfig is how the cache of a driven shard's runs is built.
type CacheConfig struct {
	// Rest reaches the API server.
	Rest *rest.Config
	// Namespaces restricts the caches to a namespace-scoped install's
	// namespaces (nil: every namespace).
	Namespaces map[string]cache.Config
	// Transform trims every cached run.
	Transform toolscache.TransformFunc
	// Index registers the field indexes the runs are listed through.
	Index func(context.Context, client.FieldIndexer) error
	// Held is told how many shards are held each time that changes, under
	// the same lock as the change: two shards taken or lost at once never
	// report their counts out of order.
	Held func(n int)
}

// Caches are the informer caches of the shards this replica drives: each
// holds only its shard's runs (a label selector), so the runs' memory
// divides among the replicas. They read runs as one client.Reader.
type Caches struct {
	cfg    CacheConfig
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

// NewCaches holds no shard yet.
func NewCaches(cfg CacheConfig) *Caches {
	return &Caches{cfg: cfg, shards: map[int]drivenShard{}}
}

// Open builds the cache of one shard's runs, with its indexes, starts it
// (until ctx ends), waits for it to sync and holds it (hold, with ctx as
// its runs' fence); ok is false when ctx ended first. Held before anything
// watches it: a reconcile its first list queues finds the run (Get), where
// a run not found is taken for one another replica drives, and its
// reconcile ends with nothing to wake it again.
func (s *Caches) Open(ctx context.Context, shard int, scheme *runtime.Scheme) (c cache.Cache, ok bool, err error) {
	sel := labels.SelectorFromSet(labels.Set{LabelShard: strconv.Itoa(shard)})
	c, err = cache.New(s.cfg.Rest, cache.Options{Scheme: scheme, DefaultNamespaces: s.cfg.Namespaces, ByObject: map[client.Object]cache.ByObject{
		&arv1.AgentRun{}: {Label: sel, Transform: s.cfg.Transform},
	}})
	if err == nil && s.cfg.Index != nil {
		err = s.cfg.Index(ctx, c)
	}
	if err != nil {
		return nil, false, err
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return c, false, nil
	}
	s.hold(ctx, shard, c)
	return c, true, nil
}

// hold makes c the cache of a shard this replica drives, read by Get and
// List, with fence (ended when the hold on the shard's Lease ends) as its
// runs' Fence, until Release.
func (s *Caches) hold(fence context.Context, shard int, c cache.Cache) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shards[shard] = drivenShard{cache: c, fence: fence}
	s.held()
}

// Release drops the shard's cache: this replica no longer drives it.
func (s *Caches) Release(shard int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.shards, shard)
	s.held()
}

// held tells CacheConfig.Held the count; s.mu is held.
func (s *Caches) held() {
	if s.cfg.Held != nil {
		s.cfg.Held(len(s.shards))
	}
}

func (s *Caches) each() []cache.Cache {
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

// Fence is the shard's context, or a done one if this replica does not
// drive it.
func (s *Caches) Fence(shard int) context.Context {
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

// Get finds the run in the cache of whichever held shard holds it.
func (s *Caches) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	for _, c := range s.each() {
		if err := c.Get(ctx, key, obj, opts...); err == nil || !apierrors.IsNotFound(err) {
			return err
		}
	}
	return apierrors.NewNotFound(arv1.GroupVersion.WithResource("agentruns").GroupResource(), key.Name)
}

// List lists the runs of every held shard.
func (s *Caches) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
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
