package controllers

import (
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// deletionPredicate passes updates that set a deletion timestamp, which do
// not change the generation of a custom resource.
type deletionPredicate struct{ predicate.Funcs }

func (deletionPredicate) Update(e event.UpdateEvent) bool {
	return e.ObjectNew.GetDeletionTimestamp() != nil && e.ObjectOld.GetDeletionTimestamp() == nil
}

// dependencyChanged passes creations, deletions and changes of a Secret or
// ConfigMap (a new resourceVersion), never resync echoes.
type dependencyChanged struct{ predicate.Funcs }

func (dependencyChanged) Update(e event.UpdateEvent) bool {
	return e.ObjectOld.GetResourceVersion() != e.ObjectNew.GetResourceVersion()
}

// notOwnedByAgentRun drops events of the run's own ConfigMaps (journal,
// snapshot, output): no run ever waits on them.
type notOwnedByAgentRun struct{ predicate.Funcs }

func (notOwnedByAgentRun) Create(e event.CreateEvent) bool { return !runOwned(e.Object.GetLabels()) }
func (notOwnedByAgentRun) Update(e event.UpdateEvent) bool {
	return !runOwned(e.ObjectNew.GetLabels())
}
func (notOwnedByAgentRun) Delete(e event.DeleteEvent) bool { return !runOwned(e.Object.GetLabels()) }

func runOwned(l map[string]string) bool { return l[arv1.LabelComponent] != "" && l[labelRunUID] != "" }

// childChanged wakes a parent when a child's phase or wait changes, or when
// it goes away: what the parent derives its fan-out and roll-up from.
type childChanged struct{ predicate.Funcs }

func (childChanged) Update(e event.UpdateEvent) bool {
	o, n := e.ObjectOld.(*arv1.AgentRun), e.ObjectNew.(*arv1.AgentRun)
	if o.Status.Phase != n.Status.Phase || (n.DeletionTimestamp != nil) != (o.DeletionTimestamp != nil) {
		return true
	}
	ow, nw := o.Status.WaitingOn, n.Status.WaitingOn
	return (ow == nil) != (nw == nil) || (ow != nil && ow.Reason != nw.Reason)
}
