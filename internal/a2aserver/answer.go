package a2aserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/a2aproject/a2a-go/a2a"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// answer turns a message to an input-required task into the
// AgentRunAnswer for the point the run waits on, created as the caller,
// and waits for the controller's verdict on it: a rejected answer is an
// invalid-params error carrying the controller's reason.
func (h *handler) answer(ctx context.Context, m *a2a.Message) (*arv1.AgentRun, string, error) {
	run, err := h.getRun(ctx, m.TaskID)
	if err != nil {
		return nil, "", err
	}
	state, _ := StateOf(run)
	w := run.Status.WaitingOn
	if state != a2a.TaskStateInputRequired || w == nil || w.Point == "" {
		return nil, "", fmt.Errorf("task %s is %s, not waiting for an answer: %w", m.TaskID, state, a2a.ErrInvalidParams)
	}
	spec, err := answerSpec(w, m)
	if err != nil {
		return nil, "", err
	}
	spec.Run, spec.Point, spec.By = run.Name, w.Point, h.user
	ans := &arv1.AgentRunAnswer{ObjectMeta: metav1.ObjectMeta{GenerateName: run.Name + "-a2a-", Namespace: h.ns}, Spec: spec}
	if err := h.c.Create(ctx, ans); err != nil {
		return nil, "", rpcError(err)
	}
	if err := h.verdict(ctx, ans); err != nil {
		return nil, "", err
	}
	return run, w.Point, nil
}

// verdict watches the answer until the controller applies or rejects it.
func (h *handler) verdict(ctx context.Context, ans *arv1.AgentRunAnswer) error {
	for ctx.Err() == nil {
		w, err := h.c.Watch(ctx, &arv1.AgentRunAnswerList{}, &client.ListOptions{Namespace: h.ns,
			FieldSelector: fields.OneTermEqualSelector("metadata.name", ans.Name),
			Raw:           &metav1.ListOptions{ResourceVersion: ans.ResourceVersion}})
		if err != nil {
			return rpcError(err)
		}
		for ev := range w.ResultChan() {
			a, ok := ev.Object.(*arv1.AgentRunAnswer)
			if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
				continue
			}
			ans.ResourceVersion = a.ResourceVersion
			switch a.Status.State {
			case arv1.AnswerApplied:
				w.Stop()
				return nil
			case arv1.AnswerRejected:
				w.Stop()
				return fmt.Errorf("the run rejected the answer: %s: %w", a.Status.Message, a2a.ErrInvalidParams)
			}
		}
		w.Stop()
	}
	return ctx.Err()
}

// answerData is the structured answer a data part may carry, with the
// AgentRunAnswer's own field names.
type answerData struct {
	Decision arv1.AnswerDecision `json:"decision"`
	Text     *string             `json:"text"`
	Input    json.RawMessage     `json:"input"`
}

// answerSpec reads the answer from the message: a data part with
// decision, text and input (AgentRunAnswer's fields) says exactly what to
// answer; otherwise the text is the answer to a question, the choice at a
// checkpoint offering options, or, for an approval, "approve" or "deny"
// (the words after "deny" are the reason).
func answerSpec(w *arv1.WaitingOn, m *a2a.Message) (arv1.AgentRunAnswerSpec, error) {
	for _, p := range m.Parts {
		if d, ok := p.(a2a.DataPart); ok {
			return dataAnswer(d)
		}
	}
	text := strings.TrimSpace(textOf(m))
	if text == "" {
		return arv1.AgentRunAnswerSpec{}, fmt.Errorf("the message holds no answer: %w", a2a.ErrInvalidParams)
	}
	switch {
	case w.Reason == arv1.WaitUserPrompt && !isReview(w), w.Reason == arv1.WaitSignal:
		return arv1.AgentRunAnswerSpec{Text: &text}, nil
	case w.Reason == arv1.WaitInteractionPoint && offersChoice(w):
		return arv1.AgentRunAnswerSpec{Decision: arv1.DecisionApprove, Text: &text}, nil
	case w.Reason == arv1.WaitNeedsReconciliation:
		return arv1.AgentRunAnswerSpec{}, fmt.Errorf("a dangling write is resolved with a data part {\"decision\": \"Done\"|\"Retry\"|\"Abandon\", \"text\": output}: %w", a2a.ErrInvalidParams)
	}
	word, rest, _ := strings.Cut(text, " ")
	switch strings.ToLower(strings.Trim(word, ".,:;!")) {
	case "approve", "approved", "yes", "y", "ok", "lgtm":
		return arv1.AgentRunAnswerSpec{Decision: arv1.DecisionApprove}, nil
	case "deny", "denied", "no", "n", "reject":
		spec := arv1.AgentRunAnswerSpec{Decision: arv1.DecisionDeny}
		if rest = strings.TrimSpace(rest); rest != "" {
			spec.Text = &rest
		}
		return spec, nil
	}
	return arv1.AgentRunAnswerSpec{}, fmt.Errorf("the task waits on %s; reply \"approve\" or \"deny REASON\": %w", w.Reason, a2a.ErrInvalidParams)
}

func dataAnswer(d a2a.DataPart) (arv1.AgentRunAnswerSpec, error) {
	b, err := json.Marshal(d.Data)
	if err != nil {
		return arv1.AgentRunAnswerSpec{}, fmt.Errorf("%v: %w", err, a2a.ErrInvalidParams)
	}
	var ad answerData
	if err := json.Unmarshal(b, &ad); err != nil {
		return arv1.AgentRunAnswerSpec{}, fmt.Errorf("the data part is not an answer {decision, text, input}: %v: %w", err, a2a.ErrInvalidParams)
	}
	spec := arv1.AgentRunAnswerSpec{Decision: ad.Decision, Text: ad.Text}
	if len(ad.Input) > 0 {
		in := string(ad.Input)
		spec.Input = &in
	}
	return spec, nil
}

// isReview tells a present_for_review wait from an ask_user one, as the
// controller summarises it.
func isReview(w *arv1.WaitingOn) bool {
	return w.Summary == string(arv1.WaitUserPrompt)+": review" || strings.HasPrefix(w.Question, "Review:")
}

// offersChoice: a multiple_choice or free_text checkpoint, which the run
// state writes into its question.
func offersChoice(w *arv1.WaitingOn) bool {
	for _, s := range []string{"multiple_choice: ", "free_text: "} {
		if strings.Contains(w.Question, "["+s) || strings.Contains(w.Question, "; "+s) {
			return true
		}
	}
	return false
}
