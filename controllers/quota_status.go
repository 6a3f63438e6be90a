package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/controllers/agentrun/queue"
	"github.com/agentrun-dev/agentrun-operator/internal/metrics"
	"github.com/agentrun-dev/agentrun-operator/internal/money"
	"github.com/agentrun-dev/agentrun-operator/internal/quota"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// DefaultQuotaStatusInterval is how often a quota's status (and its
// gauges) is refreshed from the store: what `kubectl get` shows of its use
// may lag by this much, and runs waiting for a slot a run on another
// replica freed are woken within it (queue.QuotaHandler).
const DefaultQuotaStatusInterval = 10 * time.Second

// quotaSweepRounds is how many status refreshes pass between two checks
// of a quota's holders against the live runs (a minute at the default
// interval), so what a run deleted while no replica drove it, or ended on
// a replica that died before giving it back, held goes back.
const quotaSweepRounds = 6

// QuotaStatusReconciler writes the status of AgentRunQuotas and
// ClusterAgentRunQuotas: their use in the current period (from the
// database store, or, without one, the live runs holding activeRuns
// slots), the period's start and reset, the limits with no room, and
// their gauges. It runs on the leader. Build it with NewQuotaStatus.
type QuotaStatusReconciler struct {
	client client.Client
	// runs lists live runs (activeRuns without a database) and reads a
	// holder's run (the sweep): uncached when runs are sharded.
	runs     client.Reader
	db       store.Quotas
	clock    clock.PassiveClock
	interval time.Duration
	cluster  bool

	mu    sync.Mutex
	swept map[string]time.Time
}

// QuotaStatusOptions build a QuotaStatusReconciler.
type QuotaStatusOptions struct {
	Client client.Client
	Runs   client.Reader
	// DB is the database store's quotas (nil: none).
	DB    store.Quotas
	Clock clock.PassiveClock
	// Interval is DefaultQuotaStatusInterval when 0.
	Interval time.Duration
	// Cluster: reconcile ClusterAgentRunQuotas too (a cluster-wide install).
	Cluster bool
}

// NewQuotaStatus builds the reconciler.
func NewQuotaStatus(o QuotaStatusOptions) *QuotaStatusReconciler {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Interval <= 0 {
		o.Interval = DefaultQuotaStatusInterval
	}
	return &QuotaStatusReconciler{client: o.Client, runs: o.Runs, db: o.DB, clock: o.Clock, interval: o.Interval, cluster: o.Cluster, swept: map[string]time.Time{}}
}

// SetupWithManager registers one controller per kind. A spec change is
// reconciled at once; the use is refreshed on the interval.
func (r *QuotaStatusReconciler) SetupWithManager(mgr ctrl.Manager, o controller.Options) error {
	metrics.RegisterQuotas()
	kinds := []client.Object{&arv1.AgentRunQuota{}}
	if r.cluster {
		kinds = append(kinds, &arv1.ClusterAgentRunQuota{})
	}
	for _, obj := range kinds {
		name := "agentrunquota-status"
		if _, ok := obj.(*arv1.ClusterAgentRunQuota); ok {
			name = "clusteragentrunquota-status"
		}
		err := ctrl.NewControllerManagedBy(mgr).
			For(obj, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
			WithOptions(o).
			Named(name).
			Complete(quotaKindReconciler{r: r, cluster: isCluster(obj)})
		if err != nil {
			return fmt.Errorf("setting up the %s controller: %w", name, err)
		}
	}
	return nil
}

func isCluster(obj client.Object) bool {
	_, ok := obj.(*arv1.ClusterAgentRunQuota)
	return ok
}

// quotaKindReconciler reconciles one kind.
type quotaKindReconciler struct {
	r       *QuotaStatusReconciler
	cluster bool
}

// Reconcile refreshes one quota's status.
func (k quotaKindReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var obj client.Object = &arv1.AgentRunQuota{}
	kind := arv1.KindAgentRunQuota
	if k.cluster {
		obj, kind = &arv1.ClusterAgentRunQuota{}, arv1.KindClusterAgentRunQuota
	}
	if err := k.r.client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			metrics.ForgetQuota(quota.Key(kind, req.Namespace, req.Name))
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	return k.r.refresh(ctx, obj)
}

// refresh computes the quota's status, writes it if it changed, sets its
// gauges, and says when to look again: the interval, or its reset if
// sooner.
func (r *QuotaStatusReconciler) refresh(ctx context.Context, obj client.Object) (ctrl.Result, error) {
	var q quota.Quota
	var prev *arv1.AgentRunQuotaStatus
	switch o := obj.(type) {
	case *arv1.AgentRunQuota:
		q, prev = quota.FromNamespaced(o), &o.Status
	case *arv1.ClusterAgentRunQuota:
		q, prev = quota.FromCluster(o), &o.Status
	}
	now := r.clock.Now()
	l, err := q.Limit(now)
	var st arv1.AgentRunQuotaStatus
	switch {
	case err != nil:
		st = quota.Status(&q, prev, &l, store.QuotaUse{}, &quota.Problem{Reason: arv1.ReasonInvalidQuota, Message: err.Error()})
	default:
		st = r.status(ctx, &q, prev, &l)
	}
	r.gauges(&q, &l, &st)
	if !equality.Semantic.DeepEqual(prev, &st) {
		before := obj.DeepCopyObject().(client.Object)
		switch o := obj.(type) {
		case *arv1.AgentRunQuota:
			o.Status = st
		case *arv1.ClusterAgentRunQuota:
			o.Status = st
		}
		if err := r.client.Status().Patch(ctx, obj, client.MergeFrom(before)); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
	}
	after := r.interval
	if !l.ResetAt.IsZero() {
		after = min(after, max(l.ResetAt.Sub(now), time.Millisecond))
	}
	return ctrl.Result{RequeueAfter: after}, nil
}

// status is the quota's status from the store (or, without a database,
// the live runs), sweeping its holders now and then.
func (r *QuotaStatusReconciler) status(ctx context.Context, q *quota.Quota, prev *arv1.AgentRunQuotaStatus, l *store.QuotaLimit) arv1.AgentRunQuotaStatus {
	if r.db == nil {
		n, err := r.activeRuns(ctx, q)
		if err != nil {
			return quota.Status(q, prev, l, store.QuotaUse{}, &quota.Problem{Reason: arv1.ReasonStoreUnavailable, Message: "Counting the runs: " + err.Error()})
		}
		ar := store.QuotaLimit{Key: l.Key, ActiveRuns: l.ActiveRuns}
		var p *quota.Problem
		if quota.NeedsDatabase(&q.Spec) {
			p = &quota.Problem{Counted: true, Reason: arv1.ReasonNeedsDatabase,
				Message: "Only activeRuns is enforced: cost, tokens, runs and a period are counted in a database store, and the manager has none (--store)"}
		}
		return quota.Status(q, prev, &ar, store.QuotaUse{ActiveRuns: n}, p)
	}
	r.sweep(ctx, l.Key)
	u, err := r.db.QuotaUse(ctx, l.Key, l.Period)
	if err != nil {
		return quota.Status(q, prev, l, u, &quota.Problem{Reason: arv1.ReasonStoreUnavailable, Message: "Reading the quota's use from the store: " + err.Error()})
	}
	return quota.Status(q, prev, l, u, nil)
}

// activeRuns counts, without a database, the live roots the quota counts
// that started and have not finished.
func (r *QuotaStatusReconciler) activeRuns(ctx context.Context, q *quota.Quota) (int64, error) {
	var list arv1.AgentRunList
	if err := r.runs.List(ctx, &list, client.InNamespace(q.Namespace)); err != nil {
		return 0, err
	}
	labels := map[string]map[string]string{}
	n := int64(0)
	for i := range list.Items {
		run := &list.Items[i]
		if p := run.Status.Phase; p.IsUnstarted() || p.IsTerminal() || !queue.IsRoot(run) {
			continue
		}
		m := quota.Run{Namespace: run.Namespace, RootLabels: run.Labels, RootAgent: run.Spec.Agent}
		if q.NamespaceSelector != nil {
			if _, ok := labels[run.Namespace]; !ok {
				ns := &metav1.PartialObjectMetadata{}
				ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
				if err := r.client.Get(ctx, types.NamespacedName{Name: run.Namespace}, ns); err != nil {
					return 0, err
				}
				labels[run.Namespace] = ns.Labels
			}
			m.NamespaceLabels = labels[run.Namespace]
		}
		if q.Counts(m) {
			n++
		}
	}
	return n, nil
}

// sweep gives back, at most once per quotaSweepRounds refreshes, what runs that are
// gone or finished still hold of the quota: a run deleted while no
// replica drove it, a replica that died between a run's end and giving
// its slot back.
func (r *QuotaStatusReconciler) sweep(ctx context.Context, key string) {
	now := r.clock.Now()
	r.mu.Lock()
	last, ok := r.swept[key]
	if ok && now.Sub(last) < quotaSweepRounds*r.interval {
		r.mu.Unlock()
		return
	}
	r.swept[key] = now
	r.mu.Unlock()
	holders, err := r.db.QuotaHolders(ctx, key)
	if err != nil {
		return
	}
	log := ctrl.LoggerFrom(ctx)
	for _, h := range holders {
		var run arv1.AgentRun
		err := r.runs.Get(ctx, types.NamespacedName{Namespace: h.Namespace, Name: h.Name}, &run)
		gone := apierrors.IsNotFound(err) || (err == nil && (run.UID != h.UID || run.Status.Phase.IsTerminal()))
		if !gone {
			continue
		}
		if _, err := r.db.EndRun(ctx, h.UID); err != nil && !errors.Is(err, context.Canceled) {
			log.Info("Giving back a gone run's quota holds failed; retried at the next sweep", "quota", key, "AgentRun", h.Namespace+"/"+h.Name, "error", err.Error())
			continue
		}
		log.Info("Gave back the quota holds of a run that is gone or finished", "quota", key, "AgentRun", h.Namespace+"/"+h.Name)
	}
}

// gauges sets the quota's agentrun_quota_used and agentrun_quota_hard.
func (r *QuotaStatusReconciler) gauges(q *quota.Quota, l *store.QuotaLimit, st *arv1.AgentRunQuotaStatus) {
	used, hard := map[string]float64{}, map[string]float64{}
	for _, res := range arv1.QuotaResources {
		h, ok := quota.Hard(l, res)
		if !ok || (r.db == nil && res != arv1.QuotaActiveRuns) {
			continue
		}
		hard[string(res)] = float64(h)
		switch res {
		case arv1.QuotaCost:
			hard[string(res)] = dollars(h)
			if c, err := money.ParseUSD(st.Used.Cost); err == nil {
				used[string(res)] = dollars(int64(c))
			}
		case arv1.QuotaTokens:
			used[string(res)] = float64(deref(st.Used.Tokens))
		case arv1.QuotaRuns:
			used[string(res)] = float64(deref(st.Used.Runs))
		case arv1.QuotaActiveRuns:
			if st.Used.ActiveRuns != nil {
				used[string(res)] = float64(*st.Used.ActiveRuns)
			}
		}
	}
	metrics.SetQuota(q.Key(), used, hard)
}

func dollars(nano int64) float64 { return float64(nano) / 1e9 }

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
