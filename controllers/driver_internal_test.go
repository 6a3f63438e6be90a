package controllers

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
)

// TestStepContinuesOnlyACallThatNeedsNothingElse: the step that finished a
// call makes the next one itself only for a model call or an MCP tool call
// with nothing to do first; every other decision is the reconcile's.
func TestStepContinuesOnlyACallThatNeedsNothingElse(t *testing.T) {
	cases := []struct {
		name string
		f    facts
		a    runstate.Action
		want bool
	}{
		{name: "a model call", a: runstate.Action{Kind: runstate.ActDispatch}, want: true},
		{name: "an MCP tool call", a: runstate.Action{Kind: runstate.ActToolCall}, want: true},
		{name: "a model call issued again", a: runstate.Action{Kind: runstate.ActDispatch, Reissue: true}, want: false},
		{name: "a call beside children to create", a: runstate.Action{Kind: runstate.ActDispatch, CreateChildren: []runstate.ChildRequest{{}}}, want: false},
		{name: "a tool listing due", f: facts{listings: []serverConn{{}}}, a: runstate.Action{Kind: runstate.ActToolCall}, want: false},
		{name: "an answer to record", f: facts{answerUpdates: []answerUpdate{{}}}, a: runstate.Action{Kind: runstate.ActDispatch}, want: false},
		{name: "a park", a: runstate.Action{Kind: runstate.ActPark}, want: false},
		{name: "the end", a: runstate.Action{Kind: runstate.ActNone}, want: false},
		{name: "a cancel", a: runstate.Action{Kind: runstate.ActCancel}, want: false},
		{name: "a failure", a: runstate.Action{Kind: runstate.ActFail}, want: false},
		{name: "fan-out resolved", a: runstate.Action{Kind: runstate.ActResolveFanOut}, want: false},
	}
	for _, c := range cases {
		if got := stepContinues(&c.f, c.a); got != c.want {
			t.Errorf("%s: stepContinues = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestMayContinueOnlyARunTheReconcileHasCaughtUpWith: a step goes on only
// with a run that runs, unparked, not deleted, cancelled or paused, whose
// spec the reconcile has observed and that has its snapshot.
func TestMayContinueOnlyARunTheReconcileHasCaughtUpWith(t *testing.T) {
	running := func() *arv1.AgentRun {
		return &arv1.AgentRun{
			ObjectMeta: metav1.ObjectMeta{Generation: 2},
			Status:     arv1.AgentRunStatus{Phase: arv1.PhaseRunning, ObservedGeneration: 2, BlueprintSnapshot: "bp-1"},
		}
	}
	now := metav1.NewTime(time.Unix(1_700_000_000, 0))
	cases := []struct {
		name string
		edit func(*arv1.AgentRun)
		want bool
	}{
		{name: "running", edit: func(*arv1.AgentRun) {}, want: true},
		{name: "deleted", edit: func(r *arv1.AgentRun) { r.DeletionTimestamp = &now }, want: false},
		{name: "cancelled", edit: func(r *arv1.AgentRun) { r.Spec.Cancel = true }, want: false},
		{name: "paused", edit: func(r *arv1.AgentRun) { r.Spec.Paused = true }, want: false},
		{name: "starting", edit: func(r *arv1.AgentRun) { r.Status.Phase = arv1.PhaseStarting }, want: false},
		{name: "parked", edit: func(r *arv1.AgentRun) { r.Status.WaitingOn = &arv1.WaitingOn{Reason: arv1.WaitQuotaExceeded} }, want: false},
		{name: "a spec not observed yet", edit: func(r *arv1.AgentRun) { r.Generation = 3 }, want: false},
		{name: "no snapshot", edit: func(r *arv1.AgentRun) { r.Status.BlueprintSnapshot = "" }, want: false},
	}
	for _, c := range cases {
		run := running()
		c.edit(run)
		if got := mayContinue(run); got != c.want {
			t.Errorf("%s: mayContinue = %v, want %v", c.name, got, c.want)
		}
	}
}
