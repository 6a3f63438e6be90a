package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/controllers/agentrun/children"
	"github.com/agentrun-dev/agentrun-operator/controllers/agentrun/queue"
	"github.com/agentrun-dev/agentrun-operator/internal/caches"
	"github.com/agentrun-dev/agentrun-operator/internal/executor"
	"github.com/agentrun-dev/agentrun-operator/internal/perrun"
	"github.com/agentrun-dev/agentrun-operator/internal/steps"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
	"github.com/agentrun-dev/agentrun-operator/internal/store/router"
)

// Retention is how long finished runs are kept when their spec does not
// say (spec.ttlSecondsAfterFinished).
type Retention struct {
	// Default is the manager-wide ttlSecondsAfterFinished; nil keeps runs
	// forever.
	Default *time.Duration
}

// gitOpsMarks are the labels and annotations GitOps tools put on what they
// apply. A run they manage gets no default retention: deleting it would
// make the tool apply it again, and the run would run (and bill) again.
var gitOpsMarks = []string{
	"argocd.argoproj.io/instance",
	"argocd.argoproj.io/tracking-id",
	"kustomize.toolkit.fluxcd.io/name",
	"helm.toolkit.fluxcd.io/name",
}

// FinishedRunTransform keeps a finished run in the informer cache as the
// stub the controller still reads (caches.FinishedRunTransform), with the
// GitOps marks retention reads.
func FinishedRunTransform() toolscache.TransformFunc {
	return caches.FinishedRunTransform(gitOpsMarks)
}

// ttlOf is how long after finishing the run is deleted; false keeps it.
func (rt Retention) ttlOf(run *arv1.AgentRun) (time.Duration, bool) {
	if t := run.Spec.TTLSecondsAfterFinished; t != nil {
		return time.Duration(*t) * time.Second, true
	}
	if rt.Default == nil {
		return 0, false
	}
	for _, m := range gitOpsMarks {
		if run.Labels[m] != "" || run.Annotations[m] != "" {
			return 0, false
		}
	}
	return *rt.Default, true
}

// requeue adds to res the requeue that deletes a finished run when its
// time comes. A run whose webhook is not settled waits for it: the
// delivery's report wakes it.
func (rt Retention) requeue(run *arv1.AgentRun, now time.Time, res ctrl.Result) ctrl.Result {
	ttl, ok := rt.ttlOf(run)
	if !ok || callbackDue(run) || run.Status.FinishedAt == nil {
		return res
	}
	left := max(run.Status.FinishedAt.Add(ttl).Sub(now), time.Millisecond)
	if res.RequeueAfter == 0 || left < res.RequeueAfter {
		res.RequeueAfter = left
	}
	return res
}

// finisher is the path of a run that has finished or is being deleted:
// it settles what a finished run still owes (the fate of its answers, its
// webhook, the generation it saw, its archive) and deletes it with all it
// owns once its retention has passed; for a run being deleted it stops its
// work and drops the finalizer older versions added.
type finisher struct {
	client client.Client
	// reader reads a finished run's full record (the cache keeps a stub).
	reader   client.Reader
	clock    clock.PassiveClock
	journals *router.Router
	runs     *caches.Runs
	children *children.Children
	queue    *queue.Queue
	// archive archives finished runs (archive.go); retention says when
	// they are deleted.
	archive   *archiver
	retention Retention
	// pool runs the runs' steps, cancelled when a run goes; runState is
	// what this process keeps of each run (registry.go).
	pool     *executor.Pool
	runState *perrun.Registry
	// deliveries hold the webhook deliveries' reports; deliver sends a
	// delivery that is due (callback.go).
	deliveries *steps.Deliveries
	deliver    func(context.Context, *arv1.AgentRun)
}

// finished settles what a finished run still owes: the fate of answers it
// never got to record, its webhook, the generation it saw, and its
// deletion once its retention has passed.
func (fin *finisher) finished(ctx context.Context, run *arv1.AgentRun) (ctrl.Result, error) {
	fin.journals.Forget(run.UID) // a finished run is never folded again
	before := run.DeepCopy()
	settled, err := fin.settleAnswers(ctx, run)
	if err != nil {
		return ctrl.Result{}, err
	}
	if run.Status.ObservedGeneration != run.Generation {
		// Its spec was edited after the end: observed, never acted on. The
		// cache keeps only a stub of a finished run; stamp the full record.
		if err := fin.reader.Get(ctx, client.ObjectKeyFromObject(run), run); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		before = run.DeepCopy()
		run.Status.ObservedGeneration = run.Generation
		setConditions(run, conditionInputs{})
	}
	if !fin.archive.archived(run) && !fin.archive.waitsForStore(run) {
		// A replica that died between the run's end and giving back its
		// quota holds left them: given back before the archive (once).
		fin.queue.End(ctx, run)
		stored, archived, err := fin.archive.finished(ctx, run)
		if err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		before, run = stored, archived
	}
	undo := fin.recordDelivery(run)
	if _, err := fin.runs.PatchStatus(ctx, before, run); err != nil {
		undo()
		if errors.Is(err, caches.ErrStatusConflict) {
			return ctrl.Result{RequeueAfter: time.Millisecond}, nil
		}
		return ctrl.Result{}, err
	}
	fin.deliver(ctx, run)
	if !fin.archive.archived(run) {
		return ctrl.Result{RequeueAfter: archiveRetry}, nil // kept until archived
	}
	now := fin.clock.Now()
	res := fin.retention.requeue(run, now, ctrl.Result{})
	if ttl, ok := fin.retention.ttlOf(run); ok && settled && !callbackDue(run) && run.Status.FinishedAt != nil && !now.Before(run.Status.FinishedAt.Add(ttl)) {
		return ctrl.Result{}, fin.deleteTree(ctx, run)
	}
	return res, nil
}

// deleteTree deletes a finished run with everything it owns, leaves first:
// its children (each with what it owns), its journal and output, then the
// run, so a run that is gone left nothing behind. Owner references would
// let the garbage collector do it (a foreground deletion), but the
// collector is one rate-limited client for the whole cluster
// (kube-controller-manager's --kube-api-qps, 20 requests/s by default, and
// several requests per object it deletes): retention would go at its
// pace. Deleted leaves first, nothing is left for the collector to do.
func (fin *finisher) deleteTree(ctx context.Context, run *arv1.AgentRun) error {
	children, err := fin.children.List(ctx, run)
	if err != nil {
		return err
	}
	for i := range children {
		if err := fin.deleteTree(ctx, &children[i]); err != nil {
			return err
		}
	}
	if err := deleteObjectsOf(ctx, fin.client, run.Namespace, run.UID); err != nil {
		return fmt.Errorf("deleting the objects of run %s: %w", run.Name, err)
	}
	err = fin.client.Delete(ctx, run, client.Preconditions{UID: &run.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting run %s: %w", run.Name, err)
	}
	fin.pool.Cancel(run.UID)
	fin.runState.Forget(run.UID)
	return nil
}

// deleteObjectsOf deletes the ConfigMaps a run owns (its journal chunks,
// which hold its output). The garbage collector would too, once the run is
// gone, in its own time (see deleteTree and forgetGone).
func deleteObjectsOf(ctx context.Context, c client.Client, ns string, uid types.UID) error {
	return c.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns),
		client.MatchingLabels{configmaps.LabelRunUID: string(uid)})
}

// deleted stops the work of a run being deleted whose deletion
// waits: on the finalizer older versions added, removed here, or on the
// garbage collector (kubectl delete --cascade=foreground). Runs are no
// longer given a finalizer (it cost a write per run). Its children go when
// it is gone (forgetGone), or before, by the collector, in a foreground
// deletion.
func (fin *finisher) deleted(ctx context.Context, run *arv1.AgentRun) error {
	fin.pool.Cancel(run.UID)
	fin.queue.End(ctx, run)
	fin.runState.Forget(run.UID)
	if !controllerutil.ContainsFinalizer(run, arv1.Finalizer) {
		return nil
	}
	orig := run.DeepCopy()
	controllerutil.RemoveFinalizer(run, arv1.Finalizer)
	return client.IgnoreNotFound(fin.client.Patch(ctx, run, client.MergeFrom(orig)))
}

// recordDelivery puts a finished delivery's report in the run's status.
// It returns a function that puts the report back, for when the status
// write fails: the delivery is then recorded later, never sent again.
func (fin *finisher) recordDelivery(run *arv1.AgentRun) (undo func()) {
	rep, ok := fin.deliveries.Take(run.UID)
	if !ok {
		return func() {}
	}
	cb := rep.Callback
	run.Status.Callback, run.Status.SetupRefs = &cb, rep.SetupRefs
	return func() { fin.deliveries.Restore(run.UID, rep) }
}
