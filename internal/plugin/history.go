package plugin

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hv1 "github.com/agentrun-dev/agentrun-operator/api/history/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/history/historyclient"
	"github.com/agentrun-dev/agentrun-operator/internal/transcript"
)

// history and cost read the history API (docs/history.md) as the user:
// archived runs, and the cost report of the call ledger.

// historyOptions are the flags of history and cost.
type historyOptions struct {
	selector string   // -l
	phase    string   // --phase
	agent    string   // --agent
	model    string   // --model (cost)
	since    string   // --since
	limit    int64    // --limit (history)
	by       []string // --by (cost)
}

// historyPage is how many records one request asks for.
const historyPage = 500

func historySpec() spec {
	return spec{use: "history", short: "List archived runs (their CRs may be gone)", group: groupInspect,
		long: `List the runs the operator archived (history.agentrun.dev agentrunrecords,
served from its database store), newest finished first: name, agent,
phase, tokens, cost (unknown when a call could not be priced, never $0),
duration and how long ago they finished. Records outlive their AgentRuns:
read one's journal with kubectl agentrun transcript NAME and its output
with kubectl agentrun output NAME. The same RBAC applies as to kubectl get
agentrunrecords (the view role grants it).`,
		example: `  kubectl agentrun history -n team-a
  kubectl agentrun history -A -l team=x --phase Error --since 7d
  kubectl agentrun history -n team-a --agent researcher --limit 20`,
		flags: func(fs *pflag.FlagSet, o *options) {
			fs.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "list records in every namespace")
			fs.StringVarP(&o.history.selector, "selector", "l", "", "label selector over the runs' labels (team=x, env in (a,b), !key)")
			fs.StringVar(&o.history.phase, "phase", "", "only runs that finished in this phase (Complete, Error, Cancelled, ...)")
			fs.StringVar(&o.history.agent, "agent", "", "only runs of this agent (spec.agent)")
			fs.StringVar(&o.history.since, "since", "", "only runs that finished within this age (12h, 7d), or since an RFC 3339 time or a date")
			fs.Int64Var(&o.history.limit, "limit", 100, "print at most this many records (0: all)")
		},
		check: historyArgs, run: (*app).history}
}

func costSpec() spec {
	return spec{use: "cost", short: "Sum tokens and cost by namespace, agent, model or day", group: groupInspect,
		long: `Sum the model calls' tokens and cost from the operator's call ledger
(history.agentrun.dev agentruncostreports), grouped by --by: namespace,
agent, model and day (UTC), one or more. A group with a call that could
not be priced shows cost "unknown" with the priced part and the count of
unpriced calls: unknown cost is never counted as $0. A call's agent is its
run's, known once the run is archived ("-" before).`,
		example: `  kubectl agentrun cost -A --by namespace --since 30d
  kubectl agentrun cost -n team-a --by agent,model --since 7d
  kubectl agentrun cost -n team-a --by day --agent researcher`,
		flags: func(fs *pflag.FlagSet, o *options) {
			fs.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "sum every namespace's calls")
			fs.StringSliceVar(&o.history.by, "by", []string{"namespace"}, "group by these: namespace, agent, model, day (repeat or join with commas)")
			fs.StringVar(&o.history.since, "since", "30d", "calls made within this age (12h, 30d), or since an RFC 3339 time or a date")
			fs.StringVar(&o.history.agent, "agent", "", "only calls of this agent's runs")
			fs.StringVar(&o.history.model, "model", "", "only calls of this model")
		},
		check: costArgs, run: (*app).cost}
}

func historyArgs(cmd *cobra.Command, o options) error {
	if err := noArgs(cmd, o); err != nil {
		return err
	}
	if o.history.limit < 0 {
		return usagef("--limit must be 0 (all) or more, got %d", o.history.limit)
	}
	return nil
}

// costDimensions are --by's values.
var costDimensions = map[string]bool{"namespace": true, "agent": true, "model": true, "day": true}

func costArgs(cmd *cobra.Command, o options) error {
	if err := noArgs(cmd, o); err != nil {
		return err
	}
	if len(o.history.by) == 0 {
		return usagef("--by needs at least one of namespace, agent, model, day")
	}
	for _, d := range o.history.by {
		if !costDimensions[d] {
			return usagef("--by %q: give namespace, agent, model or day", d)
		}
	}
	return nil
}

// fieldSelector joins the history's field terms.
func (h historyOptions) fieldSelector(terms ...[2]string) string {
	var out []string
	for _, t := range terms {
		if t[1] != "" {
			out = append(out, t[0]+"="+t[1])
		}
	}
	return strings.Join(out, ",")
}

func (a *app) history(ctx context.Context, _ client.Client, ns string, o options) error {
	h, err := historyclient.New(a.cfg)
	if err != nil {
		return err
	}
	if o.allNamespaces {
		ns = ""
	}
	opts := metav1.ListOptions{LabelSelector: o.history.selector, FieldSelector: o.history.fieldSelector(
		[2]string{"status.phase", o.history.phase}, [2]string{"spec.agent", o.history.agent}, [2]string{"status.finishedAfter", o.history.since})}
	var rows []historyclient.Row
	more := false
	for {
		opts.Limit = historyPage
		if left := o.history.limit - int64(len(rows)); o.history.limit > 0 && left < historyPage {
			opts.Limit = left
		}
		page, err := h.ListRecords(ctx, ns, opts)
		if err != nil {
			return historyListError(err)
		}
		now := a.now()
		for i := range page.Items {
			rows = append(rows, historyclient.RowOf(&page.Items[i], now))
		}
		opts.Continue = page.Continue
		if opts.Continue == "" {
			break
		}
		if o.history.limit > 0 && int64(len(rows)) >= o.history.limit {
			more = true
			break
		}
	}
	return a.printHistory(rows, ns == "", more, o.history.limit)
}

// historyListError words the history API's absence.
func historyListError(err error) error {
	if isMissingAPI(err) {
		return errNoHistory
	}
	return err
}

func (a *app) printHistory(rows []historyclient.Row, all, more bool, limit int64) error {
	if len(rows) == 0 {
		fmt.Fprintln(a.stderr, "No archived runs found.")
		return nil
	}
	tw := newTable(a.stdout)
	head := "NAME\tAGENT\tPHASE\tTOKENS\tCOST\tDURATION\tFINISHED"
	if all {
		head = "NAMESPACE\t" + head
	}
	fmt.Fprintln(tw, head)
	for _, r := range rows {
		line := fmt.Sprintf("%s\t%s\t%s\t%d\t%s\t%s\t%s", r.Name, transcript.OrDash(r.Agent), transcript.OrDash(r.Phase), r.Tokens, r.Cost, r.Duration, r.Finished)
		if all {
			line = r.Namespace + "\t" + line
		}
		fmt.Fprintln(tw, line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if more {
		fmt.Fprintf(a.stderr, "(the first %d: more with --limit, 0 for all)\n", limit)
	}
	return nil
}

func (a *app) cost(ctx context.Context, _ client.Client, ns string, o options) error {
	h, err := historyclient.New(a.cfg)
	if err != nil {
		return err
	}
	if o.allNamespaces {
		ns = ""
	}
	fs := o.history.fieldSelector([2]string{"spec.since", o.history.since}, [2]string{"spec.groupBy", strings.Join(o.history.by, "+")},
		[2]string{"spec.agent", o.history.agent}, [2]string{"spec.model", o.history.model})
	report, err := h.CostReport(ctx, ns, metav1.ListOptions{FieldSelector: fs})
	if err != nil {
		return historyListError(err)
	}
	return a.printCost(report, o.history.by)
}

func (a *app) printCost(report *hv1.AgentRunCostReportList, by []string) error {
	if len(report.Items) == 0 {
		fmt.Fprintln(a.stderr, "No model calls in that range.")
		return nil
	}
	tw := newTable(a.stdout)
	fmt.Fprintln(tw, strings.ToUpper(strings.Join(by, "\t"))+"\tCALLS\tTOKENS\tCOST\tUNPRICED CALLS")
	for i := range report.Items {
		g, t := report.Items[i].Spec, report.Items[i].Status
		values := map[string]string{"namespace": g.Namespace, "agent": g.Agent, "model": g.Model, "day": g.Day}
		cells := make([]string, 0, len(by))
		for _, d := range by {
			cells = append(cells, transcript.OrDash(values[d]))
		}
		cost := "$" + t.CostUSD
		if t.CostUSD == "unknown" {
			cost = "unknown (≥$" + t.PricedUSD + ")"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\n", strings.Join(cells, "\t"), t.Calls, t.TotalTokens, cost, t.UnpricedCalls)
	}
	return tw.Flush()
}
