package monitoring

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

func monitoringFile(name string) string {
	return filepath.Join(testenv.RepoRoot(), "config", "monitoring", name)
}

func loadDashboard(t *testing.T) *Dashboard {
	t.Helper()
	d, err := LoadDashboard(monitoringFile("grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDashboardIsWellFormed: the dashboard is JSON with a uid, its panel
// ids are unique, and every panel but a row (layout only) has a data source
// and at least one query, each with its own data source.
func TestDashboardIsWellFormed(t *testing.T) {
	raw, err := os.ReadFile(monitoringFile("grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(raw) {
		t.Fatal("grafana-dashboard.json is not valid JSON")
	}
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q title %q: both are needed for a stable link", d.UID, d.Title)
	}
	seen := map[int]string{}
	queries := 0
	for _, p := range d.Panels {
		if prev, dup := seen[p.ID]; dup || p.ID <= 0 {
			t.Errorf("panel %q has id %d (already used by %q, or not positive)", p.Title, p.ID, prev)
		}
		seen[p.ID] = p.Title
		if p.Type == "row" {
			if len(p.Targets) > 0 {
				t.Errorf("row %q has queries", p.Title)
			}
			continue
		}
		if !hasDatasource(p.Datasource) {
			t.Errorf("panel %d %q has no datasource", p.ID, p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %d %q has no query", p.ID, p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" || !hasDatasource(tg.Datasource) {
				t.Errorf("panel %d %q target %s: expr %q, datasource %s", p.ID, p.Title, tg.RefID, tg.Expr, tg.Datasource)
			}
			queries++
		}
	}
	if queries < 20 {
		t.Errorf("%d queries in the dashboard; its panels were lost", queries)
	}
}

func hasDatasource(raw json.RawMessage) bool {
	var ds struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	}
	return json.Unmarshal(raw, &ds) == nil && ds.Type == "prometheus" && ds.UID != ""
}

// TestRuleFileIsValid: the PrometheusRule's groups pass rulefmt.Parse (the
// check of `promtool check rules`), and every alert has a severity, a
// summary, a description and a runbook_url.
func TestRuleFileIsValid(t *testing.T) {
	g, errs := LoadPrometheusRule(monitoringFile("prometheusrule.yaml"))
	for _, err := range errs {
		t.Error(err)
	}
	if g == nil {
		return
	}
	alerts := 0
	for _, grp := range g.Groups {
		for _, r := range grp.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			for _, k := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[k] == "" {
					t.Errorf("alert %s has no %s annotation", r.Alert, k)
				}
			}
			if r.Labels["severity"] == "" {
				t.Errorf("alert %s has no severity label", r.Alert)
			}
		}
	}
	if alerts < 7 {
		t.Errorf("%d alerts, want the 7 of docs/observability.md", alerts)
	}
}

// TestRuleFileRejectsABrokenRule: the same check refuses an expression
// that does not parse and an unknown field, so a pass above means
// something.
func TestRuleFileRejectsABrokenRule(t *testing.T) {
	for name, rule := range map[string]string{
		"bad expr":      "    - alert: X\n      expr: sum by (namespace (agentrun_runs)\n",
		"unknown field": "    - alert: X\n      expr: agentrun_runs > 0\n      fore: 5m\n",
	} {
		path := filepath.Join(t.TempDir(), "rule.yaml")
		doc := "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata: {name: x}\nspec:\n  groups:\n  - name: g\n    rules:\n" + rule
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, errs := LoadPrometheusRule(path); len(errs) == 0 {
			t.Errorf("%s: accepted", name)
		}
	}
}

// anchor is the id GitHub gives a Markdown heading.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func headingAnchors(t *testing.T, doc string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), doc))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			out[anchor(h)] = true
		} else if h, ok := strings.CutPrefix(line, "### "); ok {
			out[anchor(h)] = true
		}
	}
	return out
}

// blockers are the SetupBlocker values of the CRD's enum.
func blockers(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "crd", "bases", "agentrun.dev_agentruns.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd map[string]any
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	var found []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if bl, ok := v["blocker"].(map[string]any); ok && found == nil {
				for _, e := range bl["enum"].([]any) {
					found = append(found, e.(string))
				}
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(crd)
	if len(found) < 10 {
		t.Fatalf("found %d blockers in the CRD's enum", len(found))
	}
	return found
}

var runbookBase = "https://github.com/agentrun-dev/agentrun-operator/blob/main/docs/troubleshooting.md#"

// TestRunbooksExist: every runbook_url points at a section of
// docs/troubleshooting.md; the setup alert's, templated on the blocker,
// at the section of each blocker the CRD knows.
func TestRunbooksExist(t *testing.T) {
	g, errs := LoadPrometheusRule(monitoringFile("prometheusrule.yaml"))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	have := headingAnchors(t, "docs/troubleshooting.md")
	tmpl := regexp.MustCompile(`\{\{\s*\$labels\.blocker\s*\|\s*toLower\s*\}\}`)
	for _, grp := range g.Groups {
		for _, r := range grp.Rules {
			u := r.Annotations["runbook_url"]
			frag, ok := strings.CutPrefix(u, runbookBase)
			if !ok {
				t.Errorf("alert %s: runbook_url %q is not under %s", r.Alert, u, runbookBase)
				continue
			}
			targets := []string{frag}
			if tmpl.MatchString(frag) {
				targets = nil
				for _, b := range blockers(t) {
					targets = append(targets, tmpl.ReplaceAllString(frag, strings.ToLower(b)))
				}
			}
			for _, a := range targets {
				if !have[a] {
					t.Errorf("alert %s: docs/troubleshooting.md has no section #%s", r.Alert, a)
				}
			}
		}
	}
}

// TestKustomizeRenders: `kubectl kustomize config/monitoring` (the real
// kubectl) renders the dashboard ConfigMap for Grafana's sidecar, holding
// the dashboard file unchanged, beside the PodMonitor and PrometheusRule,
// every namespaced object in agentrun-system.
func TestKustomizeRenders(t *testing.T) {
	out, err := exec.Command(testenv.KubectlPath(), "kustomize", filepath.Join(testenv.RepoRoot(), "config", "monitoring")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v", err)
	}
	dashboard, err := os.ReadFile(monitoringFile("grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string            `json:"name"`
				Namespace string            `json:"namespace"`
				Labels    map[string]string `json:"labels"`
			} `json:"metadata"`
			Data map[string]string `json:"data"`
		}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatal(err)
		}
		kinds[obj.Kind] = true
		if clusterScoped := strings.HasPrefix(obj.Kind, "Cluster"); clusterScoped != (obj.Metadata.Namespace != "agentrun-system") {
			t.Errorf("%s %s in namespace %q, want agentrun-system", obj.Kind, obj.Metadata.Name, obj.Metadata.Namespace)
		}
		if obj.Kind == "ConfigMap" {
			if obj.Metadata.Labels["grafana_dashboard"] != "1" {
				t.Errorf("dashboard ConfigMap labels %v lack grafana_dashboard: \"1\"", obj.Metadata.Labels)
			}
			if obj.Data["agentrun-operator.json"] != string(dashboard) {
				t.Error("the ConfigMap's agentrun-operator.json is not grafana-dashboard.json")
			}
		}
	}
	for _, k := range []string{"ConfigMap", "PodMonitor", "PrometheusRule"} {
		if !kinds[k] {
			t.Errorf("no %s rendered (got %v)", k, kinds)
		}
	}
}
