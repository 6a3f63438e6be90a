package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/executor"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/webhook"
	"github.com/agentrun-dev/agentrun-operator/internal/wire"
)

// callbackSeq keys a run's delivery in the executor, apart from its steps.
const callbackSeq = -1

// markCallbackDue records, in the same status write as the terminal phase,
// that a delivery is owed. From then on a restart finds it and sends it.
func markCallbackDue(run *arv1.AgentRun) {
	if run.Spec.Callback == nil || !run.Status.Phase.IsTerminal() || run.Status.Callback != nil {
		return
	}
	run.Status.Callback = &arv1.CallbackStatus{DeliveryID: webhook.DeliveryID(string(run.UID)), State: arv1.CallbackPending}
}

// deliverCallback sends a due delivery on an executor worker (never on the
// reconcile path) unless one is already under way.
func (r *AgentRunReconciler) deliverCallback(run *arv1.AgentRun) {
	cb := run.Status.Callback
	if run.Spec.Callback == nil || cb == nil || cb.State != arv1.CallbackPending {
		return
	}
	key := executor.Key{Run: run.UID, Seq: callbackSeq}
	wake := event.GenericEvent{Object: &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: run.Name, Namespace: run.Namespace}}}
	target := run.DeepCopy()
	r.Pool.Submit(key, wake, func(ctx context.Context) { r.sendCallback(ctx, target) })
}

func (r *AgentRunReconciler) sendCallback(ctx context.Context, run *arv1.AgentRun) {
	log := ctrl.Log.WithName("callback").WithValues("AgentRun", run.Namespace+"/"+run.Name)
	// The cache may lag a delivery this manager just recorded; read the
	// run itself so a recorded delivery is never sent again.
	fresh := &arv1.AgentRun{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(run), fresh); err != nil {
		return
	}
	if fresh.Status.Callback == nil || fresh.Status.Callback.State != arv1.CallbackPending {
		return
	}
	run = fresh
	cb := run.Status.Callback.DeepCopy()
	var key []byte
	var setupRefs []string
	if ref := run.Spec.Callback.SigningKeySecretRef; ref != nil {
		var sec corev1.Secret
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: ref.Name}, &sec)
		switch {
		case apierrors.IsNotFound(err) || (err == nil && len(sec.Data[ref.Key]) == 0):
			// Wait for the key: the Secret watch re-queues this run through
			// setupRefs, and the delivery goes out then.
			cb.LastError = fmt.Sprintf("the signing key Secret %s/%s key %q is missing or empty; create it and the delivery goes out", run.Namespace, ref.Name, ref.Key)
			r.patchCallback(ctx, run, cb, []string{"Secret/" + ref.Name})
			return
		case err != nil:
			log.Error(err, "Reading the signing key")
			return
		}
		key = sec.Data[ref.Key]
	}
	body, err := callbackBody(run, r.Clock.Now())
	if err != nil {
		log.Error(err, "Building the callback body")
		return
	}
	res := webhook.Deliver(ctx, sharedHTTP, r.CallbackPolicy, run.Spec.Callback.URL, cb.DeliveryID, key, body, r.Clock.Now)
	if ctx.Err() != nil {
		return // manager stopping: the delivery stays Pending for the next one
	}
	now := metav1.NewTime(r.Clock.Now())
	cb.Attempts += int32(res.Attempts)
	cb.LastAttemptAt = &now
	switch {
	case res.Delivered:
		cb.State, cb.DeliveredAt, cb.LastError = arv1.CallbackDelivered, &now, ""
	default:
		cb.State, cb.LastError = arv1.CallbackFailed, clipTo(providers.Redact(res.Err.Error(), string(key)), 1000)
	}
	r.patchCallback(ctx, run, cb, setupRefs)
}

// patchCallback merge-patches status.callback (and setupRefs) alone.
func (r *AgentRunReconciler) patchCallback(ctx context.Context, run *arv1.AgentRun, cb *arv1.CallbackStatus, setupRefs []string) {
	patch := map[string]any{"status": map[string]any{"callback": cb, "setupRefs": setupRefs}}
	data, err := json.Marshal(patch)
	if err != nil {
		return
	}
	obj := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: run.Name, Namespace: run.Namespace}}
	if err := r.Status().Patch(ctx, obj, client.RawPatch("application/merge-patch+json", data)); err != nil {
		ctrl.Log.WithName("callback").Error(err, "Recording the callback delivery", "AgentRun", run.Namespace+"/"+run.Name)
	}
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
		"event":           webhook.EventCompleted,
		"delivery_id":     st.Callback.DeliveryID,
		"run_id":          string(run.UID),
		"namespace":       run.Namespace,
		"name":            run.Name,
		"agent":           st.AgentName,
		"phase":           st.Phase,
		"status":          wire.Status(run, now),
		"result":          result,
		"final_output":    wire.OutputDescriptor(st.FinalOutput),
		"metadata":        run.Spec.Metadata,
		"tokens":          map[string]int64{"prompt": st.Usage.PromptTokens, "completion": st.Usage.CompletionTokens},
		"cost_usd":        cost,
		"empty_output":    st.Flags.EmptyOutput,
		"splits_degraded": st.Flags.SplitsDegraded,
	})
}
