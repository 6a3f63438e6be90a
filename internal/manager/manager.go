// Package manager wires the AgentRun controller into a controller-runtime
// manager. cmd/manager and the local runner (hack/run-local) share it, so the
// operator a developer runs locally is the one that ships.
package manager

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/controllers"
	"github.com/agentrun-dev/agentrun-operator/controllers/schedules"
	"github.com/agentrun-dev/agentrun-operator/internal/caches"
	"github.com/agentrun-dev/agentrun-operator/internal/egress"
	"github.com/agentrun-dev/agentrun-operator/internal/eventsink"
	"github.com/agentrun-dev/agentrun-operator/internal/executor"
	"github.com/agentrun-dev/agentrun-operator/internal/policystatus"
	"github.com/agentrun-dev/agentrun-operator/internal/providerconfig"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/ratelimit"
	"github.com/agentrun-dev/agentrun-operator/internal/shards"
	"github.com/agentrun-dev/agentrun-operator/internal/snapshotgc"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
	"github.com/agentrun-dev/agentrun-operator/internal/store/router"
	"github.com/agentrun-dev/agentrun-operator/internal/tracing"
	"github.com/agentrun-dev/agentrun-operator/internal/writegauge"
)

// Options are the manager's knobs, one per command-line flag.
type Options struct {
	// MetricsAddr is where the Prometheus endpoint listens ("0": off).
	MetricsAddr string
	// MetricsSecure serves it over HTTPS behind the API server's
	// authentication and authorization (cmd/manager's default); false,
	// plain HTTP (tests, the local runner).
	MetricsSecure bool
	// MetricsCertDir holds the endpoint's tls.crt and tls.key; empty, a
	// self-signed certificate.
	MetricsCertDir string
	ProbeAddr      string
	// PprofAddr serves Go's profiles (/debug/pprof) when set.
	PprofAddr      string
	LeaderElection bool
	// MaxConcurrentSteps bounds model and tool calls in flight at once.
	MaxConcurrentSteps int
	// MaxConcurrentReconciles bounds parallel reconciles
	// (DefaultMaxConcurrentReconciles when 0).
	MaxConcurrentReconciles int
	// MaxActiveRuns bounds the runs driven at once; the rest wait in line
	// and are admitted in creation order (0: no bound).
	MaxActiveRuns int
	// MaxActiveRunsPerNamespace bounds one namespace's active runs (0: no
	// bound); a Namespace's agentrun.dev/max-active-runs annotation
	// overrides it (cluster-wide installs only: a namespace-scoped one
	// cannot read Namespaces).
	MaxActiveRunsPerNamespace int
	// Namespaces, when set, restricts the manager to these namespaces: its
	// caches watch only them and it reads nothing elsewhere, so Roles in
	// them (config/namespaced) are all the RBAC it needs.
	Namespaces []string
	// ToolListingRetry is how long a failed MCP server listing stands
	// before the server is listed again (tests shorten it; default 30s).
	ToolListingRetry time.Duration
	// StatusInterval is how long a running run's status may lag its journal
	// while it only progresses (controllers.DefaultStatusInterval when 0;
	// negative: every change is written at once).
	StatusInterval time.Duration
	// Store says where journals and finished runs are kept (the zero
	// value: ConfigMaps, no archive).
	Store StoreOptions
	// JournalChunkBytes bounds each journal chunk's data
	// (configmaps.DefaultChunkBytes when 0).
	JournalChunkBytes int
	// SnapshotSweep says how often unused blueprint snapshots are deleted
	// (tests shorten it).
	SnapshotSweep snapshotgc.Sweep
	// MaxStepsPerServer bounds the steps calling one MCP server at once, so
	// a hung server cannot take every slot (0: a quarter of the pool).
	MaxStepsPerServer int
	// TTLAfterFinished is the default ttlSecondsAfterFinished of runs that
	// do not set one; nil keeps them forever.
	TTLAfterFinished *time.Duration
	// OnWake observes the wake sources each reconcile leaves (tests).
	OnWake func(run *arv1.AgentRun, sources []string)
	// WakeThrough is the path the executor's wake events take (tests).
	WakeThrough func(<-chan event.GenericEvent) <-chan event.GenericEvent
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
	// ScheduleClock is the AgentRunSchedule controller's clock (tests
	// step it to cross schedule times); defaults to Clock.
	ScheduleClock clock.PassiveClock
	// Scripted is the built-in scripted provider; a test passes its own to
	// count calls. Defaults to a new one.
	Scripted *providers.Scripted
	// OnReconcile observes every reconcile (tests count them).
	OnReconcile func(types.NamespacedName)
	// OnReconciler is given the AgentRun reconciler once it is built
	// (tests read what it keeps in memory).
	OnReconciler func(*controllers.AgentRunReconciler)
	// SkipNameValidation lets several managers live in one process (tests
	// that restart the manager).
	SkipNameValidation bool
	// Egress widens or narrows the default egress policy of every call the
	// manager makes on a tenant's behalf (webhooks, MCP servers, model
	// providers): the --egress-* flags. The zero value is the default
	// policy, which refuses loopback, link-local, cloud metadata, the API
	// server and the manager pod; tests that call loopback servers must
	// allow them here explicitly.
	Egress egress.Config
	// EgressConfigMap names the cluster admin's egress ConfigMap (key
	// egress.toml), merged with Egress. It is read at start (a ConfigMap
	// that does not parse stops the manager) and watched, so edits apply
	// to the next connection. Empty Name: none.
	EgressConfigMap types.NamespacedName
	// PriorityClasses names the cluster admin's priority classes ConfigMap
	// (class name to integer value, plus priority.DefaultKey naming the
	// default class). It is read at start and watched; edits re-order the
	// runs waiting in line. Empty Name: none (spec.priority alone).
	PriorityClasses types.NamespacedName
	// PriorityPolicy names the priority-class ValidatingAdmissionPolicy the
	// classes in force are written into, so the API server refuses a run
	// naming an unknown class or one above its namespace's cap
	// (internal/prioritypolicy). Empty: none is written.
	PriorityPolicy string
	// EgressOptions are passed to the policy after the manager's own
	// (tests inject a resolver).
	EgressOptions []egress.Option
	// QuotaStatusInterval is how often quotas' status is refreshed from
	// the store (controllers.DefaultQuotaStatusInterval when 0).
	QuotaStatusInterval time.Duration
	// QuotaPolicy names the quota admission policy the manager writes
	// whether it has a database store into, so spend quotas are refused
	// at apply without one (internal/quotapolicy). Empty: none is written.
	QuotaPolicy string

	// Shards divides the runs among replicas by Leases (0 or 1: this
	// manager drives every run).
	Shards int
	// Lease is where and how the shard Leases (and leader election's) are
	// held.
	Lease LeaseOptions
	// Identity names this replica (default: host name and a random suffix).
	Identity string
	// Tracing says whether and where the runs' traces go (cmd/manager
	// reads it from the OTEL_* environment; off when not Enabled).
	Tracing tracing.Config
	// Webhook serves the admission webhooks (off in the zero value: the
	// local runner and tests that do not install config/webhook).
	Webhook WebhookOptions
}

// DefaultMaxConcurrentReconciles is how many runs are reconciled at once.
// A reconcile's one network call is its status write. Since a run's calls
// follow each other in its steps, a run is reconciled about twice (its
// start and its end), and a burst of runs all start and end at once, as
// do the runs a fixed Secret wakes: with 2 workers 300 runs calling a 2 s
// model finished at 0.57 of a bare client's throughput, with 8 at 0.67,
// with 16 at 0.70, and 100 runs woken by a Secret moved with p99 1.12 s
// with 8 and 0.78 s with 16 (docs/scaling.md).
const DefaultMaxConcurrentReconciles = 16

// DefaultMaxConcurrentSteps is how many model and tool calls one replica
// holds in flight at once. A call in flight is a goroutine waiting on a
// kept-alive connection (a few tens of KiB), and real models answer in
// seconds, so the bound is set by what providers allow (their limits in
// providers.toml, their 429s), not by a small pool.
const DefaultMaxConcurrentSteps = 1024

// LeaseOptions are the Leases' namespace and timings.
type LeaseOptions struct {
	// Namespace defaults to the pod's own (POD_NAMESPACE, or the service
	// account's namespace file in a cluster).
	Namespace                            string
	Duration, RenewDeadline, RetryPeriod time.Duration
}

// Scheme is the runtime scheme the operator needs: core types plus AgentRun.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := arv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// countingWrites is cfg with every client built from it counting its
// writes in flight, so the manager's Events can give way to them.
func countingWrites(cfg *rest.Config) (*rest.Config, *writegauge.Gauge) {
	g := &writegauge.Gauge{}
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(g.Wrap)
	return cfg, g
}

// complete fills in the defaults New needs before it builds anything, and
// refuses options no manager can run with.
func (o *Options) complete() error {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Identity == "" {
		o.Identity = defaultIdentity()
	}
	if (o.LeaderElection || o.Shards > 1) && o.Lease.Namespace == "" {
		if o.Lease.Namespace = podNamespace(); o.Lease.Namespace == "" {
			return fmt.Errorf("outside a cluster the Leases need a namespace: pass --lease-namespace")
		}
	}
	if b := o.JournalChunkBytes; b != 0 && (b < configmaps.MinChunkBytes || b > configmaps.MaxChunkBytes) {
		return fmt.Errorf("--journal-chunk-bytes=%d is outside %d..%d (16 KiB to 512 KiB)", b, configmaps.MinChunkBytes, configmaps.MaxChunkBytes)
	}
	return nil
}

// New builds a manager with the AgentRun controller registered.
func New(cfg *rest.Config, o Options) (ctrl.Manager, error) {
	if err := o.complete(); err != nil {
		return nil, err
	}
	cfg, writes := countingWrites(cfg)
	mgr, err := ctrl.NewManager(cfg, ctrlOptions(o))
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	if o.Scripted == nil {
		o.Scripted = providers.NewUncountedScripted()
	}
	if o.MaxConcurrentSteps <= 0 {
		o.MaxConcurrentSteps = DefaultMaxConcurrentSteps
	}
	if o.MaxConcurrentReconciles <= 0 {
		o.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	eg, err := addEgress(mgr, cfg, o)
	if err != nil {
		return nil, err
	}
	sink := eventsink.New(mgr.GetClient(), mgr.GetScheme(), "agentrun-operator")
	sink.GiveWay = writes.Busy
	if err := mgr.Add(sink); err != nil {
		return nil, err
	}
	tracer, err := tracing.New(context.Background(), o.Tracing)
	if err != nil {
		return nil, err
	}
	var r *controllers.AgentRunReconciler
	sharding, err := shardsFor(mgr, cfg, o, func(ctx context.Context, shard int) { r.DriveShard(ctx, shard) })
	if err != nil {
		return nil, err
	}
	deps := reconcilerDeps(mgr, cfg, o, eg)
	deps.Recorder, deps.Sharding, deps.Tracer = sink, sharding, tracer
	if deps.Store, err = newStore(mgr, o); err != nil {
		return nil, err
	}
	pc := newPriorityClasses(mgr, cfg, o)
	deps.Priorities = pc.store
	r, err = controllers.NewAgentRunReconciler(deps)
	if err != nil {
		return nil, err
	}
	if o.PriorityClasses.Name != "" {
		pc.changed = r.PrioritiesChanged
		if err := mgr.Add(pc); err != nil {
			return nil, err
		}
	}
	if o.OnReconciler != nil {
		o.OnReconciler(r)
	}
	if err := mgr.Add(memoryReleaser{interval: 30 * time.Second, threshold: 16 << 20}); err != nil {
		return nil, err
	}
	if err := addRunController(mgr, r, o); err != nil {
		return nil, err
	}
	if err := addScheduler(mgr, o, sink); err != nil {
		return nil, err
	}
	if err := policystatus.Add(mgr, len(o.Namespaces) == 0, controller.Options{SkipNameValidation: &o.SkipNameValidation}); err != nil {
		return nil, err
	}
	if err := addQuotas(mgr, cfg, o, deps.Store); err != nil {
		return nil, fmt.Errorf("setting up quotas: %w", err)
	}
	if err := addEndpoints(mgr, cfg, o, deps.Store); err != nil {
		return nil, err
	}
	if tracer.On() {
		return tracedManager{Manager: mgr, tracer: tracer}, nil
	}
	return mgr, nil
}

// addEndpoints registers what the manager serves besides its controllers:
// the webhooks, the health probes and the store's readiness check.
func addEndpoints(mgr ctrl.Manager, cfg *rest.Config, o Options, st *router.Router) error {
	if err := addWebhooks(mgr, cfg, o.Webhook); err != nil {
		return err
	}
	if err := addProbes(mgr, o.ProbeAddr); err != nil {
		return err
	}
	return addStoreProbe(mgr, o, st)
}

// ctrlOptions are the controller-runtime manager's options.
func ctrlOptions(o Options) ctrl.Options {
	return ctrl.Options{
		Scheme: Scheme(),
		// Managed fields are never read; dropping them from the cache saves
		// memory on every cached object.
		Cache:                   cacheOptions(o.Namespaces, o.Shards > 1),
		Metrics:                 metricsServer(MetricsOptions{BindAddress: o.MetricsAddr, Secure: o.MetricsSecure, CertDir: o.MetricsCertDir}),
		HealthProbeBindAddress:  o.ProbeAddr,
		PprofBindAddress:        o.PprofAddr,
		LeaderElection:          o.LeaderElection,
		LeaderElectionID:        "agentrun-operator.agentrun.dev",
		LeaderElectionNamespace: o.Lease.Namespace,
		LeaseDuration:           nonZero(o.Lease.Duration),
		RenewDeadline:           nonZero(o.Lease.RenewDeadline),
		RetryPeriod:             nonZero(o.Lease.RetryPeriod),
	}
}

// addEgress builds the egress policy of the calls made on tenants'
// behalf, and watches the cluster admin's egress ConfigMap if one is named.
func addEgress(mgr ctrl.Manager, cfg *rest.Config, o Options) (*egressPolicy, error) {
	eg, err := newEgressPolicy(context.Background(), cfg, o, mgr.GetAPIReader(), ctrl.Log.WithName("egress"))
	if err != nil {
		return nil, fmt.Errorf("building the egress policy: %w", err)
	}
	if o.EgressConfigMap.Name != "" {
		if err := mgr.Add(&egressWatch{e: eg, cfg: cfg, recorder: mgr.GetEventRecorder("agentrun-operator")}); err != nil {
			return nil, err
		}
	}
	return eg, nil
}

// reconcilerDeps are the reconciler's dependencies that come from the
// options and the manager (New adds the Recorder, Sharding and Tracer).
func reconcilerDeps(mgr ctrl.Manager, cfg *rest.Config, o Options, eg *egressPolicy) controllers.Deps {
	httpClients := eg.client
	if o.Shards > 1 {
		httpClients = namedReplica(eg.client, o.Identity)
	}
	return controllers.Deps{
		Client:        mgr.GetClient(),
		APIReader:     mgr.GetAPIReader(),
		Clock:         o.Clock,
		Pool:          executor.New(o.MaxConcurrentSteps, o.MaxStepsPerServer),
		Limiter:       ratelimit.New(clock.RealClock{}),
		Providers:     map[string]providers.Provider{providerconfig.TypeScripted: o.Scripted},
		HTTP:          httpClients,
		Retention:     controllers.Retention{Default: o.TTLAfterFinished},
		MaxActiveRuns: o.MaxActiveRuns,
		Namespaces:    o.Namespaces,
		// Namespaces are cluster-scoped: a namespace-scoped install cannot
		// watch them, and keeps to the flag.
		MaxActiveRunsPerNamespace: o.MaxActiveRunsPerNamespace,
		NamespaceCaps:             len(o.Namespaces) == 0,
		Sweep:                     o.SnapshotSweep,
		ArchiveRetention:          cmp.Or(o.Store.ArchiveRetention, DefaultArchiveRetention),
		ToolListingRetry:          o.ToolListingRetry,
		StatusInterval:            o.StatusInterval,
		JournalChunkBytes:         o.JournalChunkBytes,
		OnReconcile:               o.OnReconcile,
		OnWake:                    o.OnWake,
		WakeThrough:               o.WakeThrough,
		RestConfig:                cfg,
		Identity:                  o.Identity,
	}
}

// addScheduler registers the AgentRunSchedule controller. It runs on the
// leader only (controller-runtime's default), so two replicas never decide
// one schedule's times at once.
func addScheduler(mgr ctrl.Manager, o Options, rec events.EventRecorder) error {
	c := o.ScheduleClock
	if c == nil {
		c = o.Clock
	}
	r := &schedules.Reconciler{
		Client: mgr.GetClient(), Fresh: mgr.GetAPIReader(), Uncached: o.Shards > 1, Clock: c, Recorder: rec,
	}
	if err := r.SetupWithManager(mgr, controller.Options{SkipNameValidation: &o.SkipNameValidation}); err != nil {
		return fmt.Errorf("setting up the AgentRunSchedule controller: %w", err)
	}
	return nil
}

// addRunController sets up the AgentRun controller and registers its raw
// informer handlers with the manager's cache (their informers start with
// it).
func addRunController(mgr ctrl.Manager, r *controllers.AgentRunReconciler, o Options) error {
	if err := r.SetupWithManager(mgr, controller.Options{MaxConcurrentReconciles: o.MaxConcurrentReconciles, SkipNameValidation: &o.SkipNameValidation}); err != nil {
		return fmt.Errorf("setting up the AgentRun controller: %w", err)
	}
	for _, h := range r.InformerHandlers() {
		inf, err := mgr.GetCache().GetInformer(context.Background(), h.Object)
		if err != nil {
			return fmt.Errorf("watching %T: %w", h.Object, err)
		}
		if _, err := inf.AddEventHandler(h.Handler); err != nil {
			return fmt.Errorf("handling the events of %T: %w", h.Object, err)
		}
	}
	return nil
}

// addProbes serves the health and readiness probes, unless they are off.
func addProbes(mgr ctrl.Manager, addr string) error {
	if addr == "" || addr == "0" {
		return nil
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("readyz", healthz.Ping)
}

// tracedManager shuts its tracer down once everything the manager ran has
// stopped, so the spans of the last reconciles and steps are sent too.
type tracedManager struct {
	ctrl.Manager
	tracer *tracing.Tracer
}

func (m tracedManager) Start(ctx context.Context) error {
	err := m.Manager.Start(ctx)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if serr := m.tracer.Shutdown(sctx); serr != nil {
		ctrl.Log.WithName("tracing").Error(serr, "Flushing the last spans")
	}
	return err
}

// cacheOptions keep the manager's memory to what it reads: managed fields
// are dropped from every cached object, finished runs are kept as stubs
// (controllers.FinishedRunTransform), and the ConfigMap metadata cache (the
// watch that wakes runs when a provider config or blueprint changes)
// leaves out the operator's own ConfigMaps (journals, snapshots), which no
// run waits on. With namespaces, every watch is in those namespaces only.
func cacheOptions(namespaces []string, sharded bool) cache.Options {
	notOurs, err := labels.Parse("!" + arv1.LabelComponent)
	if err != nil {
		panic(err)
	}
	runs := cache.ByObject{Transform: controllers.FinishedRunTransform()}
	if sharded {
		// Runs are cached per shard this replica drives (shards.Caches,
		// held by the reconciler); the manager's own cache holds none.
		runs.Label = labels.SelectorFromSet(labels.Set{shards.LabelShard: "none"})
	}
	return cache.Options{
		DefaultNamespaces: caches.Namespaces(namespaces),
		DefaultTransform:  cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {Label: notOurs},
			&arv1.AgentRun{}:    runs,
		},
	}
}

// shardsFor sets up this replica's part in the shard Leases, when runs are
// divided among replicas.
func shardsFor(mgr ctrl.Manager, cfg *rest.Config, o Options, drive func(context.Context, int)) (controllers.Sharding, error) {
	if o.Shards <= 1 {
		return controllers.Sharding{Shards: 1}, nil
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return controllers.Sharding{}, err
	}
	coord, err := shards.New(shards.Config{
		Shards: o.Shards, Namespace: o.Lease.Namespace, Identity: o.Identity,
		LeaseDuration: o.Lease.Duration, RenewDeadline: o.Lease.RenewDeadline, RetryPeriod: o.Lease.RetryPeriod,
		Kube: kube, Drive: drive, Log: ctrl.Log.WithName("shards"),
	})
	if err != nil {
		return controllers.Sharding{}, err
	}
	return controllers.Sharding{Shards: o.Shards, Owns: coord.Owns}, mgr.Add(coord)
}

// defaultIdentity names this replica: in a cluster the pod's name (unique
// among the replicas, kept across container restarts so status.driver
// does not change with them), else the host name and process id, so two
// processes on one host are two replicas.
func defaultIdentity() string {
	if pod := os.Getenv("POD_NAME"); pod != "" {
		return pod
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// InPod reports whether the manager runs in a Kubernetes pod (it knows
// its namespace).
func InPod() bool { return podNamespace() != "" }

// podNamespace is the namespace the manager runs in, when it runs in a
// cluster.
func podNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func nonZero(d time.Duration) *time.Duration {
	if d <= 0 {
		return nil
	}
	return &d
}

// Run builds the manager and runs it until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, o Options) error {
	mgr, err := New(cfg, o)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}
