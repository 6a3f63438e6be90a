// Package quota is the pure part of AgentRunQuota and
// ClusterAgentRunQuota: which runs a quota counts, when its period begins
// and ends, what a model call may cost at worst, and how a quota's use is
// shown. The database store enforces quotas (internal/store/sqlstore) and
// the controller asks it (controllers/quota*.go); both read the rules here.
package quota

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/money"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// Quota is either kind of quota as the rules see it.
type Quota struct {
	// Kind is arv1.KindAgentRunQuota or arv1.KindClusterAgentRunQuota.
	Kind string
	// Namespace is a namespaced quota's; "" for a cluster quota.
	Namespace, Name string
	Generation      int64
	Spec            arv1.AgentRunQuotaSpec
	// NamespaceSelector is a cluster quota's (nil: every namespace).
	NamespaceSelector *metav1.LabelSelector
}

// FromNamespaced is q as the rules see it.
func FromNamespaced(q *arv1.AgentRunQuota) Quota {
	return Quota{Kind: arv1.KindAgentRunQuota, Namespace: q.Namespace, Name: q.Name, Generation: q.Generation, Spec: q.Spec}
}

// FromCluster is q as the rules see it.
func FromCluster(q *arv1.ClusterAgentRunQuota) Quota {
	return Quota{Kind: arv1.KindClusterAgentRunQuota, Name: q.Name, Generation: q.Generation, Spec: q.Spec.Common(), NamespaceSelector: q.Spec.NamespaceSelector}
}

// Key names the quota in the store, in waits and in metrics.
func (q *Quota) Key() string { return Key(q.Kind, q.Namespace, q.Name) }

// Key names a quota: "ClusterAgentRunQuota/<name>" or
// "AgentRunQuota/<namespace>/<name>".
func Key(kind, namespace, name string) string {
	if namespace == "" {
		return kind + "/" + name
	}
	return kind + "/" + namespace + "/" + name
}

// ParseKey splits a key into kind, namespace and name.
func ParseKey(key string) (kind, namespace, name string, ok bool) {
	parts := strings.Split(key, "/")
	switch {
	case len(parts) == 2 && parts[0] == arv1.KindClusterAgentRunQuota:
		return parts[0], "", parts[1], true
	case len(parts) == 3 && parts[0] == arv1.KindAgentRunQuota:
		return parts[0], parts[1], parts[2], true
	}
	return "", "", "", false
}

// NeedsDatabase says whether the quota limits anything but activeRuns, or
// has a period: those are counted from the database store's ledger.
func NeedsDatabase(s *arv1.AgentRunQuotaSpec) bool {
	h := s.Hard
	return s.Period != "" || h.Cost != "" || h.Tokens != nil || h.Runs != nil
}

// Run is what a quota matches a run by: its namespace's labels, and its
// run tree's root (the run itself when it is one).
type Run struct {
	Namespace       string
	NamespaceLabels map[string]string
	// RootLabels and RootAgent are the labels and spec.agent of the run
	// tree's root.
	RootLabels map[string]string
	RootAgent  string
}

// Counts reports whether the quota counts the run. A selector that does
// not parse counts nothing (the API server refuses most such selectors).
func (q *Quota) Counts(r Run) bool {
	if q.Kind == arv1.KindAgentRunQuota && q.Namespace != r.Namespace {
		return false
	}
	if q.Kind == arv1.KindClusterAgentRunQuota && !matches(q.NamespaceSelector, r.NamespaceLabels) {
		return false
	}
	sel := q.Spec.Selector
	if sel == nil {
		return true
	}
	if len(sel.Agents) > 0 && !slices.Contains(sel.Agents, r.RootAgent) {
		return false
	}
	return matches(sel.Labels, r.RootLabels)
}

func matches(s *metav1.LabelSelector, set map[string]string) bool {
	if s == nil {
		return true
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return false
	}
	return sel.Matches(labels.Set(set))
}

// Period is the period now falls in: its start and end in the time zone
// (UTC when tz is empty). ok is false for a running total (no period), and
// when the zone is unknown to this binary (the API server checked it; a
// binary with an older zone database may not know a new zone), in which
// case err says so.
func Period(p arv1.QuotaPeriod, tz string, now time.Time) (start, end time.Time, ok bool, err error) {
	if p == "" {
		return time.Time{}, time.Time{}, false, nil
	}
	loc := time.UTC
	if tz != "" && tz != "UTC" {
		if loc, err = time.LoadLocation(tz); err != nil {
			return time.Time{}, time.Time{}, false, fmt.Errorf("time zone %q: %w", tz, err)
		}
	}
	t := now.In(loc)
	y, m, d := t.Date()
	switch p {
	case arv1.QuotaDay:
		start = time.Date(y, m, d, 0, 0, 0, 0, loc)
		end = time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	case arv1.QuotaWeek:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		start = time.Date(y, m, d-back, 0, 0, 0, 0, loc)
		end = time.Date(y, m, d-back+7, 0, 0, 0, 0, loc)
	case arv1.QuotaMonth:
		start = time.Date(y, m, 1, 0, 0, 0, 0, loc)
		end = time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	default:
		return time.Time{}, time.Time{}, false, fmt.Errorf("unknown period %q", p)
	}
	return start, end, true, nil
}

// Limit is the quota as the store enforces it at now: its key, its
// current period and its limits.
func (q *Quota) Limit(now time.Time) (store.QuotaLimit, error) {
	l := store.QuotaLimit{Key: q.Key()}
	start, end, ok, err := Period(q.Spec.Period, q.Spec.TimeZone, now)
	if err != nil {
		return l, err
	}
	if ok {
		l.Period, l.ResetAt = start.UnixMicro(), end
	}
	h := q.Spec.Hard
	if h.Cost != "" {
		c, err := money.ParseUSD(h.Cost)
		if err != nil {
			return l, fmt.Errorf("spec.hard.cost: %w", err)
		}
		l.Cost = ptr(int64(c))
	}
	l.Tokens, l.Runs = h.Tokens, h.Runs
	if h.ActiveRuns != nil {
		l.ActiveRuns = ptr(int64(*h.ActiveRuns))
	}
	return l, nil
}

func ptr[T any](v T) *T { return &v }

// Hard is the quota's limit of r, and whether it has one.
func Hard(l *store.QuotaLimit, r arv1.QuotaResource) (int64, bool) {
	var p *int64
	switch r {
	case arv1.QuotaCost:
		p = l.Cost
	case arv1.QuotaTokens:
		p = l.Tokens
	case arv1.QuotaRuns:
		p = l.Runs
	case arv1.QuotaActiveRuns:
		p = l.ActiveRuns
	}
	if p == nil {
		return 0, false
	}
	return *p, true
}

// Amount renders an amount of r as people read it: cost in US dollars,
// the rest as integers.
func Amount(r arv1.QuotaResource, n int64) string {
	if r == arv1.QuotaCost {
		return money.NanoUSD(n).String()
	}
	return fmt.Sprint(n)
}

// NeedsAPerson says whether only a person (raising the quota) can lift a
// wait on r: false when the period's reset will, or, for activeRuns, when
// the runs holding the slots finish.
func NeedsAPerson(r arv1.QuotaResource, resetAt time.Time) bool {
	return r != arv1.QuotaActiveRuns && resetAt.IsZero()
}

// Wait is the waitingOn of a run the store refused for e, at now.
func Wait(e *store.QuotaExceededError, prev *arv1.WaitingOn, now time.Time) *arv1.WaitingOn {
	w := &arv1.WaitingOn{
		Reason: arv1.WaitQuotaExceeded, Quota: e.Quota, Resource: e.Resource,
		Used: Amount(e.Resource, e.Used), Hard: Amount(e.Resource, e.Hard),
		NeedsAPerson: NeedsAPerson(e.Resource, e.ResetAt),
	}
	w.Summary = clip(fmt.Sprintf("QuotaExceeded: %s %s", e.Quota, e.Resource), 128)
	if !e.ResetAt.IsZero() {
		t := metav1.NewTime(e.ResetAt)
		w.ResetAt = &t
	}
	since := metav1.NewTime(now)
	if prev != nil && prev.Reason == w.Reason && prev.Quota == w.Quota && prev.Since != nil {
		since = *prev.Since
	}
	w.Since = &since
	return w
}

// Message is the sentence of a quota wait: what is used up, and what
// lifts it.
func Message(w *arv1.WaitingOn) string {
	var what string
	if w.Resource == arv1.QuotaCost {
		what = fmt.Sprintf("%s has used $%s of its $%s cost limit (calls in flight at their worst case)", w.Quota, w.Used, w.Hard)
	} else {
		what = fmt.Sprintf("%s has used %s of its %s %s", w.Quota, w.Used, w.Hard, w.Resource)
	}
	switch {
	case w.ResetAt != nil:
		return what + "; the run goes on by itself when the period resets at " + w.ResetAt.UTC().Format(time.RFC3339) + ", or when the quota is raised"
	case w.Resource == arv1.QuotaActiveRuns:
		return what + "; the run starts by itself when one of the runs holding a slot finishes, or when the quota is raised"
	}
	return what + "; it has no period, so only raising the quota (spec.hard." + string(w.Resource) + ") lets the run go on"
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
