package controllers

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/snapshotgc"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
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
// output) and of blueprint snapshots: no run ever waits on them.
type notOwnedByAgentRun struct{ predicate.Funcs }

func (notOwnedByAgentRun) Create(e event.CreateEvent) bool { return !runOwned(e.Object.GetLabels()) }
func (notOwnedByAgentRun) Update(e event.UpdateEvent) bool {
	return !runOwned(e.ObjectNew.GetLabels())
}
func (notOwnedByAgentRun) Delete(e event.DeleteEvent) bool { return !runOwned(e.Object.GetLabels()) }

func runOwned(l map[string]string) bool {
	return l[arv1.LabelComponent] != "" && (l[configmaps.LabelRunUID] != "" || l[arv1.LabelComponent] == snapshotgc.Component)
}

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

// wakePriority puts runs woken by their own finished step ahead of new and
// resynced runs in the work queue, so runs in flight finish before more
// start (no breadth-first convoy).
const wakePriority = 10

// queuedPriority is how a run waiting in line for an active-run slot is
// looked at again: after everything else, since that look only shows (or
// keeps showing) that it waits. A burst of one tenant's runs then never
// holds the reconcilers from another tenant's new runs; the run whose turn
// comes is woken at wakePriority by admission.
const queuedPriority = -10

// wakeHandler enqueues the executor's wake events at wakePriority, noting
// when each run was first woken (woken) so its reconcile can time its wait.
type wakeHandler struct{ woken *wakeTimes }

func (wakeHandler) Create(context.Context, event.TypedCreateEvent[client.Object], workqueue.TypedRateLimitingInterface[reconcile.Request]) {
}
func (wakeHandler) Update(context.Context, event.TypedUpdateEvent[client.Object], workqueue.TypedRateLimitingInterface[reconcile.Request]) {
}
func (wakeHandler) Delete(context.Context, event.TypedDeleteEvent[client.Object], workqueue.TypedRateLimitingInterface[reconcile.Request]) {
}

func (h wakeHandler) Generic(_ context.Context, e event.TypedGenericEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)}
	h.woken.mark(req.NamespacedName, time.Now())
	if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(wakePriority)}, req)
		return
	}
	q.Add(req)
}

var _ handler.EventHandler = wakeHandler{}

// wakeEvent is the event that re-queues one run.
func wakeEvent(namespace, name string) event.GenericEvent {
	return event.GenericEvent{Object: &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}}
}

func wakeOf(run *arv1.AgentRun) event.GenericEvent { return wakeEvent(run.Namespace, run.Name) }

// created passes only creations: a fork waiting for its source
// (ForkSourceMissing) is woken when a run of that name is created.
type created struct{ predicate.Funcs }

func (created) Create(event.CreateEvent) bool   { return true }
func (created) Update(event.UpdateEvent) bool   { return false }
func (created) Delete(event.DeleteEvent) bool   { return false }
func (created) Generic(event.GenericEvent) bool { return false }
