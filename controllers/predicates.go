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
