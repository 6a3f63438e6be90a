package schedules

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// Default history limits (CronJob's).
const (
	DefaultSuccessfulRunsHistoryLimit = 3
	DefaultFailedRunsHistoryLimit     = 1
)

// trimHistory deletes the oldest finished runs beyond the schedule's
// limits: Complete runs against successfulRunsHistoryLimit, Error and
// Cancelled ones against failedRunsHistoryLimit, in the background as
// CronJob deletes its Jobs: what a run owns (its journal, its children)
// goes after it, deleted by the garbage collector and by the AgentRun
// controller when it sees the run go (forgetGone).
func (r *Reconciler) trimHistory(ctx context.Context, s *arv1.AgentRunSchedule, finished []arv1.AgentRun) error {
	var ok, failed []arv1.AgentRun
	for _, run := range finished {
		if run.Status.Phase == arv1.PhaseComplete {
			ok = append(ok, run)
		} else {
			failed = append(failed, run)
		}
	}
	for _, part := range []struct {
		runs  []arv1.AgentRun
		limit *int32
		def   int32
	}{{ok, s.Spec.SuccessfulRunsHistoryLimit, DefaultSuccessfulRunsHistoryLimit}, {failed, s.Spec.FailedRunsHistoryLimit, DefaultFailedRunsHistoryLimit}} {
		keep := part.def
		if part.limit != nil {
			keep = *part.limit
		}
		for _, run := range oldestBeyond(part.runs, int(keep)) {
			uid := run.UID
			err := r.Client.Delete(ctx, &run, client.Preconditions{UID: &uid}, client.PropagationPolicy("Background"))
			if client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting run %s beyond the history limit: %w", run.Name, err)
			}
			r.Recorder.Eventf(s, nil, corev1.EventTypeNormal, EventRunDeleted, "Delete", "deleted finished run %s (phase %s) beyond the history limit", run.Name, run.Status.Phase)
		}
	}
	return nil
}

// oldestBeyond is the runs beyond the newest keep, by creation time
// (their names, which carry the scheduled time, break ties).
func oldestBeyond(runs []arv1.AgentRun, keep int) []arv1.AgentRun {
	if len(runs) <= keep {
		return nil
	}
	slices.SortFunc(runs, func(a, b arv1.AgentRun) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return -c
		}
		if a.Name > b.Name {
			return -1
		}
		return 1
	})
	return runs[keep:]
}

// statusEqual reports whether a schedule's status is unchanged.
func statusEqual(a, b arv1.AgentRunScheduleStatus) bool {
	return equality.Semantic.DeepEqual(a, b)
}
