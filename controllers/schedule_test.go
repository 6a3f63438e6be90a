package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/controllers/schedules"
	"github.com/agentrun-dev/agentrun-operator/internal/providers/providertest"
	"github.com/agentrun-dev/agentrun-operator/internal/schedule"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
)

// scheduledAgent is one stage that completes on the model's complete
// call; no title call, so each run makes exactly one model call.
const scheduledAgent = `[agent]
name = "nightly"
[agent.title]
enabled = false
[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "oa", model = "gpt-x"}]
`

// scheduleSetup makes a namespace whose runs call a loopback OpenAI
// server answering every call with complete after delay.
func scheduleSetup(t *testing.T, delay time.Duration) (string, *providertest.Server) {
	t.Helper()
	ns := newNamespace(t)
	oa := providertest.NewOpenAIServer(t)
	oa.Push(providertest.Reply{ToolCall: &providertest.ToolCall{Name: "complete", Args: `{"output":"done"}`}, PromptTokens: 10, CompletionTokens: 1, Delay: delay})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": providerConfig(openAIEntry("oa", oa.URL, false))})
	createSecret(t, ns, "oa-key", map[string]string{"api-key": "sk-test"})
	createConfigMap(t, ns, "nightly", map[string]string{"agent.toml": scheduledAgent})
	return ns, oa
}

func createSchedule(t *testing.T, ns, name string, mutate func(*arv1.AgentRunSchedule)) *arv1.AgentRunSchedule {
	t.Helper()
	s := &arv1.AgentRunSchedule{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: arv1.AgentRunScheduleSpec{
			Schedule: "@every 2s",
			Template: arv1.AgentRunTemplate{
				Metadata: arv1.TemplateMetadata{Labels: map[string]string{"team": "triage"}},
				Spec:     arv1.AgentRunSpec{Agent: "nightly", Task: "triage the new issues"},
			},
		},
	}
	if mutate != nil {
		mutate(s)
	}
	if err := k8s.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A schedule left behind would go on creating runs under every
		// later test's manager (and keep etcd's revision moving).
		ctx := context.Background()
		_ = k8s.Delete(ctx, s)
		_ = k8s.DeleteAllOf(ctx, &arv1.AgentRun{}, client.InNamespace(ns), client.MatchingLabels{"agentrun.dev/schedule": name})
	})
	return s
}

func getSchedule(t *testing.T, ns, name string) *arv1.AgentRunSchedule {
	t.Helper()
	s := &arv1.AgentRunSchedule{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// scheduleRuns lists the runs a schedule created, oldest name first.
func scheduleRuns(t *testing.T, ns, name string) []arv1.AgentRun {
	t.Helper()
	var list arv1.AgentRunList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{arv1.LabelSchedule: name}); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b arv1.AgentRun) int { return strings.Compare(a.Name, b.Name) })
	return list.Items
}

// poke makes the schedule's controller reconcile it now (a fake clock's
// step wakes nothing by itself).
func poke(t *testing.T, ns, name string) {
	t.Helper()
	s := getSchedule(t, ns, name)
	patch := client.MergeFrom(s.DeepCopy())
	metav1.SetMetaDataAnnotation(&s.ObjectMeta, "test.agentrun.dev/poke", time.Now().Format(time.RFC3339Nano))
	if err := k8s.Patch(context.Background(), s, patch); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last: %s", what, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func activeOf(runs []arv1.AgentRun) []string {
	var out []string
	for _, r := range runs {
		if !r.Status.Phase.IsTerminal() {
			out = append(out, r.Name)
		}
	}
	return out
}

func namesOf(runs []arv1.AgentRun) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.Name + "(" + string(r.Status.Phase) + ")"
	}
	return out
}

// waitRunCount waits until the schedule has n runs.
func waitRunCount(t *testing.T, ns, name string, n int) []arv1.AgentRun {
	t.Helper()
	var runs []arv1.AgentRun
	eventually(t, 20*time.Second, fmt.Sprintf("%d runs", n), func() (bool, string) {
		runs = scheduleRuns(t, ns, name)
		return len(runs) == n, fmt.Sprint(namesOf(runs))
	})
	return runs
}

// TestScheduleForbidNeverTwoActive runs on the real clock: a schedule
// every 2 s whose runs take 5 s (the model answers after 5 s). Forbid
// skips the times that come while a run is active, so there is never
// more than one, and runs still follow one another.
func TestScheduleForbidNeverTwoActive(t *testing.T) {
	startManager(t, managerOpts{})
	ns, _ := scheduleSetup(t, 5*time.Second)
	createSchedule(t, ns, "forbid", func(s *arv1.AgentRunSchedule) { s.Spec.ConcurrencyPolicy = arv1.ConcurrencyForbid })

	// Watch until two runs have completed one after the other (about 13 s:
	// 2 s to the first time, 5 s each), failing at once if two are ever
	// active together.
	deadline := time.Now().Add(90 * time.Second)
	maxActive, completed := 0, 0
	for completed < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d runs completed in 90 s: %v", completed, namesOf(scheduleRuns(t, ns, "forbid")))
		}
		runs := scheduleRuns(t, ns, "forbid")
		a := activeOf(runs)
		if len(a) > 1 {
			t.Fatalf("two runs active at once under Forbid: %v", namesOf(runs))
		}
		maxActive = max(maxActive, len(a))
		completed = 0
		for _, r := range runs {
			if r.Status.Phase == arv1.PhaseComplete {
				completed++
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if maxActive != 1 {
		t.Fatalf("max active %d, want 1", maxActive)
	}
	// Two 5 s runs one after the other took at least 12 s, six times of
	// the schedule: Forbid skipped the ones that came during a run, so
	// there are the two completed runs and at most the one now active.
	if runs := scheduleRuns(t, ns, "forbid"); len(runs) > 3 {
		t.Errorf("runs %v: times during a run were not skipped", namesOf(runs))
	}
	if st := getSchedule(t, ns, "forbid").Status; st.ActiveCount > 1 {
		t.Errorf("status.activeCount %d", st.ActiveCount)
	}
	for _, r := range scheduleRuns(t, ns, "forbid") {
		if ref := metav1.GetControllerOf(&r); ref == nil || ref.Kind != "AgentRunSchedule" || ref.Name != "forbid" {
			t.Errorf("run %s controller owner = %+v, want the schedule", r.Name, ref)
		}
		if r.Labels["team"] != "triage" || r.Annotations[arv1.AnnotationScheduledAt] == "" {
			t.Errorf("run %s labels %v annotations %v: want the template's and the scheduled time", r.Name, r.Labels, r.Annotations)
		}
	}
}

// fakeAt starts a manager whose schedule clock is fake and returns it.
func fakeAt(t *testing.T, at time.Time) (*testingclock.FakeClock, *harness) {
	t.Helper()
	fc := testingclock.NewFakeClock(at)
	return fc, startManager(t, managerOpts{scheduleClock: fc})
}

// TestScheduleReplaceCancelsTheOld: when the next time comes under
// Replace, the active run is cancelled through spec.cancel and the new
// one starts.
func TestScheduleReplaceCancelsTheOld(t *testing.T) {
	fc, _ := fakeAt(t, time.Now())
	ns, _ := scheduleSetup(t, time.Minute)
	s := createSchedule(t, ns, "replace", func(s *arv1.AgentRunSchedule) { s.Spec.ConcurrencyPolicy = arv1.ConcurrencyReplace })
	c := s.CreationTimestamp.Time

	fc.SetTime(c.Add(2 * time.Second))
	poke(t, ns, "replace")
	first := waitRunCount(t, ns, "replace", 1)[0]
	if first.Name != schedule.RunName("replace", c.Add(2*time.Second)) {
		t.Fatalf("run %s, want it named after its time", first.Name)
	}
	waitFor(t, ns, first.Name, 20*time.Second, "the first run working", phaseIs(arv1.PhaseRunning))

	fc.SetTime(c.Add(4 * time.Second))
	poke(t, ns, "replace")
	runs := waitRunCount(t, ns, "replace", 2)
	old := waitFor(t, ns, first.Name, 20*time.Second, "the old run cancelled", phaseIs(arv1.PhaseCancelled))
	if !old.Spec.Cancel {
		t.Errorf("old run ended %s without spec.cancel", old.Status.Phase)
	}
	if second := runs[1]; second.Name != schedule.RunName("replace", c.Add(4*time.Second)) || second.Status.Phase.IsTerminal() {
		t.Errorf("second run %s phase %s, want the 4 s run, active", second.Name, second.Status.Phase)
	}
}

// journalCount counts the ConfigMaps holding a run's journal.
func journalCount(t *testing.T, ns string, uid types.UID) int {
	t.Helper()
	var cms corev1.ConfigMapList
	if err := k8s.List(context.Background(), &cms, client.InNamespace(ns), client.MatchingLabels{configmaps.LabelRunUID: string(uid)}); err != nil {
		t.Fatal(err)
	}
	return len(cms.Items)
}

// TestScheduleHistoryLimitDeletesOldestWithJournals: with a successful
// history of 1, each completed run replaces the one before, whose journal
// ConfigMaps go with it.
func TestScheduleHistoryLimitDeletesOldestWithJournals(t *testing.T) {
	fc, _ := fakeAt(t, time.Now())
	ns, _ := scheduleSetup(t, 0)
	s := createSchedule(t, ns, "history", func(s *arv1.AgentRunSchedule) {
		s.Spec.SuccessfulRunsHistoryLimit = ptr.To[int32](1)
	})
	c := s.CreationTimestamp.Time

	var firstUID types.UID
	var firstName string
	for i := 1; i <= 3; i++ {
		at := c.Add(time.Duration(2*i) * time.Second)
		fc.SetTime(at)
		poke(t, ns, "history")
		name := schedule.RunName("history", at)
		eventually(t, 20*time.Second, "run "+name+" created", func() (bool, string) {
			return slices.ContainsFunc(scheduleRuns(t, ns, "history"), func(r arv1.AgentRun) bool { return r.Name == name }), ""
		})
		run := waitFor(t, ns, name, 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
		if i == 1 {
			firstUID, firstName = run.UID, run.Name
			if journalCount(t, ns, firstUID) == 0 {
				t.Fatalf("run %s has no journal ConfigMaps to delete", name)
			}
		}
	}
	// The last completion wakes the schedule, which trims.
	eventually(t, 20*time.Second, "only the newest Complete run kept", func() (bool, string) {
		runs := scheduleRuns(t, ns, "history")
		return len(runs) == 1 && runs[0].Name == schedule.RunName("history", c.Add(6*time.Second)), fmt.Sprint(namesOf(runs))
	})
	eventually(t, 20*time.Second, "the deleted run's journal gone", func() (bool, string) {
		n := journalCount(t, ns, firstUID)
		return n == 0, fmt.Sprintf("%d ConfigMaps of %s left", n, firstName)
	})
}

// TestScheduleSuspendStopsIt: a suspended schedule creates nothing
// however many times pass; lifting suspend runs only the latest missed
// time.
func TestScheduleSuspendStopsIt(t *testing.T) {
	fc, _ := fakeAt(t, time.Now())
	ns, _ := scheduleSetup(t, 0)
	s := createSchedule(t, ns, "paused", func(s *arv1.AgentRunSchedule) { s.Spec.Suspend = true })
	c := s.CreationTimestamp.Time
	fc.SetTime(c.Add(11 * time.Second)) // five times pass
	poke(t, ns, "paused")
	eventually(t, 20*time.Second, "Ready reason Suspended", func() (bool, string) {
		got := getSchedule(t, ns, "paused")
		cond := meta.FindStatusCondition(got.Status.Conditions, arv1.ConditionReady)
		return cond != nil && cond.Reason == arv1.ReasonSuspended && got.Status.NextScheduleTime == nil, fmt.Sprintf("%+v", got.Status)
	})
	if err := holdsFor(time.Second, func() error {
		if runs := scheduleRuns(t, ns, "paused"); len(runs) != 0 {
			return fmt.Errorf("suspended schedule created %v", namesOf(runs))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	got := getSchedule(t, ns, "paused")
	patch := client.MergeFrom(got.DeepCopy())
	got.Spec.Suspend = false
	if err := k8s.Patch(context.Background(), got, patch); err != nil {
		t.Fatal(err)
	}
	runs := waitRunCount(t, ns, "paused", 1)
	if runs[0].Name != schedule.RunName("paused", c.Add(10*time.Second)) {
		t.Errorf("run %s, want only the latest missed time (10 s)", runs[0].Name)
	}
}

// TestScheduleCrashAfterCreateLeavesOneRun: a manager creates the run of
// a time and dies before its status write; the next manager finds the
// run by its name and records the time instead of creating another.
func TestScheduleCrashAfterCreateLeavesOneRun(t *testing.T) {
	fc, h := fakeAt(t, time.Now())
	ns, _ := scheduleSetup(t, time.Minute)
	s := createSchedule(t, ns, "crash", nil)
	c := s.CreationTimestamp.Time
	at := c.Add(2 * time.Second)
	fc.SetTime(at)
	poke(t, ns, "crash")
	run := waitRunCount(t, ns, "crash", 1)[0]
	eventually(t, 20*time.Second, "lastScheduleTime written", func() (bool, string) {
		st := getSchedule(t, ns, "crash").Status
		return st.LastScheduleTime != nil && st.LastScheduleTime.Equal(&metav1.Time{Time: at}), fmt.Sprintf("%+v", st)
	})
	h.stop()

	// The status write that would have followed the create is lost.
	lost := client.RawPatch(types.MergePatchType, []byte(`{"status":{"lastScheduleTime":null,"active":null,"activeCount":null}}`))
	if err := k8s.Status().Patch(context.Background(), getSchedule(t, ns, "crash"), lost); err != nil {
		t.Fatal(err)
	}
	startManager(t, managerOpts{scheduleClock: fc, identity: "second"})
	eventually(t, 20*time.Second, "the second manager records the time", func() (bool, string) {
		st := getSchedule(t, ns, "crash").Status
		return st.LastScheduleTime != nil && st.LastScheduleTime.Equal(&metav1.Time{Time: at}) && st.ActiveCount == 1, fmt.Sprintf("%+v", st)
	})
	runs := scheduleRuns(t, ns, "crash")
	if len(runs) != 1 || runs[0].UID != run.UID {
		t.Fatalf("runs after the restart: %v, want only the first (uid %s)", namesOf(runs), run.UID)
	}
}

// TestScheduleOutageCatchesUpOnce: a schedule every 2 s with a 10 s
// starting deadline, and a manager away for 20 s: ten times were missed,
// one catch-up run is created (the latest time), never a storm.
func TestScheduleOutageCatchesUpOnce(t *testing.T) {
	fc, h := fakeAt(t, time.Now())
	ns, _ := scheduleSetup(t, 0)
	s := createSchedule(t, ns, "outage", func(s *arv1.AgentRunSchedule) { s.Spec.StartingDeadlineSeconds = ptr.To[int64](10) })
	c := s.CreationTimestamp.Time
	fc.SetTime(c.Add(2 * time.Second))
	poke(t, ns, "outage")
	waitRunCount(t, ns, "outage", 1)
	eventually(t, 20*time.Second, "lastScheduleTime written", func() (bool, string) {
		st := getSchedule(t, ns, "outage").Status
		return st.LastScheduleTime != nil, fmt.Sprintf("%+v", st)
	})
	h.stop()

	back := c.Add(22*time.Second + 500*time.Millisecond)
	fc.SetTime(back)
	startManager(t, managerOpts{scheduleClock: fc, identity: "after-outage"})
	latest := c.Add(22 * time.Second)
	eventually(t, 20*time.Second, "the catch-up recorded", func() (bool, string) {
		st := getSchedule(t, ns, "outage").Status
		return st.LastScheduleTime != nil && st.LastScheduleTime.Equal(&metav1.Time{Time: latest}), fmt.Sprintf("%+v", st)
	})
	if err := holdsFor(1500*time.Millisecond, func() error {
		runs := scheduleRuns(t, ns, "outage")
		if len(runs) != 2 || runs[1].Name != schedule.RunName("outage", latest) {
			return fmt.Errorf("runs %v, want the first and one catch-up at %s", namesOf(runs), latest.UTC())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestScheduleInvalidTemplateIsACondition: a template the API server
// refuses as an AgentRun (depth above 16) is the schedule's Ready=False
// TemplateInvalid with the server's message, and nothing is retried in a
// loop.
func TestScheduleInvalidTemplateIsACondition(t *testing.T) {
	startManager(t, managerOpts{})
	ns, _ := scheduleSetup(t, 0)
	createSchedule(t, ns, "bad", func(s *arv1.AgentRunSchedule) { s.Spec.Template.Spec.Depth = 99 })
	var cond *metav1.Condition
	eventually(t, 20*time.Second, "Ready=False TemplateInvalid", func() (bool, string) {
		cond = meta.FindStatusCondition(getSchedule(t, ns, "bad").Status.Conditions, arv1.ConditionReady)
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == arv1.ReasonTemplateInvalid, fmt.Sprintf("%+v", cond)
	})
	if !strings.Contains(cond.Message, "spec.depth") {
		t.Errorf("message %q does not name spec.depth", cond.Message)
	}
	if st := meta.FindStatusCondition(getSchedule(t, ns, "bad").Status.Conditions, arv1.ConditionStalled); st == nil ||
		st.Status != metav1.ConditionTrue || st.Reason != arv1.ReasonTemplateInvalid {
		t.Errorf("Stalled = %+v, want True TemplateInvalid: the schedule cannot go on until its spec changes", st)
	}
	rv := getSchedule(t, ns, "bad").ResourceVersion
	if err := holdsFor(3*time.Second, func() error {
		if runs := scheduleRuns(t, ns, "bad"); len(runs) != 0 {
			return fmt.Errorf("runs created from an invalid template: %v", namesOf(runs))
		}
		if now := getSchedule(t, ns, "bad").ResourceVersion; now != rv {
			return fmt.Errorf("schedule rewritten (%s -> %s): a loop", rv, now)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestScheduleMissedTimeIsAWarning: a schedule every 10 s with a 1 s
// starting deadline, whose manager comes to a time 5 s late: no run is
// created, and, as CronJob does, the time is recorded as missed: a Warning
// MissSchedule event naming it, status.missedCount 1 and lastMissedTime.
// Reconciling again does not count it twice, and the next time is run.
func TestScheduleMissedTimeIsAWarning(t *testing.T) {
	fc, _ := fakeAt(t, time.Now())
	ns, _ := scheduleSetup(t, 0)
	s := createSchedule(t, ns, "late", func(s *arv1.AgentRunSchedule) {
		s.Spec.Schedule = "@every 10s"
		s.Spec.StartingDeadlineSeconds = ptr.To[int64](1)
	})
	c := s.CreationTimestamp.Time
	missed := c.Add(10 * time.Second)
	fc.SetTime(c.Add(15 * time.Second))
	poke(t, ns, "late")
	eventually(t, 20*time.Second, "the missed time in status", func() (bool, string) {
		st := getSchedule(t, ns, "late").Status
		return st.MissedCount == 1 && st.LastMissedTime != nil && st.LastMissedTime.Equal(&metav1.Time{Time: missed}), fmt.Sprintf("%+v", st)
	})
	waitForEvent(t, ns, "late", schedules.EventMissSchedule, missed.UTC().Format(time.RFC3339))
	poke(t, ns, "late")
	if err := holdsFor(time.Second, func() error {
		if runs := scheduleRuns(t, ns, "late"); len(runs) != 0 {
			return fmt.Errorf("runs %v for a time past its deadline", namesOf(runs))
		}
		if n := getSchedule(t, ns, "late").Status.MissedCount; n != 1 {
			return fmt.Errorf("missedCount %d after reconciling again, want still 1", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var events corev1.EventList
	if err := k8s.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.Reason == schedules.EventMissSchedule && e.Type != corev1.EventTypeWarning {
			t.Errorf("MissSchedule event of type %s, want Warning", e.Type)
		}
	}

	fc.SetTime(c.Add(20*time.Second + 200*time.Millisecond))
	poke(t, ns, "late")
	runs := waitRunCount(t, ns, "late", 1)
	if runs[0].Name != schedule.RunName("late", c.Add(20*time.Second)) {
		t.Errorf("run %s, want the time after the missed one", runs[0].Name)
	}
	if n := getSchedule(t, ns, "late").Status.MissedCount; n != 1 {
		t.Errorf("missedCount %d after a time on time, want 1", n)
	}
}

// TestScheduleInvalidIsStalled: a schedule whose cron expression passed
// the CRD's rules but does not parse (the admission webhook was away) is
// Stalled like a run that cannot go on: Ready=False and Stalled=True,
// both InvalidSchedule, a Warning event, and `kubectl wait
// --for=condition=Stalled` returns. Fixing the spec clears Stalled.
func TestScheduleInvalidIsStalled(t *testing.T) {
	startManager(t, managerOpts{})
	ns, _ := scheduleSetup(t, 0)
	createSchedule(t, ns, "broken", func(s *arv1.AgentRunSchedule) { s.Spec.Schedule = "99 * * * *" })
	eventually(t, 20*time.Second, "Ready=False and Stalled=True InvalidSchedule", func() (bool, string) {
		conds := getSchedule(t, ns, "broken").Status.Conditions
		ready := meta.FindStatusCondition(conds, arv1.ConditionReady)
		stalled := meta.FindStatusCondition(conds, arv1.ConditionStalled)
		return ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == arv1.ReasonInvalidSchedule &&
			stalled != nil && stalled.Status == metav1.ConditionTrue && stalled.Reason == arv1.ReasonInvalidSchedule &&
			strings.Contains(stalled.Message, "spec.schedule"), fmt.Sprintf("%+v", conds)
	})
	waitForEvent(t, ns, "broken", arv1.ReasonInvalidSchedule, "spec.schedule")
	kubectlOut(t, "wait", "--for=condition=Stalled", "--timeout=10s", "agentrunschedule/broken", "-n", ns)

	s := getSchedule(t, ns, "broken")
	patch := client.MergeFrom(s.DeepCopy())
	s.Spec.Schedule = "0 9 * * *"
	if err := k8s.Patch(context.Background(), s, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "Ready=True and no Stalled once fixed", func() (bool, string) {
		conds := getSchedule(t, ns, "broken").Status.Conditions
		ready := meta.FindStatusCondition(conds, arv1.ConditionReady)
		return ready != nil && ready.Status == metav1.ConditionTrue && meta.FindStatusCondition(conds, arv1.ConditionStalled) == nil, fmt.Sprintf("%+v", conds)
	})
}
