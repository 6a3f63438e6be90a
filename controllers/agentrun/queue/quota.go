package queue

// Quotas (AgentRunQuota, ClusterAgentRunQuota): a run that would exceed
// one is not started (it stays Queued, waiting on QuotaExceeded), and a
// running run parks before a model call the quota has no room for. With a
// database store the store decides, in its transactions, exactly across
// replicas: a run's start takes its runs and activeRuns holds
// (store.Quotas.StartRun), a call's intent reserves its worst case and its
// answer settles it (the step's journal writes, with the charge set here).
// Without one only activeRuns is enforced, from the live runs this
// process sees. A waiting run is woken by the quota's change (a raise, or
// its status showing room: quotaWatch), by a call of this process settling
// below its worst case (recheck) or, for a period, at its reset.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/providerconfig"
	"github.com/agentrun-dev/agentrun-operator/internal/quota"
	"github.com/agentrun-dev/agentrun-operator/internal/runqueue"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
	"github.com/agentrun-dev/agentrun-operator/internal/steps"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// +kubebuilder:rbac:groups=agentrun.dev,resources=agentrunquotas;clusteragentrunquotas,verbs=get;list;watch
// +kubebuilder:rbac:groups=agentrun.dev,resources=agentrunquotas/status;clusteragentrunquotas/status,verbs=get;update;patch

// quotaGate is what the reconciler keeps of quotas, per run: the runs
// whose start the quotas counted, the runs a quota refused a call (until
// it is raised or resets), and who waits on which quota.
type quotaGate struct {
	// reader reads quotas and Namespaces (metadata) from the cache.
	reader client.Reader
	// runs lists the live runs of a namespace ("": all) and finds a root.
	runs   client.Reader
	rootOf func(ctx context.Context, ns, name string) *arv1.AgentRun
	// db counts quotas in the database store; nil without one.
	db store.Quotas
	// cluster: ClusterAgentRunQuotas apply (a cluster-wide install).
	cluster bool
	wake    func(...types.NamespacedName)

	mu sync.Mutex
	// started are runs whose start the quotas counted.
	started map[types.UID]bool
	// hits are runs parked on a quota before a call, with the quota's
	// generation then (a new one lifts the hit).
	hits map[types.UID]quotaHit
	// waiting are the runs waiting on each quota (by key).
	waiting map[string]map[types.UID]quotaWaiter
	// active are, without a database, the runs holding each activeRuns
	// quota's slots (seeded from the live runs on first use).
	active map[string]map[types.UID]bool
	// generations are the quotas' generations as their watch last
	// delivered them (deletedQuota once deleted): a refusal judged
	// against an older one wakes its run at once (awaitAs).
	generations map[string]int64
}

// deletedQuota is the generation of a quota its watch saw deleted.
const deletedQuota = -1

type quotaHit struct {
	err        store.QuotaExceededError
	generation int64
}

type quotaWaiter struct {
	key      types.NamespacedName
	place    runqueue.Place
	resource arv1.QuotaResource
	// period, need and hard are the refusal's: for cost and tokens the run
	// waits until what the period used (calls in flight at their worst
	// case) leaves need under hard.
	period, need, hard int64
}

// refusal is a quota's refusal of a run's start or call, with the quota's
// generation it was judged against.
type refusal struct {
	err        *store.QuotaExceededError
	generation int64
}

func newQuotaGate(reader, runs client.Reader, db store.Quotas, cluster bool, rootOf func(context.Context, string, string) *arv1.AgentRun, wake func(...types.NamespacedName)) *quotaGate {
	return &quotaGate{
		reader: reader, runs: runs, db: db, cluster: cluster, rootOf: rootOf, wake: wake,
		started: map[types.UID]bool{}, hits: map[types.UID]quotaHit{},
		waiting: map[string]map[types.UID]quotaWaiter{}, active: map[string]map[types.UID]bool{},
		generations: map[string]int64{},
	}
}

// IsRoot reports whether the run is no fan-out worker or sub-agent (those count with
// their tree's root, which the quotas admitted).
func IsRoot(run *arv1.AgentRun) bool { return run.Labels[arv1.LabelParent] == "" }

// rootRun is the run's tree's root (the run itself when it is one, or
// when its root is gone).
func (g *quotaGate) rootRun(ctx context.Context, run *arv1.AgentRun) *arv1.AgentRun {
	if name := run.Labels[arv1.LabelRoot]; name != "" && name != run.Name {
		if root := g.rootOf(ctx, run.Namespace, name); root != nil {
			return root
		}
	}
	return run
}

// applying lists the quotas that count the run, from the cache.
func (g *quotaGate) applying(ctx context.Context, run *arv1.AgentRun) ([]quota.Quota, error) {
	var qs []quota.Quota
	var nl arv1.AgentRunQuotaList
	if err := g.reader.List(ctx, &nl, client.InNamespace(run.Namespace)); err != nil {
		return nil, fmt.Errorf("listing AgentRunQuotas: %w", err)
	}
	for i := range nl.Items {
		qs = append(qs, quota.FromNamespaced(&nl.Items[i]))
	}
	selectNamespaces := false
	if g.cluster {
		var cl arv1.ClusterAgentRunQuotaList
		if err := g.reader.List(ctx, &cl); err != nil {
			return nil, fmt.Errorf("listing ClusterAgentRunQuotas: %w", err)
		}
		for i := range cl.Items {
			qs = append(qs, quota.FromCluster(&cl.Items[i]))
			selectNamespaces = selectNamespaces || cl.Items[i].Spec.NamespaceSelector != nil
		}
	}
	if len(qs) == 0 {
		return nil, nil
	}
	root := g.rootRun(ctx, run)
	m := quota.Run{Namespace: run.Namespace, RootLabels: root.Labels, RootAgent: root.Spec.Agent}
	if selectNamespaces {
		ns := &metav1.PartialObjectMetadata{}
		ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
		if err := g.reader.Get(ctx, types.NamespacedName{Name: run.Namespace}, ns); err != nil {
			return nil, fmt.Errorf("reading namespace %s's labels for quotas: %w", run.Namespace, err)
		}
		m.NamespaceLabels = ns.Labels
	}
	out := qs[:0]
	for i := range qs {
		if qs[i].Counts(m) {
			out = append(out, qs[i])
		}
	}
	return out, nil
}

// limits are the quotas as the store enforces them now: without a
// database only activeRuns (the others cannot be counted; the quota's
// status says so).
func (g *quotaGate) limits(qs []quota.Quota, now time.Time) ([]store.QuotaLimit, error) {
	out := make([]store.QuotaLimit, 0, len(qs))
	for i := range qs {
		l, err := qs[i].Limit(now)
		if err != nil {
			return nil, fmt.Errorf("quota %s: %w", qs[i].Key(), err)
		}
		if g.db == nil {
			if l.ActiveRuns == nil {
				continue
			}
			l = store.QuotaLimit{Key: l.Key, ActiveRuns: l.ActiveRuns}
		}
		out = append(out, l)
	}
	return out, nil
}

// Hold is a run's start held back by a quota with no room for it.
type Hold struct {
	// Wait is what the run waits on (QuotaExceeded).
	Wait *arv1.WaitingOn
	// RequeueAfter is when the quota's period resets (0: it does not).
	RequeueAfter time.Duration
}

// HoldStart holds back a root run's start while a quota has no room for
// it (nil: not held): the run stays Queued, waiting on QuotaExceeded
// (waiting is what it waited on as last written), and is looked at again
// at the period's reset (a timer) or when the quota changes.
func (q *Queue) HoldStart(ctx context.Context, run *arv1.AgentRun, waiting *arv1.WaitingOn, now time.Time) (*Hold, error) {
	g := q.quotas
	if !run.Status.Phase.IsUnstarted() || run.Status.BlueprintSnapshot != "" || !IsRoot(run) || g.counted(run.UID) {
		return nil, nil
	}
	qs, err := g.applying(ctx, run)
	if err != nil || len(qs) == 0 {
		return nil, err
	}
	ls, err := g.limits(qs, now)
	if err != nil {
		return nil, err
	}
	if g.db != nil {
		err = g.db.StartRun(ctx, store.RefOf(run), ls)
	} else {
		err = g.memStart(ctx, run, qs, ls)
	}
	var qe *store.QuotaExceededError
	switch {
	case errors.As(err, &qe):
		g.await(run, refusal{err: qe, generation: generationOf(qs, qe.Quota)})
		g.recheck(ctx, qe.Quota)
		h := &Hold{Wait: quota.Wait(qe, waiting, now)}
		if !qe.ResetAt.IsZero() {
			h.RequeueAfter = max(qe.ResetAt.Sub(now), time.Millisecond)
		}
		return h, nil
	case err != nil:
		return nil, err
	}
	g.mu.Lock()
	g.started[run.UID] = true
	g.unawait(run.UID)
	g.mu.Unlock()
	return nil, nil
}

func (g *quotaGate) counted(uid types.UID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.started[uid]
}

// memStart takes, without a database, an activeRuns slot of each quota
// for the run, all or none, counting the live runs started and not
// finished.
func (g *quotaGate) memStart(ctx context.Context, run *arv1.AgentRun, qs []quota.Quota, ls []store.QuotaLimit) error {
	for _, l := range ls {
		if err := g.seed(ctx, l.Key, qs); err != nil {
			return err
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range ls {
		set := g.active[ls[i].Key]
		if !set[run.UID] && int64(len(set)) >= *ls[i].ActiveRuns {
			return &store.QuotaExceededError{Quota: ls[i].Key, Resource: arv1.QuotaActiveRuns, Used: int64(len(set)), Hard: *ls[i].ActiveRuns, Need: 1}
		}
	}
	for _, l := range ls {
		g.active[l.Key][run.UID] = true
	}
	return nil
}

// seed counts, once per quota, the live runs holding its slots: roots it
// counts that started and have not finished.
func (g *quotaGate) seed(ctx context.Context, key string, qs []quota.Quota) error {
	g.mu.Lock()
	_, done := g.active[key]
	g.mu.Unlock()
	if done {
		return nil
	}
	var q *quota.Quota
	for i := range qs {
		if qs[i].Key() == key {
			q = &qs[i]
		}
	}
	var list arv1.AgentRunList
	if err := g.runs.List(ctx, &list, client.InNamespace(q.Namespace)); err != nil {
		return fmt.Errorf("listing runs to count quota %s: %w", key, err)
	}
	set := map[types.UID]bool{}
	for i := range list.Items {
		run := &list.Items[i]
		if p := run.Status.Phase; p.IsUnstarted() || p.IsTerminal() || !IsRoot(run) {
			continue
		}
		nsLabels := map[string]string(nil)
		if q.NamespaceSelector != nil {
			ns := &metav1.PartialObjectMetadata{}
			ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
			if err := g.reader.Get(ctx, types.NamespacedName{Name: run.Namespace}, ns); err == nil {
				nsLabels = ns.Labels
			}
		}
		if q.Counts(quota.Run{Namespace: run.Namespace, NamespaceLabels: nsLabels, RootLabels: run.Labels, RootAgent: run.Spec.Agent}) {
			set[run.UID] = true
		}
	}
	g.mu.Lock()
	if _, done := g.active[key]; !done {
		g.active[key] = set
	}
	g.mu.Unlock()
	return nil
}

// End gives back what a finished or deleted run held of its quotas (its
// activeRuns slots, the reservations of calls it will never answer) and
// wakes a run waiting for a slot of each quota it freed.
func (q *Queue) End(ctx context.Context, run *arv1.AgentRun) {
	g := q.quotas
	g.mu.Lock()
	var freed []string
	for key, set := range g.active {
		if set[run.UID] {
			delete(set, run.UID)
			freed = append(freed, key)
		}
	}
	g.mu.Unlock()
	if g.db != nil {
		keys, err := g.db.EndRun(ctx, run.UID)
		if err != nil {
			// The quota's status refresh releases what a gone or finished
			// run holds (quotaSweep).
			ctrl.LoggerFrom(ctx).Info("Giving back the run's quota holds failed; the quota's next refresh does", "error", err.Error())
		}
		freed = append(freed, keys...)
	}
	for _, key := range freed {
		g.wakeRoom(key, 1)
	}
}

// Charge sets what a model call reserves against the run's quotas (with a
// database store): its worst case, from its provider's rate card (p,
// model) and its request's size. refused, when set, is called if a quota
// refuses the call: the caller's fresh intent was then never dispatched,
// so its reissue once there is room counts no dispatch lost. A refused
// reissue of a journaled intent keeps its count: the earlier dispatch was
// lost, and the ledger counted it.
func (q *Queue) Charge(ctx context.Context, run *arv1.AgentRun, call *steps.ModelCall, p *providerconfig.Provider, model string, now time.Time, refused func()) error {
	g := q.quotas
	if g.db == nil {
		return nil
	}
	qs, err := g.applying(ctx, run)
	if err != nil || len(qs) == 0 {
		return err
	}
	ls, err := g.limits(qs, now)
	if err != nil {
		return err
	}
	gens := map[string]int64{}
	for i := range qs {
		gens[qs[i].Key()] = qs[i].Generation
	}
	cost, tokens, _ := quota.WorstCase(p, model, call.Request.PromptBytes())
	call.Quota = &store.Charge{Seq: call.Intent.Seq, Quotas: ls, Cost: cost, Tokens: tokens}
	uid := run.UID
	// The step calls OverQuota while this reconcile may still write run.
	who, place := client.ObjectKeyFromObject(run), runqueue.PlaceOf(run)
	call.OverQuota = func(e *store.QuotaExceededError) {
		if refused != nil {
			refused()
		}
		g.mu.Lock()
		g.hits[uid] = quotaHit{err: *e, generation: gens[e.Quota]}
		g.mu.Unlock()
		g.awaitAs(uid, who, place, refusal{err: e, generation: gens[e.Quota]})
		g.recheck(ctx, e.Quota)
	}
	return nil
}

// Refused says, for a run whose model call is due, whether a quota
// refused that call and still has no room (nil: none): not once the quota
// changed (raised, edited, deleted, or no longer counting the run) or its
// period reset.
func (q *Queue) Refused(ctx context.Context, run *arv1.AgentRun, now time.Time) *runstate.QuotaHit {
	g := q.quotas
	g.mu.Lock()
	h, ok := g.hits[run.UID]
	g.mu.Unlock()
	if !ok {
		return nil
	}
	lifted := !h.err.ResetAt.IsZero() && !now.Before(h.err.ResetAt)
	if !lifted {
		qs, err := g.applying(ctx, run)
		i := slices.IndexFunc(qs, func(q quota.Quota) bool { return q.Key() == h.err.Quota })
		lifted = err == nil && (i < 0 || qs[i].Generation != h.generation)
	}
	if lifted {
		g.mu.Lock()
		delete(g.hits, run.UID)
		g.unawait(run.UID)
		g.mu.Unlock()
		return nil
	}
	g.await(run, refusal{err: &h.err, generation: h.generation})
	w := quota.Wait(&h.err, nil, now)
	hit := &runstate.QuotaHit{Quota: w.Quota, Resource: w.Resource, Used: w.Used, Hard: w.Hard, NeedsAPerson: w.NeedsAPerson}
	if w.ResetAt != nil {
		at := w.ResetAt.Time
		hit.ResetAt = &at
	}
	return hit
}

// await notes that the run waits on the quota that refused it.
func (g *quotaGate) await(run *arv1.AgentRun, r refusal) {
	g.awaitAs(run.UID, client.ObjectKeyFromObject(run), runqueue.PlaceOf(run), r)
}

// awaitAs notes that the run waits on the quota that refused it, unless
// the quota's watch has already delivered a newer generation of it
// (raised or edited) or its deletion while the refusal was made: the wake
// for that change came before this wait, so the run is woken now and
// tries again.
func (g *quotaGate) awaitAs(uid types.UID, who types.NamespacedName, place runqueue.Place, r refusal) {
	e := r.err
	g.mu.Lock()
	g.unawait(uid)
	if seen, ok := g.generations[e.Quota]; ok && (seen == deletedQuota || seen > r.generation) {
		if h, ok := g.hits[uid]; ok && h.err.Quota == e.Quota {
			delete(g.hits, uid)
		}
		g.mu.Unlock()
		g.wake(who)
		return
	}
	defer g.mu.Unlock()
	if g.waiting[e.Quota] == nil {
		g.waiting[e.Quota] = map[types.UID]quotaWaiter{}
	}
	g.waiting[e.Quota][uid] = quotaWaiter{key: who, place: place, resource: e.Resource, period: e.Period, need: e.Need, hard: e.Hard}
}

// generationOf is the generation of the quota of key among qs (0: none).
func generationOf(qs []quota.Quota, key string) int64 {
	for i := range qs {
		if qs[i].Key() == key {
			return qs[i].Generation
		}
	}
	return 0
}

// Cost and tokens come back when a call settles below its worst case, fails,
// or is given back: nothing about the quota's spec changes, and its status
// (sampled every --quota-status-interval) may never show it exceeded at
// all, so its watch alone would leave a run parked until the period's
// reset. A model call's step that ends (settled) rechecks the quotas it
// was charged against, and a run refused rechecks its quota once it
// waits (a call that settled between its refusal and its wait would wake
// nobody otherwise); the quota's status wakes runs on other replicas the
// same way (QuotaHandler).

// Settled rechecks, once a model call's step ended, the quotas its call
// was charged against.
func (q *Queue) Settled(ctx context.Context, c *store.Charge) {
	if c == nil {
		return
	}
	for _, l := range c.Quotas {
		q.quotas.recheck(ctx, l.Key)
	}
}

// recheck reads what the quota uses, and wakes the waiters that fit now:
// those on its activeRuns when slots are free, and those on its cost and
// tokens whose refused call or start fits what their period used. A slot
// or a reservation given back between a refusal and its wait woke nobody,
// and nothing else would wake the run if no other run of the quota ends.
func (g *quotaGate) recheck(ctx context.Context, key string) {
	g.mu.Lock()
	var periods []int64
	slots := int64(-1) // the activeRuns limit its waiters were refused at
	for _, w := range g.waiting[key] {
		switch w.resource {
		case arv1.QuotaActiveRuns:
			slots = w.hard
		case arv1.QuotaCost, arv1.QuotaTokens:
			if !slices.Contains(periods, w.period) {
				periods = append(periods, w.period)
			}
		}
	}
	active, counted := int64(len(g.active[key])), g.active[key] != nil
	g.mu.Unlock()
	if g.db == nil {
		if slots >= 0 && counted && active < slots {
			g.wakeRoom(key, int(slots-active))
		}
		return
	}
	if slots >= 0 && len(periods) == 0 {
		periods = append(periods, 0) // activeRuns, counted whatever the period
	}
	for i, p := range periods {
		u, err := g.db.QuotaUse(ctx, key, p)
		if err != nil {
			continue // the quota's status refresh wakes them (QuotaHandler)
		}
		if i == 0 && slots >= 0 && u.ActiveRuns < slots {
			g.wakeRoom(key, int(slots-u.ActiveRuns))
		}
		g.wakeFitting(key, p, map[arv1.QuotaResource]int64{arv1.QuotaCost: quota.Used(u, arv1.QuotaCost), arv1.QuotaTokens: quota.Used(u, arv1.QuotaTokens)})
	}
}

// wakeFitting wakes, in their place in line, the runs waiting on the
// quota's cost or tokens in period whose need fits under the limit
// given what is used (with calls in flight), as many as fit together;
// their hits on it are dropped, so each tries again.
func (g *quotaGate) wakeFitting(key string, period int64, used map[arv1.QuotaResource]int64) {
	g.mu.Lock()
	type waiter struct {
		uid types.UID
		w   quotaWaiter
	}
	var ws []waiter
	for uid, w := range g.waiting[key] {
		if _, ok := used[w.resource]; ok && w.period == period {
			ws = append(ws, waiter{uid, w})
		}
	}
	slices.SortFunc(ws, func(a, b waiter) int {
		switch {
		case a.w.place.Before(b.w.place):
			return -1
		case b.w.place.Before(a.w.place):
			return 1
		}
		return 0
	})
	var keys []types.NamespacedName
	for _, x := range ws {
		if used[x.w.resource]+x.w.need > x.w.hard {
			continue
		}
		used[x.w.resource] += x.w.need
		delete(g.waiting[key], x.uid)
		if h, ok := g.hits[x.uid]; ok && h.err.Quota == key {
			delete(g.hits, x.uid)
		}
		keys = append(keys, x.w.key)
	}
	if len(g.waiting[key]) == 0 {
		delete(g.waiting, key)
	}
	g.mu.Unlock()
	g.wake(keys...)
}

// unawait drops the run from every quota's waiters; g.mu held.
func (g *quotaGate) unawait(uid types.UID) {
	for key, ws := range g.waiting {
		delete(ws, uid)
		if len(ws) == 0 {
			delete(g.waiting, key)
		}
	}
}

// wakeAll wakes every run waiting on the quota (raised, edited, deleted,
// or its limits with no room changed); the hits on it are dropped, so a
// parked run tries its call again (and parks again if it still does not
// fit).
func (g *quotaGate) wakeAll(key string) {
	g.mu.Lock()
	ws := g.waiting[key]
	delete(g.waiting, key)
	keys := make([]types.NamespacedName, 0, len(ws))
	for uid, w := range ws {
		if h, ok := g.hits[uid]; ok && h.err.Quota == key {
			delete(g.hits, uid)
		}
		keys = append(keys, w.key)
	}
	g.mu.Unlock()
	g.wake(keys...)
}

// wakeRoom wakes the first n runs (in their place in line) waiting on the
// quota's activeRuns: slots have freed.
func (g *quotaGate) wakeRoom(key string, n int) {
	if n <= 0 {
		return
	}
	g.mu.Lock()
	var ws []quotaWaiter
	var uids []types.UID
	for uid, w := range g.waiting[key] {
		if w.resource == arv1.QuotaActiveRuns {
			ws, uids = append(ws, w), append(uids, uid)
		}
	}
	idx := make([]int, len(ws))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		switch {
		case ws[a].place.Before(ws[b].place):
			return -1
		case ws[b].place.Before(ws[a].place):
			return 1
		}
		return 0
	})
	var keys []types.NamespacedName
	for _, i := range idx[:min(n, len(idx))] {
		delete(g.waiting[key], uids[i])
		keys = append(keys, ws[i].key)
	}
	if len(g.waiting[key]) == 0 {
		delete(g.waiting, key)
	}
	g.mu.Unlock()
	g.wake(keys...)
}

// Forget drops what is kept of the run (its activeRuns slot without a
// database stays: the run still holds it until it ends).
func (g *quotaGate) Forget(uid types.UID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.started, uid)
	delete(g.hits, uid)
	g.unawait(uid)
}

// Has reports whether anything is kept of the run.
func (g *quotaGate) Has(uid types.UID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, hit := g.hits[uid]
	has := g.started[uid] || hit
	for _, ws := range g.waiting {
		_, w := ws[uid]
		has = has || w
	}
	return has
}

// EachRun calls fn with every run something is kept of.
func (g *quotaGate) EachRun(fn func(types.UID)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for uid := range g.started {
		fn(uid)
	}
	for uid := range g.hits {
		fn(uid)
	}
	for _, ws := range g.waiting {
		for uid := range ws {
			fn(uid)
		}
	}
}
