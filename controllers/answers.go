package controllers

import (
	"context"
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
)

// IndexAnswerRun indexes AgentRunAnswers by the run they answer.
const IndexAnswerRun = "spec.run"

// +kubebuilder:rbac:groups=agentrun.dev,resources=agentrunanswers,verbs=get;list;watch
// +kubebuilder:rbac:groups=agentrun.dev,resources=agentrunanswers/status,verbs=get;update;patch

// answerFacts finds the answer to the run's pending checkpoint (the oldest
// unprocessed one for that point), and the answers whose fate is known but
// not yet written on them: applied ones (the journal says so) and ones for
// a question the run is not asking.
func (r *AgentRunReconciler) answerFacts(ctx context.Context, run *arv1.AgentRun, f *facts) error {
	in := f.State.Interaction
	var list arv1.AgentRunAnswerList
	if err := r.List(ctx, &list, client.InNamespace(run.Namespace), client.MatchingFields{IndexAnswerRun: run.Name}); err != nil {
		return fmt.Errorf("listing answers: %w", err)
	}
	items := list.Items
	sort.Slice(items, func(i, j int) bool {
		return items[i].CreationTimestamp.Before(&items[j].CreationTimestamp) ||
			(items[i].CreationTimestamp.Equal(&items[j].CreationTimestamp) && items[i].Name < items[j].Name)
	})
	for i := range items {
		a := &items[i]
		switch {
		case a.Status.State != "":
		case f.State.Answers[a.Name]:
			f.answerUpdates = append(f.answerUpdates, answerUpdate{a, arv1.AnswerApplied, "Applied to the run"})
		case in == nil || a.Spec.Point != in.Point.Name:
			waiting := "no question"
			if in != nil {
				waiting = fmt.Sprintf("point %q", in.Point.Name)
			}
			f.answerUpdates = append(f.answerUpdates, answerUpdate{a, arv1.AnswerRejected, fmt.Sprintf("The run waits on %s, not on point %q", waiting, a.Spec.Point)})
		case f.Answer == nil:
			f.Answer = &runstate.Answer{Name: a.Name, Approved: a.Spec.Decision == arv1.DecisionApprove, By: a.Spec.By}
		default:
			f.answerUpdates = append(f.answerUpdates, answerUpdate{a, arv1.AnswerRejected, fmt.Sprintf("Point %q was already answered by %s", a.Spec.Point, f.Answer.Name)})
		}
	}
	return nil
}

// answerUpdate is an answer's fate to record on it.
type answerUpdate struct {
	answer  *arv1.AgentRunAnswer
	state   arv1.AnswerState
	message string
}

// recordAnswers writes each answer's fate. Done after the journal entry, so
// a crash in between finds the answer applied in the journal and records
// it then: an answer is applied exactly once.
func (r *AgentRunReconciler) recordAnswers(ctx context.Context, updates []answerUpdate) error {
	for _, u := range updates {
		a := u.answer.DeepCopy()
		a.Status.State, a.Status.Message = u.state, u.message
		if u.state == arv1.AnswerApplied {
			now := metav1.NewTime(r.Clock.Now())
			a.Status.AppliedAt = &now
		}
		if err := r.Status().Update(ctx, a); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("recording answer %s: %w", a.Name, err)
		}
	}
	return nil
}

// runForAnswer maps an answer to the run it answers.
func runForAnswer(_ context.Context, o client.Object) []reconcileRequest {
	a, ok := o.(*arv1.AgentRunAnswer)
	if !ok {
		return nil
	}
	return []reconcileRequest{{NamespacedName: client.ObjectKey{Namespace: a.Namespace, Name: a.Spec.Run}}}
}
