package steps

import (
	"fmt"
	"strings"

	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// The words the operator itself puts into model calls, beside the step
// that sends them: the titling task, the summary a compact edge asks for,
// and how to leave a stage. The blueprint's own prompts are its author's.

// TitleTask is the titling call's task: the run's task, and a request for
// a short title only.
func TitleTask(task string) string {
	return "Give this task a short title of at most eight words. Answer with the title only, no quotes.\n\nTask: " + task
}

// CompactTask is the summary a compact (or summarize) edge asks for before
// stage takes its first turn, with the edge's compact_prompt (prompt) if it
// has one, then the run's task.
func CompactTask(stage, prompt, task string) string {
	t := fmt.Sprintf("Summarize the work on this task so far for the next stage, %q: what was decided, what was found, what is left to do. Answer with the summary only.", stage)
	if prompt != "" {
		t += "\n\n" + prompt
	}
	return t + "\n\nTask: " + task
}

// TransitionPrompt tells the model how to leave the stage: its
// transition_prompt (else a built-in sentence), then the edges it may
// choose, that is the llm_choice edges whose targets have revisits left.
// Edges that fire on runtime signals are never offered: a dead_end edge
// offered as a choice would be a shortcut past the pipeline.
func TransitionPrompt(st *journal.State, bp *blueprint.Blueprint, stage *blueprint.Stage) string {
	choices := st.Choices(bp, stage)
	if len(choices) == 0 {
		return stage.TransitionPrompt
	}
	var b strings.Builder
	if stage.TransitionPrompt != "" {
		b.WriteString(stage.TransitionPrompt)
	} else {
		b.WriteString("When this stage's work is done, call the transition tool with the target that fits best.")
	}
	b.WriteString("\nTargets:")
	for _, t := range choices {
		b.WriteString("\n- " + t.Target)
		if t.Hint != "" {
			b.WriteString(": " + t.Hint)
		}
	}
	if stage.AllowComplete {
		b.WriteString("\nOr call complete to finish the whole run.")
	}
	return b.String()
}
