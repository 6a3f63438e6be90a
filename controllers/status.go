package controllers

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/money"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
)

type metav1Time = metav1.Time

// project writes the run record from the facts and the decision: the one
// place status is computed, so phase, waitingOn, conditions and counters
// always agree.
func project(run *arv1.AgentRun, f *facts, a runstate.Action, o actOutcome, now time.Time) {
	st := &run.Status
	prev := st.DeepCopy()
	t := metav1.NewTime(now)
	st.ObservedGeneration = run.Generation
	if st.StartedAt == nil {
		st.StartedAt = &t
	}
	if p := run.GetOwnerReferences(); len(p) > 0 {
		for _, ref := range p {
			if ref.Controller != nil && *ref.Controller && ref.Kind == "AgentRun" {
				st.ParentRun = ref.Name
			}
		}
	}
	state := f.State
	if bp := f.Blueprint; bp != nil {
		st.AgentName = bp.Agent.Name
		st.NumStages = int32(len(bp.Stages))
	}
	if f.Spawned {
		st.BlueprintSnapshot = ownedName(run, "blueprint")
		st.CurrentStage = state.Stage
		st.StageIndex = int32(state.StageIndex)
		st.Iteration = int32(state.Iteration)
		st.Stage = fmt.Sprintf("%s %d/%d", state.Stage, state.StageIndex+1, st.NumStages)
	}

	st.Error = ""
	switch {
	case a.Kind == runstate.ActFail:
		st.Phase, st.Error = arv1.PhaseError, clipTo(a.Message, 4000)
	case state.Outcome == journal.OutcomeComplete:
		st.Phase = arv1.PhaseComplete
	case state.Outcome == journal.OutcomeError:
		st.Phase, st.Error = arv1.PhaseError, clipTo(state.Message, 4000)
	case state.Outcome == journal.OutcomeCancelled:
		st.Phase = arv1.PhaseCancelled
	case f.Paused:
		st.Phase = arv1.PhasePaused
	case a.Kind == runstate.ActPark:
		st.Phase = arv1.PhaseWaitingInput
	case state.NextSeq == 0:
		st.Phase = arv1.PhaseStarting
	default:
		st.Phase = arv1.PhaseRunning
	}

	st.WaitingOn, st.SetupRefs = nil, nil
	if st.Phase == arv1.PhaseWaitingInput {
		st.WaitingOn = runstate.DeriveWaitingOn(a.Markers, prev.WaitingOn, now)
		if a.Markers.Setup != nil {
			st.SetupRefs = a.Markers.Setup.Refs
		}
	}

	u := &st.Usage
	u.PromptTokens, u.CompletionTokens = state.Usage.Prompt, state.Usage.Completion
	u.CachedTokens, u.CacheWriteTokens = state.Usage.Cached, state.Usage.CacheWrite
	u.TotalTokens = state.Usage.Prompt + state.Usage.Completion
	u.ModelCalls = state.ModelCalls
	u.ToolCalls = state.ToolCalls
	u.UnpricedCalls = state.UnpricedCalls
	u.CostPricedUSD = money.NanoUSD(state.PricedNanoUSD).String()
	u.CostUSD = u.CostPricedUSD
	if state.UnpricedCalls > 0 {
		u.CostUSD = costUnknown
	}
	u.CostIsExact = !state.CostInexact

	if st.Model == "" {
		if state.EntryModel != "" {
			st.Model = state.EntryModel
		} else if o.dispatchedModel != "" && f.Blueprint != nil && f.Blueprint.EntryStage() != nil && state.Stage == f.Blueprint.EntryStage().Name {
			st.Model = o.dispatchedModel
		}
	}
	st.PendingCall = nil
	if p := state.Pending; p != nil && state.Outcome == journal.OutcomeNone {
		st.PendingCall = &arv1.PendingCall{Kind: arv1.CallKindModel, Seq: p.Seq, RequestHash: p.RequestHash}
	}
	if p := state.PendingTool(); p != nil && (state.Outcome == journal.OutcomeNone || p.Effect == string(arv1.EffectWrite)) {
		// A write's intent stays on record after the run ends: the evidence
		// of an unresolved write.
		st.PendingCall = &arv1.PendingCall{
			Kind: arv1.CallKindTool, Seq: p.Seq, Tool: p.Tool, Input: clipTo(p.Input, 16384),
			Effect: arv1.ToolEffect(p.Effect), IdempotencyKey: p.IdempotencyKey,
		}
	}
	st.Title, st.TitleError = clipTo(state.Title, 256), clipTo(state.TitleError, 1024)
	st.Flags.MaxIterationsHit = state.MaxIterationsHit
	st.Flags.ProducedOutput = state.Output != nil
	st.Flags.GatesForced = state.GatesForced
	// Every run can hand back output (the complete tool carries it), so a
	// finished run with no output and no modifications produced nothing.
	st.Flags.EmptyOutput = st.Phase.IsTerminal() && state.Output == nil && st.Flags.ModifiedFileCount == 0 && !st.Flags.NoOutputTools
	if o.finalOutput != nil {
		st.FinalOutput = o.finalOutput
	}
	st.Children = childrenSummary(f, a)
	st.TreeUsage = treeUsage(st.Usage, f.children)

	// Last moved: a new iteration, stage or phase only.
	if st.Phase != prev.Phase || st.CurrentStage != prev.CurrentStage || st.Iteration != prev.Iteration || st.LastProgressAt == nil {
		st.LastProgressAt = &t
	}
	observeClock(st, now)
	markCallbackDue(run)
	setConditions(run, o.backpressure)
}

// costUnknown is how an unpriced total reads: unknown is never free.
const costUnknown = "unknown"

// observeClock runs the active clock only while the run works: Starting,
// Running, or waiting on its own workers or children. Idempotent.
func observeClock(st *arv1.AgentRunStatus, now time.Time) {
	runs := st.Phase == arv1.PhaseStarting || st.Phase == arv1.PhaseRunning ||
		(st.WaitingOn != nil && (st.WaitingOn.Reason == arv1.WaitFanOutWorkers || st.WaitingOn.Reason == arv1.WaitChildren))
	if st.Active == nil {
		st.Active = &arv1.ActiveClock{}
	}
	c := st.Active
	switch {
	case runs && c.Since == nil:
		t := metav1.NewTime(now)
		c.Since = &t
	case !runs && c.Since != nil:
		if d := now.Sub(c.Since.Time); d > 0 {
			c.BankedSeconds += int64(d / time.Second)
		}
		c.Since = nil
	}
}

// setConditions derives Ready, Reconciling, Stalled, Waiting and
// NeedsAttention from phase and waitingOn, so they always agree with them.
func setConditions(run *arv1.AgentRun, backpressure bool) {
	st := &run.Status
	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: run.Generation,
		})
	}
	switch st.Phase {
	case arv1.PhaseComplete, arv1.PhaseCompleteInteractive:
		set(arv1.ConditionReady, metav1.ConditionTrue, arv1.ReasonSucceeded, "The run completed")
		meta.RemoveStatusCondition(&st.Conditions, arv1.ConditionReconciling)
		meta.RemoveStatusCondition(&st.Conditions, arv1.ConditionStalled)
	case arv1.PhaseError:
		set(arv1.ConditionReady, metav1.ConditionFalse, arv1.ReasonFailed, st.Error)
		meta.RemoveStatusCondition(&st.Conditions, arv1.ConditionReconciling)
		set(arv1.ConditionStalled, metav1.ConditionTrue, arv1.ReasonFailed, st.Error)
	case arv1.PhaseCancelled:
		set(arv1.ConditionReady, metav1.ConditionFalse, arv1.ReasonCancelled, "The run was cancelled")
		meta.RemoveStatusCondition(&st.Conditions, arv1.ConditionReconciling)
		set(arv1.ConditionStalled, metav1.ConditionTrue, arv1.ReasonCancelled, "The run was cancelled")
	default:
		reason, msg := arv1.ReasonProgressing, "The run is in progress"
		switch {
		case st.Phase == arv1.PhaseStarting:
			reason, msg = arv1.ReasonAccepted, "The run was accepted"
		case st.Phase == arv1.PhasePaused:
			reason, msg = arv1.ReasonPaused, "The run is paused (spec.paused)"
		case st.WaitingOn != nil:
			reason, msg = string(st.WaitingOn.Reason), waitMessage(st.WaitingOn)
		case backpressure:
			reason, msg = arv1.ReasonWaitingForExecutor, "A step is ready; every executor slot is busy (backpressure, not a setup problem)"
		}
		set(arv1.ConditionReady, metav1.ConditionFalse, arv1.ReasonIncomplete, "The run has not completed")
		if st.WaitingOn != nil && st.WaitingOn.Reason == arv1.WaitNeedsSetup {
			set(arv1.ConditionStalled, metav1.ConditionTrue, reason, msg)
			meta.RemoveStatusCondition(&st.Conditions, arv1.ConditionReconciling)
		} else {
			set(arv1.ConditionReconciling, metav1.ConditionTrue, reason, msg)
			meta.RemoveStatusCondition(&st.Conditions, arv1.ConditionStalled)
		}
	}
	if w := st.WaitingOn; w != nil {
		set(arv1.ConditionWaiting, metav1.ConditionTrue, string(w.Reason), waitMessage(w))
		if w.Reason.NeedsAPerson() {
			set(arv1.ConditionNeedsAttention, metav1.ConditionTrue, string(w.Reason), waitMessage(w))
		} else {
			set(arv1.ConditionNeedsAttention, metav1.ConditionFalse, arv1.ReasonNoPersonNeeded, "Nothing waits on a person")
		}
	} else {
		set(arv1.ConditionWaiting, metav1.ConditionFalse, arv1.ReasonNotWaiting, "The run is not parked")
		set(arv1.ConditionNeedsAttention, metav1.ConditionFalse, arv1.ReasonNoPersonNeeded, "Nothing waits on a person")
	}
}

// waitMessage is the human sentence for a wait: the remedy when there is one.
func waitMessage(w *arv1.WaitingOn) string {
	if w.Remedy != "" {
		return w.Remedy
	}
	if w.Question != "" {
		return fmt.Sprintf("%s %q asks: %s", w.Reason, w.Point, w.Question)
	}
	if w.Summary != "" {
		return "Waiting on " + w.Summary
	}
	return "Waiting on " + string(w.Reason)
}

// childrenSummary counts the run's children, from the fan-out plan when one
// is under way (it knows the queue) and from the children otherwise.
func childrenSummary(f *facts, a runstate.Action) *arv1.ChildrenSummary {
	if len(f.Children) == 0 && a.FanOut == nil {
		return nil
	}
	s := &arv1.ChildrenSummary{Total: int32(len(f.Children))}
	for _, c := range f.Children {
		switch {
		case !c.Phase.IsTerminal():
			s.Running++
		case c.Phase == arv1.PhaseComplete || c.Phase == arv1.PhaseCompleteInteractive:
			s.Succeeded++
		default:
			s.Failed++
		}
	}
	if p := a.FanOut; p != nil {
		s.Queued = int32(p.Queued)
		s.Retried = int32(p.Retried)
	}
	return s
}

// addUsage adds c into t; cost becomes unknown if either is.
func addUsage(t *arv1.Usage, c arv1.Usage) {
	t.PromptTokens += c.PromptTokens
	t.CompletionTokens += c.CompletionTokens
	t.CachedTokens += c.CachedTokens
	t.CacheWriteTokens += c.CacheWriteTokens
	t.TotalTokens += c.TotalTokens
	t.ModelCalls += c.ModelCalls
	t.ToolCalls += c.ToolCalls
	t.UnpricedCalls += c.UnpricedCalls
	t.CostIsExact = t.CostIsExact && (c.CostIsExact || c.CostPricedUSD == "" || c.CostPricedUSD == "0")
	a, _ := money.ParseUSD(orZero(t.CostPricedUSD))
	b, _ := money.ParseUSD(orZero(c.CostPricedUSD))
	t.CostPricedUSD = (a + b).String()
	if t.CostUSD == costUnknown || c.CostUSD == costUnknown || t.UnpricedCalls > 0 {
		t.CostUSD = costUnknown
	} else {
		t.CostUSD = t.CostPricedUSD
	}
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}

// clipTo bounds text to n bytes, the status field's limit, marking the cut.
func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
