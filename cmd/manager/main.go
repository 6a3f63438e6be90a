// Command manager runs the agentrun-operator: the AgentRun controller with
// health probes, a metrics endpoint and optional leader election.
package main

import (
	"flag"
	"os"
	"runtime/debug"
	"strings"
	"time"
	// The zone database, so AgentRunSchedule time zones resolve in a
	// distroless image that has no /usr/share/zoneinfo.
	_ "time/tzdata"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/controllers"
	"github.com/agentrun-dev/agentrun-operator/internal/a2aserver"
	"github.com/agentrun-dev/agentrun-operator/internal/egress"
	"github.com/agentrun-dev/agentrun-operator/internal/history"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/priority"
	"github.com/agentrun-dev/agentrun-operator/internal/prioritypolicy"
	"github.com/agentrun-dev/agentrun-operator/internal/quotapolicy"
	"github.com/agentrun-dev/agentrun-operator/internal/shards"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
	"github.com/agentrun-dev/agentrun-operator/internal/tracing"
)

// subcommand runs another server of the same image when the first
// argument names one, and exits.
func subcommand() {
	if len(os.Args) < 2 {
		return
	}
	switch os.Args[1] {
	case "a2a":
		// The A2A endpoint (docs/a2a.md): the same image, another
		// Deployment, a ServiceAccount with no rights.
		os.Exit(a2aserver.Main(os.Args[2:], manager.Scheme(), os.Stderr))
	case "history":
		// The archive as history.agentrun.dev (docs/history.md): another
		// Deployment, behind an APIService.
		os.Exit(history.Main(os.Args[2:], os.Stderr))
	}
}

func main() {
	subcommand()
	var o manager.Options
	flag.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8443", "Address the Prometheus metrics endpoint binds to; \"0\" turns it off.")
	flag.BoolVar(&o.MetricsSecure, "metrics-secure", true, "Serve /metrics over HTTPS to scrapers the API server authenticates (TokenReview) and authorizes for GET /metrics (SubjectAccessReview; the metrics-reader ClusterRole grants it). false: plain HTTP, open to whoever reaches the port.")
	flag.StringVar(&o.MetricsCertDir, "metrics-cert-dir", "", "Directory holding the metrics endpoint's tls.crt and tls.key (reloaded when they change); empty: a self-signed certificate made at start.")
	flag.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	flag.StringVar(&o.PprofAddr, "pprof-bind-address", "", "Address Go's profiles (/debug/pprof) are served on; off when empty. For profiling the manager, never expose it.")
	flag.BoolVar(&o.LeaderElection, "leader-elect", false, "Elect a leader so only one manager replica drives runs at a time (with --shards above 1, the leader only sweeps unused snapshots; every replica drives its shards).")
	flag.IntVar(&o.Shards, "shards", 1, "Shards the runs are divided into, each driven by the replica holding its Lease; replicas share the shards evenly and take over a dead one's. 1: this replica drives every run. Every replica must be given the same number.")
	flag.StringVar(&o.Lease.Namespace, "lease-namespace", "", "Namespace of the leader-election and shard Leases (default: the manager pod's own namespace; required outside a cluster).")
	flag.DurationVar(&o.Lease.Duration, "lease-duration", shards.DefaultLeaseDuration, "How long a Lease holds without renewal: a dead replica's shards are taken over after about this long.")
	flag.DurationVar(&o.Lease.RenewDeadline, "lease-renew-deadline", shards.DefaultRenewDeadline, "How long a replica keeps driving a shard whose Lease it cannot renew; shorter than --lease-duration, so it stops before another may take the shard.")
	flag.DurationVar(&o.Lease.RetryPeriod, "lease-retry-period", shards.DefaultRetryPeriod, "How often Leases are renewed and tried.")
	flag.StringVar(&o.Identity, "replica-id", "", "This replica's name in the Leases and in status.driver (default: the host (pod) name and a random suffix).")
	flag.IntVar(&o.MaxConcurrentSteps, "max-concurrent-steps", manager.DefaultMaxConcurrentSteps, "Model and tool calls in flight at once, across all runs. A call in flight is a goroutine on a kept-alive connection; what bounds calls to a provider is its limits in providers.toml (max_concurrent, requests_per_minute, tokens_per_minute) and its own 429s. A full pool is backpressure, shown in status.")
	flag.IntVar(&o.MaxConcurrentReconciles, "max-concurrent-reconciles", manager.DefaultMaxConcurrentReconciles, "AgentRuns reconciled in parallel. A reconcile never calls a model or a tool; its one network call is its status write. A run is reconciled about twice (its start and its end: its calls follow each other in its step), and a burst of runs starts and ends at once, so a few workers keep the starts and ends of a burst moving; on a busy API server more workers only make each write slower.")
	flag.IntVar(&o.MaxActiveRuns, "max-active-runs", 0, "Runs driven at once; the rest wait in line (status says Queued) and are admitted first come, first served, sharing slots fairly across namespaces. A parked run gives its slot back. 0: as many as --max-concurrent-steps; negative: no bound.")
	flag.IntVar(&o.MaxActiveRunsPerNamespace, "max-active-runs-per-namespace", 0, "Active runs one namespace may hold at once, so one tenant cannot take every slot (0: no bound of its own; slots are shared fairly across namespaces either way). The cluster admin overrides it per namespace with the annotation agentrun.dev/max-active-runs on the Namespace (cluster-wide installs only).")
	namespaces := flag.String("namespaces", "", "Comma-separated namespaces to watch; the manager reads and writes nothing elsewhere and needs only Roles there (config/namespaced). Empty: every namespace, with the ClusterRole.")
	flag.IntVar(&o.MaxStepsPerServer, "max-steps-per-server", 0, "Steps calling one MCP server at once, so a hung server cannot take every executor slot (0: a quarter of --max-concurrent-steps).")
	flag.DurationVar(&o.StatusInterval, "status-interval", controllers.DefaultStatusInterval, "How long a running run's status may lag its journal while the run only moves from one model call to the next: the calls follow each other in the run's step, their intents go into the journal, and status is written at most this often, so runs whose calls take seconds do not cost the API server a status write a call. Waits, errors, conditions and the end are always written at once. 0: every change is written at once.")
	flag.IntVar(&o.JournalChunkBytes, "journal-chunk-bytes", configmaps.DefaultChunkBytes, "Bytes of journal entries one journal ConfigMap (chunk) holds before a run's journal goes on in the next, 16384 to 524288. Every append rewrites its whole chunk in etcd, so smaller chunks make a long run's steps cheaper for the API server and etcd, and leave more objects behind it; a short run's journal fits one chunk either way (docs/scaling.md).")
	flag.StringVar(&o.Store.DSN, "store", os.Getenv("AGENTRUN_STORE"), "Where runs' journals and finished runs are kept: postgres://USER@HOST:PORT/DB?sslmode=verify-full&sslrootcert=/path/ca.crt (the password from PGPASSWORD, e.g. a Secret's key; libpq's key=value form works too) or sqlite:PATH. Empty (the default, or AGENTRUN_STORE unset): ConfigMaps owned by each run, with no archive. Runs begun on ConfigMaps keep their journal there (docs/storage.md).")
	flag.IntVar(&o.Store.MaxConns, "store-max-conns", sqlstore.DefaultMaxConns, "Connections the manager opens to a PostgreSQL store at most.")
	flag.DurationVar(&o.Store.ArchiveRetention, "archive-retention", manager.DefaultArchiveRetention, "How long finished runs stay in a database store's archive after they finish; older records are deleted in bounded batches.")
	bindWebhookFlags(&o.Webhook)
	egress.BindFlags(flag.CommandLine, &o.Egress)
	flag.StringVar(&o.EgressConfigMap.Name, "egress-configmap", egress.DefaultConfigMapName, "ConfigMap (key "+egress.DataKey+") holding the cluster admin's egress policy, merged with the --egress-* flags; read at start (one that does not parse stops the manager) and watched, so edits apply to the next connection. Empty: flags only.")
	flag.StringVar(&o.EgressConfigMap.Namespace, "egress-configmap-namespace", envOr("POD_NAMESPACE", arv1.DefaultSystemNamespace), "Namespace of --egress-configmap: the manager's own (the POD_NAMESPACE environment variable), which tenants must not be able to write.")
	flag.StringVar(&o.PriorityClasses.Name, "priority-classes-configmap", priority.DefaultConfigMapName, "ConfigMap of the cluster admin's priority classes (class name: integer value; key "+priority.DefaultKey+" names the default class), in --priority-classes-namespace; read at start and watched, so edits re-order the runs waiting in line. Empty: spec.priority only.")
	flag.StringVar(&o.PriorityClasses.Namespace, "priority-classes-namespace", envOr("POD_NAMESPACE", arv1.DefaultSystemNamespace), "Namespace of --priority-classes-configmap: the manager's own, which tenants must not be able to write.")
	flag.StringVar(&o.PriorityPolicy, "priority-class-policy", prioritypolicy.DefaultPolicyName, "ValidatingAdmissionPolicy the manager writes the priority classes in force into (its RBAC allows this one by name), so the API server refuses a run naming an unknown class or a class above its namespace's agentrun.dev/max-priority. Empty: none is written (classes are then not checked at apply).")
	flag.StringVar(&o.QuotaPolicy, "quota-store-policy", quotapolicy.DefaultPolicyName, "ValidatingAdmissionPolicy the manager writes whether it has a database store (--store) into (its RBAC allows this one by name), so the API server refuses, at apply, quotas that limit cost, tokens or runs or have a period when it has none (docs/quotas.md). Empty: none is written.")
	flag.DurationVar(&o.QuotaStatusInterval, "quota-status-interval", controllers.DefaultQuotaStatusInterval, "How often AgentRunQuotas' and ClusterAgentRunQuotas' status and gauges are refreshed from the store; runs waiting for an activeRuns slot freed on another replica are woken within it.")
	ttl := flag.Int("ttl-seconds-after-finished", 3600, "Seconds a finished run is kept when its spec sets no ttlSecondsAfterFinished; the run is then deleted with its journal, output and children. Negative keeps finished runs forever. Runs applied by Argo CD or Flux get no default (deleting them would re-apply them).")
	o.Tracing = tracing.FromEnv()
	flag.BoolVar(&o.Tracing.Content, "trace-content", false, "Put prompts and answers into the model-call spans (gen_ai.input.messages, gen_ai.output.messages) when tracing is on. Off by default: they hold whatever tenants wrote. Tool arguments and results, secrets and headers are never traced. Tracing itself is on when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (docs/observability.md).")
	zo := zap.Options{}
	zo.BindFlags(flag.CommandLine)
	flag.Parse()
	if o.StatusInterval == 0 {
		o.StatusInterval = -1 // the flag's 0 means off; the options' 0 means the default
	}
	switch {
	case o.MaxActiveRuns == 0:
		o.MaxActiveRuns = o.MaxConcurrentSteps
	case o.MaxActiveRuns < 0:
		o.MaxActiveRuns = 0
	}
	for _, ns := range strings.Split(*namespaces, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			o.Namespaces = append(o.Namespaces, ns)
		}
	}
	if *ttl >= 0 {
		d := time.Duration(*ttl) * time.Second
		o.TTLAfterFinished = &d
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zo)))
	if !flagSet("webhook-bind-address") && o.Webhook.CertDir == "" && o.Webhook.Namespace == "" && !manager.InPod() {
		// Outside a cluster (a manager run from a shell or by tests) no
		// webhook configuration calls this process and it has no
		// namespace to keep a certificate in: the default serves none. An
		// explicit --webhook-bind-address still insists.
		o.Webhook.Addr = "0"
		ctrl.Log.WithName("setup").Info("Not in a pod: the admission webhooks are not served (pass --webhook-namespace to serve them)")
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}

	ctrl.Log.WithName("setup").Info("Starting the manager")
	if err := manager.Run(ctrl.SetupSignalHandler(), ctrl.GetConfigOrDie(), o); err != nil {
		ctrl.Log.WithName("setup").Error(err, "The manager stopped with an error")
		os.Exit(1)
	}
}

// defaultGCPercent is the garbage collector's target when GOGC is unset.
// The manager's heap is mostly its informer caches, which grow with the
// runs in the cluster and are rarely freed; collecting at 50% growth
// instead of Go's 100% keeps its resident memory about a quarter lower for
// little CPU (docs/scaling.md has the figures). GOGC overrides it.
const defaultGCPercent = 50

// bindWebhookFlags binds the admission webhooks' flags. The default names
// are those config/default installs (agentrun- prefixed by kustomize).
func bindWebhookFlags(w *manager.WebhookOptions) {
	flag.StringVar(&w.Addr, "webhook-bind-address", ":9443", "Address the validating admission webhooks (tool policies' CEL rules refused at apply time) listen on, over HTTPS; \"0\" turns them off (then remove the ValidatingWebhookConfiguration too, else its failurePolicy decides what the API server does without them).")
	flag.StringVar(&w.CertDir, "webhook-cert-dir", "", "Directory holding the webhook server's tls.crt and tls.key (e.g. a cert-manager Secret, reloaded when renewed; cert-manager's CA injector then writes the caBundle). Empty: the manager keeps its own CA and certificate in --webhook-secret and writes the caBundle of --webhook-configuration.")
	flag.StringVar(&w.Namespace, "webhook-namespace", "", "Namespace of --webhook-secret and --webhook-service (default: the manager pod's own).")
	flag.StringVar(&w.SecretName, "webhook-secret", "agentrun-webhook-server-cert", "Secret in the manager's namespace holding the webhook CA and serving certificate the manager makes; every replica serves the one it holds.")
	flag.StringVar(&w.ServiceName, "webhook-service", "agentrun-webhook-service", "Service the API server calls the webhooks through: the certificate is for <service>.<namespace>.svc.")
	flag.StringVar(&w.Configuration, "webhook-configuration", "agentrun-validating-webhook-configuration", "ValidatingWebhookConfiguration whose caBundle the manager keeps equal to its CA (its RBAC allows this one by name). Empty: the manager writes none.")
}

// flagSet: the command line set the flag name.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
