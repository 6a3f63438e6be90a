package controllers

import (
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
		hs = append(hs, r.namespaceCapsHandler())
	}
	hs = append(hs, r.quotaHandlers()...)
	return append(hs, r.policies.handlers()...)
}
