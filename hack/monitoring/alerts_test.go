package monitoring

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

// alertRule builds the named alert of the rule file as Prometheus's rule
// manager would.
func alertRule(t *testing.T, name string) *rules.AlertingRule {
	t.Helper()
	g, errs := LoadPrometheusRule(monitoringFile("prometheusrule.yaml"))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var r *rulefmt.Rule
	for _, grp := range g.Groups {
		for i := range grp.Rules {
			if grp.Rules[i].Alert == name {
				r = &grp.Rules[i]
			}
		}
	}
	if r == nil {
		t.Fatalf("no alert %s in the rule file", name)
	}
	expr, err := Parser.ParseExpr(r.Expr)
	if err != nil {
		t.Fatal(err)
	}
	return rules.NewAlertingRule(r.Alert, expr, time.Duration(r.For), time.Duration(r.KeepFiringFor),
		labels.FromMap(r.Labels), labels.FromMap(r.Annotations), labels.EmptyLabels(), "", false,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// firing evaluates the alert over the series (promtool's load syntax, one
// sample a minute from time 0) once a minute for minutes, as a rule group
// with a 1m interval does, and returns the firing alerts' labels (their
// summary and runbook_url added, as rendered) after each evaluation.
func firing(t *testing.T, name, series string, minutes int) [][]map[string]string {
	t.Helper()
	st := promqltest.LoadedStorage(t, "load 1m\n"+strings.TrimLeft(series, "\n"))
	engine := promqltest.NewTestEngine(t, false, 0, 100000)
	rule := alertRule(t, name)
	query := rules.EngineQueryFunc(engine, st)
	var out [][]map[string]string
	for m := 0; m <= minutes; m++ {
		if _, err := rule.Eval(context.Background(), 0, time.Unix(0, 0).Add(time.Duration(m)*time.Minute), query, nil, 0); err != nil {
			t.Fatalf("%s at %dm: %v", name, m, err)
		}
		var now []map[string]string
		for _, a := range rule.ActiveAlerts() {
			if a.State != rules.StateFiring {
				continue
			}
			l := a.Labels.Map()
			l["summary"], l["runbook_url"] = a.Annotations.Get("summary"), a.Annotations.Get("runbook_url")
			now = append(now, l)
		}
		out = append(out, now)
	}
	return out
}

func labelsOf(alerts []map[string]string, key string) []string {
	var out []string
	for _, a := range alerts {
		out = append(out, a[key])
	}
	return out
}

// TestWaitingOnAPersonAlert: a run waiting on a person fires past an hour
// (the gauge grows a minute a minute), not before; a NeedsSetup run (left to
// AgentRunSetupBlocked) and a healthy sleeper never do.
func TestWaitingOnAPersonAlert(t *testing.T) {
	got := firing(t, "AgentRunWaitingOnAPerson", `
  agentrun_runs_waiting_oldest_seconds{instance="m0",namespace="a",reason="UserPrompt",needs_a_person="true"} 0+60x80
  agentrun_runs_waiting_oldest_seconds{instance="m0",namespace="a",reason="NeedsSetup",needs_a_person="true"} 7200+60x80
  agentrun_runs_waiting_oldest_seconds{instance="m1",namespace="b",reason="Sleeping",needs_a_person="false"} 7200+60x80
`, 80)
	for m, alerts := range got {
		switch {
		case m <= 60 && len(alerts) > 0:
			t.Errorf("at %dm (waited %ds) firing: %v", m, m*60, alerts)
		case m > 60 && (len(alerts) != 1 || alerts[0]["namespace"] != "a" || alerts[0]["reason"] != "UserPrompt"):
			t.Errorf("at %dm (waited %ds) firing %v, want namespace a reason UserPrompt only", m, m*60, alerts)
		}
	}
	if s := got[70][0]["summary"]; !strings.Contains(s, "UserPrompt") || !strings.Contains(s, " a ") {
		t.Errorf("summary %q does not name the namespace and reason", s)
	}
}

// TestCircuitOpenAlert: an open circuit fires after 2 minutes open, whichever
// replica reports it; a provider failing below the threshold (0) does not,
// and the alert resolves when the circuit closes.
func TestCircuitOpenAlert(t *testing.T) {
	got := firing(t, "AgentRunProviderCircuitOpen", `
  agentrun_circuit_open{instance="m0",namespace="a",provider="down"} 0 0 0 0 0 1 1 1 1 1 0 0 0 0 0 0 0
  agentrun_circuit_open{instance="m1",namespace="a",provider="down"} 0x16
  agentrun_circuit_open{instance="m0",namespace="a",provider="flaky"} 0x16
`, 16)
	for m, alerts := range got {
		want := m >= 7 && m <= 9
		if fired := len(alerts) == 1 && alerts[0]["provider"] == "down"; fired != want || len(alerts) > 1 {
			t.Errorf("at %dm firing %v, want firing for provider down: %v", m, labelsOf(alerts, "provider"), want)
		}
	}
}

// TestSetupBlockedAlert: blockers present for 15 minutes fire, with the
// runbook of the blocker's own section; fewer minutes do not.
func TestSetupBlockedAlert(t *testing.T) {
	got := firing(t, "AgentRunSetupBlocked", `
  agentrun_setup_blockers{instance="m0",namespace="a",blocker="SecretMissing"} 1x20
  agentrun_setup_blockers{instance="m0",namespace="b",blocker="AuthFailed"} 1x5 _x15
`, 20)
	for m, alerts := range got {
		if want := m >= 15; (len(alerts) == 1) != want || len(alerts) > 1 {
			t.Errorf("at %dm firing %v, want SecretMissing: %v", m, labelsOf(alerts, "blocker"), want)
		}
	}
	if u := got[16][0]["runbook_url"]; u != runbookBase+"secretmissing" {
		t.Errorf("runbook_url %q, want the SecretMissing section", u)
	}
}

// TestExecutorSaturatedAlert: busy at total for 10 minutes fires for that
// replica only.
func TestExecutorSaturatedAlert(t *testing.T) {
	got := firing(t, "AgentRunExecutorSaturated", `
  agentrun_executor_slots{instance="m0",state="busy"} 16x14
  agentrun_executor_slots{instance="m0",state="total"} 16x14
  agentrun_executor_slots{instance="m1",state="busy"} 15x14
  agentrun_executor_slots{instance="m1",state="total"} 16x14
`, 14)
	for m, alerts := range got {
		if want := m >= 10; (len(alerts) == 1 && alerts[0]["instance"] == "m0") != want || len(alerts) > 1 {
			t.Errorf("at %dm firing %v, want m0: %v", m, labelsOf(alerts, "instance"), want)
		}
	}
}

// TestUnwokenReconcilesAlert: one unwoken reconcile fires at once, and the
// alert resolves once the 15-minute window no longer holds the increase.
func TestUnwokenReconcilesAlert(t *testing.T) {
	got := firing(t, "AgentRunUnwokenReconciles", `
  agentrun_unwoken_reconciles_total{instance="m0"} 0 0 0 1x30
  agentrun_unwoken_reconciles_total{instance="m1"} 0x33
`, 33)
	for m, alerts := range got {
		if want := m >= 3 && m <= 16; (len(alerts) == 1 && alerts[0]["instance"] == "m0") != want || len(alerts) > 1 {
			t.Errorf("at %dm firing %v, want m0: %v", m, labelsOf(alerts, "instance"), want)
		}
	}
}

// TestQuotaNearlyUsedAlert: a quota's limit used to 80% for 5 minutes
// fires for that quota and resource; 79% does not, nor a limit of 0 (a
// quota that refuses everything is not nearly used, it is set so).
func TestQuotaNearlyUsedAlert(t *testing.T) {
	got := firing(t, "AgentRunQuotaNearlyUsed", `
  agentrun_quota_used{instance="m0",quota="ClusterAgentRunQuota/team",resource="cost"} 100 150 160x12
  agentrun_quota_hard{instance="m0",quota="ClusterAgentRunQuota/team",resource="cost"} 200x14
  agentrun_quota_used{instance="m0",quota="AgentRunQuota/a/slots",resource="activeRuns"} 79x14
  agentrun_quota_hard{instance="m0",quota="AgentRunQuota/a/slots",resource="activeRuns"} 100x14
  agentrun_quota_used{instance="m0",quota="AgentRunQuota/a/closed",resource="runs"} 0x14
  agentrun_quota_hard{instance="m0",quota="AgentRunQuota/a/closed",resource="runs"} 0x14
`, 14)
	for m, alerts := range got {
		want := m >= 7
		if fired := len(alerts) == 1 && alerts[0]["quota"] == "ClusterAgentRunQuota/team" && alerts[0]["resource"] == "cost"; fired != want || len(alerts) > 1 {
			t.Errorf("at %dm firing %v, want the team's cost: %v", m, labelsOf(alerts, "quota"), want)
		}
	}
	if s := got[10][0]["summary"]; !strings.Contains(s, "ClusterAgentRunQuota/team") || !strings.Contains(s, "80%") || !strings.Contains(s, "cost") {
		t.Errorf("summary %q", s)
	}
}

// TestStoreUnavailableAlert: a replica that has known the store down for 5
// minutes fires; one down for 4 minutes, then up again, never does.
func TestStoreUnavailableAlert(t *testing.T) {
	got := firing(t, "AgentRunStoreUnavailable", `
  agentrun_store_up{instance="m0"} 1 0x12
  agentrun_store_up{instance="m1"} 1 0 0 0 0 1x8
`, 12)
	for m, alerts := range got {
		want := m >= 6
		if fired := len(alerts) == 1 && alerts[0]["instance"] == "m0"; fired != want || len(alerts) > 1 {
			t.Errorf("at %dm firing %v, want m0: %v", m, labelsOf(alerts, "instance"), want)
		}
	}
}

// TestArchiveBehindAlert: finished runs of a namespace left unarchived
// for 30 minutes fire for that namespace; a backlog archived within
// minutes (an upgrade's, a short outage's) never does.
func TestArchiveBehindAlert(t *testing.T) {
	got := firing(t, "AgentRunArchiveBehind", `
  agentrun_runs_unarchived{instance="m0",namespace="a"} 0 2x40
  agentrun_runs_unarchived{instance="m0",namespace="b"} 0 500 300 100 0x38
`, 40)
	for m, alerts := range got {
		want := m >= 31
		if fired := len(alerts) == 1 && alerts[0]["namespace"] == "a"; fired != want || len(alerts) > 1 {
			t.Errorf("at %dm firing %v, want a: %v", m, labelsOf(alerts, "namespace"), want)
		}
	}
}
