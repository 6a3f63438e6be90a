package queue

import (
	"slices"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/money"
	"github.com/agentrun-dev/agentrun-operator/internal/quota"
)

// QuotaKinds are the quota kinds whose changes QuotaHandler takes:
// AgentRunQuotas, and ClusterAgentRunQuotas in a cluster-wide install.
func (q *Queue) QuotaKinds() []client.Object {
	kinds := []client.Object{&arv1.AgentRunQuota{}}
	if q.quotas.cluster {
		kinds = append(kinds, &arv1.ClusterAgentRunQuota{})
	}
	return kinds
}

// QuotaHandler wakes the runs waiting on a quota when it changes in a way
// that may let them go on: a new generation (raised, edited) or its
// deletion wakes them all; its status (refreshed by the quota's
// reconciler from the store, on every replica's behalf) waking them all
// when the limits with no room change, as many runs waiting for an
// activeRuns slot as slots freed, and the runs waiting on its cost or
// tokens whose refused call fits what it shows used. No run waiting on a
// quota is polled.
func (q *Queue) QuotaHandler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if v := view(obj); v != nil {
				q.quotas.observe(v.key, v.generation)
			}
		},
		UpdateFunc: func(old, obj any) { q.quotas.changed(view(old), view(obj)) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if v := view(obj); v != nil {
				q.quotas.observe(v.key, deletedQuota)
				q.quotas.wakeAll(v.key)
			}
		},
	}
}

// quotaView is what the watch compares of a quota.
type quotaView struct {
	key        string
	generation int64
	status     *arv1.AgentRunQuotaStatus
	hard       arv1.QuotaHard
}

func view(obj any) *quotaView {
	switch q := obj.(type) {
	case *arv1.AgentRunQuota:
		return &quotaView{key: quota.Key(arv1.KindAgentRunQuota, q.Namespace, q.Name), generation: q.Generation, status: &q.Status, hard: q.Spec.Hard}
	case *arv1.ClusterAgentRunQuota:
		return &quotaView{key: quota.Key(arv1.KindClusterAgentRunQuota, "", q.Name), generation: q.Generation, status: &q.Status, hard: q.Spec.Hard}
	}
	return nil
}

// changed wakes what a quota's change may let go on.
func (g *quotaGate) changed(old, cur *quotaView) {
	if old == nil || cur == nil {
		return
	}
	g.observe(cur.key, cur.generation)
	if old.generation != cur.generation || !slices.Equal(old.status.Exceeded, cur.status.Exceeded) {
		g.wakeAll(cur.key)
		return
	}
	if cur.hard.ActiveRuns != nil {
		was, now := activeOf(old.status), activeOf(cur.status)
		if now < was {
			g.wakeRoom(cur.key, int(*cur.hard.ActiveRuns-now))
		}
	}
	// Room a call settling below its worst case freed (on any replica).
	period, used := statusUse(cur.status)
	g.wakeFitting(cur.key, period, used)
}

// observe records the quota's generation as its watch delivered it,
// before the wakes of its change: a refusal judged against an older one
// that waits after them is woken at once (awaitAs).
func (g *quotaGate) observe(key string, generation int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.generations[key] = generation
}

// statusUse is the period a quota's status counts and its cost (nano-USD)
// and tokens used there, calls in flight at their worst case.
func statusUse(st *arv1.AgentRunQuotaStatus) (int64, map[arv1.QuotaResource]int64) {
	period, used := int64(0), map[arv1.QuotaResource]int64{}
	if st.PeriodStart != nil {
		period = st.PeriodStart.UnixMicro()
	}
	if c, err := money.ParseUSD(st.Used.Cost); err == nil && st.Used.Cost != "" {
		used[arv1.QuotaCost] = int64(c)
	}
	if st.Used.Tokens != nil {
		used[arv1.QuotaTokens] = *st.Used.Tokens
	}
	return period, used
}

func activeOf(st *arv1.AgentRunQuotaStatus) int32 {
	if st.Used.ActiveRuns == nil {
		return 0
	}
	return *st.Used.ActiveRuns
}
