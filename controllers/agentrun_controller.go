// Package controllers holds the AgentRun reconciler: a thin Reconcile that
// gets the run, keeps its finalizer, derives the facts, decides the next
// action (a pure function in internal/runstate), acts, and writes status once.
package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/circuit"
	"github.com/agentrun-dev/agentrun-operator/internal/executor"
	"github.com/agentrun-dev/agentrun-operator/internal/metrics"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
	"github.com/agentrun-dev/agentrun-operator/internal/webhook"
)

// AgentRunReconciler drives AgentRuns.
type AgentRunReconciler struct {
	// Client reads AgentRuns from the cache and writes everything.
	client.Client
	// APIReader reads ConfigMaps and Secrets uncached: the cache holds only
	// their metadata, so no secret data sits in the manager's memory.
	APIReader client.Reader
	// Recorder emits Kubernetes Events after status has been persisted.
	Recorder events.EventRecorder
	// Clock is injected so tests can control time.
	Clock clock.PassiveClock
	// Pool runs steps off the reconcile path.
	Pool *executor.Pool
	// Providers maps a provider type ("scripted", ...) to its client.
	Providers map[string]providers.Provider
	// Breakers are the providers' circuit breakers, shared by every run.
	Breakers *circuit.Breakers
	// CallbackPolicy bounds webhook delivery attempts.
	CallbackPolicy webhook.Policy
	// OnReconcile, when set, observes every reconcile (tests count them).
	OnReconcile func(types.NamespacedName)
	// MaxConcurrentReconciles bounds parallel reconciles.
	MaxConcurrentReconciles int
	// SkipNameValidation allows a second controller of the same name in one
	// process (tests restart managers).
	SkipNameValidation bool

	journals     *journalStore
	blueprints   *blueprintCache
	expectations *expectations
	stepTimeout  time.Duration
	toolCatalog  *toolCatalog
	// unstarted holds tool intents journaled while the pool was full: never
	// started, so safe to start later even when they are writes.
	unstarted sync.Map // executor.Key -> struct{}
}

// +kubebuilder:rbac:groups=agentrun.dev,resources=agentruns,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=agentrun.dev,resources=agentruns/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=agentrun.dev,resources=agentruns/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch

// Reconcile moves one AgentRun forward.
func (r *AgentRunReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.OnReconcile != nil {
		r.OnReconcile(req.NamespacedName)
	}
	run := &arv1.AgentRun{}
	if err := r.Get(ctx, req.NamespacedName, run); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !run.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, run)
	}
	if controllerutil.AddFinalizer(run, arv1.Finalizer) {
		// Persist the finalizer before any work, so deletion always lets us
		// stop what we started. The update does not change the generation,
		// so carry on in this reconcile with the updated object.
		if err := r.Update(ctx, run); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
	}
	if run.Status.Phase.IsTerminal() {
		// Terminal is final: a spec edit after the end is observed, never
		// acted on (a fixed blueprint cannot be resumed into).
		return ctrl.Result{}, r.observeTerminal(ctx, run)
	}

	before := run.Status.DeepCopy()
	now := r.Clock.Now()

	var (
		facts   *facts
		action  runstate.Action
		outcome actOutcome
		err     error
	)
	// Acting may change the facts (a snapshot taken, an answer journaled);
	// then derive and decide again, so one reconcile goes as far as it can
	// and status is still written once.
	for range 4 {
		if facts, err = r.derive(ctx, run, now); err != nil {
			return ctrl.Result{}, err
		}
		action = runstate.Decide(facts.Facts)
		if outcome, err = r.act(ctx, run, facts, action); err != nil {
			return ctrl.Result{}, err
		}
		if !outcome.again {
			break
		}
	}
	project(run, facts, action, outcome, now)

	if equality.Semantic.DeepEqual(before, &run.Status) {
		return outcome.result(), nil
	}
	run.Status.UpdatedAt = ptrTime(now)
	if err := r.Status().Update(ctx, run); err != nil {
		if apierrors.IsConflict(err) {
			// A newer version of the run is already queued; its reconcile
			// re-derives everything this one did.
			return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil
		}
		return ctrl.Result{}, fmt.Errorf("writing status: %w", err)
	}
	r.emitEvents(run, before)
	if run.Status.Phase.IsTerminal() {
		r.journals.Forget(run.UID)
		r.blueprints.Forget(run.UID)
	}
	r.deliverCallback(run)
	return outcome.result(), nil
}

// observeTerminal stamps a terminal run's status with the generation it saw.
func (r *AgentRunReconciler) observeTerminal(ctx context.Context, run *arv1.AgentRun) error {
	defer r.deliverCallback(run)
	if err := r.settleAnswersOfFinishedRun(ctx, run); err != nil {
		return err
	}
	// A finished run is never folded again: drop its in-memory copies.
	r.journals.Forget(run.UID)
	r.blueprints.Forget(run.UID)
	if run.Status.ObservedGeneration == run.Generation {
		return nil
	}
	run.Status.ObservedGeneration = run.Generation
	setConditions(run, false)
	return client.IgnoreNotFound(r.Status().Update(ctx, run))
}

// reconcileDelete stops in-flight work and releases the finalizer. Owned
// objects (journal, snapshot, output, children) go with the run through
// their owner references.
func (r *AgentRunReconciler) reconcileDelete(ctx context.Context, run *arv1.AgentRun) error {
	r.Pool.Cancel(run.UID)
	// Delete children first and keep the finalizer until they are gone, so
	// no child outlives its parent even where no garbage collector runs.
	children, err := r.listChildren(ctx, run)
	if err != nil {
		return err
	}
	if len(children) > 0 {
		for i := range children {
			if children[i].DeletionTimestamp.IsZero() {
				if err := r.Delete(ctx, &children[i]); client.IgnoreNotFound(err) != nil {
					return fmt.Errorf("deleting child %s: %w", children[i].Name, err)
				}
			}
		}
		return nil // each child's deletion re-queues this run
	}
	r.expectations.drop(run.UID)
	r.journals.Forget(run.UID)
	r.blueprints.Forget(run.UID)
	if controllerutil.RemoveFinalizer(run, arv1.Finalizer) {
		return client.IgnoreNotFound(r.Update(ctx, run))
	}
	return nil
}

// emitEvents reports phase changes and parks, after status persisted, with
// the remedy in the message so `kubectl describe` shows what to do.
func (r *AgentRunReconciler) emitEvents(run *arv1.AgentRun, before *arv1.AgentRunStatus) {
	st := &run.Status
	if w := st.WaitingOn; w != nil && (before.WaitingOn == nil || before.WaitingOn.Reason != w.Reason || before.WaitingOn.Blocker != w.Blocker) {
		typ := "Normal"
		if w.NeedsAPerson {
			typ = "Warning"
		}
		r.Recorder.Eventf(run, nil, typ, string(w.Reason), "Park", "Waiting on %s: %s", w.Summary, waitMessage(w))
	}
	if before.Phase != st.Phase {
		typ, msg := "Normal", fmt.Sprintf("Phase changed from %s to %s", orNone(string(before.Phase)), st.Phase)
		if st.Phase == arv1.PhaseError {
			typ, msg = "Warning", msg+": "+st.Error
		}
		r.Recorder.Eventf(run, nil, typ, string(st.Phase), "PhaseChange", "%s", msg)
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// SetupWithManager registers the controller, its indexes and its watches.
// Runs are woken by: their own spec/metadata changes, a finished step (the
// executor's channel), and a change to a Secret or ConfigMap a parked run
// waits on (metadata-only watches mapped through the setupRefs index).
func (r *AgentRunReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Recorder == nil || r.Clock == nil || r.Pool == nil || r.APIReader == nil {
		return fmt.Errorf("AgentRunReconciler needs a Recorder, a Clock, a Pool and an APIReader")
	}
	if r.Breakers == nil {
		r.Breakers = circuit.New()
	}
	if r.CallbackPolicy.Attempts == 0 {
		r.CallbackPolicy = webhook.DefaultPolicy
	}
	r.journals = newJournalStore(r.Client, r.APIReader)
	r.expectations = newExpectations()
	r.blueprints = newBlueprintCache()
	r.toolCatalog = newToolCatalog()
	if r.stepTimeout == 0 {
		r.stepTimeout = 5 * time.Minute
	}
	if err := SetupIndexes(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := mgr.Add(r.Pool); err != nil {
		return err
	}
	metrics.Register(mgr.GetClient(), r.Pool)
	return ctrl.NewControllerManagedBy(mgr).
		For(&arv1.AgentRun{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{},
			predicate.AnnotationChangedPredicate{},
			predicate.LabelChangedPredicate{},
			deletionPredicate{},
		))).
		Owns(&arv1.AgentRun{}, builder.WithPredicates(childChanged{})).
		Watches(&arv1.AgentRunAnswer{}, handler.EnqueueRequestsFromMapFunc(runForAnswer), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.runsWaitingOn("Secret")), builder.WithPredicates(dependencyChanged{})).
		WatchesMetadata(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.runsWaitingOn("ConfigMap")), builder.WithPredicates(dependencyChanged{}, notOwnedByAgentRun{})).
		WatchesRawSource(source.Channel(r.Pool.Events(), &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.MaxConcurrentReconciles, 1), SkipNameValidation: &r.SkipNameValidation}).
		Named("agentrun").
		Complete(r)
}

// runsWaitingOn maps a Secret or ConfigMap to exactly the runs whose
// setupRefs name it.
func (r *AgentRunReconciler) runsWaitingOn(kind string) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []ctrl.Request {
		var runs arv1.AgentRunList
		if err := r.List(ctx, &runs, client.InNamespace(obj.GetNamespace()),
			client.MatchingFields{IndexSetupRefs: kind + "/" + obj.GetName()}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing runs waiting on object", "kind", kind, "name", obj.GetName())
			return nil
		}
		reqs := make([]ctrl.Request, 0, len(runs.Items))
		for i := range runs.Items {
			reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&runs.Items[i])})
		}
		return reqs
	}
}

type reconcileRequest = ctrl.Request

func ptrTime(t time.Time) *metav1Time { v := metav1Time{Time: t}; return &v }
