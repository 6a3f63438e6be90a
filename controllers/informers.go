package controllers

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// InformerHandler is a handler of raw informer events the reconciler needs
// beside its controller's watches. The manager's wiring registers each
// (internal/manager), so what the process watches is said in one place.
type InformerHandler struct {
	// Object is the kind whose informer feeds Handler.
	Object client.Object
	// Handler gets the informer's events.
	Handler toolscache.ResourceEventHandler
}

// InformerHandlers are the reconciler's: the run cache learns when the
// informer has caught up with a status write, so the copy kept from the
// write can go; namespaces' annotations feed the per-namespace caps (when
// they are watched); a changed or deleted quota wakes the runs waiting on
// it; a deleted tool policy's compiled rules are dropped.
func (r *AgentRunReconciler) InformerHandlers() []InformerHandler {
	hs := []InformerHandler{{Object: &arv1.AgentRun{}, Handler: r.runs.Handler(r.wake)}}
	if r.watchCaps {
		ns := &metav1.PartialObjectMetadata{}
		ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
		hs = append(hs, InformerHandler{Object: ns, Handler: r.queue.NamespaceHandler()})
	}
	for _, kind := range r.queue.QuotaKinds() {
		hs = append(hs, InformerHandler{Object: kind, Handler: r.queue.QuotaHandler()})
	}
	return append(hs, r.tools.policies.handlers()...)
}
