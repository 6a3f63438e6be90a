// Package controllers holds the AgentRun reconciler: a thin Reconcile that
// gets the run, derives the facts, decides the next action (a pure function
// in internal/runstate), acts, and writes status once, in a deferred patch,
// then hands the steps that status records to the executor. The steps'
// bodies live in internal/steps; the reconcile never waits on the network.
//
// One driver moves every run forward (driver.go), entered by the reconcile
// (driver.Drive, for any event and any decision) and by the step that
// finished a call (driver.Continue, only for a next model or MCP tool call
// that needs nothing else); stepContinues is the choice of which acts.
// Admission and quotas are controllers/agentrun/queue's. docs/architecture.md
// maps the rest.
package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/controllers/agentrun/children"
	"github.com/agentrun-dev/agentrun-operator/controllers/agentrun/queue"
	"github.com/agentrun-dev/agentrun-operator/internal/caches"
	"github.com/agentrun-dev/agentrun-operator/internal/callbacks"
	"github.com/agentrun-dev/agentrun-operator/internal/circuit"
	"github.com/agentrun-dev/agentrun-operator/internal/executor"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/metrics"
	"github.com/agentrun-dev/agentrun-operator/internal/perrun"
	"github.com/agentrun-dev/agentrun-operator/internal/priority"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/ratelimit"
	"github.com/agentrun-dev/agentrun-operator/internal/shards"
	"github.com/agentrun-dev/agentrun-operator/internal/snapshotgc"
	"github.com/agentrun-dev/agentrun-operator/internal/steps"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
	"github.com/agentrun-dev/agentrun-operator/internal/store/router"
	"github.com/agentrun-dev/agentrun-operator/internal/toolcatalog"
	"github.com/agentrun-dev/agentrun-operator/internal/tracing"
)

// Deps are what the reconciler is built from. Client, APIReader, Recorder
// and Pool are required.
type Deps struct {
	// Client reads AgentRuns (and Secret and ConfigMap metadata) from the
	// cache and writes everything.
	Client client.Client
	// APIReader reads ConfigMaps and Secrets uncached: the cache holds only
	// their metadata, so no secret data sits in the informer cache.
	APIReader client.Reader
	// Recorder emits Kubernetes Events after status has been persisted.
	Recorder events.EventRecorder
	// Pool runs steps off the reconcile path.
	Pool *executor.Pool
	// Clock defaults to the real clock; tests control time with it.
	Clock clock.PassiveClock
	// Providers maps a provider type ("scripted", ...) to its client.
	Providers map[string]providers.Provider
	// Breakers are the providers' circuit breakers, shared by every run.
	Breakers *circuit.Breakers
	// HTTP returns the client for calls made on behalf of a namespace's
	// runs (providers, MCP servers, webhooks).
	HTTP func(namespace string) *http.Client
	// CallbackPolicy bounds webhook delivery attempts.
	CallbackPolicy callbacks.Policy
	// StepTimeout bounds one attempt of a model or tool call.
	StepTimeout time.Duration
	// Retention is how long finished runs are kept by default.
	Retention Retention
	// MaxActiveRuns bounds the runs driven at once; the rest wait in line,
	// admitted in creation order (0: no bound).
	MaxActiveRuns int
	// MaxActiveRunsPerNamespace bounds one namespace's active runs (0: no
	// bound), unless NamespaceCaps reads another from the Namespace.
	MaxActiveRunsPerNamespace int
	// Namespaces, when set, are the only namespaces the manager watches
	// and may read (a namespace-scoped install with Roles only).
	Namespaces []string
	// NamespaceCaps watches Namespaces (metadata only) for the
	// agentrun.dev/max-active-runs annotation, which overrides
	// MaxActiveRunsPerNamespace. Off in a namespace-scoped install, which
	// cannot read Namespaces.
	NamespaceCaps bool
	// Sweep says how often unused blueprint snapshots are deleted.
	Sweep snapshotgc.Sweep
	// OnReconcile, when set, observes every reconcile (tests count them).
	OnReconcile func(types.NamespacedName)
	// OnWake, when set, observes the wake sources every reconcile of an
	// unfinished run leaves (tests check none is left without).
	OnWake func(run *arv1.AgentRun, sources []string)
	// WakeThrough, when set, is the path the executor's wake events take
	// to the controller (tests delay, duplicate and reorder them).
	WakeThrough func(<-chan event.GenericEvent) <-chan event.GenericEvent
	// Identity names this replica in status.driver.
	Identity string
	// Sharding divides the runs among replicas (zero: one shard, all here).
	// With more than one shard RestConfig is required: each shard this
	// replica drives gets a cache of its own runs.
	Sharding   Sharding
	RestConfig *rest.Config
	// ToolListingRetry is how long a failed MCP server listing is trusted
	// before the server is listed again (toolcatalog.DefaultRetry when 0).
	ToolListingRetry time.Duration
	// Tracer emits the runs' spans (nil: tracing off).
	Tracer *tracing.Tracer
	// Limiter holds model calls within their providers' limits (a new one
	// when nil).
	Limiter *ratelimit.Limiter
	// StatusInterval is how long a running run's status may go unwritten
	// while it only progresses from one model call to the next (its
	// intents then go into the journal): a burst of fast steps costs one
	// status write a second, not one a step. Zero: DefaultStatusInterval;
	// negative: every change is written at once.
	StatusInterval time.Duration
	// Store keeps the runs' journals, routing each to where it began (nil:
	// ConfigMaps, through Client and APIReader).
	Store *router.Router
	// ArchiveRetention is how long a database store keeps finished runs'
	// records (no sweep when 0).
	ArchiveRetention time.Duration
	// JournalChunkBytes bounds each journal chunk's data
	// (configmaps.DefaultChunkBytes when 0).
	JournalChunkBytes int
	// Priorities are the cluster's priority classes, kept current by the
	// manager's watch on their ConfigMap (nil: none; spec.priority only).
	Priorities *priority.Store
}

// store is the store of the runs' journals: Store, or the API server's
// ConfigMaps.
// statusInterval is Deps.StatusInterval with its default (0 when
// negative: every change written at once).
func (d *Deps) statusInterval() time.Duration {
	switch {
	case d.StatusInterval == 0:
		return DefaultStatusInterval
	case d.StatusInterval > 0:
		return d.StatusInterval
	}
	return 0
}

func (d *Deps) store() *router.Router {
	if d.Store != nil {
		return d.Store
	}
	cm := configmaps.New(d.Client, d.APIReader)
	cm.ChunkBytes = d.JournalChunkBytes
	return router.New(cm, nil)
}

// DefaultStatusInterval bounds how far a running run's status may lag its
// journal while it only progresses. Real model calls take seconds, and a
// progress write per call would cost every run a status write a call: at
// 1,000 runs in flight that is hundreds of AgentRun writes a second for
// nobody's benefit. Waits, conditions, errors and the end are never held.
const DefaultStatusInterval = 10 * time.Second

// AgentRunReconciler drives AgentRuns. Build it with NewAgentRunReconciler.
type AgentRunReconciler struct {
	client     client.Client
	reader     client.Reader
	recorder   events.EventRecorder
	clock      clock.PassiveClock
	pool       *executor.Pool
	steps      *steps.Runtime
	journals   *router.Router
	breakers   *circuit.Breakers
	runs       *caches.Runs
	refs       *caches.Refs
	blueprints *blueprints
	unstarted  *unstartedIntents
	failures   *failures
	pressure   *pressure
	// children are the runs' child runs (controllers/agentrun/children).
	children *children.Children
	// childCalls carries out the agent tools on children, their results'
	// drain and forks (childcalls.go, fork.go).
	childCalls *childCalls
	// driver moves runs forward, from the reconcile and from the step that
	// finished a call (driver.go).
	driver *driver
	// queue says when a run may be driven: its active-run slot and its
	// quotas (controllers/agentrun/queue).
	queue *queue.Queue
	// watchCaps: the queue takes Namespaces' bounds from their annotations.
	watchCaps   bool
	sweep       snapshotgc.Sweep
	namespaces  []string
	onReconcile func(types.NamespacedName)
	onWake      func(*arv1.AgentRun, []string)
	wakes       <-chan event.GenericEvent
	woken       *wakeTimes // when each run woken by wakes was first woken
	identity    string
	// runsReader reads AgentRuns: the manager's cache, or with several
	// shards the caches of the shards this replica drives.
	runsReader  client.Reader
	shards      Sharding
	shardCaches *shards.Caches
	labels      *shards.Labeler
	restConfig  *rest.Config
	scheme      *runtime.Scheme
	mapper      meta.RESTMapper
	ctrl        controller.Controller
	tracer      *tracing.Tracer
	// pace says when a run's status is written (statuswait.go).
	pace *statusPacer
	// unjournaled holds each run's model-call intent that its step has yet
	// to journal (see dispatch).
	unjournaled *perrun.Box[journal.Entry]
	// limiter holds model calls within their providers' limits;
	// rateHolds are the limits holding runs' calls in flight.
	limiter   *ratelimit.Limiter
	rateHolds *rateHolds
	// runState is every holder of per-run state above, for one forget
	// (registry.go).
	runState *perrun.Registry
	// tools settles the runs' tool calls (tools.go).
	tools *toolSettler
	// store says whether the runs' store can be used now.
	store *storeHealth
	// finish settles, archives and deletes finished runs and stops
	// deleted ones (finished.go).
	finisher *finisher
}

// NewAgentRunReconciler builds the reconciler and its step runtime from
// explicit dependencies, so a test can build one without a manager.
func NewAgentRunReconciler(d Deps) (*AgentRunReconciler, error) {
	if d.Client == nil || d.APIReader == nil || d.Recorder == nil || d.Pool == nil {
		return nil, errors.New("AgentRunReconciler needs a Client, an APIReader, a Recorder and a Pool")
	}
	if d.Clock == nil {
		d.Clock = clock.RealClock{}
	}
	if d.Breakers == nil {
		d.Breakers = circuit.New()
	}
	if d.Identity == "" {
		d.Identity, _ = os.Hostname()
	}
	if d.Limiter == nil {
		d.Limiter = ratelimit.New(clock.RealClock{})
	}
	r := &AgentRunReconciler{
		client: d.Client, reader: d.APIReader, recorder: d.Recorder, clock: d.Clock, pool: d.Pool,
		journals: d.store(), breakers: d.Breakers, refs: caches.NewRefs(d.Client, d.APIReader),
		identity: d.Identity, runsReader: d.Client, shards: d.Sharding, restConfig: d.RestConfig,
		unstarted: newUnstartedIntents(), failures: newFailures(), pressure: newPressure(),
		sweep: d.Sweep, onReconcile: d.OnReconcile, onWake: d.OnWake, tracer: d.Tracer,
	}
	interval := d.statusInterval()
	r.unjournaled, r.rateHolds, r.limiter = perrun.New[journal.Entry](), newRateHolds(), d.Limiter
	r.pace = newStatusPacer(interval, interval > 0 && !r.sharded(), r.wake)
	shardCaches := shards.CacheConfig{Rest: d.RestConfig, Namespaces: caches.Namespaces(d.Namespaces), Transform: FinishedRunTransform(), Index: SetupRunIndexes}
	if r.sharded() {
		r.shareLimits(0) // no shard held yet: the least share
		shardCaches.Held = r.shareLimits
	}
	r.shardCaches = shards.NewCaches(shardCaches)
	if r.sharded() {
		if d.RestConfig == nil || d.Sharding.Owns == nil {
			return nil, errors.New("sharding needs a RestConfig and an Owns function")
		}
		r.runsReader = r.shardCaches
	}
	r.runs = caches.NewRuns(r.runsReader, d.Client, d.APIReader)
	r.blueprints = &blueprints{client: d.Client, reader: d.APIReader, refs: r.refs, parsed: newBlueprintCache()}
	r.queue = queue.New(queue.Options{
		Cache: d.Client, Runs: r.runsReader, Quotas: r.journals.Quotas(), Cluster: len(d.Namespaces) == 0,
		MaxActiveRuns: d.MaxActiveRuns, MaxActiveRunsPerNamespace: d.MaxActiveRunsPerNamespace, Priorities: d.Priorities, Wake: r.wake,
	})
	r.watchCaps, r.namespaces = d.NamespaceCaps, d.Namespaces
	catalog := toolcatalog.New(0, d.ToolListingRetry)
	rt, err := steps.New(steps.Options{
		Journal: r.journals, Catalog: catalog, Breakers: d.Breakers, Providers: d.Providers, HTTP: d.HTTP,
		Reader: d.APIReader, Wake: r.wake, Clock: d.Clock, Log: ctrl.Log, CallbackPolicy: d.CallbackPolicy, StepTimeout: d.StepTimeout,
		Tracer: d.Tracer, Limiter: d.Limiter,
	})
	if err != nil {
		return nil, err
	}
	r.steps = rt
	r.children = children.New(d.Client, r.runsReader, r.journals, d.Tracer)
	r.childCalls = &childCalls{client: d.Client, reader: d.APIReader, journals: r.journals, blueprints: r.blueprints}
	r.driver = &driver{clock: d.Clock, identity: d.Identity, first: r.pace.first, runs: r.runs, jobs: r}
	r.store = newStoreHealth(r.journals.Check, r.wake)
	r.journals.OnUnavailable(r.store.failed)
	r.runState = r.registerRunState()
	r.finisher = &finisher{
		client: d.Client, reader: d.APIReader, clock: d.Clock, journals: r.journals, runs: r.runs, children: r.children, queue: r.queue,
		archive:   &archiver{journals: r.journals, reader: d.APIReader, children: r.children, retention: d.ArchiveRetention, health: r.store},
		retention: d.Retention, pool: d.Pool, runState: r.runState, deliveries: r.steps.Deliveries, deliver: r.deliverCallback,
	}
	r.tools = &toolSettler{
		catalog: catalog, policies: newToolPolicies(d.Client, d.Namespaces), refs: r.refs, recorder: d.Recorder,
		pool: d.Pool, steps: rt, unstarted: r.unstarted, providers: d.Providers, runs: r,
	}
	r.wakes, r.woken = d.Pool.Events(), newWakeTimes()
	if d.WakeThrough != nil {
		r.wakes = d.WakeThrough(r.wakes)
	}
	return r, nil
}

// +kubebuilder:rbac:groups=agentrun.dev,resources=agentruns,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=agentrun.dev,resources=agentruns/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=agentrun.dev,resources=agentruns/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch;delete;deletecollection
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch

// Reconcile moves one AgentRun forward.
func (r *AgentRunReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	if r.onReconcile != nil {
		r.onReconcile(req.NamespacedName)
	}
	if at, ok := r.woken.take(req.NamespacedName); ok {
		metrics.WakeWait.Observe(time.Since(at).Seconds())
	}
	run, err := r.runs.Get(ctx, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, err
	}
	if uid, gone := r.runs.Gone(req.NamespacedName, run); gone {
		if err := r.forgetGone(ctx, req.NamespacedName, uid); err != nil {
			return ctrl.Result{}, err
		}
	}
	switch {
	case run == nil:
		return ctrl.Result{}, nil
	case !r.drives(run):
		return ctrl.Result{}, nil // another replica's shard now
	case !run.DeletionTimestamp.IsZero():
		return ctrl.Result{}, r.finisher.deleted(ctx, run)
	case run.Status.Phase.IsTerminal():
		// Terminal is final: a spec edit after the end is observed, never
		// acted on (a fixed blueprint cannot be resumed into).
		return r.finisher.finished(ctx, run)
	}
	if r.sharded() {
		// The journal writes this reconcile makes carry the shard's hold.
		ctx = executor.WithValuesOf(ctx, r.fenceOf(run))
	}
	s := r.driver.begin(run)
	defer func() {
		res, err = r.settle(ctx, s, err)
		if !r.drives(s.run) {
			// Its shard went to another replica while this reconcile ran:
			// what it kept of the run is that replica's now.
			r.forget(s.run.UID)
		}
	}()
	return ctrl.Result{}, r.driver.Drive(ctx, s)
}

// SetupWithManager registers the controller, its indexes and its watches.
// Runs are woken by: their own spec and metadata changes, a finished step
// (the executor's channel, at high priority so runs in flight finish
// before new ones start), a child's phase or wait changing, an answer, and
// a change to a Secret or ConfigMap a parked run waits on (metadata-only
// watches mapped through the setupRefs index), and the creation of the run
// a fork waits for.
func (r *AgentRunReconciler) SetupWithManager(mgr ctrl.Manager, o controller.Options) error {
	if err := SetupIndexes(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := mgr.Add(r.pool); err != nil {
		return err
	}
	if err := mgr.Add(r.sweeper()); err != nil {
		return err
	}
	if err := mgr.Add(r.store); err != nil {
		return err
	}
	if w := r.finisher.archive.sweeper(r.clock.Now); w != nil {
		if err := mgr.Add(w); err != nil {
			return err
		}
	}
	metrics.Register(metrics.Sources{Runs: r.runsReader, Pool: r.pool, Circuits: r.breakers, Buckets: r.limiter, RunsInMemory: r.RunsInMemory, Now: r.clock.Now,
		StoreUp: func() bool { return r.store.problem() == nil }, Archiving: r.journals.Archive() != nil})
	r.scheme, r.mapper = mgr.GetScheme(), mgr.GetRESTMapper()
	o.MaxConcurrentReconciles = max(o.MaxConcurrentReconciles, 1)
	if r.sharded() {
		// Every replica reconciles the runs of the shards it holds; the
		// manager's leader election, if on, only picks who sweeps.
		o.NeedLeaderElection = ptr.To(false)
	}
	c, err := ctrl.NewControllerManagedBy(mgr).
		For(&arv1.AgentRun{}, builder.WithPredicates(r.pace.first.births(), predicate.Or(
			predicate.GenerationChangedPredicate{},
			predicate.AnnotationChangedPredicate{},
			predicate.LabelChangedPredicate{},
			deletionPredicate{},
		))).
		Owns(&arv1.AgentRun{}, builder.WithPredicates(childChanged{})).
		Watches(&arv1.AgentRunAnswer{}, handler.EnqueueRequestsFromMapFunc(runForAnswer), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.runsWaitingOn("Secret")), builder.WithPredicates(dependencyChanged{})).
		WatchesMetadata(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.runsWaitingOn("ConfigMap")), builder.WithPredicates(dependencyChanged{}, notOwnedByAgentRun{})).
		Watches(&arv1.AgentRun{}, handler.EnqueueRequestsFromMapFunc(r.runsWaitingOn("AgentRun")), builder.WithPredicates(created{})).
		WatchesRawSource(source.Channel(r.wakes, wakeHandler{woken: r.woken})).
		WithOptions(o).
		Named("agentrun").
		Build(r)
	if err != nil {
		return err
	}
	r.ctrl = c
	if r.sharded() {
		r.labels = shards.NewLabeler(shards.LabelerConfig{
			Shards: r.shards.Shards, Owns: r.shards.Owns, Rest: r.restConfig, Scheme: r.scheme,
			Namespaces: caches.Namespaces(r.namespaces), Writer: r.client, Reader: r.reader,
		})
		return mgr.Add(r.labels)
	}
	return nil
}

// sweeper deletes unused snapshots. With runs divided among replicas no
// cache holds them all, so it lists them on the API server, in pages.
func (r *AgentRunReconciler) sweeper() *snapshotgc.Sweeper {
	s := &snapshotgc.Sweeper{Runs: r.client, Snapshots: r.reader, Writer: r.client, Clock: r.clock, Sweep: r.sweep, Namespaces: r.namespaces}
	if r.sharded() {
		s.Runs, s.PageSize = r.reader, 500
	}
	return s
}

// runsWaitingOn maps a Secret or ConfigMap to exactly the runs whose
// setupRefs name it.
func (r *AgentRunReconciler) runsWaitingOn(kind string) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []ctrl.Request {
		var runs arv1.AgentRunList
		if err := r.runsReader.List(ctx, &runs, client.InNamespace(obj.GetNamespace()),
			client.MatchingFields{IndexSetupRefs: kind + "/" + obj.GetName()}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing runs waiting on object", "kind", kind, "name", obj.GetName())
			return nil
		}
		reqs := make([]ctrl.Request, 0, len(runs.Items))
		for i := range runs.Items {
			reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&runs.Items[i])})
		}
		for _, key := range r.runs.WaitingOn(obj.GetNamespace(), kind+"/"+obj.GetName()) {
			reqs = append(reqs, ctrl.Request{NamespacedName: key}) // the queue folds a repeat
		}
		return reqs
	}
}

// wake re-queues runs through the executor's channel (a finished tool
// listing wakes the runs that waited for it).
func (r *AgentRunReconciler) wake(runs ...types.NamespacedName) {
	evs := make([]event.GenericEvent, 0, len(runs))
	for _, n := range runs {
		evs = append(evs, wakeEvent(n.Namespace, n.Name))
	}
	r.pool.Notify(evs...)
}

// PrioritiesChanged re-orders the runs waiting in line after the priority
// classes changed (the manager's watch on their ConfigMap calls it).
func (r *AgentRunReconciler) PrioritiesChanged(ctx context.Context) { r.queue.PrioritiesChanged(ctx) }

// forgetGone stops what a run that left the cache (uid: the informer
// saw it go) left behind in this process: its steps and what was kept of
// it. A run that was deleted also takes its children and its journal,
// though the garbage collector would delete them too: it does so in its
// own time, and both are named after the run, so a run created again under
// the name would find its predecessor's journal chunks and children in the
// way (its journal writes refused, its children's creates taken for done).
// This runs in the reconcile of the name, before its successor's. One that
// is still there belongs to a shard another replica drives now, and its
// children stay.
func (r *AgentRunReconciler) forgetGone(ctx context.Context, key types.NamespacedName, uid types.UID) error {
	r.pool.Cancel(uid)
	r.forget(uid)
	if r.sharded() {
		live := &arv1.AgentRun{}
		err := r.reader.Get(ctx, key, live)
		switch {
		case err == nil && live.UID == uid:
			return nil // another replica's now
		case err != nil && !apierrors.IsNotFound(err):
			r.runs.GoneAgain(key, uid)
			return err
		}
	}
	// Deleted: what it held of its quotas goes back.
	r.queue.End(ctx, &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, UID: uid}})
	if err := r.children.DeleteOf(ctx, key.Namespace, uid); err != nil {
		r.runs.GoneAgain(key, uid)
		return fmt.Errorf("deleting the children of deleted run %s: %w", key, err)
	}
	if err := deleteObjectsOf(ctx, r.client, key.Namespace, uid); err != nil {
		r.runs.GoneAgain(key, uid)
		return fmt.Errorf("deleting the journal of deleted run %s: %w", key, err)
	}
	// A run deleted before its archive write leaves its journal in the
	// database: marked, the archive's sweep removes it after the retention.
	if a := r.journals.Archive(); a != nil {
		if err := a.Deleted(ctx, uid); err != nil {
			r.runs.GoneAgain(key, uid)
			return fmt.Errorf("marking the journal of deleted run %s for the archive's sweep: %w", key, err)
		}
	}
	return nil
}

// forgetLocal drops what this process kept of a run it no longer drives.
func (r *AgentRunReconciler) forgetLocal(key types.NamespacedName, uid types.UID) {
	r.runs.Drop(key)
	r.forget(uid)
}
