package steps

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/callbacks"
	"github.com/agentrun-dev/agentrun-operator/internal/perrun"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
)

// CallbackSeq keys a run's webhook delivery in the executor, apart from
// its calls.
const CallbackSeq = -1

// Delivery is one webhook delivery to make.
type Delivery struct {
	// Run is the finished run, as its last status write left it.
	Run *arv1.AgentRun
	// Body builds the delivery's JSON from the run.
	Body func(run *arv1.AgentRun) ([]byte, error)
}

// DeliveryReport is how a delivery went, for the reconcile to record in
// status.callback.
type DeliveryReport struct {
	Callback arv1.CallbackStatus
	// SetupRefs are objects the delivery waits on (a missing signing key
	// Secret), so their watch wakes the run.
	SetupRefs []string
}

// Deliveries hold reports until the run's reconcile records them.
type Deliveries = perrun.Box[DeliveryReport]

// NewDeliveries makes an empty report store.
func NewDeliveries() *Deliveries { return perrun.New[DeliveryReport]() }

// RunDelivery sends a run's due webhook and reports the outcome. The run is
// read afresh first: a delivery recorded since (by this or another
// manager) is never sent again. A missing signing key is reported as a
// wait on its Secret. The delivery id is the same on every attempt and
// after restarts, so a receiver that saw it before can drop it.
func (rt *Runtime) RunDelivery(ctx context.Context, d Delivery) {
	log := rt.logFor(ctx, "callback", d.Run)
	run := &arv1.AgentRun{}
	if err := rt.Reader.Get(ctx, client.ObjectKeyFromObject(d.Run), run); err != nil {
		return
	}
	if run.Spec.Callback == nil || run.Status.Callback == nil || run.Status.Callback.State != arv1.CallbackPending {
		return
	}
	cb := run.Status.Callback.DeepCopy()
	var key []byte
	if ref := run.Spec.Callback.SigningKeySecretRef; ref != nil {
		var sec corev1.Secret
		err := rt.Reader.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: ref.Name}, &sec)
		switch {
		case apierrors.IsNotFound(err) || (err == nil && len(sec.Data[ref.Key]) == 0):
			cb.LastError = fmt.Sprintf("the signing key Secret %s/%s key %q is missing or empty; create it and the delivery goes out", run.Namespace, ref.Name, ref.Key)
			rt.Deliveries.Put(run.UID, DeliveryReport{Callback: *cb, SetupRefs: []string{"Secret/" + ref.Name}})
			return
		case err != nil:
			log.Error(err, "Reading the signing key")
			return
		}
		key = sec.Data[ref.Key]
	}
	body, err := d.Body(run)
	if err != nil {
		log.Error(err, "Building the callback body")
		return
	}
	res := callbacks.Deliver(ctx, rt.HTTP(run.Namespace), rt.CallbackPolicy, run.Spec.Callback.URL, cb.DeliveryID, key, body, rt.Clock.Now)
	if ctx.Err() != nil {
		return // manager stopping: the delivery stays Pending for the next one
	}
	now := metav1.NewTime(rt.Clock.Now())
	cb.Attempts += int32(res.Attempts)
	cb.LastAttemptAt = &now
	if res.Delivered {
		cb.State, cb.DeliveredAt, cb.LastError = arv1.CallbackDelivered, &now, ""
	} else {
		cb.State, cb.LastError = arv1.CallbackFailed, clip(providers.Redact(res.Err.Error(), string(key)), 1000)
	}
	rt.Deliveries.Put(run.UID, DeliveryReport{Callback: *cb})
}
