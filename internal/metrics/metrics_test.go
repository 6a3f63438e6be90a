package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/circuit"
	"github.com/agentrun-dev/agentrun-operator/internal/ratelimit"
)

type pool struct{ size, busy, waiting int }

func (p pool) Size() int    { return p.size }
func (p pool) Busy() int    { return p.busy }
func (p pool) Waiting() int { return p.waiting }

func parked(ns, name string, reason arv1.WaitReason, since time.Time) *arv1.AgentRun {
	return &arv1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Status: arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput, WaitingOn: &arv1.WaitingOn{
			Reason: reason, NeedsAPerson: reason.NeedsAPerson(), Since: &metav1.Time{Time: since}}},
	}
}

// gather collects c into a fresh registry and returns each sample's value
// by name and labels ("name{a=x,b=y}", labels in name order).
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.Metric {
			k := f.GetName() + "{"
			for i, l := range m.Label {
				if i > 0 {
					k += ","
				}
				k += l.GetName() + "=" + l.GetValue()
			}
			out[k+"}"] = m.GetGauge().GetValue()
		}
	}
	return out
}

// TestStateGauges: the oldest wait per namespace and reason is measured
// from status.waitingOn.since with the manager's clock, the queue and the
// circuits come from the pool and the breakers, and no label names a run.
func TestStateGauges(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	scheme := runtime.NewScheme()
	if err := arv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		parked("a", "old", arv1.WaitInteractionPoint, now.Add(-2*time.Hour)),
		parked("a", "zz-newest", arv1.WaitInteractionPoint, now.Add(-time.Minute)),
		parked("a", "setup", arv1.WaitNeedsSetup, now.Add(-10*time.Minute)),
		parked("b", "sleeper", arv1.WaitSleeping, now.Add(-30*time.Second)),
		&arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "fresh"}},
	).Build()
	breakers := circuit.New()
	for range circuit.DefaultThreshold {
		breakers.Failure("a/down", "ProviderUnreachable", now)
	}
	breakers.Failure("b/flaky", "ProviderFailed", now)

	got := gather(t, &stateCollector{src: Sources{Runs: reader, Pool: pool{size: 4, busy: 4, waiting: 3}, Circuits: breakers, RunsInMemory: func() int { return 5 }, Now: func() time.Time { return now }}})
	want := map[string]float64{
		"agentrun_runs_waiting_oldest_seconds{namespace=a,needs_a_person=true,reason=InteractionPoint}": 7200,
		"agentrun_runs_waiting_oldest_seconds{namespace=a,needs_a_person=true,reason=NeedsSetup}":       600,
		"agentrun_runs_waiting_oldest_seconds{namespace=b,needs_a_person=false,reason=Sleeping}":        30,
		"agentrun_runs_waiting{namespace=a,needs_a_person=true,reason=InteractionPoint}":                2,
		"agentrun_runs{namespace=b,phase=Queued}":                                                       1,
		"agentrun_executor_slots{state=busy}":                                                           4,
		"agentrun_executor_slots{state=total}":                                                          4,
		"agentrun_executor_waiting_runs{}":                                                              3,
		"agentrun_runs_in_memory{}":                                                                     5,
		"agentrun_circuit_open{namespace=a,provider=down}":                                              1,
		"agentrun_circuit_open{namespace=b,provider=flaky}":                                             0,
	}
	expectSamples(t, got, want)
	if n := countPrefix(got, "agentrun_runs_waiting_oldest_seconds{"); n != 3 {
		t.Errorf("%d oldest-wait series, want 3 (one per namespace and reason): %v", n, got)
	}
}

// expectSamples checks that each sample of want was gathered, with its value.
func expectSamples(t *testing.T, got, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}

func countPrefix(m map[string]float64, p string) int {
	n := 0
	for k := range m {
		if len(k) >= len(p) && k[:len(p)] == p {
			n++
		}
	}
	return n
}

// TestUnregisteredCollectorReportsNothing: before Register there is no
// clock and no source, and a scrape must not panic.
func TestUnregisteredCollectorReportsNothing(t *testing.T) {
	if got := gather(t, &stateCollector{}); len(got) != 0 {
		t.Fatalf("an unregistered collector reported %v", got)
	}
}

// finished is a run that ended Complete, archived or not.
func finished(ns, name string, archived metav1.ConditionStatus) *arv1.AgentRun {
	run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: arv1.AgentRunStatus{Phase: arv1.PhaseComplete}}
	if archived != "" {
		run.Status.Conditions = []metav1.Condition{{Type: arv1.ConditionArchived, Status: archived, Reason: "R", LastTransitionTime: metav1.Now()}}
	}
	return run
}

// TestStoreAndArchiveGauges: the store's health is reported as the
// controller knows it; with archiving, every namespace with finished runs
// counts those not archived yet (a failed write, or none tried), and
// without it nothing is counted.
func TestStoreAndArchiveGauges(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := arv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		finished("a", "done", metav1.ConditionTrue),
		finished("a", "failed", metav1.ConditionFalse),
		finished("a", "before-the-database", ""),
		finished("b", "done", metav1.ConditionTrue),
		parked("c", "in-flight", arv1.WaitStoreUnavailable, time.Now()),
	).Build()
	up := false
	src := Sources{Runs: reader, Now: time.Now, StoreUp: func() bool { return up }, Archiving: true}
	got := gather(t, &stateCollector{src: src})
	want := map[string]float64{
		"agentrun_store_up{}":                   0,
		"agentrun_runs_unarchived{namespace=a}": 2,
		"agentrun_runs_unarchived{namespace=b}": 0,
	}
	expectSamples(t, got, want)
	if n := countPrefix(got, "agentrun_runs_unarchived{"); n != 2 {
		t.Errorf("%d unarchived series, want 2 (the namespaces with finished runs): %v", n, got)
	}
	up = true
	if g := gather(t, &stateCollector{src: src})["agentrun_store_up{}"]; g != 1 {
		t.Errorf("agentrun_store_up = %v with the store answering, want 1", g)
	}
	src.Archiving, src.StoreUp = false, nil
	got = gather(t, &stateCollector{src: src})
	if n := countPrefix(got, "agentrun_runs_unarchived{") + countPrefix(got, "agentrun_store_up{"); n != 0 {
		t.Errorf("without an archive or a store probe: %v", got)
	}
}

type buckets []ratelimit.BucketStats

func (b buckets) Stats() []ratelimit.BucketStats { return b }

// TestBucketGauges: accounts sharing a provider and model add up, a pause
// counts only while its Retry-After lies ahead, and a learned rate is
// reported only once one was learned.
func TestBucketGauges(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	src := buckets{
		{Provider: "openai", Model: "gpt", InFlight: 3, Waiting: 2, LearnedPerSecond: 20, PausedUntil: now.Add(time.Second)},
		{Provider: "openai", Model: "gpt", InFlight: 1, Waiting: 0, LearnedPerSecond: 5},
		{Provider: "anthropic", Model: "claude", InFlight: 7, PausedUntil: now.Add(-time.Second)},
	}
	got := gather(t, &stateCollector{src: Sources{Buckets: src, Now: func() time.Time { return now }}})
	want := map[string]float64{
		"agentrun_model_bucket_calls{model=gpt,provider=openai,state=in_flight}":       4,
		"agentrun_model_bucket_calls{model=gpt,provider=openai,state=waiting}":         2,
		"agentrun_model_bucket_paused{model=gpt,provider=openai}":                      1,
		"agentrun_model_learned_requests_per_second{model=gpt,provider=openai}":        25,
		"agentrun_model_bucket_calls{model=claude,provider=anthropic,state=in_flight}": 7,
		"agentrun_model_bucket_paused{model=claude,provider=anthropic}":                0,
	}
	expectSamples(t, got, want)
	if _, ok := got["agentrun_model_learned_requests_per_second{model=claude,provider=anthropic}"]; ok {
		t.Errorf("a bucket that learned no rate reports one: %v", got)
	}
}
