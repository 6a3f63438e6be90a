package controllers

import (
	"errors"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/caches"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/money"
	"github.com/agentrun-dev/agentrun-operator/internal/quota"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
)

// project writes the run record from the facts and the decision: the one
// place status is computed, so phase, waitingOn, conditions and counters
// always agree.
func project(s *scope) {
	run, f, a, o, now := s.run, s.facts, s.action, s.out, s.now
	st := &run.Status
	prev := s.before.Status.DeepCopy()
	t := metav1.NewTime(now)
	st.ObservedGeneration = run.Generation
	if st.StartedAt == nil {
		st.StartedAt = &t
	}
	if ref := metav1.GetControllerOf(run); ref != nil && ref.Kind == "AgentRun" {
		st.ParentRun = ref.Name
	}
	state := f.State
	if bp := f.Blueprint; bp != nil {
		st.AgentName = bp.Agent.Name
		st.NumStages = int32(len(bp.Stages))
		st.ReadPaths = readPaths(bp)
	}
	if f.Spawned {
		st.CurrentStage = state.Stage
		st.StageIndex = int32(state.StageIndex)
		st.Iteration = int32(state.Iteration)
		st.Stage = fmt.Sprintf("%s %d/%d", state.Stage, state.StageIndex+1, st.NumStages)
	}
	st.Phase, st.Error = phaseOf(f, a)
	if f.Spawned {
		st.Stages = stageStatuses(f.Blueprint, &state, st.Phase)
		st.LastTransition = lastTransition(&state)
	}
	st.WaitingOn, st.SetupRefs = nil, nil
	if st.Phase == arv1.PhaseWaitingInput {
		st.WaitingOn = runstate.DeriveWaitingOn(a.Markers, prev.WaitingOn, now)
		if a.Markers.Setup != nil {
			st.SetupRefs = a.Markers.Setup.Refs
		}
	}
	projectUsage(&st.Usage, &state)
	if f.Spawned {
		st.InheritedUsage = inheritedUsage(&state)
	}
	// The model is the one that answered the entry stage, never one that
	// was tried and failed over from.
	st.Model = state.EntryModel
	st.PendingCall = pendingCall(&state)
	st.Title, st.TitleError = clipTo(state.Title, 256), clipTo(state.TitleError, 1024)
	st.Flags.MaxIterationsHit = state.MaxIterationsHit
	st.Flags.ProducedOutput = state.Output != nil
	st.Flags.GatesForced = state.GatesForced
	if f.Spawned {
		st.Flags.RequiredRegionsAbandoned = state.RequiredRegionsAbandoned(f.Blueprint)
	}
	st.Flags.BrokenScripts = validatorNotRun(run, f.Blueprint, &state)
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
	if st.Phase.IsTerminal() && st.FinishedAt == nil {
		st.FinishedAt = &t
	}
	st.Driver = ""
	if !st.Phase.IsTerminal() {
		st.Driver = s.driver
	}
	observeClock(st, now)
	markCallbackDue(run)
	setConditions(run, conditionInputs{backpressure: s.showPressure, catalogWait: o.catalogWait, queued: o.queued, cancelled: cancelledWhy(&state)})
	if !caches.SameStatus(prev, st) {
		st.UpdatedAt, st.ObservedAt = &t, &t
	}
}

// readPaths is how much of the blueprint's [read_paths] was granted, as the
// seeds record it (read_paths{declared,granted}, absent when none are
// declared). A run here reads no files, so none is ever granted: 0/n says
// every read the blueprint declares would be refused.
func readPaths(bp *blueprint.Blueprint) *arv1.ReadPathGrantCounts {
	if len(bp.ReadPaths) == 0 {
		return nil
	}
	return &arv1.ReadPathGrantCounts{Declared: int32(len(bp.ReadPaths)), Granted: 0}
}

// validatorNotRun: output was submitted under a declared validator. The
// validator is a Leviath Rhai script, which this operator cannot run; the
// seeds treat a validator that cannot run as broken, not as a rejection,
// so the output stands and the flag says the script never checked it.
func validatorNotRun(run *arv1.AgentRun, bp *blueprint.Blueprint, state *journal.State) bool {
	return bp != nil && state.Output != nil && outputSpec(run, bp).validator != ""
}

// lastTransition is the journal's last stage change as status shows it.
func lastTransition(state *journal.State) *arv1.StageTransition {
	l := state.LastTransition()
	if l == nil {
		return nil
	}
	return &arv1.StageTransition{From: l.From, To: l.To, Condition: l.Condition, Reason: clipTo(l.Reason, 4096)}
}

// projectQueued is the record of a run waiting for an active-run slot:
// accepted, in line, nothing else changed.
func projectQueued(s *scope) {
	st, t := &s.run.Status, metav1.NewTime(s.now)
	prev := s.before.Status.DeepCopy()
	st.ObservedGeneration = s.run.Generation
	if st.StartedAt == nil {
		st.StartedAt = &t
	}
	if st.Phase.IsUnstarted() {
		st.Phase, st.LastProgressAt = arv1.PhaseQueued, &t
	}
	if st.Phase == arv1.PhaseQueued {
		// Held by a quota (queue.HoldStart), or in the manager's line.
		st.WaitingOn = s.out.quotaWait
	}
	st.Driver = s.driver
	setConditions(s.run, conditionInputs{queued: s.out.quotaWait == nil})
	if !caches.SameStatus(prev, st) {
		st.UpdatedAt = &t
	}
}

// phaseOf is the run's phase (and error) from its journal and decision.
func phaseOf(f *facts, a runstate.Action) (arv1.Phase, string) {
	state := f.State
	switch {
	case a.Kind == runstate.ActFail:
		return arv1.PhaseError, clipTo(a.Message, 4000)
	case state.Outcome == journal.OutcomeComplete:
		return arv1.PhaseComplete, ""
	case state.Outcome == journal.OutcomeError:
		return arv1.PhaseError, clipTo(state.Message, 4000)
	case state.Outcome == journal.OutcomeCancelled:
		return arv1.PhaseCancelled, ""
	case f.Paused:
		return arv1.PhasePaused, ""
	case a.Kind == runstate.ActPark:
		return arv1.PhaseWaitingInput, ""
	case state.NextSeq == 0 && state.Pending == nil:
		return arv1.PhaseStarting, ""
	}
	return arv1.PhaseRunning, ""
}

// projectUsage copies the journal's counters into status. Unknown is
// never free: an unpriced call or one that may have been billed without
// its answer (lost in a crash) makes the cost unknown.
func projectUsage(u *arv1.Usage, state *journal.State) { projectSpend(u, state.Own()) }

// projectSpend copies one set of counters into a Usage.
func projectSpend(u *arv1.Usage, sp journal.Spend) {
	u.PromptTokens, u.CompletionTokens = sp.Usage.Prompt, sp.Usage.Completion
	u.CachedTokens, u.CacheWriteTokens = sp.Usage.Cached, sp.Usage.CacheWrite
	u.TotalTokens = sp.Usage.Prompt + sp.Usage.Completion
	u.ModelCalls = sp.ModelCalls
	u.ToolCalls = sp.ToolCalls
	u.UnpricedCalls = sp.UnpricedCalls
	u.LostCalls = sp.LostCalls
	u.CostPricedUSD = money.NanoUSD(sp.PricedNanoUSD).String()
	u.CostUSD = u.CostPricedUSD
	if sp.UnpricedCalls > 0 || sp.LostCalls > 0 {
		u.CostUSD = costUnknown
	}
	u.CostIsExact = !sp.CostInexact && sp.LostCalls == 0
}

// inheritedUsage is what a fork's inherited calls consumed, absent when
// it inherited none (or is no fork).
func inheritedUsage(state *journal.State) *arv1.Usage {
	if state.Inherited == (journal.Spend{}) {
		return nil
	}
	u := &arv1.Usage{}
	projectSpend(u, state.Inherited)
	return u
}

// pendingCall is the seeds' pending-call object: the intent written ahead
// of a call, which stays on record after the run ends for a write (the
// evidence of an unresolved write).
func pendingCall(state *journal.State) *arv1.PendingCall {
	if p := state.PendingTool(); p != nil && (state.Outcome == journal.OutcomeNone || p.Effect == string(arv1.EffectWrite)) {
		return &arv1.PendingCall{
			Kind: arv1.CallKindTool, Seq: p.Seq, Tool: p.Tool, Input: clipTo(p.Input, 16384),
			Effect: arv1.ToolEffect(p.Effect), IdempotencyKey: p.IdempotencyKey,
			Index: int32(p.Index), Server: p.Server, Stage: state.Stage,
		}
	}
	if p := state.Pending; p != nil && state.Outcome == journal.OutcomeNone {
		return &arv1.PendingCall{
			Kind: arv1.CallKindModel, Seq: p.Seq, RequestHash: p.RequestHash, Stage: p.Stage, Iteration: int32(p.Iteration),
			Provider: p.Provider, Model: p.Model, Purpose: p.Purpose, Lost: int32(p.Lost),
		}
	}
	return nil
}

// costUnknown is how an unpriced total reads: unknown is never free.
const costUnknown = "unknown"

// observeClock runs the active clock only while the run works: Starting,
// Running, or waiting on its own workers or children. Idempotent.
func observeClock(st *arv1.AgentRunStatus, now time.Time) {
	runs := st.Phase == arv1.PhaseStarting || st.Phase == arv1.PhaseRunning ||
		(st.WaitingOn != nil && (st.WaitingOn.Reason == arv1.WaitFanOutWorkers || st.WaitingOn.Reason == arv1.WaitChildren || st.WaitingOn.Reason == arv1.WaitRateLimited))
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

// conditionInputs are what conditions show besides phase and waitingOn.
type conditionInputs struct {
	// backpressure: a step is due but every executor slot is busy.
	backpressure bool
	// catalogWait: the step waits for its tools to be listed.
	catalogWait bool
	// queued: the run waits for an active-run slot.
	queued bool
	// cancelled is why a person's answer cancelled the run, when one did.
	cancelled string
}

// cancelledWhy is why a cancelled run was cancelled by an answer (a
// checkpoint declined or aborted with an abort option, a write
// abandoned): the run has no error to show it in, and a person reading
// Ready must learn which point and option ended it. Empty for a run
// cancelled from outside (spec.cancel), whose reason is just that.
func cancelledWhy(st *journal.State) string {
	if st.Outcome != journal.OutcomeCancelled || st.Message == "" || st.Message == "cancelled" {
		return ""
	}
	return "The run was cancelled: " + st.Message
}

// cancelMessage is the Cancelled conditions' message: why, when an answer
// cancelled the run, kept when the conditions are derived again without
// the journal (a finished run is not folded again).
func cancelMessage(run *arv1.AgentRun, in conditionInputs) string {
	if in.cancelled != "" {
		return in.cancelled
	}
	if c := meta.FindStatusCondition(run.Status.Conditions, arv1.ConditionReady); c != nil && c.Reason == arv1.ReasonCancelled {
		return c.Message
	}
	return "The run was cancelled"
}

// setConditions derives Ready, Reconciling, Stalled, Waiting and
// NeedsAttention from phase and waitingOn, so they always agree with them.
func setConditions(run *arv1.AgentRun, in conditionInputs) {
	st := &run.Status
	switch st.Phase {
	case arv1.PhaseComplete, arv1.PhaseCompleteInteractive:
		setCondition(run, arv1.ConditionReady, metav1.ConditionTrue, arv1.ReasonSucceeded, "The run completed")
		meta.RemoveStatusCondition(&st.Conditions, arv1.ConditionReconciling)
		meta.RemoveStatusCondition(&st.Conditions, arv1.ConditionStalled)
	case arv1.PhaseError:
		setCondition(run, arv1.ConditionReady, metav1.ConditionFalse, arv1.ReasonFailed, st.Error)
		meta.RemoveStatusCondition(&st.Conditions, arv1.ConditionReconciling)
		setCondition(run, arv1.ConditionStalled, metav1.ConditionTrue, arv1.ReasonFailed, st.Error)
	case arv1.PhaseCancelled:
		msg := cancelMessage(run, in)
		setCondition(run, arv1.ConditionReady, metav1.ConditionFalse, arv1.ReasonCancelled, msg)
		meta.RemoveStatusCondition(&st.Conditions, arv1.ConditionReconciling)
		setCondition(run, arv1.ConditionStalled, metav1.ConditionTrue, arv1.ReasonCancelled, msg)
	default:
		reason, msg := progressReason(st, in)
		setCondition(run, arv1.ConditionReady, metav1.ConditionFalse, arv1.ReasonIncomplete, "The run has not completed")
		if st.WaitingOn != nil && st.WaitingOn.Reason == arv1.WaitNeedsSetup {
			setCondition(run, arv1.ConditionStalled, metav1.ConditionTrue, reason, msg)
			meta.RemoveStatusCondition(&st.Conditions, arv1.ConditionReconciling)
		} else {
			setCondition(run, arv1.ConditionReconciling, metav1.ConditionTrue, reason, msg)
			meta.RemoveStatusCondition(&st.Conditions, arv1.ConditionStalled)
		}
	}
	if w := st.WaitingOn; w != nil {
		setCondition(run, arv1.ConditionWaiting, metav1.ConditionTrue, string(w.Reason), waitMessage(w))
		if w.NeedsAPerson {
			setCondition(run, arv1.ConditionNeedsAttention, metav1.ConditionTrue, string(w.Reason), waitMessage(w))
		} else {
			setCondition(run, arv1.ConditionNeedsAttention, metav1.ConditionFalse, arv1.ReasonNoPersonNeeded, "Nothing waits on a person")
		}
	} else {
		setCondition(run, arv1.ConditionWaiting, metav1.ConditionFalse, arv1.ReasonNotWaiting, "The run is not parked")
		setCondition(run, arv1.ConditionNeedsAttention, metav1.ConditionFalse, arv1.ReasonNoPersonNeeded, "Nothing waits on a person")
	}
}

// progressReason is the reason and message of an unfinished run.
func progressReason(st *arv1.AgentRunStatus, in conditionInputs) (string, string) {
	switch {
	case in.queued:
		return arv1.ReasonQueued, "The run waits for an active-run slot (--max-active-runs, and its namespace's bound: --max-active-runs-per-namespace or the Namespace's " +
			arv1.AnnotationMaxActiveRuns + " annotation); a free slot goes to the namespace with the fewest active runs, then by priority (spec.priority or spec.priorityClassName), then in creation order"
	case st.Phase == arv1.PhasePaused:
		return arv1.ReasonPaused, "The run is paused (spec.paused)"
	case st.WaitingOn != nil:
		return string(st.WaitingOn.Reason), waitMessage(st.WaitingOn)
	case in.backpressure:
		return arv1.ReasonWaitingForExecutor, "A step is ready; every executor slot is busy (backpressure, not a setup problem)"
	case in.catalogWait:
		return arv1.ReasonWaitingForToolCatalog, "The tools of the next step are being listed from their MCP servers"
	case st.Phase == arv1.PhaseStarting:
		return arv1.ReasonAccepted, "The run was accepted"
	}
	return arv1.ReasonProgressing, "The run is in progress"
}

// setCondition sets one condition, stamped with the generation observed.
func setCondition(run *arv1.AgentRun, t string, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
		Type: t, Status: s, Reason: reason, Message: clipTo(msg, 32768), ObservedGeneration: run.Generation,
	})
}

// retried shows, on a run still in progress, that the reconcile before
// this one failed and was retried: the transient error stays visible for
// one status write even when it was the status write that failed.
func retried(run *arv1.AgentRun, last string) {
	c := meta.FindStatusCondition(run.Status.Conditions, arv1.ConditionReconciling)
	if c == nil || c.Status != metav1.ConditionTrue || run.Status.WaitingOn != nil {
		return
	}
	setCondition(run, arv1.ConditionReconciling, metav1.ConditionTrue, arv1.ReasonRetryingAfterError,
		clipTo("Retried after: "+last, 4000))
}

// markError shows a failed reconcile in conditions, leaving the rest of the
// record as it was: a transient failure (an API error) on Reconciling with
// the controller retrying, a terminal one (the run's records cannot be
// read) on Stalled.
func markError(run *arv1.AgentRun, err error, now time.Time) {
	msg := clipTo(capitalize(err.Error()), 4000)
	if errors.Is(err, reconcile.TerminalError(nil)) {
		meta.RemoveStatusCondition(&run.Status.Conditions, arv1.ConditionReconciling)
		setCondition(run, arv1.ConditionStalled, metav1.ConditionTrue, arv1.ReasonReconcileFailed, msg)
	} else {
		setCondition(run, arv1.ConditionReconciling, metav1.ConditionTrue, arv1.ReasonRetryingAfterError, msg+"; retrying")
	}
	t := metav1.NewTime(now)
	run.Status.UpdatedAt = &t
}

// waitMessage is the human sentence for a wait: the remedy when there is one.
func waitMessage(w *arv1.WaitingOn) string {
	if w.Reason == arv1.WaitStoreUnavailable {
		m := "The runs' store cannot be used: " + w.StoreError
		if w.Remedy != "" {
			return m + "; " + w.Remedy
		}
		return m + "; the run goes on by itself once it answers"
	}
	if w.Reason == arv1.WaitQuotaExceeded {
		return quota.Message(w)
	}
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

// stageStatuses is every blueprint stage with what the journal says the
// run did there. Only what the journal holds goes in (no clock that moves
// by itself), so a reconcile that changes nothing writes nothing.
func stageStatuses(bp *blueprint.Blueprint, state *journal.State, phase arv1.Phase) []arv1.StageStatus {
	if bp == nil || len(bp.Stages) == 0 {
		return nil
	}
	out := make([]arv1.StageStatus, 0, len(bp.Stages))
	for _, stage := range bp.Stages {
		rec, entered := state.Stages[stage.Name]
		ss := arv1.StageStatus{Name: stage.Name, State: stageState(entered, stage.Name == state.Stage, rec.Failed, phase)}
		if entered {
			ss.Entered = &metav1.Time{Time: rec.FirstEntered}
			ss.Visits, ss.Iterations = int32(rec.Visits), int32(rec.Iterations)
			if rec.Spent > 0 {
				ss.TimeInStage = &metav1.Duration{Duration: rec.Spent.Round(time.Millisecond)}
			}
		}
		out = append(out, ss)
	}
	return out
}

// stageState is where the run stands with one stage.
func stageState(entered, current, failed bool, phase arv1.Phase) arv1.StageState {
	switch {
	case !entered && phase.IsTerminal():
		return arv1.StageSkipped
	case !entered:
		return arv1.StagePending
	case !current && failed:
		return arv1.StageError // left on its error edge
	case !current:
		return arv1.StageComplete
	}
	switch phase {
	case arv1.PhaseComplete, arv1.PhaseCompleteInteractive:
		return arv1.StageComplete
	case arv1.PhaseError:
		return arv1.StageError
	case arv1.PhaseCancelled:
		return arv1.StageCancelled
	case arv1.PhaseWaitingInput:
		return arv1.StageWaitingInput
	}
	return arv1.StageActive
}
