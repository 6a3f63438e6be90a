package controllers_test

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool/mcptest"
)

// TestMetricsShowTheRuns scrapes the running manager's metrics endpoint and
// finds the runs, waits, blockers, tokens and cost the test created.
func TestMetricsShowTheRuns(t *testing.T) {
	port := freePort(t)
	startManager(t, managerOpts{metricsAddr: fmt.Sprintf("127.0.0.1:%d", port), steps: 7})
	ns := newNamespace(t)
	createConfigMap(t, ns, "triple", map[string]string{"agent.toml": threeStage})
	createConfigMap(t, ns, "single", map[string]string{"agent.toml": oneStage})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders + keyedProviders})
	srv := mcptest.New(t, mcptest.Options{})
	createConfigMap(t, ns, "tooling", map[string]string{"agent.toml": strings.Replace(
		toolAgent(srv.URL(), "", "", `read_doc {"id":"m"}`, `fail_tool {}`), "[mcp_servers.tracker]", "[mcp_servers.metered]", 1)})
	createRun(t, ns, "done", "triple")
	createRun(t, ns, "blocked", "single")
	createRun(t, ns, "r", "tooling")
	waitFor(t, ns, "r", 30*time.Second, "the tool run Complete", phaseIs(arv1.PhaseComplete))
	waitFor(t, ns, "done", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	waitFor(t, ns, "blocked", 30*time.Second, "SecretMissing", blockedOn(arv1.BlockerSecretMissing))

	want := []string{
		fmt.Sprintf(`agentrun_runs{namespace=%q,phase="Complete"} 2`, ns),
		fmt.Sprintf(`agentrun_runs{namespace=%q,phase="WaitingInput"} 1`, ns),
		fmt.Sprintf(`agentrun_runs_waiting{namespace=%q,needs_a_person="true",reason="NeedsSetup"} 1`, ns),
		fmt.Sprintf(`agentrun_setup_blockers{blocker="SecretMissing",namespace=%q} 1`, ns),
		fmt.Sprintf(`agentrun_tokens_total{agent="triple",kind="prompt",namespace=%q} 470`, ns),
		fmt.Sprintf(`agentrun_tokens_total{agent="triple",kind="completion",namespace=%q} 85`, ns),
		fmt.Sprintf(`agentrun_cost_usd_total{agent="triple",namespace=%q} 0.0065`, ns),
		`agentrun_executor_slots{state="total"} 7`,
		`agentrun_model_call_duration_seconds_count{provider="demo"}`,
		`agentrun_model_calls_total{outcome="ok",provider="demo"}`,
		`agentrun_tool_calls_total{effect="read",outcome="ok",server="metered"} 1`,
		`agentrun_tool_calls_total{effect="read",outcome="tool_error",server="metered"} 1`,
		`agentrun_tool_call_duration_seconds_count{server="metered"} 2`,
	}
	var body string
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
		}
		missing := []string{}
		for _, w := range want {
			if !strings.Contains(body, w) {
				missing = append(missing, w)
			}
		}
		if counted(body, "agentrun_wake_wait_seconds_count") <= 0 {
			missing = append(missing, "agentrun_wake_wait_seconds_count above 0")
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics lack %q", missing)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// counted is the value of an unlabelled counter or count in a scrape
// (-1 when it is not there).
func counted(body, name string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return f
			}
		}
	}
	return -1
}
