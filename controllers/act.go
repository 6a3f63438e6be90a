package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/builtin"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/output"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/store/router"
)

// actOutcome is what acting changed that status must show, and how the
// run will be woken again.
type actOutcome struct {
	// backpressure: a step is due but every executor slot of its lane is
	// busy; the executor wakes the run when one frees.
	backpressure bool
	// catalogWait: the step waits for a tool listing, which wakes the run.
	catalogWait bool
	// serverWait: the step waits for a slot of its MCP server's lane (the
	// general pool has room), which wakes the run.
	serverWait bool
	// queued: the run waits for an active-run slot; quietQueue: not long
	// enough yet for status to say so.
	queued       bool
	quietQueue   bool
	requeueAfter time.Duration
	finalOutput  *arv1.FinalOutputDescriptor
	// storeDown: the runs' store cannot be used; the run waits on it.
	storeDown *store.UnavailableError
	// quotaWait: a quota has no room to start the run; it stays Queued,
	// waiting on it (queue.HoldStart).
	quotaWait *arv1.WaitingOn
	// journaledIntents counts the intents this reconcile put into the
	// journal, not only into status (see statusPacer.mayWait).
	journaledIntents int
}

// act carries out the decision. Every write here is idempotent under a
// retried reconcile: objects have deterministic names and AlreadyExists
// means done. It reports whether the facts changed, so the reconcile
// derives and decides once more.
func (r *AgentRunReconciler) act(ctx context.Context, s *scope) (bool, error) {
	f, a := s.facts, s.action
	if err := recordAnswers(ctx, r.client, r.clock, f.answerUpdates); err != nil {
		return false, err
	}
	f.answerUpdates = nil
	if len(f.children) > 0 {
		if err := r.children.Cascade(ctx, s.run, f.children, a.Kind == runstate.ActCancel || (a.FanOut != nil && a.FanOut.FailAll)); err != nil {
			return false, err
		}
	}
	if len(a.CreateChildren) > 0 {
		if err := r.children.Create(ctx, s.run, &f.Facts, a.CreateChildren); err != nil {
			return false, err
		}
	}
	if e, ok := journalEntryFor(f, a); ok {
		regions, err := r.regionEntriesFor(ctx, s)
		if err != nil {
			return false, err
		}
		if err := r.record(ctx, s, append(regions, e)...); err != nil {
			return false, err
		}
		if e.Kind == journal.ToolPolicyDecided {
			r.tools.policyDecided(s.run, e.Tool, e.Policy)
		}
		return true, nil
	}
	if a.Kind == runstate.ActToolCall || a.Kind == runstate.ActDispatch {
		if err, refused := r.steps.Refusals.Take(s.run.UID); refused {
			// A step's journal write was refused for good: the run stalls
			// (terminal) instead of making the call again, which would be
			// refused again after it was paid for.
			return false, err
		}
	}
	switch a.Kind {
	case runstate.ActToolCall:
		// The agent tools are the children's (agentCall), write_region is
		// journaled at once; an MCP tool is the tool settler's.
		switch h := f.State.HeadCall(); {
		case slices.Contains(builtin.AgentTools, h.Name):
			return true, r.childCalls.agentCall(ctx, s)
		case h.Name == builtin.WriteRegion:
			return true, r.record(ctx, s, writeRegionEntries(s.run, f, h.Index, h.Arguments)...)
		}
		return r.tools.callTool(s)
	case runstate.ActWaitCatalog:
		r.tools.listTools(s)
	case runstate.ActDeliverResults:
		return true, r.childCalls.deliverResults(ctx, s)
	case runstate.ActSpawn:
		if err := r.blueprints.ensureSnapshot(ctx, s.run, f); err != nil {
			return false, err
		}
		s.run.Status.BlueprintSnapshot = f.snapshot
		return true, r.childCalls.spawnOrigin(ctx, s)
	case runstate.ActCancel:
		return r.cancel(ctx, s)
	case runstate.ActPark:
		if a.RetryAt != nil {
			s.out.requeueAfter = max(a.RetryAt.Sub(f.Now), time.Millisecond)
		}
	case runstate.ActDispatch:
		return false, r.dispatch(ctx, s)
	}
	r.tools.listTools(s) // refresh stale listings in the background
	return false, r.finalOutput(ctx, s)
}

// journalEntryFor is the entry an action journals, if it journals one.
func journalEntryFor(f *facts, a runstate.Action) (journal.Entry, bool) {
	switch a.Kind {
	case runstate.ActToolDecide, runstate.ActToolComplete, runstate.ActToolRetry, runstate.ActAbandon:
		return toolEntry(f, a), true
	case runstate.ActToolPolicy:
		h := f.State.HeadCall()
		return journal.Entry{Kind: journal.ToolPolicyDecided, Index: h.Index, Tool: h.Name, Input: h.Arguments, Policy: a.Policy}, true
	case runstate.ActResolveFanOut:
		return journal.Entry{Kind: journal.FanOutResolved, Stage: f.State.FanOut.Stage, FailedItems: a.FanOut.FailedItems, FailAll: a.FanOut.FailAll}, true
	case runstate.ActResolveChildren:
		return journal.Entry{Kind: journal.ChildrenResolved}, true
	case runstate.ActAsk:
		return journal.Entry{Kind: journal.QuestionAsked, Point: a.Ask}, true
	case runstate.ActWake:
		return journal.Entry{Kind: journal.SleepCompleted}, true
	case runstate.ActRefuseSpawn:
		return journal.Entry{Kind: journal.SpawnRefused, Message: a.Message}, true
	case runstate.ActReceiveMessage:
		return journal.Entry{Kind: journal.MessageReceived, MessageID: a.Received.ID, Text: a.Received.Text}, true
	case runstate.ActSeedRegion:
		return *f.SeedRegion, true
	case runstate.ActAnswerInteraction:
		in := f.State.Interaction
		e := journal.Entry{Kind: journal.InteractionAnswered, Stage: in.Stage, Point: in.Point.Name, Approved: true, Auto: true, By: "policy: spec.yolo"}
		if ans := a.Answer; ans != nil {
			e.Approved, e.Auto, e.By, e.Message, e.Expired = ans.Approved, ans.Expired, ans.By, ans.Name, ans.Expired
			e.Directive, e.Choice, e.Abort, e.Result = ans.Directive, ans.Choice, ans.Abort, ans.Reason
			if ans.Edit != nil {
				e.Region = pointDocument(f)
			}
		}
		return e, true
	}
	return journal.Entry{}, false
}

// record journals es as the run's next entries, now, in one write. An
// intent status holds that the journal has not recorded yet is journaled
// with them, so whatever follows an intent in the journal always finds it
// there.
func (r *AgentRunReconciler) record(ctx context.Context, s *scope, es ...journal.Entry) error {
	return recordIn(ctx, r.journals, s, es...)
}

// recordIn is record in journals, for the jobs that journal on a run's
// behalf (childCalls).
func recordIn(ctx context.Context, journals *router.Router, s *scope, es ...journal.Entry) error {
	for i := range es {
		es[i].Seq, es[i].At = s.facts.State.NextSeq+int64(i), s.facts.Now
	}
	if len(es) > 0 && s.facts.statusIntent == nil {
		stampSnapshot(s, &es[0])
	}
	if p := s.facts.statusIntent; p != nil {
		in := *p
		if h := s.facts.State.HeadCall(); in.Kind == journal.ToolCallRequested && h != nil && h.Index == in.Index {
			in.Input = h.Arguments // status holds it clipped
		}
		return journals.Append(ctx, s.run, append([]journal.Entry{in}, es...)...)
	}
	return journals.Append(ctx, s.run, es...)
}

// stampSnapshot names, on the first entry of a journal written before the
// run's status recorded its snapshot, the snapshot the run started from
// (journal.Entry.Snapshot).
func stampSnapshot(s *scope, e *journal.Entry) {
	if e.Seq == 0 && s.before.Status.BlueprintSnapshot == "" {
		e.Snapshot = s.run.Status.BlueprintSnapshot
	}
}

// cancel stops the run's steps and journals the cancellation once none
// runs: a completion and the cancellation must not race for one seq (a
// lost write result would read as an unresolved write).
func (r *AgentRunReconciler) cancel(ctx context.Context, s *scope) (bool, error) {
	r.pool.Cancel(s.run.UID)
	if r.pool.RunInFlight(s.run.UID) {
		s.out.requeueAfter = 100 * time.Millisecond
		return false, nil
	}
	return true, r.record(ctx, s, journal.Entry{Kind: journal.RunCancelled})
}

// dispatch reserves a slot for the model call and records its intent in
// the status this reconcile writes (the seeds' pending-call object), or in
// the journal when that write may wait (statuswait.go); the call starts
// once the intent is stored. A pending intent nobody here
// started is issued again under its seq and counted as possibly lost
// (mayHaveBeenSent).
func (r *AgentRunReconciler) dispatch(ctx context.Context, s *scope) error {
	f, a, run := s.facts, s.action, s.run
	st := f.State
	intent := modelIntent(f, a)
	if a.Reissue {
		intent = *st.Pending
		intent.At = f.Now
		if r.mayHaveBeenSent(run, f, *st.Pending) {
			intent.Lost++
		}
	}
	intent.RequestHash = requestHash(run, &intent)
	stampSnapshot(s, &intent)
	ticket, ok := r.pool.Reserve(r.stepOf(run, intent.Seq, ""))
	if !ok {
		s.out.backpressure = true
		return nil
	}
	journaled := a.Reissue && (f.statusIntent == nil || f.statusIntent.Seq != intent.Seq)
	call, err := r.modelCall(ctx, s, intent)
	if err == nil {
		err = r.quotaCharge(ctx, s, &call, !journaled)
	}
	if err != nil {
		ticket.Release()
		return err
	}
	call.Next = r.driver.next(run)
	r.track(run, &call)
	// An intent already in the journal is issued again there (status would
	// not be read over it); a fresh one goes there when status may wait,
	// and always with a database store (a write there costs the API
	// server nothing).
	// The step journals it before it calls, so this reconcile waits on
	// nothing; until then derive folds the copy kept here.
	// With a database store a reissue of an intent only status held (its
	// step stopped before journaling it: a handover, a kill) goes there
	// first too, so it reserves its worst case against the run's quotas
	// before the call is made.
	inJournal := journaled || (a.Reissue && r.journals.Database())
	if inJournal || (!a.Reissue && f.statusIntent == nil && (r.journals.Database() || r.pace.mayWait(s))) {
		call.JournalIntent = true
		k, lost := stepKey(run, intent.Seq), intent.Lost
		call.NotMade = func() { r.unstarted.mark(k, lost) }
		r.unjournaled.Put(run.UID, intent)
		s.aborts = append(s.aborts, func() { r.unjournaled.Take(run.UID) })
		s.out.journaledIntents++
	}
	f.State.Apply(f.Blueprint, intent)
	s.intents = append(s.intents, issuedIntent{key: stepKey(run, intent.Seq), lost: intent.Lost})
	s.start(ticket, func(ctx context.Context) {
		r.steps.RunModelCall(ctx, call)
		if call.JournalIntent {
			r.unjournaled.Take(run.UID)
		}
		r.queue.Settled(ctx, call.Quota)
		r.rateHolds.end(run.UID) // the step's end wakes the run
	})
	return nil
}

// mayHaveBeenSent says whether the pending model call, about to be issued
// again, may have reached its provider, so that its dispatch counts as
// lost (status.usage.lostCalls; the store's ledger counts it by the same
// Lost). Not when this manager issued that very intent (its Lost) and
// never started it, nor when only status holds the intent and the run's
// journal is in a database: there every model call's intent is journaled
// before the call is made (dispatch, the step's continuations), so status
// named an intent whose step had not journaled it yet, and a replica that
// died then (or whose write failed) never sent it.
func (r *AgentRunReconciler) mayHaveBeenSent(run *arv1.AgentRun, f *facts, pending journal.Entry) bool {
	if r.unstarted.issuedUnstarted(stepKey(run, pending.Seq), pending.Lost) {
		return false
	}
	onlyInStatus := f.statusIntent != nil && f.statusIntent.Seq == pending.Seq
	return !onlyInStatus || r.journals.Where(run) != arv1.JournalDatabase
}

// modelIntent is the intent of the model call Decide asked for (without
// its request hash, which names the run).
func modelIntent(f *facts, a runstate.Action) journal.Entry {
	res, st := f.resolved, f.State
	intent := journal.Entry{
		Seq: st.NextSeq, Kind: journal.ModelCallRequested, At: f.Now,
		Stage: st.Stage, Iteration: st.Iteration, Provider: res.provider.Name, Model: res.model,
	}
	switch {
	case a.Title:
		intent.Purpose = journal.PurposeTitle
	case st.Compacting() != nil:
		// A compact edge's summary comes before the stage's first turn.
		intent.Purpose = journal.PurposeCompact
	}
	return intent
}

// finalOutput stores a completed run's output once.
func (r *AgentRunReconciler) finalOutput(ctx context.Context, s *scope) error {
	f := s.facts
	if f.State.Outcome != journal.OutcomeComplete || f.State.Output == nil || s.run.Status.FinalOutput != nil {
		return nil
	}
	d, err := r.storeOutput(ctx, s.run, f.State.Output, f.Blueprint)
	s.out.finalOutput = d
	return err
}

// storeOutput keeps the final output, capped at 256 KiB, in the run's
// journal object (one object per finished run, not two), and returns its
// descriptor.
func (r *AgentRunReconciler) storeOutput(ctx context.Context, run *arv1.AgentRun, o *journal.SubmittedOutput, bp *blueprint.Blueprint) (*arv1.FinalOutputDescriptor, error) {
	text, truncated := output.Stored(o.Text)
	name, err := r.journals.PutOutput(ctx, run, text)
	if err != nil {
		return nil, err
	}
	size := len(o.Text)
	if o.Bytes > size { // cut to fit the journal when it was answered
		size, truncated = o.Bytes, true
	}
	d := &arv1.FinalOutputDescriptor{
		Stage: o.Stage, SubmittedAt: ptr.To(metav1.NewTime(r.clock.Now())), Bytes: int64(size),
		Truncated: truncated, ObjectName: name,
	}
	format := run.Spec.Output
	switch {
	case format != nil && format.Format != "":
		d.Format = format.Format
	case bp.Agent.Output != nil && bp.Agent.Output.Format != "":
		d.Format = arv1.OutputFormat(bp.Agent.Output.Format)
	}
	return d, nil
}

// runOutputSpec is the output a run must hand back: the spec's override,
// else the blueprint's. The spec's replaces the blueprint's whole, as in
// Leviath: a validator or schema written for one format is retired with it.
type runOutputSpec struct {
	check        output.Spec
	instructions string
	// validator is the declared Leviath validator script, which this
	// operator cannot run (see docs/blueprints.md).
	validator string
}

func outputSpec(run *arv1.AgentRun, bp *blueprint.Blueprint) runOutputSpec {
	if o := run.Spec.Output; o != nil {
		return runOutputSpec{check: output.Spec{Format: string(o.Format), Schema: o.Schema}, instructions: outputInstructions(o.Instructions, o.Example), validator: o.Validator}
	}
	if o := bp.Agent.Output; o != nil {
		return runOutputSpec{check: output.Spec{Format: o.Format, Schema: o.Schema}, instructions: outputInstructions(o.Instructions, o.Example), validator: o.Validator}
	}
	return runOutputSpec{}
}

// outputInstructions are what the model is told of the output: the
// instructions, then the example, marked as one so it is not taken for
// the answer.
func outputInstructions(instructions, example string) string {
	if example == "" {
		return instructions
	}
	if instructions != "" {
		instructions += "\n\n"
	}
	return instructions + "An example of acceptable output:\n" + example
}

// requestHash identifies a model request by run, position and model.
func requestHash(run *arv1.AgentRun, e *journal.Entry) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s|%d|%s|%d|%s/%s", run.UID, e.Seq, e.Stage, e.Iteration, e.Provider, e.Model))
	return hex.EncodeToString(h[:16])
}
