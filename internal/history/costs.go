package history

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	hv1 "github.com/agentrun-dev/agentrun-operator/api/history/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/money"
	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
)

// The cost report's parameters, given as field selectors (list-only
// resource): spec.since (an age, default 30d) or spec.from, and spec.to
// (default now), each RFC 3339, a date or an age; spec.groupBy, dimensions
// joined by "+" (default namespace+agent+model+day); spec.agent and
// spec.model keep only those calls.
const (
	costSince   = "spec.since"
	costFrom    = "spec.from"
	costTo      = "spec.to"
	costGroupBy = "spec.groupBy"
	costAgent   = "spec.agent"
	costModel   = "spec.model"
)

// CostFields are the fields agentruncostreports may be selected by.
var CostFields = []string{costSince, costFrom, costTo, costGroupBy, costAgent, costModel, fieldNamespace}

// DefaultCostRange is the report's range when none is given.
const DefaultCostRange = 30 * 24 * time.Hour

// costsREST serves agentruncostreports: list only, one item per group.
type costsREST struct {
	store *sqlstore.Store
	clock interface{ Now() time.Time }
}

var (
	_ rest.Lister = (*costsREST)(nil)
	_ rest.Scoper = (*costsREST)(nil)
)

func (*costsREST) New() runtime.Object     { return &hv1.AgentRunCostReport{} }
func (*costsREST) NewList() runtime.Object { return &hv1.AgentRunCostReportList{} }
func (*costsREST) Destroy()                {}
func (*costsREST) NamespaceScoped() bool   { return true }
func (*costsREST) GetSingularName() string { return "agentruncostreport" }

// costQuery reads the report's parameters.
func costQuery(ns string, fs fields.Selector, now time.Time) (sqlstore.CostQuery, error) {
	q := sqlstore.CostQuery{Namespace: ns, From: now.Add(-DefaultCostRange).UnixMicro(), To: now.UnixMicro(),
		By: []sqlstore.CostDimension{sqlstore.ByNamespace, sqlstore.ByAgent, sqlstore.ByModel, sqlstore.ByDay}}
	if fs == nil {
		return q, nil
	}
	for _, r := range fs.Requirements() {
		if not, err := fieldOperator(r); err != nil || not {
			return q, apierrors.NewBadRequest(fmt.Sprintf("field selector %s takes = only on agentruncostreports", r.Field))
		}
		switch r.Field {
		case costSince, costFrom, costTo:
			at, err := parseTime(r.Field, r.Value, now)
			if err != nil {
				return q, err
			}
			if r.Field == costTo {
				q.To = at.UnixMicro()
			} else {
				q.From = at.UnixMicro()
			}
		case costGroupBy:
			by, err := dimensions(r.Value)
			if err != nil {
				return q, err
			}
			q.By = by
		case costAgent:
			q.Agent = r.Value
		case costModel:
			q.Model = r.Value
		case fieldNamespace:
			if ns != "" && r.Value != ns {
				return q, apierrors.NewBadRequest("metadata.namespace differs from the request's namespace")
			}
			q.Namespace = r.Value
		default:
			return q, unsupportedField(r.Field, CostFields)
		}
	}
	if q.From >= q.To {
		return q, apierrors.NewBadRequest("the cost report's range is empty: its start is not before its end")
	}
	return q, nil
}

func dimensions(v string) ([]sqlstore.CostDimension, error) {
	var by []sqlstore.CostDimension
	seen := map[sqlstore.CostDimension]bool{}
	for _, d := range strings.Split(v, "+") {
		dim := sqlstore.CostDimension(strings.TrimSpace(d))
		switch dim {
		case sqlstore.ByNamespace, sqlstore.ByAgent, sqlstore.ByModel, sqlstore.ByDay:
		default:
			return nil, apierrors.NewBadRequest(fmt.Sprintf("spec.groupBy=%q: %q is not a dimension (namespace, agent, model, day, joined by +)", v, d))
		}
		if !seen[dim] {
			seen[dim] = true
			by = append(by, dim)
		}
	}
	return by, nil
}

// List sums the ledger.
func (c *costsREST) List(ctx context.Context, o *metainternalversion.ListOptions) (runtime.Object, error) {
	now := c.clock.Now()
	q, err := costQuery(genericapirequest.NamespaceValue(ctx), o.FieldSelector, now)
	if err != nil {
		return nil, err
	}
	if o.LabelSelector != nil && !o.LabelSelector.Empty() {
		return nil, apierrors.NewBadRequest("agentruncostreports take no label selector (calls carry no labels); use the field selectors " + strings.Join(CostFields, ", "))
	}
	rows, err := c.store.CostReport(ctx, q)
	if err != nil {
		return nil, storeError(err)
	}
	list := &hv1.AgentRunCostReportList{Items: make([]hv1.AgentRunCostReport, 0, len(rows))}
	from, to := metav1.NewTime(time.UnixMicro(q.From).UTC()), metav1.NewTime(time.UnixMicro(q.To).UTC())
	for _, r := range rows {
		list.Items = append(list.Items, costItem(r, from, to))
	}
	return list, nil
}

// costItem is one group as the API shows it.
func costItem(r sqlstore.CostRow, from, to metav1.Time) hv1.AgentRunCostReport {
	g := hv1.CostReportGroup{From: from, To: to, Namespace: r.Namespace, Agent: r.Agent, Model: r.Model}
	if r.Day != 0 {
		g.Day = time.UnixMicro(r.Day).UTC().Format(time.DateOnly)
	}
	var parts []string
	for _, p := range []string{g.Namespace, g.Agent, g.Model, g.Day} {
		if p != "" {
			parts = append(parts, strings.NewReplacer("/", "-", ":", "-").Replace(p))
		}
	}
	name := strings.Join(parts, ".")
	if name == "" {
		name = "total"
	}
	priced := money.NanoUSD(r.PricedNanoUSD).String()
	cost := priced
	if r.UnpricedCalls > 0 {
		cost = "unknown"
	}
	return hv1.AgentRunCostReport{
		TypeMeta:   metav1.TypeMeta{APIVersion: hv1.GroupVersion.String(), Kind: "AgentRunCostReport"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.Namespace},
		Spec:       g,
		Status: hv1.CostReportTotals{Calls: r.Calls, PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens,
			TotalTokens: r.TotalTokens, CostUSD: cost, PricedUSD: priced, UnpricedCalls: r.UnpricedCalls},
	}
}

var costColumns = []metav1.TableColumnDefinition{
	{Name: "Day", Type: "string", Description: "UTC day (when grouped by day)."},
	{Name: "Agent", Type: "string", Description: "The runs' agent (when grouped by agent)."},
	{Name: "Model", Type: "string", Description: "The model called (when grouped by model)."},
	{Name: "Calls", Type: "integer", Description: "Answered model calls."},
	{Name: "Tokens", Type: "integer", Description: "Total tokens."},
	{Name: "Cost", Type: "string", Description: "USD, or unknown when a call could not be priced (never 0)."},
	{Name: "Unpriced", Type: "integer", Description: "Calls whose cost is unknown."},
	{Name: "Priced", Type: "string", Priority: 1, Description: "USD of the priced calls."},
}

// ConvertToTable prints the report.
func (c *costsREST) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	t := &metav1.Table{ColumnDefinitions: costColumns}
	add := func(r *hv1.AgentRunCostReport) {
		cost := r.Status.CostUSD
		if cost != "unknown" {
			cost = "$" + cost
		}
		t.Rows = append(t.Rows, metav1.TableRow{
			Cells:  []any{dash(r.Spec.Day), dash(r.Spec.Agent), dash(r.Spec.Model), r.Status.Calls, r.Status.TotalTokens, cost, r.Status.UnpricedCalls, "$" + r.Status.PricedUSD},
			Object: runtime.RawExtension{Object: r},
		})
	}
	switch o := obj.(type) {
	case *hv1.AgentRunCostReport:
		add(o)
	case *hv1.AgentRunCostReportList:
		for i := range o.Items {
			add(&o.Items[i])
		}
	default:
		return nil, fmt.Errorf("cannot print %T as agentruncostreports", obj)
	}
	return t, nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
