package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/executor"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/steps"
)

// stepKey names a run's step in the executor by its intent's seq.
func stepKey(run *arv1.AgentRun, seq int64) executor.Key {
	return executor.Key{Run: run.UID, Seq: seq}
}

// stepOf is the executor step of a run's call: its lane, what to wake,
// and the fence that stops it when this replica stops driving the run.
func (r *AgentRunReconciler) stepOf(run *arv1.AgentRun, seq int64, lane string) executor.Step {
	return executor.Step{Key: stepKey(run, seq), Lane: lane, Wake: wakeOf(run), Fence: r.fenceOf(run)}
}

// modelCall builds the step for a model call: the request carries the
// stage's conversation so far, what the model is offered, and, in a merge
// stage, the workers' outputs.
func (r *AgentRunReconciler) modelCall(ctx context.Context, s *scope, intent journal.Entry) (steps.ModelCall, error) {
	f, run := s.facts, s.run
	res, st := f.resolved, f.State
	stage, _, _ := f.Blueprint.Stage(st.Stage)
	spec := outputSpec(run, f.Blueprint)
	req := providers.Request{
		RunUID: string(run.UID), Seq: intent.Seq, Stage: st.Stage, Iteration: st.Iteration,
		Attempt: st.FailedAttempts, Model: res.model, Task: run.Spec.Task, APIKey: res.apiKey,
		OutputInstructions: spec.instructions, Messages: st.Inbox, Notices: st.Notices,
	}
	if stage != nil {
		req.Script, req.SystemPrompt = stage.Script, stage.Prompt()
	}
	call := steps.ModelCall{
		Run: steps.RunRef(run), Agent: f.Blueprint.Agent.Name, Intent: intent, Provider: res.provider,
		SecretVersion: res.secretVersion, ConfigVersion: res.configVersion, Check: spec.check, BreakerKey: breakerKey(run.Namespace, res.provider.Name),
		Trace: r.traceParent(s),
	}
	if res.canFailOver {
		// An overload lasting longer moves the stage to its next model.
		call.OverloadFailover = res.provider.OverloadFailover()
	}
	if len(res.skipped) > 0 {
		s.after(func() { r.reportFailover(run, res) })
	}
	switch intent.Purpose {
	case journal.PurposeTitle:
		// The titling call: the task alone, a short answer, no turns.
		req.Purpose, req.Script, req.SystemPrompt, req.OutputInstructions = journal.PurposeTitle, nil, "", ""
		req.Task = steps.TitleTask(run.Spec.Task)
		call.Request = req
		return call, nil
	case journal.PurposeCompact:
		call.Request = compactRequest(req, st, run.Spec.Task)
		return call, nil
	}
	req.History = append(history(st.Carried()), history(st.Turns)...)
	req.StageNote = st.Note()
	if stage != nil {
		req.TransitionPrompt = steps.TransitionPrompt(&st, f.Blueprint, stage)
	}
	req.Document, req.Directive, req.Choices = documentOf(&st, f.Blueprint), st.Directive, st.PointChoices
	if f.offer != nil {
		req.Tools = f.offer.tools
		s.after(func() { r.warnUnoffered(run, f.offer) })
	}
	if stage != nil && st.Iteration == 0 && st.FailedAttempts == 0 && !measurable(stage, req.Tools) {
		s.after(func() { r.warnUnmeasured(run, stage) })
	}
	if lf := st.LastFanOut; lf != nil && lf.Target == st.Stage {
		outputs, err := r.children.MergeInputs(ctx, f.children)
		if err != nil {
			return call, err
		}
		req.ChildOutputs = outputs
	}
	call.Request = req
	return call, nil
}

// documentOf is the region a call of the current stage is given, with its
// content as the journal holds it.
func documentOf(st *journal.State, bp *blueprint.Blueprint) *providers.Document {
	name, ok := st.Document(bp)
	if !ok {
		return nil
	}
	return &providers.Document{Name: name, Content: st.Regions[name].Content}
}

// history is the turns as the model is told them: each answer with its
// tool calls, the run's tools' and its own moves', and what came of each;
// a refusal of the move it asked for is the result of the call that asked
// (feedback after the answer when no call did: an always edge, a stage
// that completes by itself).
func history(turns []journal.Turn) []providers.Turn {
	out := make([]providers.Turn, 0, len(turns))
	for _, t := range turns {
		turn := providers.Turn{Assistant: t.Text, Tools: t.Tools, Messages: t.Messages}
		refusal := ""
		switch {
		case t.Rejected != "":
			refusal = "Your output was refused: " + t.Rejected + ". Submit corrected output with the complete tool."
		case t.Refused != "":
			refusal = "That was refused: " + t.Refused + "."
		}
		if len(t.Moves) > 0 {
			turn.Tools = append(slices.Clip(turn.Tools), moveResults(t.Moves, refusal)...)
		}
		if refusal != "" && !slices.ContainsFunc(t.Moves, deciding) {
			turn.Feedback = refusal
		}
		turn.Feedback = withNotices(turn.Feedback, t.Notices)
		out = append(out, turn)
	}
	return out
}

// deciding: the move is the answer's transition or completion (the first
// well-formed one; later ones are ignored).
func deciding(m journal.Move) bool {
	return m.Ignored == "" && (m.Name == providers.ToolTransition || m.Name == providers.ToolComplete)
}

// moveResults are the results the model is told of its calls to the
// operator's own moves: the refusal, if any, for the one that decided;
// that it was taken up, or why nothing acted on it, for the others.
func moveResults(moves []journal.Move, refusal string) []journal.ToolResult {
	out := make([]journal.ToolResult, 0, len(moves))
	for _, m := range moves {
		r := journal.ToolResult{ToolCall: m.ToolCall}
		switch {
		case m.Ignored != "":
			r.Result, r.IsError = "Not acted on: "+m.Ignored+".", true
		case deciding(m) && refusal != "":
			r.Result, r.IsError = refusal, true
		default:
			r.Result = moveTaken(m)
		}
		out = append(out, r)
	}
	return out
}

// moveTaken is what the run tells the model of a move it took up.
func moveTaken(m journal.Move) string {
	var a struct {
		Target    string   `json:"target"`
		Blueprint string   `json:"blueprint"`
		Items     []string `json:"items"`
		Seconds   float64  `json:"seconds"`
	}
	_ = json.Unmarshal([]byte(m.Arguments), &a)
	switch m.Name {
	case providers.ToolTransition:
		return fmt.Sprintf("Transition to stage %q accepted.", a.Target)
	case providers.ToolComplete:
		return "Completion accepted."
	case providers.ToolSpawnAgent:
		return fmt.Sprintf("Sub-agent from blueprint %q requested.", a.Blueprint)
	case providers.ToolFanOut:
		return fmt.Sprintf("Fan-out of %d items requested.", len(a.Items))
	case providers.ToolSleep:
		return fmt.Sprintf("Sleep of %d seconds requested.", int(a.Seconds))
	}
	return "Accepted."
}

// withNotices adds the operator's notices that followed an answer (the
// sub-agent results the drain delivered) to what the model is told after
// it, so each reaches the model as a user message on every wire.
func withNotices(feedback string, notices []string) string {
	if len(notices) == 0 {
		return feedback
	}
	return strings.TrimSpace(feedback + "\n\n" + strings.Join(notices, "\n\n"))
}

// compactRequest is the summarization a compact (or summarize) edge asks
// for before the stage it enters takes its first turn: the carried turns,
// and the edge's compact_prompt if it has one.
func compactRequest(req providers.Request, st journal.State, task string) providers.Request {
	job := st.Compacting()
	req.Purpose, req.Script, req.SystemPrompt, req.OutputInstructions, req.Tools = journal.PurposeCompact, nil, "", "", nil
	req.History = history(job.Turns)
	req.Task = steps.CompactTask(st.Stage, job.Prompt, task)
	return req
}

// measurable: no stuck edge of the stage relies on edits it cannot see.
// stuck_after_same_file_edits counts write_file and edit_file calls, the
// operator's only view of files (it has no workdir); a stage offering
// neither could never reach that threshold.
func measurable(stage *blueprint.Stage, tools []providers.ToolSpec) bool {
	for _, t := range stage.Transitions {
		if t.Stuck == nil || t.Stuck.SameFileEdits == 0 {
			continue
		}
		return slices.ContainsFunc(tools, func(s providers.ToolSpec) bool { return s.Name == "write_file" || s.Name == "edit_file" })
	}
	return true
}

// quotaCharge sets what the model call reserves against the run's quotas
// (queue.Charge). fresh says the journal does not hold the intent yet: a
// refused fresh intent was never dispatched, so it is marked unstarted.
func (r *AgentRunReconciler) quotaCharge(ctx context.Context, s *scope, call *steps.ModelCall, fresh bool) error {
	res := s.facts.resolved
	if res == nil {
		return nil
	}
	var refused func()
	if fresh {
		k, lost := stepKey(s.run, call.Intent.Seq), call.Intent.Lost
		refused = func() { r.unstarted.mark(k, lost) }
	}
	return r.queue.Charge(ctx, s.run, call, res.provider, res.model, s.now, refused)
}
