package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The quotas' use and limits, set by the quota status reconciler from the
// store each time it refreshes a quota (its status's used and spec.hard):
// one series per quota and limit it sets. Cost is in US dollars.
var (
	QuotaUsed = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "agentrun_quota_used",
		Help: "What an AgentRunQuota's or ClusterAgentRunQuota's runs have used of each limit it sets, in the current period (cost in USD, with calls in flight at their worst case; tokens; runs started; active runs).",
	}, []string{"quota", "resource"})
	QuotaHard = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "agentrun_quota_hard",
		Help: "An AgentRunQuota's or ClusterAgentRunQuota's limits (spec.hard; cost in USD).",
	}, []string{"quota", "resource"})
)

var quotaOnce sync.Once

// RegisterQuotas adds the quota gauges to controller-runtime's registry
// (once per process).
func RegisterQuotas() {
	quotaOnce.Do(func() { crmetrics.Registry.MustRegister(QuotaUsed, QuotaHard) })
}

// SetQuota sets a quota's series: used and hard by resource; resources it
// no longer limits lose theirs.
func SetQuota(quota string, used, hard map[string]float64) {
	for _, r := range []string{"cost", "tokens", "runs", "activeRuns"} {
		h, ok := hard[r]
		if !ok {
			QuotaUsed.DeleteLabelValues(quota, r)
			QuotaHard.DeleteLabelValues(quota, r)
			continue
		}
		QuotaUsed.WithLabelValues(quota, r).Set(used[r])
		QuotaHard.WithLabelValues(quota, r).Set(h)
	}
}

// ForgetQuota drops a deleted quota's series.
func ForgetQuota(quota string) {
	QuotaUsed.DeletePartialMatch(prometheus.Labels{"quota": quota})
	QuotaHard.DeletePartialMatch(prometheus.Labels{"quota": quota})
}
