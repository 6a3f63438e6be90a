package v1alpha1_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

const scheduleManifest = `apiVersion: agentrun.dev/v1alpha1
kind: AgentRunSchedule
metadata:
  name: nightly
spec:
  schedule: %q
  timeZone: %q
  template:
    spec:
      agent: triage
      task: triage the new issues
`

// TestKubectlApplyRefusesBadSchedules: the CRD's rules refuse a bad cron
// expression or time zone at apply time, naming the field, without the
// manager (or a webhook) running.
func TestKubectlApplyRefusesBadSchedules(t *testing.T) {
	ns := newNamespace(t)
	dir := t.TempDir()
	apply := func(schedule, tz string) (string, error) {
		t.Helper()
		path := filepath.Join(dir, "s.yaml")
		body := strings.Replace(strings.Replace(scheduleManifest, "%q", quote(schedule), 1), "%q", quote(tz), 1)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return testenv.Kubectl(kubeconfig, "apply", "--dry-run=server", "-f", path, "-n", ns)
	}
	refused := []struct{ name, schedule, tz, field, says string }{
		{"three fields", "* * *", "UTC", "spec.schedule", "5 fields"},
		{"seven fields", "0 0 0 * * * *", "UTC", "spec.schedule", "5 fields"},
		{"a stray character", "0 9 * * 1;rm", "UTC", "spec.schedule", "5 fields"},
		{"CRON_TZ prefix", "CRON_TZ=Europe/Berlin 0 9 * * *", "UTC", "spec.schedule", "CRON_TZ"},
		{"unknown descriptor", "@fortnightly", "UTC", "spec.schedule", "descriptor"},
		{"zone with spaces", "0 9 * * *", "Europe Berlin", "spec.timeZone", "IANA"},
		{"the manager's local zone", "0 9 * * *", "Local", "spec.timeZone", "IANA"},
		{"unknown zone", "0 9 * * *", "Mars/Olympus_Mons", "spec.timeZone", ""},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			out, err := apply(c.schedule, c.tz)
			if err == nil {
				t.Fatalf("kubectl apply accepted schedule %q tz %q: %s", c.schedule, c.tz, out)
			}
			if !strings.Contains(out, c.field) || !strings.Contains(out, c.says) {
				t.Fatalf("kubectl said %q, want %q naming %s", out, c.says, c.field)
			}
		})
	}
	for _, ok := range [][2]string{{"0 9 * * MON-FRI", "Europe/Berlin"}, {"*/2 * * * * *", "UTC"}, {"@every 2s", "America/New_York"}, {"@daily", "Asia/Kolkata"}} {
		if out, err := apply(ok[0], ok[1]); err != nil || !strings.Contains(out, "created (server dry run)") {
			t.Errorf("schedule %q tz %q refused: %v %s", ok[0], ok[1], err, out)
		}
	}
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

// TestKubectlGetScheduleColumns: `kubectl get agentrunschedules` shows
// SCHEDULE, SUSPEND, ACTIVE, LAST, NEXT and AGE from the schedule's spec
// and status, and -o wide adds READY (the Ready condition's reason).
func TestKubectlGetScheduleColumns(t *testing.T) {
	ns := newNamespace(t)
	ctx := testCtx(t)
	s := &arv1.AgentRunSchedule{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly"},
		Spec: arv1.AgentRunScheduleSpec{Schedule: "0 9 * * MON-FRI", Suspend: true,
			Template: arv1.AgentRunTemplate{Spec: arv1.AgentRunSpec{Agent: "triage", Task: "triage the new issues"}}},
	}
	if err := k8sClient.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	last := metav1.NewTime(time.Now().Add(-5 * time.Minute).Truncate(time.Second))
	next := metav1.NewTime(time.Date(2031, 1, 6, 9, 0, 0, 0, time.UTC))
	s.Status = arv1.AgentRunScheduleStatus{Active: []string{"nightly-1", "nightly-2"}, ActiveCount: 2, LastScheduleTime: &last, NextScheduleTime: &next,
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Scheduled", Message: "ok", LastTransitionTime: last}}}
	if err := k8sClient.Status().Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	header := []string{"NAME", "SCHEDULE", "SUSPEND", "ACTIVE", "LAST", "NEXT", "AGE"}
	before := time.Now()
	rows := parseTable(t, kubectl(t, "get", "agentrunschedules", "-n", ns), header)
	after := time.Now()
	row := rows["nightly"]
	lastCells := []string{duration.HumanDuration(before.Sub(last.Time)), duration.HumanDuration(after.Sub(last.Time))}
	if row["SCHEDULE"] != "0 9 * * MON-FRI" || row["SUSPEND"] != "true" || row["ACTIVE"] != "2" || !slices.Contains(lastCells, row["LAST"]) || row["NEXT"] != "2031-01-06T09:00:00Z" {
		t.Errorf("row = %v, want the schedule, suspended, 2 active, last %q, next 2031-01-06T09:00:00Z", row, lastCells)
	}
	wide := parseTable(t, kubectl(t, "get", "ars", "-o", "wide", "-n", ns), append(slices.Clone(header[:6]), "READY", "AGE"))
	if got := wide["nightly"]["READY"]; got != "Scheduled" {
		t.Errorf("-o wide READY = %q, want Scheduled", got)
	}
}

// TestKubectlGetScheduleShowsFalseAndZero: a schedule that is not
// suspended and has no active run reads SUSPEND false and ACTIVE 0, as
// CronJob's columns do, not blank cells: suspend is defaulted, and
// activeCount is too, also after a status patch takes it from 2 back to
// none (the manager's JSON merge patch sends null for a zero it omits).
func TestKubectlGetScheduleShowsFalseAndZero(t *testing.T) {
	ns := newNamespace(t)
	ctx := testCtx(t)
	s := &arv1.AgentRunSchedule{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly"},
		Spec: arv1.AgentRunScheduleSpec{Schedule: "0 9 * * MON-FRI",
			Template: arv1.AgentRunTemplate{Spec: arv1.AgentRunSpec{Agent: "triage", Task: "triage the new issues"}}},
	}
	if err := k8sClient.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	at := metav1.NewTime(time.Now().Truncate(time.Second))
	s.Status = arv1.AgentRunScheduleStatus{Active: []string{"nightly-1", "nightly-2"}, ActiveCount: 2,
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Scheduled", Message: "ok", LastTransitionTime: at}}}
	if err := k8sClient.Status().Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	header := []string{"NAME", "SCHEDULE", "SUSPEND", "ACTIVE", "LAST", "NEXT", "AGE"}
	if row := parseTable(t, kubectl(t, "get", "agentrunschedules", "-n", ns), header)["nightly"]; row["SUSPEND"] != "false" || row["ACTIVE"] != "2" {
		t.Errorf("row = %v, want SUSPEND false and ACTIVE 2", row)
	}
	before := s.DeepCopy()
	s.Status.Active, s.Status.ActiveCount = nil, 0
	if err := k8sClient.Status().Patch(ctx, s, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	if row := parseTable(t, kubectl(t, "get", "agentrunschedules", "-n", ns), header)["nightly"]; row["SUSPEND"] != "false" || row["ACTIVE"] != "0" {
		t.Errorf("row = %v, want SUSPEND false and ACTIVE 0, as CronJob shows", row)
	}
	out := kubectl(t, "get", "ars", "nightly", "-n", ns, "-o", "jsonpath={.spec.suspend} {.status.activeCount} {.status.missedCount}")
	if out != "false 0 0" {
		t.Errorf("suspend, activeCount, missedCount = %q, want written as false 0 0", out)
	}
}
