package schedules

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
	"github.com/agentrun-dev/agentrun-operator/internal/schedule"
)

// +kubebuilder:rbac:groups=agentrun.dev,resources=agentrunschedules,verbs=get;list;watch
// +kubebuilder:rbac:groups=agentrun.dev,resources=agentrunschedules/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=agentrun.dev,resources=agentrunschedules/finalizers,verbs=update

// Reconciler creates the runs of AgentRunSchedules at their times
// (docs/scheduling.md). It keeps no state of its own: what has run is the
// schedule's status.lastScheduleTime and the runs themselves, which are
// named after their scheduled time, so a create repeated after a crash
// meets the first one (AlreadyExists) and never makes a second.
type Reconciler struct {
	// Client reads schedules and runs from the cache and writes.
	Client client.Client
	// Fresh reads runs from the API server when a time is due, so a run
	// created a moment ago and not yet cached still counts as active.
	// With runs divided among replicas the cache holds none, and Fresh
	// serves every read.
	Fresh client.Reader
	// Uncached says the manager's cache holds no runs (sharded managers).
	Uncached bool
	Clock    clock.PassiveClock
	Recorder events.EventRecorder
}

// Event reasons of an AgentRunSchedule.
const (
	// EventRunCreated: a run was created for a scheduled time.
	EventRunCreated = "RunCreated"
	// EventRunSkipped: a time came while a run was active under Forbid.
	EventRunSkipped = "RunSkipped"
	// EventRunReplaced: an active run was cancelled for a new one (Replace).
	EventRunReplaced = "RunReplaced"
	// EventRunDeleted: a finished run beyond the history limit was deleted.
	EventRunDeleted = "RunDeleted"
	// EventMissSchedule (Warning): a time was given up because its run
	// could not be created within startingDeadlineSeconds (CronJob's
	// reason); status.missedCount counts them.
	EventMissSchedule = "MissSchedule"
)

// Reconcile brings one schedule up to date: it trims the history, checks
// the spec and template, creates the run that is due (if any, under the
// concurrency policy) and requeues at the next time.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var s arv1.AgentRunSchedule
	if err := r.Client.Get(ctx, req.NamespacedName, &s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !s.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	before := s.DeepCopy()
	now := r.Clock.Now()
	res, err := r.reconcile(ctx, &s, now)
	s.Status.ObservedGeneration = s.Generation
	if perr := r.patchStatus(ctx, before, &s); perr != nil {
		return ctrl.Result{}, errors.Join(err, perr)
	}
	return res, err
}

func (r *Reconciler) reconcile(ctx context.Context, s *arv1.AgentRunSchedule, now time.Time) (ctrl.Result, error) {
	runs, err := r.ownedRuns(ctx, r.runReader(), s)
	if err != nil {
		return ctrl.Result{}, err
	}
	active, finished := splitRuns(runs)
	setActive(s, active)
	setLastSuccess(s, finished)
	if err := r.trimHistory(ctx, s, finished); err != nil {
		return ctrl.Result{}, err
	}
	parsed, err := schedule.Parse(&s.Spec)
	if err != nil {
		s.Status.NextScheduleTime = nil
		r.stall(s, arv1.ReasonInvalidSchedule, err.Error())
		return ctrl.Result{}, nil // a spec change reconciles again
	}
	if ok, err := r.templateAccepted(ctx, s); err != nil || !ok {
		s.Status.NextScheduleTime = nil
		return ctrl.Result{}, err
	}
	if s.Spec.Suspend {
		s.Status.NextScheduleTime = nil
		setWorking(s, arv1.ReasonSuspended, "spec.suspend is set: no run is created")
		return ctrl.Result{}, nil
	}
	times := parsed.Due(lastTime(s), now, startingDeadline(s))
	if times.Missed != nil {
		r.missed(s, *times.Missed, now)
	}
	if times.Due != nil {
		if err := r.runDue(ctx, s, *times.Due); err != nil {
			return ctrl.Result{}, err
		}
	}
	// A refusal of this generation's template stands; anything older (a
	// fixed schedule, a lifted suspend) gives way.
	if c := meta.FindStatusCondition(s.Status.Conditions, arv1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse || c.ObservedGeneration != s.Generation {
		setWorking(s, arv1.ReasonScheduled, "runs are created at their times")
	}
	s.Status.NextScheduleTime = &metav1.Time{Time: times.Next}
	return ctrl.Result{RequeueAfter: max(times.Next.Sub(now), 0) + 50*time.Millisecond}, nil
}

// lastTime is the latest scheduled time already dealt with: run, or
// given up as missed (so it is reported once). Before any, the schedule's
// creation.
func lastTime(s *arv1.AgentRunSchedule) time.Time {
	after := s.CreationTimestamp.Time
	for _, t := range []*metav1.Time{s.Status.LastScheduleTime, s.Status.LastMissedTime} {
		if t != nil && t.After(after) {
			after = t.Time
		}
	}
	return after
}

// startingDeadline is spec.startingDeadlineSeconds as a duration (nil:
// any lateness).
func startingDeadline(s *arv1.AgentRunSchedule) *time.Duration {
	if d := s.Spec.StartingDeadlineSeconds; d != nil {
		dd := time.Duration(*d) * time.Second
		return &dd
	}
	return nil
}

// missed records a time given up for being later than the starting
// deadline, as CronJob does with a Warning MissSchedule event; the count
// and the time go in status, and the time keeps it from being reported
// again.
func (r *Reconciler) missed(s *arv1.AgentRunSchedule, t, now time.Time) {
	s.Status.MissedCount++
	s.Status.LastMissedTime = &metav1.Time{Time: t}
	r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, EventMissSchedule, "Skip",
		"missed scheduled time %s: %s late, past startingDeadlineSeconds (%ds); no run is created for it",
		t.UTC().Format(time.RFC3339), now.Sub(t).Round(time.Second), *s.Spec.StartingDeadlineSeconds)
}

// runReader is where runs are listed from outside a due time.
func (r *Reconciler) runReader() client.Reader {
	if r.Uncached {
		return r.Fresh
	}
	return r.Client
}

// ownedRuns lists the runs the schedule created (its label, and its
// controller reference, so a run merely labelled like it is not its).
func (r *Reconciler) ownedRuns(ctx context.Context, rd client.Reader, s *arv1.AgentRunSchedule) ([]arv1.AgentRun, error) {
	var list arv1.AgentRunList
	if err := rd.List(ctx, &list, client.InNamespace(s.Namespace), client.MatchingLabels{arv1.LabelSchedule: s.Name}); err != nil {
		return nil, fmt.Errorf("listing the runs of schedule %s: %w", s.Name, err)
	}
	out := list.Items[:0]
	for _, run := range list.Items {
		if ref := metav1.GetControllerOf(&run); ref != nil && ref.UID == s.UID {
			out = append(out, run)
		}
	}
	return out, nil
}

// splitRuns divides runs into those still going and those finished.
func splitRuns(runs []arv1.AgentRun) (active, finished []arv1.AgentRun) {
	for _, run := range runs {
		if run.Status.Phase.IsTerminal() {
			finished = append(finished, run)
		} else {
			active = append(active, run)
		}
	}
	return active, finished
}

// runDue creates the run of the due time t under the concurrency policy,
// and records t as the last scheduled time once the run exists.
func (r *Reconciler) runDue(ctx context.Context, s *arv1.AgentRunSchedule, t time.Time) error {
	// The cache may not hold a run created a moment ago: decide on what
	// the API server has.
	runs, err := r.ownedRuns(ctx, r.Fresh, s)
	if err != nil {
		return err
	}
	name := schedule.RunName(s.Name, t)
	active, finished := splitRuns(runs)
	setActive(s, active)
	setLastSuccess(s, finished)
	for _, run := range runs {
		if run.Name == name {
			// Created before a crash that lost the status write.
			s.Status.LastScheduleTime = &metav1.Time{Time: t}
			return nil
		}
	}
	if len(active) > 0 {
		switch s.Spec.ConcurrencyPolicy {
		case arv1.ConcurrencyForbid:
			r.Recorder.Eventf(s, nil, corev1.EventTypeNormal, EventRunSkipped, "Skip", "%s: run %s is still active (concurrencyPolicy Forbid)", t.UTC().Format(time.RFC3339), active[0].Name)
			return nil
		case arv1.ConcurrencyReplace:
			if err := r.cancelRuns(ctx, s, active); err != nil {
				return err
			}
		}
	}
	return r.createRun(ctx, s, name, t)
}

// cancelRuns asks each active run to stop (spec.cancel), as a person would.
func (r *Reconciler) cancelRuns(ctx context.Context, s *arv1.AgentRunSchedule, runs []arv1.AgentRun) error {
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))
	for i := range runs {
		run := &runs[i]
		if run.Spec.Cancel {
			continue
		}
		if err := r.Client.Patch(ctx, run, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("cancelling run %s: %w", run.Name, err)
		}
		r.Recorder.Eventf(s, run, corev1.EventTypeNormal, EventRunReplaced, "Cancel", "cancelled run %s for the next one (concurrencyPolicy Replace)", run.Name)
	}
	return nil
}

// createRun creates the run of time t. A template the API server refuses
// becomes the Ready condition instead of an error, so it is not retried
// until the schedule changes.
func (r *Reconciler) createRun(ctx context.Context, s *arv1.AgentRunSchedule, name string, t time.Time) error {
	run := runFor(s, name, t)
	err := r.Client.Create(ctx, run)
	switch {
	case err == nil:
		s.Status.Active = append(s.Status.Active, name)
		s.Status.ActiveCount = int32(len(s.Status.Active))
		r.Recorder.Eventf(s, run, corev1.EventTypeNormal, EventRunCreated, "Create", "created run %s for %s", name, t.UTC().Format(time.RFC3339))
	case apierrors.IsAlreadyExists(err):
		// Created before a crash; the name is the time's.
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		r.stall(s, arv1.ReasonTemplateInvalid, err.Error())
		return nil
	default:
		return fmt.Errorf("creating run %s: %w", name, err)
	}
	s.Status.LastScheduleTime = &metav1.Time{Time: t}
	return nil
}

// runFor is the run of time t: the template, the schedule's label and
// the scheduled time, owned by the schedule.
func runFor(s *arv1.AgentRunSchedule, name string, t time.Time) *arv1.AgentRun {
	labels := map[string]string{}
	for k, v := range s.Spec.Template.Metadata.Labels {
		labels[k] = v
	}
	labels[arv1.LabelSchedule] = s.Name
	annotations := map[string]string{}
	for k, v := range s.Spec.Template.Metadata.Annotations {
		annotations[k] = v
	}
	annotations[arv1.AnnotationScheduledAt] = t.UTC().Format(time.RFC3339)
	yes := true
	return &arv1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: s.Namespace, Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: arv1.GroupVersion.String(), Kind: "AgentRunSchedule", Name: s.Name, UID: s.UID,
				Controller: &yes, BlockOwnerDeletion: &yes,
			}},
		},
		Spec: *s.Spec.Template.Spec.DeepCopy(),
	}
}

// templateAccepted asks the API server (a dry-run create) whether the
// template makes a valid AgentRun, once per generation of the spec, so a
// bad template shows on the schedule at once rather than at its first
// time, which may be a day away.
func (r *Reconciler) templateAccepted(ctx context.Context, s *arv1.AgentRunSchedule) (bool, error) {
	c := meta.FindStatusCondition(s.Status.Conditions, arv1.ConditionReady)
	if c != nil && c.ObservedGeneration == s.Generation {
		return c.Reason != arv1.ReasonTemplateInvalid && c.Reason != arv1.ReasonInvalidSchedule, nil
	}
	run := runFor(s, "", r.Clock.Now())
	run.GenerateName = s.Name + "-"
	err := r.Client.Create(ctx, run, client.DryRunAll)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		r.stall(s, arv1.ReasonTemplateInvalid, err.Error())
		return false, nil
	default:
		return false, fmt.Errorf("checking the template of schedule %s: %w", s.Name, err)
	}
}

// setReady sets the Ready condition at the spec's generation.
func setReady(s *arv1.AgentRunSchedule, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{
		Type: arv1.ConditionReady, Status: status, Reason: reason, Message: msg, ObservedGeneration: s.Generation,
	})
}

// setWorking is a schedule that creates runs (or would, but for suspend):
// Ready=True and no Stalled.
func setWorking(s *arv1.AgentRunSchedule, reason, msg string) {
	setReady(s, metav1.ConditionTrue, reason, msg)
	meta.RemoveStatusCondition(&s.Status.Conditions, arv1.ConditionStalled)
}

// stall is a schedule that cannot create runs until its spec changes (a
// schedule that does not parse, a template the API server refuses):
// Ready=False and Stalled=True with the same reason, as a run that cannot
// go on by itself is, and a Warning event the first time for this spec.
func (r *Reconciler) stall(s *arv1.AgentRunSchedule, reason, msg string) {
	msg = runstate.Clip(msg, 1024)
	c := meta.FindStatusCondition(s.Status.Conditions, arv1.ConditionStalled)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason || c.ObservedGeneration != s.Generation {
		r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, reason, "Schedule", "%s", msg)
	}
	setReady(s, metav1.ConditionFalse, reason, msg)
	meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{
		Type: arv1.ConditionStalled, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: s.Generation,
	})
}

// setActive records the active runs' names.
func setActive(s *arv1.AgentRunSchedule, active []arv1.AgentRun) {
	s.Status.Active = nil
	for _, run := range active {
		s.Status.Active = append(s.Status.Active, run.Name)
	}
	s.Status.ActiveCount = int32(len(s.Status.Active))
}

// setLastSuccess records when the latest Complete run finished.
func setLastSuccess(s *arv1.AgentRunSchedule, finished []arv1.AgentRun) {
	for _, run := range finished {
		at := run.Status.FinishedAt
		if run.Status.Phase != arv1.PhaseComplete || at == nil {
			continue
		}
		if last := s.Status.LastSuccessfulTime; last == nil || at.After(last.Time) {
			s.Status.LastSuccessfulTime = at.DeepCopy()
		}
	}
}

// patchStatus writes the status if it changed.
func (r *Reconciler) patchStatus(ctx context.Context, before, s *arv1.AgentRunSchedule) error {
	if statusEqual(before.Status, s.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, s, client.MergeFrom(before)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("writing the status of schedule %s: %w", s.Name, err)
	}
	return nil
}

// SetupWithManager watches schedules and the runs they own: a run
// finishing can let a Forbid schedule's missed time run and trims the
// history. Without cached runs (sharded managers) only the schedules are
// watched and runs are read at each time.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, o controller.Options) error {
	if r.Client == nil || r.Fresh == nil || r.Clock == nil || r.Recorder == nil {
		return fmt.Errorf("schedule reconciler: Client, Fresh, Clock and Recorder are required")
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&arv1.AgentRunSchedule{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{},
		)))
	if !r.Uncached {
		b = b.Owns(&arv1.AgentRun{}, builder.WithPredicates(runEnded{}))
	}
	return b.WithOptions(o).Named("agentrunschedule").Complete(r)
}

// runEnded passes a run's creation, deletion and the update that ends it:
// all a schedule needs to hear of its runs.
type runEnded struct{ predicate.Funcs }

func (runEnded) Create(event.CreateEvent) bool   { return true }
func (runEnded) Delete(event.DeleteEvent) bool   { return true }
func (runEnded) Generic(event.GenericEvent) bool { return false }
func (runEnded) Update(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*arv1.AgentRun)
	n, ok2 := e.ObjectNew.(*arv1.AgentRun)
	return ok1 && ok2 && o.Status.Phase.IsTerminal() != n.Status.Phase.IsTerminal()
}
