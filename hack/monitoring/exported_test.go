package monitoring

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool/mcptest"
	"github.com/agentrun-dev/agentrun-operator/test/loadtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	loadtest.Cleanup()
	os.Exit(code)
}

// providers: the built-in scripted one, with a limit so its calls have a
// rate-limit bucket; one that needs a Secret nobody
// created (SecretMissing); an OpenAI-compatible one on a loopback port
// nobody listens on, whose failures feed its circuit.
const providersTOML = `
[providers.demo]
type = "scripted"
models = ["scripted-1"]
max_concurrent = 100

[providers.keyed]
type = "scripted"
models = ["k1"]
api_key_secret = {name = "missing-creds", key = "api-key"}

[providers.down]
type = "openai"
base_url = "http://127.0.0.1:%d/v1"
api_key_secret = {name = "down-key", key = "api-key"}
models = ["m1"]
`

// toolsAgent (name, url) calls a tool that answers and one that fails on
// the MCP server at url, one priced and one unpriced model turn.
const toolsAgent = `
[agent]
name = %q
[agent.title]
enabled = false
[mcp_servers.tracker]
url = %q
[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.work.script]]
text = "reading"
tool_calls = [{name = "read_doc", arguments = '{"id":"spec"}'}]
usage = {prompt = 100, completion = 10, cached = 20}
cost_usd = "0.001"
[[stages.work.script]]
text = "failing"
tool_calls = [{name = "fail_tool", arguments = '{}'}]
usage = {prompt = 120, completion = 12}
[[stages.work.script]]
complete = true
output = "done"
usage = {prompt = 130, completion = 5}
`

// oneCall is a one-stage agent on provider/model.
const oneCall = `
[agent]
name = %q
[agent.title]
enabled = false
[stages.only]
allow_complete = true
[stages.only.model]
models = [{provider = %q, model = %q}]
[[stages.only.script]]
complete = true
output = "done"
`

// TestExpressionsSelectExportedMetrics runs the manager binary against a
// real API server, drives runs through model calls (answered, priced,
// unpriced, failing), MCP tool calls (ok and failing), a wait on a person, a
// missing Secret and an egress refusal, scrapes /metrics over HTTP, and
// checks every expression of the dashboard and the rule file against what
// it exported: each parses, each metric it selects exists, each label it
// matches on is one the metric has. It also checks the other way round:
// every agentrun_ metric the manager exports is on the dashboard.
func TestExpressionsSelectExportedMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	exported, body, ns := scrapeDrivenManager(ctx, t)
	// The gauges this dashboard needed added to the manager show the runs
	// driven above: the run waiting on its interaction point, the failing
	// provider's circuit, the executor's queue.
	for _, want := range []string{
		fmt.Sprintf(`agentrun_runs_waiting_oldest_seconds{namespace=%q,needs_a_person="true",reason="InteractionPoint"} `, ns),
		fmt.Sprintf(`agentrun_circuit_open{namespace=%q,provider="down"} `, ns),
		"agentrun_executor_waiting_runs 0",
		`agentrun_model_bucket_calls{model="scripted-1",provider="demo",state="in_flight"} `,
		`agentrun_reconcile_errors_total{kind="terminal"} `,
		fmt.Sprintf(`agentrun_tool_policy_decisions_total{action="Audit",policy="%s/audit-reads",rule="audit-read-doc"} 1`, ns),
		fmt.Sprintf(`agentrun_quota_hard{quota="AgentRunQuota/%s/team",resource="activeRuns"} 50`, ns),
		"agentrun_store_up 1",
		fmt.Sprintf(`agentrun_runs_unarchived{namespace=%q} 0`, ns),
		`agentrun_archive_writes_total{outcome="failed"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the scrape has no %s", want)
		}
	}

	d := loadDashboard(t)
	exprs, err := d.Exprs()
	if err != nil {
		t.Fatal(err)
	}
	g, errs := LoadPrometheusRule(monitoringFile("prometheusrule.yaml"))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	exprs = append(exprs, RuleExprs(g)...)
	for _, err := range Check(exprs, exported) {
		t.Error(err)
	}
	selected := Selected(exprs)
	for name := range exported {
		if !strings.HasPrefix(name, "agentrun_") || strings.HasSuffix(name, "_sum") || strings.HasSuffix(name, "_count") {
			continue
		}
		if !selected[name] {
			t.Errorf("the manager exports %s but no dashboard panel or alert uses it", name)
		}
	}
}

// TestCheckCatchesMistakes: a misspelled metric, a label the metric does
// not have, an expression that does not parse and a histogram's family name
// (which is not a series) are each reported.
func TestCheckCatchesMistakes(t *testing.T) {
	exported, err := ParseExposition(strings.NewReader(`# TYPE agentrun_model_calls_total counter
agentrun_model_calls_total{provider="demo",outcome="ok"} 3
# TYPE agentrun_model_call_duration_seconds histogram
agentrun_model_call_duration_seconds_bucket{provider="demo",le="+Inf"} 3
agentrun_model_call_duration_seconds_sum{provider="demo"} 0.3
agentrun_model_call_duration_seconds_count{provider="demo"} 3
`))
	if err != nil {
		t.Fatal(err)
	}
	good := []Expr{
		{"ok", `sum by (outcome) (rate(agentrun_model_calls_total{provider="demo", instance=~".+"}[5m]))`},
		{"ok", `histogram_quantile(0.99, sum by (le) (rate(agentrun_model_call_duration_seconds_bucket{provider="demo"}[5m])))`},
	}
	if errs := Check(good, exported); len(errs) > 0 {
		t.Fatalf("correct expressions refused: %v", errs)
	}
	for _, bad := range []string{
		`rate(agentrun_model_cals_total[5m])`,
		`rate(agentrun_model_calls_total{provder="demo"}[5m])`,
		`sum by (provider (agentrun_model_calls_total)`,
		`rate(agentrun_model_call_duration_seconds[5m])`,
		`rate(agentrun_model_call_duration_seconds_bucket[$__rate_interval])`,
		`vector(1)`,
	} {
		if errs := Check([]Expr{{"bad", bad}}, exported); len(errs) == 0 {
			t.Errorf("%s passed the check", bad)
		}
	}
}

// scrapeDrivenManager returns what the scrape exported, its text, and the
// runs' namespace.
func scrapeDrivenManager(ctx context.Context, t *testing.T) (Exported, string, string) {
	t.Helper()
	c, err := loadtest.StartCluster()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	// On a database store (SQLite, a file in the manager's directory), so
	// the archive's metrics are exported too.
	dir := t.TempDir()
	m, err := c.StartManager(ctx, dir, "--store=sqlite:"+filepath.Join(dir, "agentrun.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(10 * time.Second) })
	closed, err := loadtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	srv := mcptest.New(t, mcptest.Options{})
	ns, err := c.NewNamespace(ctx, "monitoring")
	if err != nil {
		t.Fatal(err)
	}
	key := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "down-key"}, StringData: map[string]string{"api-key": "not-a-real-key"}}
	if err := c.Client.Create(ctx, key); err != nil {
		t.Fatal(err)
	}
	agents := map[string]string{
		loadtest.ProvidersConfigMap: fmt.Sprintf(providersTOML, closed),
		"tooling":                   fmt.Sprintf(toolsAgent, "tooling", srv.URL()),
		"waits":                     loadtest.WaitsForAPerson,
		"blocked":                   fmt.Sprintf(oneCall, "blocked", "keyed", "k1"),
		"down":                      fmt.Sprintf(oneCall, "down", "down", "m1"),
		// 127.0.0.2 is loopback outside the --egress-allow-cidr the
		// manager was given (127.0.0.1/32): refused.
		"refused": fmt.Sprintf(toolsAgent, "refused", "http://127.0.0.2:9/mcp"),
	}
	for name, body := range agents {
		file := "agent.toml"
		if name == loadtest.ProvidersConfigMap {
			file = "providers.toml"
		}
		if err := c.CreateConfigMap(ctx, ns, name, map[string]string{file: body}); err != nil {
			t.Fatal(err)
		}
	}
	until := map[string]func(*arv1.AgentRun) bool{
		"tooling": loadtest.IsComplete,
		"waits":   loadtest.IsWaitingForAPerson,
		"blocked": func(r *arv1.AgentRun) bool { return blockedOn(r) == arv1.BlockerSecretMissing },
		"refused": func(r *arv1.AgentRun) bool { return blockedOn(r) != "" },
		"down":    func(r *arv1.AgentRun) bool { return blockedOn(r) != "" },
	}
	// An Audit rule over the tooling run's read, so a policy decision is
	// counted.
	audit := &arv1.AgentToolPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "audit-reads"}, Spec: arv1.AgentToolPolicySpec{Rules: []arv1.ToolPolicyRule{
		{Name: "audit-read-doc", Match: `tool.name == "read_doc"`, Action: arv1.ToolPolicyAudit},
	}}}
	if err := c.Client.Create(ctx, audit); err != nil {
		t.Fatal(err)
	}
	// A quota of active runs (no database needed), so its gauges are set.
	slots := &arv1.AgentRunQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team"}, Spec: arv1.AgentRunQuotaSpec{Hard: arv1.QuotaHard{ActiveRuns: ptr.To[int32](50)}}}
	if err := c.Client.Create(ctx, slots); err != nil {
		t.Fatal(err)
	}
	for name := range until {
		run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: arv1.AgentRunSpec{Agent: name, Task: "exercise the metrics"}}
		if err := c.Client.Create(ctx, run); err != nil {
			t.Fatal(err)
		}
	}
	for name, ok := range until {
		waitForRun(ctx, t, c, types.NamespacedName{Namespace: ns, Name: name}, ok, m)
	}
	resp, err := http.Get(m.MetricsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", m.MetricsURL, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	exported, err := ParseExposition(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parsing %s: %v", m.MetricsURL, err)
	}
	return exported, string(body), ns
}

func blockedOn(r *arv1.AgentRun) arv1.SetupBlocker {
	if w := r.Status.WaitingOn; w != nil && w.Reason == arv1.WaitNeedsSetup {
		return w.Blocker
	}
	return ""
}

func waitForRun(ctx context.Context, t *testing.T, c *loadtest.Cluster, key types.NamespacedName, ok func(*arv1.AgentRun) bool, m *loadtest.Manager) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	run := &arv1.AgentRun{}
	for {
		err := c.Client.Get(ctx, key, run)
		if err == nil && ok(run) {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("run %s did not reach its state (err %v): phase %s waitingOn %+v conditions %+v\nmanager log:\n%s",
				key.Name, err, run.Status.Phase, run.Status.WaitingOn, run.Status.Conditions, m.LogTail(4096))
		}
		time.Sleep(250 * time.Millisecond)
	}
}
