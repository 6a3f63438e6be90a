package controllers

import (
	"context"
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// IndexAnswerRun indexes AgentRunAnswers by the run they answer.
const IndexAnswerRun = "spec.run"

// +kubebuilder:rbac:groups=agentrun.dev,resources=agentrunanswers,verbs=get;list;watch
// +kubebuilder:rbac:groups=agentrun.dev,resources=agentrunanswers/status,verbs=get;update;patch

// answerFacts finds the answer to the question the run asks now (the
// oldest unprocessed one that fits it), and the answers whose fate is known
// but not yet written on them: applied ones (the journal says so), ones for
// a question the run is not asking, and ones that do not fit the question
// (a choice not offered, input failing its schema, the wrong decision).
func (r *AgentRunReconciler) answerFacts(ctx context.Context, run *arv1.AgentRun, f *facts) error {
	var list arv1.AgentRunAnswerList
	if err := r.client.List(ctx, &list, client.InNamespace(run.Namespace), client.MatchingFields{IndexAnswerRun: run.Name}); err != nil {
		return fmt.Errorf("listing answers: %w", err)
	}
	items := list.Items
	sort.Slice(items, func(i, j int) bool {
		return items[i].CreationTimestamp.Before(&items[j].CreationTimestamp) ||
			(items[i].CreationTimestamp.Equal(&items[j].CreationTimestamp) && items[i].Name < items[j].Name)
	})
	var asked *string // computed once, and only when an answer is open
	for i := range items {
		a := &items[i]
		switch {
		case a.Status.State != "":
			continue
		case f.State.Answers[a.Name]:
			f.answerUpdates = append(f.answerUpdates, answerUpdate{a, arv1.AnswerApplied, "Applied to the run"})
			continue
		case f.State.Outcome != journal.OutcomeNone:
			f.answerUpdates = append(f.answerUpdates, answerUpdate{a, arv1.AnswerRejected, "The run has finished"})
			continue
		}
		if asked == nil {
			p := runstate.AskedPoint(f.Facts)
			asked = &p
		}
		ans, err := runstate.CheckAnswer(&f.State, *asked, f.Tool, answerSpec(a))
		switch {
		case err != nil:
			f.answerUpdates = append(f.answerUpdates, answerUpdate{a, arv1.AnswerRejected, clipTo(capitalize(err.Error()), 1024)})
		case f.Answer == nil:
			f.Answer = ans
		default:
			f.answerUpdates = append(f.answerUpdates, answerUpdate{a, arv1.AnswerRejected, fmt.Sprintf("Point %q was already answered by %s", a.Spec.Point, f.Answer.Name)})
		}
	}
	return nil
}

// answerSpec is the answer as the run state checks it; args as JSON text.
func answerSpec(a *arv1.AgentRunAnswer) runstate.AnswerSpec {
	s := runstate.AnswerSpec{Name: a.Name, By: a.Spec.By, Point: a.Spec.Point, Decision: string(a.Spec.Decision),
		Text: a.Spec.Text, Input: a.Spec.Input, Reason: a.Spec.Reason}
	if a.Spec.Args != nil {
		raw := string(a.Spec.Args.Raw)
		s.Args = &raw
	}
	return s
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
func recordAnswers(ctx context.Context, c client.Client, clk clock.PassiveClock, updates []answerUpdate) error {
	for _, u := range updates {
		a := u.answer.DeepCopy()
		a.Status.State, a.Status.Message = u.state, u.message
		if u.state == arv1.AnswerApplied {
			now := metav1.NewTime(clk.Now())
			a.Status.AppliedAt = &now
		}
		if err := c.Status().Update(ctx, a); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("recording answer %s: %w", a.Name, err)
		}
	}
	return nil
}

// runForAnswer maps an answer to the run it answers.
func runForAnswer(_ context.Context, o client.Object) []ctrl.Request {
	a, ok := o.(*arv1.AgentRunAnswer)
	if !ok {
		return nil
	}
	return []ctrl.Request{{NamespacedName: client.ObjectKey{Namespace: a.Namespace, Name: a.Spec.Run}}}
}

// settleAnswers records the fate of answers a finished run
// never got to record: ones its journal applied (the last reconcile ended
// before writing it) are Applied, any other is Rejected, so no answer is
// left without a state. It reports whether every answer is settled.
func (fin *finisher) settleAnswers(ctx context.Context, run *arv1.AgentRun) (bool, error) {
	var list arv1.AgentRunAnswerList
	if err := fin.client.List(ctx, &list, client.InNamespace(run.Namespace), client.MatchingFields{IndexAnswerRun: run.Name}); err != nil {
		return false, fmt.Errorf("listing answers: %w", err)
	}
	var open []*arv1.AgentRunAnswer
	for i := range list.Items {
		if list.Items[i].Status.State == "" {
			open = append(open, &list.Items[i])
		}
	}
	if len(open) == 0 {
		return true, nil
	}
	entries, err := fin.journals.Entries(ctx, store.RefOf(run))
	if err != nil {
		return false, err
	}
	applied := journal.AppliedAnswers(entries)
	var updates []answerUpdate
	for _, a := range open {
		if applied[a.Name] {
			updates = append(updates, answerUpdate{a, arv1.AnswerApplied, "Applied to the run"})
		} else {
			updates = append(updates, answerUpdate{a, arv1.AnswerRejected, fmt.Sprintf("The run has finished (%s)", run.Status.Phase)})
		}
	}
	return true, recordAnswers(ctx, fin.client, fin.clock, updates)
}
