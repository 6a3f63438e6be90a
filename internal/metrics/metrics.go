// Package metrics exposes the operator's Prometheus metrics on the manager's
// metrics endpoint: what runs are doing and waiting on (read from the cache
// at scrape time, so they cannot drift, as are the executor's queue and the
// providers' circuits), and counters for model calls, tokens and cost
// recorded as calls complete. No label names a run: cardinality stays at
// namespaces x (phases, reasons, providers, agents).
package metrics

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/circuit"
	"github.com/agentrun-dev/agentrun-operator/internal/ratelimit"
)

var (
	// ModelCalls counts model calls by provider, model and outcome
	// (ok, or the failure class).
	ModelCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentrun_model_calls_total",
		Help: "Model calls by provider and outcome (ok or the failure class).",
	}, []string{"provider", "outcome"})
	// ModelCallSeconds is model call latency by provider.
	ModelCallSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "agentrun_model_call_duration_seconds",
		Help:    "Model call latency by provider, including in-call retries.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120},
	}, []string{"provider"})
	// Tokens counts billed tokens by namespace, agent and kind.
	Tokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentrun_tokens_total",
		Help: "Tokens billed by namespace, agent and kind (prompt, completion, cached, cache_write).",
	}, []string{"namespace", "agent", "kind"})
	// CostUSD counts priced cost by namespace and agent; unpriced calls are
	// counted apart, since unknown is never free.
	CostUSD = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentrun_cost_usd_total",
		Help: "Priced cost in USD by namespace and agent (unpriced calls are in agentrun_unpriced_calls_total).",
	}, []string{"namespace", "agent"})
	// RateLimitRefusals counts model calls a provider refused for a rate
	// limit (429, 529, a 503 with Retry-After), each waited out and sent
	// again: how often declared limits would have spared the provider a
	// refusal.
	RateLimitRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentrun_model_call_rate_limited_total",
		Help: "Model call attempts a provider refused for a rate limit (429, 529, 503 with Retry-After), waited out and sent again, by provider.",
	}, []string{"provider"})
	// ToolCalls counts MCP tool calls by server, effect and outcome (ok,
	// tool_error, not_sent, failed, or unsettled for a write left to a
	// person).
	ToolCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentrun_tool_calls_total",
		Help: "MCP tool calls by server, effect and outcome (ok, tool_error, not_sent, failed, unsettled).",
	}, []string{"server", "effect", "outcome"})
	// ToolCallSeconds is MCP tool call latency by server.
	ToolCallSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "agentrun_tool_call_duration_seconds",
		Help:    "MCP tool call latency by server, including in-call retries.",
		Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"server"})
	// ToolListings counts tool-catalog listings by server and outcome (ok,
	// failed): a dead server shows as one failure per retry interval.
	ToolListings = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentrun_tool_listings_total",
		Help: "MCP tool-catalog listings by server and outcome (ok, failed).",
	}, []string{"server", "outcome"})
	// ReconcileErrors counts reconciles that ended on an error, by kind
	// (transient, terminal), so a run retrying after errors shows in alerts
	// as well as in its Reconciling condition.
	ReconcileErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentrun_reconcile_errors_total",
		Help: "Reconciles of AgentRuns that ended on an error, by kind (transient, terminal).",
	}, []string{"kind"})
	// UnwokenReconciles counts reconciles that would have left a
	// non-terminal run with nothing to wake it again; each was given a
	// safety requeue instead. Always zero unless there is a bug.
	UnwokenReconciles = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "agentrun_unwoken_reconciles_total",
		Help: "Reconciles that found no wake source for a non-terminal run and requeued it as a safety net (a bug if non-zero).",
	})
	// EgressRefusals counts destinations the egress policy refused, by
	// namespace, rule (loopback, metadata, apiserver, ...) and stage (dial,
	// redirect, url): the audit trail of what tenants tried to reach.
	EgressRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentrun_egress_refusals_total",
		Help: "Outbound calls made on a tenant's behalf that the egress policy refused, by namespace, rule and stage.",
	}, []string{"namespace", "rule", "stage"})
	// ToolPolicyDecisions counts the tool-policy rules that matched a tool
	// call, by policy (name for a ClusterAgentToolPolicy, namespace/name
	// for an AgentToolPolicy), rule and action (Deny, RequireApproval,
	// Audit): once per call, when the decision is journaled.
	ToolPolicyDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentrun_tool_policy_decisions_total",
		Help: "Tool-policy rules that matched a tool call, by policy, rule and action (Deny, RequireApproval, Audit).",
	}, []string{"policy", "rule", "action"})
	// WakeWait times how long a run the manager itself woke (its step
	// ended, a timer fired, a slot or a listing it waited for is there)
	// waits for its reconcile to start. Under a burst that is the control
	// loop's lag; the work queue's own wait histogram does not show it, as
	// it mixes these reconciles with new runs', which hardly wait.
	WakeWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "agentrun_wake_wait_seconds",
		Help:    "Time from the manager waking a run (its step ended, a timer fired, a slot freed) to the run's reconcile starting.",
		Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
	})
	// EventsDropped counts Events not sent because the queue of Events
	// waiting for the API server was full: Events are best effort, and a
	// reconcile never waits to record one.
	EventsDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "agentrun_events_dropped_total",
		Help: "Kubernetes Events about runs dropped because too many were waiting to be sent (the API server far behind).",
	})
	// ArchiveWrites counts archive writes of finished runs by outcome
	// (ArchiveStored, ArchiveFailed): a failed one keeps its run, and
	// the run's record in etcd, until it succeeds.
	ArchiveWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentrun_archive_writes_total",
		Help: "Archive writes of finished runs by outcome (archived, failed); a run whose write failed is kept until one succeeds.",
	}, []string{"outcome"})
	// UnpricedCalls counts calls that could not be priced.
	UnpricedCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentrun_unpriced_calls_total",
		Help: "Model calls that could not be priced, by namespace and agent.",
	}, []string{"namespace", "agent"})
)

// ArchiveWrites' outcomes.
const (
	ArchiveStored = "archived"
	ArchiveFailed = "failed"
)

// Pool is what the executor reports.
type Pool interface {
	Size() int
	Busy() int
	// Waiting is how many runs wait for a free slot.
	Waiting() int
}

// Circuits are the providers' circuit breakers, keyed namespace/provider.
type Circuits interface {
	States(now time.Time) []circuit.State
}

// Buckets are the model-call rate-limit buckets (ratelimit.Limiter).
type Buckets interface {
	Stats() []ratelimit.BucketStats
}

// Sources are what the scrape-time gauges are read from; any may be nil
// (its gauges are then left out).
type Sources struct {
	// Runs reads AgentRuns (the manager's cache).
	Runs     client.Reader
	Pool     Pool
	Circuits Circuits
	Buckets  Buckets
	// RunsInMemory counts the runs the manager keeps state of in memory.
	RunsInMemory func() int
	// Now is the manager's clock (the one status timestamps are written
	// with); time.Now when nil.
	Now func() time.Time
	// StoreUp says whether the runs' journal store can be used, as the
	// controller knows it: down from an operation that found it so until
	// a probe gets an answer.
	StoreUp func() bool
	// Archiving says finished runs are archived (a database store): the
	// finished runs not archived yet are counted.
	Archiving bool
}

var (
	once      sync.Once
	collector = &stateCollector{}
)

// reconcileErrorKinds are ReconcileErrors' label values, exported as zero
// from the start: a counter that first appears at 1 hides its first
// increase from rate(), and the alert on it would miss the first error.
var reconcileErrorKinds = []string{"transient", "terminal"}

// Register adds the metrics to controller-runtime's registry (once per
// process) and points the state collector at this manager's sources.
func Register(src Sources) {
	once.Do(func() {
		crmetrics.Registry.MustRegister(ModelCalls, ModelCallSeconds, RateLimitRefusals, Tokens, CostUSD, UnpricedCalls, ToolCalls, ToolCallSeconds, ToolListings, ReconcileErrors, UnwokenReconciles, EgressRefusals, ToolPolicyDecisions, EventsDropped, WakeWait, ArchiveWrites, collector)
		for _, k := range reconcileErrorKinds {
			ReconcileErrors.WithLabelValues(k)
		}
	})
	if src.Archiving {
		// From zero, as ReconcileErrors: the alert's rate sees the first failure.
		ArchiveWrites.WithLabelValues(ArchiveStored)
		ArchiveWrites.WithLabelValues(ArchiveFailed)
	}
	if src.Now == nil {
		src.Now = time.Now
	}
	collector.mu.Lock()
	defer collector.mu.Unlock()
	collector.src = src
}

// RecordCall records one finished model call.
func RecordCall(namespace, agent, provider, outcome string, took time.Duration, prompt, completion, cached, cacheWrite int64, costNano *int64) {
	ModelCalls.WithLabelValues(provider, outcome).Inc()
	ModelCallSeconds.WithLabelValues(provider).Observe(took.Seconds())
	if outcome != "ok" {
		return
	}
	for kind, n := range map[string]int64{"prompt": prompt, "completion": completion, "cached": cached, "cache_write": cacheWrite} {
		if n > 0 {
			Tokens.WithLabelValues(namespace, agent, kind).Add(float64(n))
		}
	}
	if costNano == nil {
		UnpricedCalls.WithLabelValues(namespace, agent).Inc()
		return
	}
	CostUSD.WithLabelValues(namespace, agent).Add(float64(*costNano) / 1e9)
}

var (
	runsDesc        = prometheus.NewDesc("agentrun_runs", "Runs by namespace and phase.", []string{"namespace", "phase"}, nil)
	waitingDesc     = prometheus.NewDesc("agentrun_runs_waiting", "Parked runs by namespace, waiting reason and whether they need a person.", []string{"namespace", "reason", "needs_a_person"}, nil)
	oldestDesc      = prometheus.NewDesc("agentrun_runs_waiting_oldest_seconds", "How long the longest-parked run has waited (since status.waitingOn.since), by namespace, waiting reason and whether it needs a person.", []string{"namespace", "reason", "needs_a_person"}, nil)
	blockersDesc    = prometheus.NewDesc("agentrun_setup_blockers", "Runs parked on NeedsSetup by namespace and blocker.", []string{"namespace", "blocker"}, nil)
	poolDesc        = prometheus.NewDesc("agentrun_executor_slots", "Executor pool slots by state (busy, total).", []string{"state"}, nil)
	queueDesc       = prometheus.NewDesc("agentrun_executor_waiting_runs", "Runs with a step due that wait for a free executor slot (the pool's or their MCP server's lane).", nil, nil)
	memoryDesc      = prometheus.NewDesc("agentrun_runs_in_memory", "Runs this replica keeps state of in memory: the runs it drives; a finished, deleted or handed-over run leaves none.", nil, nil)
	bucketCallsDesc = prometheus.NewDesc("agentrun_model_bucket_calls", "Model calls of a rate-limit bucket (a provider account and model) by state: in_flight, or waiting for the bucket's limits.", []string{"provider", "model", "state"}, nil)
	learnedDesc     = prometheus.NewDesc("agentrun_model_learned_requests_per_second", "The request rate this replica learned from a provider's 429s for a model with no requests_per_minute declared; absent until one is learned.", []string{"provider", "model"}, nil)
	pausedDesc      = prometheus.NewDesc("agentrun_model_bucket_paused", "1 while a bucket's calls wait out a provider's Retry-After, else 0.", []string{"provider", "model"}, nil)
	storeUpDesc     = prometheus.NewDesc("agentrun_store_up", "1 while the runs' journal store can be used, 0 while the controller knows it down (runs wait on StoreUnavailable).", nil, nil)
	unarchivedDesc  = prometheus.NewDesc("agentrun_runs_unarchived", "Finished runs whose record is not in the archive yet, by namespace; they are kept (past their TTL) until it is.", []string{"namespace"}, nil)
	circuitDesc     = prometheus.NewDesc("agentrun_circuit_open", "1 while a provider's circuit is open, 0 for one with failures below the threshold or half-open; providers without recent failures are absent.", []string{"namespace", "provider"}, nil)
)

// stateCollector reads runs from the cache, and the pool and circuits, at
// scrape time.
type stateCollector struct {
	mu  sync.Mutex
	src Sources
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{runsDesc, waitingDesc, oldestDesc, blockersDesc, poolDesc, queueDesc, memoryDesc, circuitDesc, bucketCallsDesc, learnedDesc, pausedDesc, storeUpDesc, unarchivedDesc} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	src := c.src
	c.mu.Unlock()
	if src.Now == nil {
		return // not registered yet
	}
	now := src.Now()
	if p := src.Pool; p != nil {
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(p.Busy()), "busy")
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(p.Size()), "total")
		ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(p.Waiting()))
	}
	if src.RunsInMemory != nil {
		ch <- prometheus.MustNewConstMetric(memoryDesc, prometheus.GaugeValue, float64(src.RunsInMemory()))
	}
	if src.Circuits != nil {
		collectCircuits(ch, src.Circuits.States(now))
	}
	if src.Buckets != nil {
		collectBuckets(ch, src.Buckets.Stats(), now)
	}
	if src.StoreUp != nil {
		up := 0.0
		if src.StoreUp() {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(storeUpDesc, prometheus.GaugeValue, up)
	}
	if src.Runs != nil {
		collectRuns(ch, src.Runs, now, src.Archiving)
	}
}

// collectBuckets reports the rate-limit buckets by provider and model,
// summing the accounts that share both (their rates add up).
func collectBuckets(ch chan<- prometheus.Metric, stats []ratelimit.BucketStats, now time.Time) {
	type sum struct {
		inFlight, waiting int
		learned           float64
		paused            bool
	}
	sums := map[[2]string]*sum{}
	for _, b := range stats {
		k := [2]string{b.Provider, b.Model}
		s := sums[k]
		if s == nil {
			s = &sum{}
			sums[k] = s
		}
		s.inFlight += b.InFlight
		s.waiting += b.Waiting
		s.learned += b.LearnedPerSecond
		s.paused = s.paused || b.PausedUntil.After(now)
	}
	for k, s := range sums {
		ch <- prometheus.MustNewConstMetric(bucketCallsDesc, prometheus.GaugeValue, float64(s.inFlight), k[0], k[1], "in_flight")
		ch <- prometheus.MustNewConstMetric(bucketCallsDesc, prometheus.GaugeValue, float64(s.waiting), k[0], k[1], "waiting")
		paused := 0.0
		if s.paused {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(pausedDesc, prometheus.GaugeValue, paused, k[0], k[1])
		if s.learned > 0 {
			ch <- prometheus.MustNewConstMetric(learnedDesc, prometheus.GaugeValue, s.learned, k[0], k[1])
		}
	}
}

// collectCircuits reports each breaker; its key is namespace/provider.
func collectCircuits(ch chan<- prometheus.Metric, states []circuit.State) {
	for _, s := range states {
		ns, provider, ok := strings.Cut(s.Key, "/")
		if !ok {
			continue
		}
		v := 0.0
		if s.Open {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(circuitDesc, prometheus.GaugeValue, v, ns, provider)
	}
}

type key struct{ a, b, c string }

// collectRuns reports the runs' phases and waits, and with archiving the
// finished runs not archived yet, aggregated so that no label carries a
// run's name.
func collectRuns(ch chan<- prometheus.Metric, reader client.Reader, now time.Time, archiving bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var runs arv1.AgentRunList
	if err := reader.List(ctx, &runs); err != nil {
		return // the cache is not ready yet; report nothing rather than zeros
	}
	phases, waits, blockers, unarchived := map[key]int{}, map[key]int{}, map[key]int{}, map[key]int{}
	oldest := map[key]time.Duration{}
	for i := range runs.Items {
		st := &runs.Items[i].Status
		ns := runs.Items[i].Namespace
		phase := string(st.Phase)
		if phase == "" { // read without the CRD's status default (a fake client)
			phase = string(arv1.PhaseQueued)
		}
		phases[key{ns, phase, ""}]++
		if archiving && st.Phase.IsTerminal() {
			n := unarchived[key{ns, "", ""}] // every namespace with finished runs has the series
			if !meta.IsStatusConditionTrue(st.Conditions, arv1.ConditionArchived) {
				n++
			}
			unarchived[key{ns, "", ""}] = n
		}
		w := st.WaitingOn
		if w == nil {
			continue
		}
		k := key{ns, string(w.Reason), strconv.FormatBool(w.Reason.NeedsAPerson())}
		waits[k]++
		if w.Since != nil {
			oldest[k] = max(oldest[k], now.Sub(w.Since.Time))
		}
		if w.Reason == arv1.WaitNeedsSetup {
			blockers[key{ns, string(w.Blocker), ""}]++
		}
	}
	for k, n := range phases {
		ch <- prometheus.MustNewConstMetric(runsDesc, prometheus.GaugeValue, float64(n), k.a, k.b)
	}
	for k, n := range waits {
		ch <- prometheus.MustNewConstMetric(waitingDesc, prometheus.GaugeValue, float64(n), k.a, k.b, k.c)
	}
	for k, d := range oldest {
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, max(d, 0).Seconds(), k.a, k.b, k.c)
	}
	for k, n := range blockers {
		ch <- prometheus.MustNewConstMetric(blockersDesc, prometheus.GaugeValue, float64(n), k.a, k.b)
	}
	for k, n := range unarchived {
		ch <- prometheus.MustNewConstMetric(unarchivedDesc, prometheus.GaugeValue, float64(n), k.a)
	}
}

// RecordToolCall records one finished MCP tool call.
func RecordToolCall(server, effect, outcome string, took time.Duration) {
	ToolCalls.WithLabelValues(server, effect, outcome).Inc()
	ToolCallSeconds.WithLabelValues(server).Observe(took.Seconds())
}

// RecordToolListing records one finished tool-catalog listing.
func RecordToolListing(server, outcome string) {
	ToolListings.WithLabelValues(server, outcome).Inc()
}
