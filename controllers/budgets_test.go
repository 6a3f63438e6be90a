package controllers_test

import (
	"fmt"
	"testing"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// TestBudgetParksAndRaisingResumes: a budget reached mid-run parks the run
// with the observed value before the call that would cross it; raising the
// budget in the spec (a GitOps commit) resumes it.
func TestBudgetParksAndRaisingResumes(t *testing.T) {
	h := startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "triple", map[string]string{"agent.toml": threeStage})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	steps := int64(2)
	run := createRun(t, ns, "steps", "triple", func(r *arv1.AgentRun) { r.Spec.Budgets = &arv1.Budgets{Steps: &steps} })
	tokens := int64(300)
	tokRun := createRun(t, ns, "tokens", "triple", func(r *arv1.AgentRun) { r.Spec.Budgets = &arv1.Budgets{Tokens: &tokens} })

	parked := waitFor(t, ns, "steps", 20*time.Second, "BudgetExceeded", func(r *arv1.AgentRun) bool {
		return r.Status.WaitingOn != nil && r.Status.WaitingOn.Reason == arv1.WaitBudgetExceeded
	})
	w := parked.Status.WaitingOn
	if w.Budget.Kind != arv1.BudgetSteps || w.Budget.Limit != "2" || w.Observed != "2" || !w.NeedsAPerson {
		t.Errorf("waitingOn = %+v budget %+v, want Steps limit 2 observed 2", w, w.Budget)
	}
	if err := holdsFor(500*time.Millisecond, func() error {
		if calls := h.scripted.Calls(string(run.UID)); calls != 2 {
			return fmt.Errorf("provider calls = %d, want 2: the call that would cross the budget is not made", calls)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	tp := waitFor(t, ns, "tokens", 20*time.Second, "token BudgetExceeded", func(r *arv1.AgentRun) bool {
		return r.Status.WaitingOn != nil && r.Status.WaitingOn.Reason == arv1.WaitBudgetExceeded
	})
	if tp.Status.WaitingOn.Budget.Kind != arv1.BudgetTokens || tp.Status.WaitingOn.Observed != "500" {
		t.Errorf("token budget wait = %+v %+v, want Tokens observed 500 (110 + 140 = 250 < 300, then + 250)", tp.Status.WaitingOn, tp.Status.WaitingOn.Budget)
	}
	if h.scripted.Calls(string(tokRun.UID)) != 3 {
		t.Errorf("token run made %d calls, want 3", h.scripted.Calls(string(tokRun.UID)))
	}

	patchSpec(t, ns, "steps", func(r *arv1.AgentRun) { more := int64(10); r.Spec.Budgets.Steps = &more })
	done := waitFor(t, ns, "steps", 20*time.Second, "Complete after raising the budget", phaseIs(arv1.PhaseComplete))
	if done.Status.Usage.ModelCalls != 4 {
		t.Errorf("model calls = %d, want 4", done.Status.Usage.ModelCalls)
	}
}
