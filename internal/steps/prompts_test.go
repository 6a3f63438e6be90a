package steps

import (
	"strings"
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// TestTransitionPromptOffersOnlyOpenChoices: the model is offered the
// llm_choice edges whose targets have revisits left, never the edges that
// fire on runtime signals.
func TestTransitionPromptOffersOnlyOpenChoices(t *testing.T) {
	bp, err := blueprint.Parse(map[string]string{"agent.toml": `[agent]
name = "p"
[stages.review]
[stages.review.transitions.plan]
hint = "rework"
[stages.review.transitions.ship]
hint = "good"
[stages.review.transitions.answer]
condition = "dead_end"
[stages.plan]
max_revisits = 0
[stages.plan.transitions.review]
[stages.ship]
[stages.answer]
`})
	if err != nil {
		t.Fatal(err)
	}
	review, _, _ := bp.Stage("review")
	st := journal.Fold(bp, nil)
	got := TransitionPrompt(&st, bp, review)
	if !strings.Contains(got, "- plan: rework\n- ship: good") || strings.Contains(got, "answer") {
		t.Errorf("fresh run: %q", got)
	}
	// After one visit of plan (max_revisits = 0) it is no longer offered.
	st = journal.Fold(bp, []journal.Entry{
		{Seq: 0, Kind: journal.ModelCallRequested, Stage: "review"},
		{Seq: 1, Kind: journal.ModelCallCompleted, Call: 0, Response: &journal.Response{Next: "plan"}},
		{Seq: 2, Kind: journal.ModelCallRequested, Stage: "plan"},
		{Seq: 3, Kind: journal.ModelCallCompleted, Call: 2, Response: &journal.Response{Next: "review"}},
	})
	if st.Stage != "review" {
		t.Fatalf("stage %q", st.Stage)
	}
	if got := TransitionPrompt(&st, bp, review); strings.Contains(got, "plan") || !strings.Contains(got, "- ship: good") {
		t.Errorf("plan spent: %q", got)
	}
	review.TransitionPrompt = "Choose carefully."
	if got := TransitionPrompt(&st, bp, review); !strings.HasPrefix(got, "Choose carefully.\nTargets:") {
		t.Errorf("custom prompt: %q", got)
	}
}
