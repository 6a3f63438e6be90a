package controllers

import (
	"context"

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
		OutputInstructions: spec.instructions, Messages: st.Inbox,
	}
	if stage != nil {
		req.Script, req.SystemPrompt = stage.Script, stage.Prompt()
	}
	call := steps.ModelCall{
		Run: steps.RunRef(run), Agent: f.Blueprint.Agent.Name, Intent: intent, Provider: res.provider,
		SecretVersion: res.secretVersion, Check: spec.check, BreakerKey: breakerKey(run.Namespace, res.provider.Name),
	}
	if intent.Purpose == journal.PurposeTitle {
		// The titling call: the task alone, a short answer, no turns.
		req.Purpose, req.Script, req.SystemPrompt, req.OutputInstructions = journal.PurposeTitle, nil, "", ""
		req.Task = "Give this task a short title of at most eight words. Answer with the title only, no quotes.\n\nTask: " + run.Spec.Task
		call.Request = req
		return call, nil
	}
	for _, t := range st.Turns {
		turn := providers.Turn{Assistant: t.Text, Tools: t.Tools, Messages: t.Messages}
		switch {
		case t.Rejected != "":
			turn.Feedback = "Your output was refused: " + t.Rejected + ". Submit corrected output with the complete tool."
		case t.Refused != "":
			turn.Feedback = "Your move was refused: " + t.Refused + "."
		}
		req.History = append(req.History, turn)
	}
	req.Document, req.Directive = documentOf(&st, f.Blueprint), st.Directive
	if f.offer != nil {
		req.Tools = f.offer.tools
		s.after(func() { r.warnUnoffered(run, f.offer) })
	}
	if lf := st.LastFanOut; lf != nil && lf.Target == st.Stage {
		outputs, err := r.mergeInputs(ctx, run, f.children)
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
