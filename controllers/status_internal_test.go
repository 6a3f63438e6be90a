package controllers

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// cond is a condition's status and reason, as a table names it.
type cond struct {
	status metav1.ConditionStatus
	reason string
}

func conditionsOf(run *arv1.AgentRun) map[string]cond {
	out := map[string]cond{}
	for _, c := range run.Status.Conditions {
		out[c.Type] = cond{c.Status, c.Reason}
		if c.ObservedGeneration != run.Generation {
			panic("a condition not stamped with the generation")
		}
	}
	return out
}

// TestSetConditions: each phase and wait gives the kstatus conditions
// Argo CD, Flux and kubectl wait read, and no others.
func TestSetConditions(t *testing.T) {
	wait := func(r arv1.WaitReason, person bool) *arv1.WaitingOn {
		return &arv1.WaitingOn{Reason: r, NeedsAPerson: person}
	}
	cases := []struct {
		name  string
		phase arv1.Phase
		wait  *arv1.WaitingOn
		in    conditionInputs
		want  map[string]cond
	}{
		{"running", arv1.PhaseRunning, nil, conditionInputs{}, map[string]cond{
			"Ready": {"False", arv1.ReasonIncomplete}, "Reconciling": {"True", arv1.ReasonProgressing},
			"Waiting": {"False", arv1.ReasonNotWaiting}, "NeedsAttention": {"False", arv1.ReasonNoPersonNeeded}}},
		{"queued", arv1.PhaseQueued, nil, conditionInputs{queued: true}, map[string]cond{
			"Ready": {"False", arv1.ReasonIncomplete}, "Reconciling": {"True", arv1.ReasonQueued},
			"Waiting": {"False", arv1.ReasonNotWaiting}, "NeedsAttention": {"False", arv1.ReasonNoPersonNeeded}}},
		{"backpressure", arv1.PhaseRunning, nil, conditionInputs{backpressure: true}, map[string]cond{
			"Ready": {"False", arv1.ReasonIncomplete}, "Reconciling": {"True", arv1.ReasonWaitingForExecutor},
			"Waiting": {"False", arv1.ReasonNotWaiting}, "NeedsAttention": {"False", arv1.ReasonNoPersonNeeded}}},
		{"needs setup stalls", arv1.PhaseWaitingInput, wait(arv1.WaitNeedsSetup, true), conditionInputs{}, map[string]cond{
			"Ready": {"False", arv1.ReasonIncomplete}, "Stalled": {"True", string(arv1.WaitNeedsSetup)},
			"Waiting": {"True", string(arv1.WaitNeedsSetup)}, "NeedsAttention": {"True", string(arv1.WaitNeedsSetup)}}},
		{"children are healthy", arv1.PhaseWaitingInput, wait(arv1.WaitChildren, false), conditionInputs{}, map[string]cond{
			"Ready": {"False", arv1.ReasonIncomplete}, "Reconciling": {"True", string(arv1.WaitChildren)},
			"Waiting": {"True", string(arv1.WaitChildren)}, "NeedsAttention": {"False", arv1.ReasonNoPersonNeeded}}},
		{"store away, clears by itself", arv1.PhaseWaitingInput, wait(arv1.WaitStoreUnavailable, false), conditionInputs{}, map[string]cond{
			"Ready": {"False", arv1.ReasonIncomplete}, "Reconciling": {"True", string(arv1.WaitStoreUnavailable)},
			"Waiting": {"True", string(arv1.WaitStoreUnavailable)}, "NeedsAttention": {"False", arv1.ReasonNoPersonNeeded}}},
		{"store refusing the login needs a person", arv1.PhaseWaitingInput, wait(arv1.WaitStoreUnavailable, true), conditionInputs{}, map[string]cond{
			"Ready": {"False", arv1.ReasonIncomplete}, "Reconciling": {"True", string(arv1.WaitStoreUnavailable)},
			"Waiting": {"True", string(arv1.WaitStoreUnavailable)}, "NeedsAttention": {"True", string(arv1.WaitStoreUnavailable)}}},
		{"complete", arv1.PhaseComplete, nil, conditionInputs{}, map[string]cond{
			"Ready": {"True", arv1.ReasonSucceeded}, "Waiting": {"False", arv1.ReasonNotWaiting}, "NeedsAttention": {"False", arv1.ReasonNoPersonNeeded}}},
		{"error", arv1.PhaseError, nil, conditionInputs{}, map[string]cond{
			"Ready": {"False", arv1.ReasonFailed}, "Stalled": {"True", arv1.ReasonFailed},
			"Waiting": {"False", arv1.ReasonNotWaiting}, "NeedsAttention": {"False", arv1.ReasonNoPersonNeeded}}},
		{"cancelled", arv1.PhaseCancelled, nil, conditionInputs{}, map[string]cond{
			"Ready": {"False", arv1.ReasonCancelled}, "Stalled": {"True", arv1.ReasonCancelled},
			"Waiting": {"False", arv1.ReasonNotWaiting}, "NeedsAttention": {"False", arv1.ReasonNoPersonNeeded}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Generation: 3}, Status: arv1.AgentRunStatus{Phase: tc.phase, WaitingOn: tc.wait}}
			// A condition the phase no longer has must go.
			run.Status.Conditions = []metav1.Condition{{Type: arv1.ConditionStalled, Status: "True", Reason: "Old"}, {Type: arv1.ConditionReconciling, Status: "True", Reason: "Old"}}
			setConditions(run, tc.in)
			got := conditionsOf(run)
			if len(got) != len(tc.want) {
				t.Fatalf("conditions %v, want %v", got, tc.want)
			}
			for k, w := range tc.want {
				if got[k] != w {
					t.Errorf("%s = %v, want %v", k, got[k], w)
				}
			}
		})
	}
}

// TestMarkError: a transient failure keeps the run Reconciling and says
// it retries; a terminal one stalls it; both keep what else status says.
func TestMarkError(t *testing.T) {
	now := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		err  error
		want map[string]cond
	}{
		{"transient", errors.New("the API server is busy"), map[string]cond{"Reconciling": {"True", arv1.ReasonRetryingAfterError}}},
		{"terminal", reconcile.TerminalError(errors.New("the journal is corrupt")), map[string]cond{"Stalled": {"True", arv1.ReasonReconcileFailed}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := &arv1.AgentRun{Status: arv1.AgentRunStatus{Phase: arv1.PhaseRunning, Stage: "s 1/2"}}
			markError(run, tc.err, now)
			got := conditionsOf(run)
			for k, w := range tc.want {
				if got[k] != w {
					t.Errorf("%s = %v, want %v", k, got[k], w)
				}
			}
			c := meta.FindStatusCondition(run.Status.Conditions, firstKey(tc.want))
			if c == nil || c.Message == "" || c.Message[0] < 'A' || c.Message[0] > 'Z' {
				t.Errorf("message %+v, want the error, capitalised", c)
			}
			if run.Status.Phase != arv1.PhaseRunning || run.Status.Stage != "s 1/2" || !run.Status.UpdatedAt.Equal(&metav1.Time{Time: now}) {
				t.Errorf("status %+v: the rest must stand, updatedAt now", run.Status)
			}
		})
	}
}

func firstKey(m map[string]cond) string {
	for k := range m {
		return k
	}
	return ""
}

// TestPhaseOf: the phase follows the journal's outcome first, then a
// failure decided, a pause, a park, and a run that has made no call yet
// is Starting.
func TestPhaseOf(t *testing.T) {
	cases := []struct {
		name    string
		outcome journal.Outcome
		paused  bool
		act     runstate.ActionKind
		started bool
		want    arv1.Phase
	}{
		{"complete", journal.OutcomeComplete, true, runstate.ActPark, true, arv1.PhaseComplete},
		{"error", journal.OutcomeError, false, runstate.ActDispatch, true, arv1.PhaseError},
		{"cancelled", journal.OutcomeCancelled, false, runstate.ActDispatch, true, arv1.PhaseCancelled},
		{"failing", journal.OutcomeNone, false, runstate.ActFail, true, arv1.PhaseError},
		{"paused", journal.OutcomeNone, true, runstate.ActPark, true, arv1.PhasePaused},
		{"parked", journal.OutcomeNone, false, runstate.ActPark, true, arv1.PhaseWaitingInput},
		{"not started", journal.OutcomeNone, false, runstate.ActDispatch, false, arv1.PhaseStarting},
		{"running", journal.OutcomeNone, false, runstate.ActDispatch, true, arv1.PhaseRunning},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &facts{}
			f.State.Outcome, f.Paused = tc.outcome, tc.paused
			if tc.started {
				f.State.NextSeq = 2
			}
			got, msg := phaseOf(f, runstate.Action{Kind: tc.act, Message: "why"})
			if got != tc.want {
				t.Fatalf("phase %s, want %s", got, tc.want)
			}
			if (got == arv1.PhaseError) != (msg != "" || tc.outcome == journal.OutcomeError) {
				t.Fatalf("phase %s with error %q", got, msg)
			}
		})
	}
}

// TestProjectStoreWait: a run parked on its store shows the wait with its
// cause (and a remedy only when a person must act), keeps the rest of its
// record, and keeps the time it began waiting across reconciles.
func TestProjectStoreWait(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	before := &arv1.AgentRun{Status: arv1.AgentRunStatus{Phase: arv1.PhaseRunning, Stage: "s 2/3", Usage: arv1.Usage{ModelCalls: 4}}}
	s := &scope{run: before.DeepCopy(), before: before, now: t0, driver: "r1"}
	projectStoreWait(s, &store.UnavailableError{Backend: "postgres", Cause: "dial tcp: connection refused"})
	st := s.run.Status
	if st.Phase != arv1.PhaseWaitingInput || st.WaitingOn == nil || st.WaitingOn.Reason != arv1.WaitStoreUnavailable || st.WaitingOn.NeedsAPerson || st.WaitingOn.Remedy != "" {
		t.Fatalf("status %+v, want a healthy StoreUnavailable wait", st.WaitingOn)
	}
	if st.Stage != "s 2/3" || st.Usage.ModelCalls != 4 || st.WaitingOn.StoreError != "dial tcp: connection refused" {
		t.Fatalf("status %+v: the record must stand, the cause shown", st)
	}
	later := &scope{run: s.run.DeepCopy(), before: s.run.DeepCopy(), now: t0.Add(time.Minute)}
	projectStoreWait(later, &store.UnavailableError{Backend: "postgres", Cause: "password authentication failed", Remedy: "fix the Secret"})
	w := later.run.Status.WaitingOn
	if !w.NeedsAPerson || w.Remedy != "fix the Secret" || !w.Since.Equal(&metav1.Time{Time: t0}) {
		t.Fatalf("wait %+v: a remedy needs a person; since stays %s", w, t0)
	}
}
