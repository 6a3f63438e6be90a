// Package monitoring reads config/monitoring (the Grafana dashboard and the
// PrometheusRule) and checks every PromQL expression in it against a set of
// metrics a manager exported, with Prometheus's own parsers.
package monitoring

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// Parser is the PromQL parser with Prometheus's default options (no
// experimental functions): what a stock Prometheus accepts.
var Parser = parser.NewParser(parser.Options{})

// Expr is one PromQL expression and where it was found.
type Expr struct {
	Where  string
	PromQL string
}

// Dashboard is the part of a Grafana dashboard the checks read.
type Dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// Panel is one dashboard panel (rows are panels of type "row").
type Panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []Target        `json:"targets"`
}

// Target is one query of a panel.
type Target struct {
	RefID      string          `json:"refId"`
	Datasource json.RawMessage `json:"datasource"`
	Expr       string          `json:"expr"`
}

// Variable is a template variable; Query is a string or {"query": ...}.
type Variable struct {
	Name  string          `json:"name"`
	Type  string          `json:"type"`
	Query json.RawMessage `json:"query"`
}

// LoadDashboard reads a dashboard JSON file, refusing unknown syntax.
func LoadDashboard(path string) (*Dashboard, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &d, nil
}

// Grafana's variables that stand for a duration, replaced by one before
// parsing (the parser does not know them).
var durationVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// labelValues is Grafana's label_values(selector, label) variable query.
var labelValues = regexp.MustCompile(`^\s*label_values\((.+),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)

// queryResult is Grafana's query_result(expr) variable query.
var queryResult = regexp.MustCompile(`^\s*query_result\((.+)\)\s*$`)

// Exprs lists every PromQL expression of the dashboard: each target's expr
// and each query variable's query (the selector of label_values, the
// expression of query_result).
func (d *Dashboard) Exprs() ([]Expr, error) {
	var out []Expr
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			out = append(out, Expr{Where: fmt.Sprintf("panel %d %q target %s", p.ID, p.Title, t.RefID), PromQL: durationVars.Replace(t.Expr)})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, err := variableQuery(v.Query)
		if err != nil {
			return nil, fmt.Errorf("variable %s: %w", v.Name, err)
		}
		if m := labelValues.FindStringSubmatch(q); m != nil {
			q = m[1]
		} else if m := queryResult.FindStringSubmatch(q); m != nil {
			q = m[1]
		}
		out = append(out, Expr{Where: "variable " + v.Name, PromQL: durationVars.Replace(q)})
	}
	return out, nil
}

func variableQuery(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var o struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", err
	}
	return o.Query, nil
}

// LoadPrometheusRule reads a monitoring.coreos.com/v1 PrometheusRule and
// validates its spec as Prometheus rule groups with rulefmt.Parse, what
// `promtool check rules` runs. errs lists every problem found.
func LoadPrometheusRule(path string) (*rulefmt.RuleGroups, []error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, []error{err}
	}
	var obj struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Metadata   json.RawMessage `json:"metadata"`
		Spec       json.RawMessage `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(b, &obj, yaml.DisallowUnknownFields); err != nil {
		return nil, []error{fmt.Errorf("%s: %w", path, err)}
	}
	if obj.APIVersion != "monitoring.coreos.com/v1" || obj.Kind != "PrometheusRule" {
		return nil, []error{fmt.Errorf("%s is %s %s, want monitoring.coreos.com/v1 PrometheusRule", path, obj.APIVersion, obj.Kind)}
	}
	spec, err := yaml.JSONToYAML(obj.Spec)
	if err != nil {
		return nil, []error{err}
	}
	return rulefmt.Parse(spec, false, model.LegacyValidation, Parser, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// RuleExprs lists every rule's expression.
func RuleExprs(g *rulefmt.RuleGroups) []Expr {
	var out []Expr
	for _, grp := range g.Groups {
		for _, r := range grp.Rules {
			out = append(out, Expr{Where: fmt.Sprintf("group %s rule %s%s", grp.Name, r.Alert, r.Record), PromQL: r.Expr})
		}
	}
	return out
}

// Exported is what a scrape showed: each sample name with the label names
// its series carry. A histogram family X is X_bucket (with le), X_sum and
// X_count; a summary X is X (with quantile), X_sum and X_count.
type Exported map[string]map[string]bool

// ParseExposition reads the Prometheus text exposition format.
func ParseExposition(r io.Reader) (Exported, error) {
	tp := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := tp.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	out := Exported{}
	add := func(name string, lbls map[string]bool, extra ...string) {
		set := out[name]
		if set == nil {
			set = map[string]bool{}
			out[name] = set
		}
		for l := range lbls {
			set[l] = true
		}
		for _, l := range extra {
			set[l] = true
		}
	}
	for name, f := range fams {
		for _, m := range f.Metric {
			lbls := map[string]bool{}
			for _, l := range m.Label {
				lbls[l.GetName()] = true
			}
			switch f.GetType().String() {
			case "HISTOGRAM", "GAUGE_HISTOGRAM":
				add(name+"_bucket", lbls, "le")
				add(name+"_sum", lbls)
				add(name+"_count", lbls)
			case "SUMMARY":
				add(name, lbls, "quantile")
				add(name+"_sum", lbls)
				add(name+"_count", lbls)
			default:
				add(name, lbls)
			}
		}
	}
	return out, nil
}

// TargetLabels are the labels Prometheus adds to every scraped series (job
// and instance always; pod, namespace, container and endpoint through a
// PodMonitor), so selectors may match them on any metric.
var TargetLabels = map[string]bool{"job": true, "instance": true, "pod": true, "namespace": true, "container": true, "endpoint": true}

// Check parses each expression and checks that every metric it selects is
// in exported and that every label it matches on is one the metric carries
// (or a target label). It returns one error per problem.
func Check(exprs []Expr, exported Exported) []error {
	var errs []error
	for _, e := range exprs {
		ast, err := Parser.ParseExpr(e.PromQL)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q does not parse: %w", e.Where, e.PromQL, err))
			continue
		}
		selectors := 0
		parser.Inspect(ast, func(n parser.Node, _ []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			selectors++
			errs = append(errs, checkSelector(e, vs, exported)...)
			return nil
		})
		if selectors == 0 {
			errs = append(errs, fmt.Errorf("%s: %q selects no metric", e.Where, e.PromQL))
		}
	}
	return errs
}

func checkSelector(e Expr, vs *parser.VectorSelector, exported Exported) []error {
	name := vs.Name
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
			name = m.Value
		}
	}
	if name == "" {
		return []error{fmt.Errorf("%s: selector %s names no metric", e.Where, vs)}
	}
	have, ok := exported[name]
	if !ok {
		return []error{fmt.Errorf("%s: metric %s is not exported by the manager", e.Where, name)}
	}
	var errs []error
	for _, m := range vs.LabelMatchers {
		if m.Name != labels.MetricName && !have[m.Name] && !TargetLabels[m.Name] {
			errs = append(errs, fmt.Errorf("%s: metric %s has no label %q (it has %s)", e.Where, name, m.Name, strings.Join(sortedKeys(have), ", ")))
		}
	}
	return errs
}

// Selected is the set of metric names the expressions select.
func Selected(exprs []Expr) map[string]bool {
	out := map[string]bool{}
	for _, e := range exprs {
		ast, err := Parser.ParseExpr(e.PromQL)
		if err != nil {
			continue
		}
		for _, sel := range parser.ExtractSelectors(ast) {
			for _, m := range sel {
				if m.Name == labels.MetricName {
					out[m.Value] = true
				}
			}
		}
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
