package shards

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

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

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// LabelerConfig is what a Labeler works with.
type LabelerConfig struct {
	// Shards is the number of shards; Owns reports whether this replica
	// drives one now.
	Shards int
	Owns   func(shard int) bool
	// Rest and Scheme build the cache of runs without a shard in range;
	// Namespaces restricts it (nil: every namespace).
	Rest       *rest.Config
	Scheme     *runtime.Scheme
	Namespaces map[string]cache.Config
	// Writer labels runs; Reader reads a child's parent.
	Writer client.Writer
	Reader client.Reader
}

// Labeler gives runs their shard. A run created without one (by a person
// or a GitOps tool) is labelled by the replica that drives the shard its
// UID hashes to, and so joins that shard's cache; a run whose shard has no
// driver right now is labelled once one takes it (the shard's Drive kicks
// the labeler). Children are created with their parent's label, so a run
// tree stays in one shard; a child without one (made before sharding was
// turned on) gets its parent's once the parent has one. A label out of
// range (the shard count was lowered) is folded into range, the same way
// for the whole tree. The label costs each top-level run one write, with
// more than one shard only.
//
// Runs in flight are labelled first, and a run created meanwhile goes
// ahead of the finished runs still to label: after an upgrade to shards
// every run finished before is labelled once, and new work must not wait
// behind that backlog.
type Labeler struct {
	cfg   LabelerConfig
	kicks chan struct{}
	// arrived is set when a run not finished enters the unlabelled cache,
	// so a pass through finished runs labels it first.
	arrived atomic.Bool
}

// NewLabeler labels runs once started (a manager Runnable).
func NewLabeler(cfg LabelerConfig) *Labeler {
	return &Labeler{cfg: cfg, kicks: make(chan struct{}, 1)}
}

// Kick asks for a look at the runs without a shard in range (one appeared
// or got its label, or this replica took a shard). A nil Labeler (one
// shard: no labels) ignores it.
func (l *Labeler) Kick() {
	if l == nil {
		return
	}
	select {
	case l.kicks <- struct{}{}:
	default:
	}
}

// NeedLeaderElection is false: every replica labels the runs of its own
// shards.
func (l *Labeler) NeedLeaderElection() bool { return false }

// Start watches the runs without a shard in range and labels those of
// shards this replica drives.
func (l *Labeler) Start(ctx context.Context) error {
	c, err := l.unlabelled(ctx)
	if err != nil {
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

// unlabelled is a cache of the runs without a shard in range, whose every
// arrival or departure kicks the labeler.
func (l *Labeler) unlabelled(ctx context.Context) (cache.Cache, error) {
	inRange := make([]string, l.cfg.Shards)
	for i := range inRange {
		inRange[i] = strconv.Itoa(i)
	}
	req, err := labels.NewRequirement(LabelShard, selection.NotIn, inRange)
	if err != nil {
		return nil, err
	}
	c, err := cache.New(l.cfg.Rest, cache.Options{Scheme: l.cfg.Scheme, DefaultNamespaces: l.cfg.Namespaces, ByObject: map[client.Object]cache.ByObject{
		&arv1.AgentRun{}: {Label: labels.NewSelector().Add(*req), Transform: cache.TransformStripManagedFields()},
	}})
	if err != nil {
		return nil, err
	}
	inf, err := c.GetInformer(ctx, &arv1.AgentRun{})
	if err != nil {
		return nil, err
	}
	kick := func(any) { l.Kick() }
	add := func(obj any) {
		if run, ok := obj.(*arv1.AgentRun); ok && !run.Status.Phase.IsTerminal() {
			l.arrived.Store(true)
		}
		l.Kick()
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: add, DeleteFunc: kick}); err != nil {
		return nil, err
	}
	return c, nil
}

// labelAll labels the runs whose shard this replica drives: those in
// flight first, then the finished ones, before each of which the runs in
// flight that arrived meanwhile.
func (l *Labeler) labelAll(ctx context.Context, c cache.Cache) {
	l.arrived.Store(false)
	finished := l.labelInFlight(ctx, c)
	for _, run := range finished {
		if ctx.Err() != nil {
			return
		}
		if l.arrived.Swap(false) {
			l.labelInFlight(ctx, c)
		}
		l.label(ctx, run)
	}
}

// labelInFlight labels the unlabelled runs not finished, and returns the
// finished ones.
func (l *Labeler) labelInFlight(ctx context.Context, c cache.Cache) (finished []*arv1.AgentRun) {
	var list arv1.AgentRunList
	if err := c.List(ctx, &list); err != nil {
		return nil
	}
	for i := range list.Items {
		run := &list.Items[i]
		if run.Status.Phase.IsTerminal() {
			finished = append(finished, run)
			continue
		}
		l.label(ctx, run)
	}
	return finished
}

// label labels one run with its shard, when this replica drives it.
func (l *Labeler) label(ctx context.Context, run *arv1.AgentRun) {
	shard, ok := l.shardFor(ctx, run)
	if !ok || !l.cfg.Owns(shard) {
		return
	}
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, LabelShard, strconv.Itoa(shard))
	if err := l.cfg.Writer.Patch(ctx, run, client.RawPatch(types.MergePatchType, patch)); client.IgnoreNotFound(err) != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Labelling a run with its shard", "AgentRun", client.ObjectKeyFromObject(run))
		time.AfterFunc(time.Second, l.Kick)
	}
}

// shardFor is the shard a run without one in range belongs to; ok is
// false for a child whose parent has none yet.
func (l *Labeler) shardFor(ctx context.Context, run *arv1.AgentRun) (int, bool) {
	n := l.cfg.Shards
	if s := Labelled(run); s >= 0 {
		return s % n, true
	}
	owner := metav1.GetControllerOf(run)
	if owner == nil || owner.Kind != "AgentRun" {
		return Of(run.UID, n), true
	}
	var parent arv1.AgentRun
	if err := l.cfg.Reader.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: owner.Name}, &parent); err != nil {
		return 0, false
	}
	if s := Labelled(&parent); s >= 0 && s < n {
		return s, true
	}
	return 0, false
}
