package controllers

import (
	"context"
	"encoding/json"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/callbacks"
	"github.com/agentrun-dev/agentrun-operator/internal/steps"
	"github.com/agentrun-dev/agentrun-operator/internal/wirestatus"
)

// markCallbackDue records, in the same status write as the terminal phase,
// that a delivery is owed. From then on a restart finds it and sends it.
func markCallbackDue(run *arv1.AgentRun) {
	if run.Spec.Callback == nil || !run.Status.Phase.IsTerminal() || run.Status.Callback != nil {
		return
	}
	run.Status.Callback = &arv1.CallbackStatus{DeliveryID: callbacks.DeliveryID(string(run.UID)), State: arv1.CallbackPending}
}

// callbackDue reports whether the run owes a delivery.
func callbackDue(run *arv1.AgentRun) bool {
	cb := run.Status.Callback
	return run.Spec.Callback != nil && cb != nil && cb.State == arv1.CallbackPending
}

// deliverCallback sends a due delivery on an executor step (never on the
// reconcile path) unless one is already under way. Its outcome comes back
// as a report that the run's reconcile records.
func (r *AgentRunReconciler) deliverCallback(ctx context.Context, run *arv1.AgentRun) {
	if !callbackDue(run) || r.steps.Deliveries.Has(run.UID) {
		return // nothing owed, or an outcome waits to be recorded
	}
	d := steps.Delivery{Run: steps.RunRef(run), Body: func(run *arv1.AgentRun) ([]byte, error) { return callbackBody(run, r.clock.Now()) }}
	r.pool.Submit(r.stepOf(run, steps.CallbackSeq, ""), r.step(ctx, run, func(ctx context.Context) { r.steps.RunDelivery(ctx, d) }))
}

// callbackBody is the delivery's JSON: the run's identity, its status in
// the wire shape every surface uses, its output descriptor and usage.
func callbackBody(run *arv1.AgentRun, now time.Time) ([]byte, error) {
	st := &run.Status
	var result any
	if st.Phase == arv1.PhaseError {
		result = st.Error
	}
	var cost any
	if st.Usage.CostUSD != "" && st.Usage.CostUSD != costUnknown {
		cost = st.Usage.CostUSD
	}
	return json.Marshal(map[string]any{
		"event":           callbacks.EventCompleted,
		"delivery_id":     st.Callback.DeliveryID,
		"run_id":          string(run.UID),
		"namespace":       run.Namespace,
		"name":            run.Name,
		"agent":           st.AgentName,
		"phase":           st.Phase,
		"status":          wirestatus.Status(run, now),
		"result":          result,
		"final_output":    wirestatus.OutputDescriptor(st.FinalOutput),
		"metadata":        run.Spec.Metadata,
		"tokens":          map[string]int64{"prompt": st.Usage.PromptTokens, "completion": st.Usage.CompletionTokens},
		"cost_usd":        cost,
		"empty_output":    st.Flags.EmptyOutput,
		"splits_degraded": st.Flags.SplitsDegraded,
	})
}
