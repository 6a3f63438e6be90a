// Package metrics exposes the operator's Prometheus metrics on the manager's
// metrics endpoint: what runs are doing and waiting on (read from the cache
// at scrape time, so they cannot drift), and counters for model calls,
// tokens and cost recorded as calls complete.
package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
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
	// UnpricedCalls counts calls that could not be priced.
	UnpricedCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentrun_unpriced_calls_total",
		Help: "Model calls that could not be priced, by namespace and agent.",
	}, []string{"namespace", "agent"})
)

// Pool is what the executor reports.
type Pool interface {
	Size() int
	Busy() int
}

var (
	once      sync.Once
	collector = &stateCollector{}
)

// Register adds the metrics to controller-runtime's registry (once per
// process) and points the state collector at this manager's cache and pool.
func Register(reader client.Reader, pool Pool) {
	once.Do(func() {
		crmetrics.Registry.MustRegister(ModelCalls, ModelCallSeconds, Tokens, CostUSD, UnpricedCalls, ToolCalls, ToolCallSeconds, ToolListings, ReconcileErrors, UnwokenReconciles, EgressRefusals, collector)
	})
	collector.mu.Lock()
	defer collector.mu.Unlock()
	collector.reader, collector.pool = reader, pool
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
	runsDesc     = prometheus.NewDesc("agentrun_runs", "Runs by namespace and phase.", []string{"namespace", "phase"}, nil)
	waitingDesc  = prometheus.NewDesc("agentrun_runs_waiting", "Parked runs by namespace, waiting reason and whether they need a person.", []string{"namespace", "reason", "needs_a_person"}, nil)
	blockersDesc = prometheus.NewDesc("agentrun_setup_blockers", "Runs parked on NeedsSetup by namespace and blocker.", []string{"namespace", "blocker"}, nil)
	poolDesc     = prometheus.NewDesc("agentrun_executor_slots", "Executor pool slots by state (busy, total).", []string{"state"}, nil)
)

// stateCollector reads runs from the cache at scrape time.
type stateCollector struct {
	mu     sync.Mutex
	reader client.Reader
	pool   Pool
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- runsDesc
	ch <- waitingDesc
	ch <- blockersDesc
	ch <- poolDesc
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	reader, pool := c.reader, c.pool
	c.mu.Unlock()
	if pool != nil {
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(pool.Busy()), "busy")
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(pool.Size()), "total")
	}
	if reader == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var runs arv1.AgentRunList
	if err := reader.List(ctx, &runs); err != nil {
		return // the cache is not ready yet; report nothing rather than zeros
	}
	type key struct{ a, b, c string }
	phases, waits, blockers := map[key]int{}, map[key]int{}, map[key]int{}
	for i := range runs.Items {
		st := &runs.Items[i].Status
		ns := runs.Items[i].Namespace
		phase := string(st.Phase)
		if phase == "" {
			phase = "Pending"
		}
		phases[key{ns, phase, ""}]++
		if w := st.WaitingOn; w != nil {
			needs := "false"
			if w.Reason.NeedsAPerson() {
				needs = "true"
			}
			waits[key{ns, string(w.Reason), needs}]++
			if w.Reason == arv1.WaitNeedsSetup {
				blockers[key{ns, string(w.Blocker), ""}]++
			}
		}
	}
	for k, n := range phases {
		ch <- prometheus.MustNewConstMetric(runsDesc, prometheus.GaugeValue, float64(n), k.a, k.b)
	}
	for k, n := range waits {
		ch <- prometheus.MustNewConstMetric(waitingDesc, prometheus.GaugeValue, float64(n), k.a, k.b, k.c)
	}
	for k, n := range blockers {
		ch <- prometheus.MustNewConstMetric(blockersDesc, prometheus.GaugeValue, float64(n), k.a, k.b)
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
