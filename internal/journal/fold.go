package journal

import (
	"fmt"
	"strings"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
)

// Outcome is how a run ended, if it has.
type Outcome string

// Outcomes.
const (
	OutcomeNone      Outcome = ""
	OutcomeComplete  Outcome = "Complete"
	OutcomeError     Outcome = "Error"
	OutcomeCancelled Outcome = "Cancelled"
)

// State is what a journal says about a run. It is a pure function of the
// blueprint and the entries (Fold), so the same prefix always gives the same
// state.
type State struct {
	// NextSeq is the seq the next entry gets.
	NextSeq int64

	Stage      string
	StageIndex int
	// Iteration counts completed model calls in the current stage.
	Iteration int
	// Moves counts iterations and stage entries; a change means the run
	// made progress.
	Moves int64

	Usage Usage
	// ModelCalls counts completed model calls.
	ModelCalls int64
	// ToolCalls counts the tool calls the model made.
	ToolCalls int64
	// PricedNanoUSD is the priced subtotal.
	PricedNanoUSD int64
	// UnpricedCalls could not be priced.
	UnpricedCalls int64
	// CostInexact: some priced call was reconstructed from rate cards.
	CostInexact bool
	// LostCalls are dispatches whose answer was lost in a crash (each
	// possibly billed): the cost of the run is not known exactly.
	LostCalls int64

	// Inherited is what the entries a fork inherited consumed (Entry.
	// Inherited), kept apart from the counters above, which are the run's
	// own.
	Inherited Spend

	// EntryModel is "provider/model" of the first model call in the entry stage.
	EntryModel string

	// Pending is the model call whose intent has no completion yet.
	Pending *Entry
	// Failure is the last failure at the current position (cleared by any
	// completion or stage change); FailedAttempts counts them.
	Failure        *Failure
	FailureAt      time.Time
	FailedAttempts int
	// Failed holds, per "provider/model", the model's last failure in the
	// whole run (kept across answers and stages), so every later call
	// fails over past it while it still counts (runstate.SelectCandidate
	// says how long): a rejected key or a failing model costs the run its
	// failed calls once, not once per stage.
	Failed map[string]FailedCall

	// Stages is what the journal says of each stage the run has entered,
	// by name; at is the time of the entry being folded.
	Stages map[string]StageRecord
	at     time.Time
	// Visits are the stage visits in the order the run made them, with
	// their times, so each can be told apart (tracing gives each a span).
	Visits []Visit

	// Interaction is the checkpoint the run waits on, if any.
	Interaction *PendingInteraction

	// MaxIterationsHit: some stage ran out of iterations.
	MaxIterationsHit bool
	// GatesForced: an interaction point was passed by policy, not a person.
	GatesForced bool

	Output *SubmittedOutput

	// FanOut is the fan-out in progress, if any; LastFanOut the one most
	// recently resolved (its target stage merges the workers' outputs).
	FanOut     *FanOut
	LastFanOut *FanOut
	// Subagents are every sub-agent spawned so far, in order; a child's
	// index here is part of its name.
	Subagents []Spawn
	// ChildrenGate holds a requires_children stage until its sub-agents
	// finish.
	ChildrenGate *Gate
	// Turns are the model's answers in the current stage, so each call
	// carries the conversation so far.
	Turns []Turn

	// Answers are the names of the AgentRunAnswers applied, so none is
	// applied twice.
	Answers map[string]bool

	// SleepUntil is the wake time of a sleep in progress.
	SleepUntil *time.Time

	// Calls are the tool calls of the model's last answer, settled in order
	// before the model is called again.
	Calls []CallState
	// afterCalls is that answer's completion; its move waits for the calls.
	afterCalls *Entry
	callsFrom  int64
	// Tainted: a tool result from a source above the run's clearance is in
	// the context; TaintSource names the tool.
	Tainted     bool
	TaintSource string
	// asked is the question the run has shown a person (QuestionAsked)
	// and is still waiting on, asked at askedAt; any other entry ends it.
	asked   string
	askedAt time.Time

	// Delivered are the sub-agents whose result was delivered, by
	// wait_for_agent or by the drain.
	Delivered map[string]bool
	// Received are the ids of the messages taken in; Inbox the messages
	// taken in before the current stage's first answer (later ones ride
	// on the turn they followed).
	Received map[string]bool
	Inbox    []string
	// Notices are the sub-agent results the drain delivered before the
	// current stage's first answer (later ones ride on the turn they
	// followed, Turn.Notices).
	Notices []string

	// Titled: the titling call has finished (Title or TitleError is set).
	Titled     bool
	Title      string
	TitleError string

	// Regions are the run's named documents by name, as last written
	// (see regions.go); Handoff names the region a person edited at the
	// checkpoint the run just passed, which the next stage is given, and
	// Directive is a person's instructions to the stage it was sent back to.
	Regions   map[string]Region
	Handoff   string
	Directive string
	// PointChoices are the answers people gave at the checkpoints the run
	// passed to enter the current stage (multiple_choice options,
	// free_text text), in order; choosing collects them while the run is
	// still at the stage's points.
	PointChoices []PointChoice
	choosing     []PointChoice

	Outcome Outcome
	// Message explains an Error outcome.
	Message string

	// last is the last stage change; note why a runtime signal entered the
	// current stage; reason is the signal of the move being made.
	last   *TransitionRecord
	note   string
	reason string
	// carried are the turns the current stage received over its edge;
	// compacting is a summarization due before its first turn.
	carried    []Turn
	compacting *CompactJob
	// visit counts what the current stage visit did, for stuck edges.
	visit visit
}

// FailedCall is a model's last failure in the run.
type FailedCall struct {
	Failure Failure
	At      time.Time
}

// PendingInteraction is a stage-boundary checkpoint that must be answered
// before the run moves to Target (empty Target: the run completes).
type PendingInteraction struct {
	Stage  string
	Point  blueprint.InteractionPoint
	Target string
	// answered counts points of Stage already approved.
	answered int
}

// PointChoice is a person's answer at a checkpoint: the option chosen at a
// multiple_choice point, the text given at a free_text one.
type PointChoice struct {
	Point string
	Text  string
}

// Turn is one answer of the model in the stage and what it was told back.
type Turn struct {
	Text string
	// Rejected is why its submitted output was refused, if it was.
	Rejected string
	// Refused is why the run refused the move it asked for (leaving
	// without required output, a stage out of revisits, a transition whose
	// required regions are empty), if it did.
	Refused string
	// Tools are the answer's tool calls with their results.
	Tools []ToolResult
	// Moves are the answer's calls to the operator's own moves and the
	// calls nothing acted on (Response.Moves).
	Moves []Move
	// Messages are what the run's parent sent after this answer.
	Messages []string
	// Notices are the operator's own messages after this answer: the
	// results of sub-agents the drain delivered.
	Notices []string
}

// FanOut is a fan_out stage's items and where the run goes once they are done.
type FanOut struct {
	Stage  string
	Items  []string
	Target string
}

// Gate holds a stage until something outside the journal is done.
type Gate struct {
	Stage  string
	Target string
}

// SubmittedOutput is the run's final output.
type SubmittedOutput struct {
	Text  string
	Stage string
	Seq   int64
	// Bytes is the output's length as submitted, when Text was cut to fit
	// the journal (Response.OutputBytes); zero when Text is whole.
	Bytes int
}

// Fold replays entries over the blueprint. Entries must be in seq order; an
// entry that contradicts the state (a completion for no intent) is ignored,
// so a partial or duplicated journal still folds.
func Fold(bp *blueprint.Blueprint, entries []Entry) State {
	st := State{}
	entry := bp.EntryStage()
	if entry != nil {
		st.Stage = entry.Name
		_, st.StageIndex, _ = bp.Stage(entry.Name)
	}
	for i := range entries {
		st.apply(bp, &entries[i])
	}
	return st
}

// Apply folds one more entry into the state, as Fold would have had it been
// in the journal.
func (st *State) Apply(bp *blueprint.Blueprint, e Entry) { st.apply(bp, &e) }

// StageRecord is one stage's visits, as the journal records them.
type StageRecord struct {
	// Visits counts the times the run entered the stage; Iterations its
	// completed model calls over all visits.
	Visits, Iterations int
	// FirstEntered and LastEntered are when the run first and last
	// entered it (the time of the entry that moved it there; the entry
	// stage's is the run's first entry).
	FirstEntered, LastEntered time.Time
	// Spent is the time spent in visits that have ended: the run left the
	// stage, or ended in it.
	Spent time.Duration
	// Left: the last visit has ended.
	Left bool
	// Failed: the last visit ended on the stage's error edge (a failure no
	// setup change fixes), so the stage shows Error though the run went on.
	Failed bool
}

// Visit is one stay in a stage: from the entry that moved the run there
// to the one that moved it on or ended the run.
type Visit struct {
	Stage         string
	Entered, Left time.Time
	Ended, Failed bool
}

// apply folds one entry, keeping the stages' records: the entry stage is
// entered with the first entry, and the stage the run ends in is left
// when it ends.
func (st *State) apply(bp *blueprint.Blueprint, e *Entry) {
	ended := st.Outcome != OutcomeNone
	if !ended {
		st.at = e.At
		if st.Stages == nil && st.Stage != "" {
			st.enterStage(st.Stage)
		}
	}
	st.applyEntry(bp, e)
	if !ended && st.Outcome != OutcomeNone {
		st.endVisit()
	}
}

// enterStage starts a visit of stage at the current entry's time.
func (st *State) enterStage(stage string) {
	if st.Stages == nil {
		st.Stages = map[string]StageRecord{}
	}
	r := st.Stages[stage]
	r.Visits++
	r.LastEntered, r.Left, r.Failed = st.at, false, false
	if r.FirstEntered.IsZero() {
		r.FirstEntered = st.at
	}
	st.Stages[stage] = r
	st.Visits = append(st.Visits, Visit{Stage: stage, Entered: st.at})
}

// endVisit ends the current stage's visit at the current entry's time.
func (st *State) endVisit() {
	r, ok := st.Stages[st.Stage]
	if !ok || r.Left {
		return
	}
	if d := st.at.Sub(r.LastEntered); d > 0 {
		r.Spent += d
	}
	r.Left = true
	st.Stages[st.Stage] = r
	if n := len(st.Visits); n > 0 {
		v := &st.Visits[n-1]
		v.Left, v.Ended, v.Failed = st.at, true, r.Failed
	}
}

// countLost adds (sign 1) or takes back (-1) the lost dispatches an
// intent counts.
func (st *State) countLost(e *Entry, sign int64) {
	if e.Inherited {
		st.Inherited.LostCalls += sign * int64(e.Lost)
	} else {
		st.LostCalls += sign * int64(e.Lost)
	}
}

func (st *State) applyEntry(bp *blueprint.Blueprint, e *Entry) {
	if e.Seq >= st.NextSeq {
		st.NextSeq = e.Seq + 1
	}
	if st.Outcome != OutcomeNone {
		return
	}
	if e.Kind == QuestionAsked {
		st.asked, st.askedAt = e.Point, e.At
		return
	}
	st.asked = "" // anything else happening ends the wait on the question
	switch e.Kind {
	case ToolCallDecided, ToolCallRequested, ToolCallCompleted, ToolCallRetried, ToolPolicyDecided:
		st.applyTool(bp, e)
	case RunAbandoned:
		st.abandon(e)
	case ModelCallRequested:
		if p := st.Pending; p != nil && p.Seq == e.Seq {
			// Issued again under the pending intent's seq, which it
			// replaces: its Lost counts the earlier dispatches lost too.
			st.countLost(p, -1)
		}
		c := *e
		st.Pending = &c
		st.countLost(e, 1)
	case ModelCallCompleted:
		st.modelCallCompleted(bp, e)
	case ModelCallFailed:
		st.modelCallFailed(bp, e)
	case InteractionAnswered:
		st.interactionAnswered(bp, e)
	case RunCancelled:
		st.Pending = nil
		st.Outcome = OutcomeCancelled
		st.Message = "cancelled"
	case FanOutResolved:
		st.fanOutResolved(bp, e)
	case ChildrenResolved:
		st.childrenResolved(bp)
	case SleepCompleted:
		st.SleepUntil = nil
	case SpawnRefused:
		st.fail(bp, e.Message)
	case MessageReceived:
		st.receive(e)
	case SubagentResultDelivered:
		st.drained(e)
	case RegionWritten:
		st.writeRegion(e)
	}
}

// modelCallCompleted ends the pending model call: a title, a compaction,
// or a stage's turn.
func (st *State) modelCallCompleted(bp *blueprint.Blueprint, e *Entry) {
	if st.Pending == nil || st.Pending.Seq != e.Call {
		return
	}
	purpose := st.Pending.Purpose
	st.Pending = nil
	switch purpose {
	case PurposeTitle:
		st.titled(e)
		return
	case PurposeCompact:
		st.compacted(e)
		return
	}
	st.complete(bp, e)
}

// modelCallFailed ends the pending model call with its failure: a title
// that cannot be had, a compaction that failed, or a failed turn (fatal:
// the run fails).
func (st *State) modelCallFailed(bp *blueprint.Blueprint, e *Entry) {
	if st.Pending == nil || st.Pending.Seq != e.Call {
		return
	}
	ref := st.Pending.Provider + "/" + st.Pending.Model
	purpose := st.Pending.Purpose
	st.Pending = nil
	if purpose == PurposeCompact && st.compactFailed(e) {
		return
	}
	if purpose == PurposeTitle {
		// A title that cannot be had never holds up or fails the run.
		st.Titled = true
		if e.Failure != nil {
			st.TitleError = string(e.Failure.Class) + ": " + e.Failure.Message
		}
		return
	}
	if e.Failure != nil {
		f := *e.Failure
		st.Failure = &f
		st.FailureAt = e.At
		if st.Failed == nil {
			st.Failed = map[string]FailedCall{}
		}
		st.Failed[ref] = FailedCall{Failure: f, At: e.At}
		st.FailedAttempts++
		if f.Class == FailFatal {
			st.fail(bp, "model call failed: "+f.Message)
		}
	}
}

// interactionAnswered takes a person's answer at the pending interaction
// point: expired, declined, sent back, or passed (on to the stage's next
// point, or out of the stage).
func (st *State) interactionAnswered(bp *blueprint.Blueprint, e *Entry) {
	in := st.Interaction
	if in == nil || in.Point.Name != e.Point {
		return
	}
	st.remember(e.Message)
	if e.Expired && in.Point.Unattended == blueprint.UnattendedAsk {
		st.Interaction = nil
		st.Outcome = OutcomeError
		st.Message = fmt.Sprintf("interaction point %q expired with no answer, and it may not be passed unattended", e.Point)
		return
	}
	if !e.Approved {
		st.Interaction, st.choosing = nil, nil
		st.Outcome = OutcomeCancelled
		st.Message = fmt.Sprintf("interaction point %q was declined", e.Point)
		if e.Result != "" {
			st.Message += ": " + e.Result // the person's reason
		}
		if e.Abort != "" {
			st.Message = fmt.Sprintf("interaction point %q: abort option %q was chosen", e.Point, e.Abort)
		}
		return
	}
	st.Interaction = nil
	if e.Auto {
		st.GatesForced = true
	}
	if st.sentBack(bp, in, e) {
		st.choosing = nil
		return
	}
	if e.Choice != "" {
		st.choosing = append(st.choosing, PointChoice{Point: e.Point, Text: e.Choice})
	}
	stage, _, _ := bp.Stage(in.Stage)
	if next := in.answered + 1; stage != nil && next < len(stage.InteractionPoints) {
		st.Interaction = &PendingInteraction{Stage: in.Stage, Point: stage.InteractionPoints[next], Target: in.Target, answered: next}
		return
	}
	st.move(bp, in.Target)
	st.handOff(e)
	st.PointChoices, st.choosing = st.choosing, nil
}

// fanOutResolved leaves the fan-out stage once its workers are settled.
func (st *State) fanOutResolved(bp *blueprint.Blueprint, e *Entry) {
	fo := st.FanOut
	if fo == nil {
		return
	}
	st.FanOut, st.LastFanOut = nil, fo
	if e.FailAll {
		st.fail(bp, fmt.Sprintf("stage %q: a fan-out worker failed and on_worker_failure = fail_all", fo.Stage))
		return
	}
	st.leave(bp, fo.Stage, fo.Target)
}

// childrenResolved leaves the stage once the children it waited on are
// settled.
func (st *State) childrenResolved(bp *blueprint.Blueprint) {
	g := st.ChildrenGate
	if g == nil {
		return
	}
	st.ChildrenGate = nil
	st.leave(bp, g.Stage, g.Target)
}

// titled records the titling call: its usage is billed like any call, but
// it is no turn of a stage.
func (st *State) titled(e *Entry) {
	st.Titled = true
	st.account(e)
	title := ""
	if e.Response != nil {
		title = strings.TrimSpace(strings.Trim(strings.TrimSpace(e.Response.Text), `"'`))
	}
	if i := strings.IndexByte(title, '\n'); i >= 0 {
		title = title[:i]
	}
	switch {
	case title == "":
		st.TitleError = "the model answered with no title"
	case len(title) > 120:
		st.TitleError = "the model's title was longer than 120 bytes"
	default:
		st.Title = title
	}
}

// account adds a call's usage and cost.
func (st *State) account(e *Entry) {
	if e.Inherited {
		st.Inherited.add(e)
		return
	}
	own := st.Own()
	own.add(e)
	st.Usage, st.ToolCalls, st.PricedNanoUSD = own.Usage, own.ToolCalls, own.PricedNanoUSD
	st.UnpricedCalls, st.CostInexact = own.UnpricedCalls, own.CostInexact
}

// complete accounts for a model answer and applies the transition it implies.
func (st *State) complete(bp *blueprint.Blueprint, e *Entry) {
	st.account(e)
	if e.Inherited {
		st.Inherited.ModelCalls++
	} else {
		st.ModelCalls++
	}
	if st.EntryModel == "" && e.Provider != "" {
		st.EntryModel = e.Provider + "/" + e.Model
	}
	st.Failure, st.FailedAttempts, st.FailureAt = nil, 0, time.Time{}
	st.Iteration++
	st.Moves++
	if e.Response != nil {
		st.visit.toolCalls += e.Response.ToolCalls
	}
	if r, ok := st.Stages[st.Stage]; ok {
		r.Iterations++
		st.Stages[st.Stage] = r
	}

	if _, _, ok := bp.Stage(st.Stage); !ok {
		st.Outcome, st.Message = OutcomeError, fmt.Sprintf("stage %q is not in the blueprint", st.Stage)
		return
	}
	r := e.Response
	if r == nil {
		r = &Response{}
	}
	st.Turns = append(st.Turns, Turn{Text: r.Text, Rejected: r.OutputRejected, Moves: r.Moves})
	if len(r.Calls) > 0 && r.OutputRejected == "" {
		st.startCalls(e, r)
		return
	}
	st.advance(bp, e)
}

// advance applies the move a model answer implies (sleep, output,
// transition, completion), once its tool calls, if any, are settled.
func (st *State) advance(bp *blueprint.Blueprint, e *Entry) {
	stage, _, ok := bp.Stage(st.Stage)
	if !ok {
		st.Outcome, st.Message = OutcomeError, fmt.Sprintf("stage %q is not in the blueprint", st.Stage)
		return
	}
	r := e.Response
	if r == nil {
		r = &Response{}
	}
	if r.SleepSeconds > 0 {
		// The fold reads no clock: the wake time is the completion's own
		// time plus the duration, the same on every replay.
		wake := e.At.Add(time.Duration(r.SleepSeconds) * time.Second)
		st.SleepUntil = &wake
		if !r.Complete && r.Next == "" {
			st.spawnAlongside(stage, r)
			return // the model asked to sleep, not to move on
		}
	}
	if r.OutputRejected != "" {
		st.outputRejected(bp, stage, r)
		return
	}
	if r.Output != "" {
		st.Output = &SubmittedOutput{Text: r.Output, Stage: stage.Name, Seq: e.Seq, Bytes: r.OutputBytes}
	}
	if stays(stage, r) && st.stuck(bp, stage, e.At) {
		return
	}
	target, done, hitMax, err := nextTarget(stage, r, st.Iteration, func(s string) bool { return st.CanEnter(bp, s) })
	if stage.FanOut != nil && err == "" && !done {
		// A fan_out stage's answer is its items: it moves on once they are done.
		target, done = fanOutTarget(stage), true
	}
	switch {
	case err != "":
		if hitMax {
			st.MaxIterationsHit = true
		}
		st.Outcome, st.Message = OutcomeError, err
		return
	case !done:
		st.spawnAlongside(stage, r)
		return
	}
	if hitMax {
		st.MaxIterationsHit = true
		st.reason = cutOff(stage)
	}
	if !hitMax && stage.FanOut == nil && (st.stuckWhileHeld(bp, stage, target, e.At) || !st.finishing(bp, stage, target)) {
		return
	}
	if stage.FanOut == nil && target != "" {
		if missing := st.emptyRegions(stage, target); len(missing) > 0 {
			st.refuseMove(bp, stage, target, missing, hitMax)
			return
		}
	}
	st.moveOn(bp, stage, r, target)
}

// outputRejected: refused output neither counts nor moves the run: the
// model tries again, told why, until the stage runs out of iterations.
func (st *State) outputRejected(bp *blueprint.Blueprint, stage *blueprint.Stage, r *Response) {
	if st.Iteration < stage.MaxIterations {
		return
	}
	if t, ok := st.signalEdge(bp, stage, blueprint.CondMaxIterations); ok {
		st.MaxIterationsHit = true
		st.reason = cutOff(stage)
		st.leave(bp, stage.Name, t.Target)
		return
	}
	st.MaxIterationsHit = true
	st.Outcome = OutcomeError
	st.Message = fmt.Sprintf("stage %q reached max_iterations (%d) without acceptable output: %s", stage.Name, stage.MaxIterations, r.OutputRejected)
}

// fanOutTarget is where a fan_out stage goes once its items are done: its
// always edge, else its first.
func fanOutTarget(stage *blueprint.Stage) string {
	if t, ok := stage.TransitionFor(blueprint.CondAlways); ok {
		return t.Target
	}
	if len(stage.Transitions) > 0 {
		return stage.Transitions[0].Target
	}
	return ""
}

// moveOn makes the answer's move toward target: a fan-out of its items,
// a wait on the children it spawned, or out of the stage.
func (st *State) moveOn(bp *blueprint.Blueprint, stage *blueprint.Stage, r *Response, target string) {
	if stage.FanOut != nil {
		items := r.Items
		if m := stage.FanOut.MaxItems; m > 0 && len(items) > m {
			items = items[:m]
		}
		if stage.FanOut.MergeStage != "" {
			target = stage.FanOut.MergeStage
		}
		st.FanOut = &FanOut{Stage: stage.Name, Items: items, Target: target}
		return
	}
	if len(r.Spawns) > 0 {
		st.Subagents = append(st.Subagents, r.Spawns...)
	}
	if stage.RequiresChildren && len(st.Subagents) > 0 {
		st.ChildrenGate = &Gate{Stage: stage.Name, Target: target}
		return
	}
	st.leave(bp, stage.Name, target)
}

// spawnAlongside registers the sub-agents of an answer that stays in its
// stage: they run alongside the stage's next turns, which may wait for them
// (wait_for_agent) or check on them. A fan_out stage's answer is its items.
func (st *State) spawnAlongside(stage *blueprint.Stage, r *Response) {
	if stage.FanOut == nil {
		st.Subagents = append(st.Subagents, r.Spawns...)
	}
}

// leave exits stage toward target, through its interaction points if any.
func (st *State) leave(bp *blueprint.Blueprint, stage, target string) {
	if s, _, ok := bp.Stage(stage); ok && len(s.InteractionPoints) > 0 {
		st.Interaction = &PendingInteraction{Stage: stage, Point: s.InteractionPoints[0], Target: target}
		return
	}
	st.move(bp, target)
}

// nextTarget says where a stage goes after an answer: a target stage, ""
// with done=true to complete the run, or done=false to iterate again.
func nextTarget(stage *blueprint.Stage, r *Response, iteration int, canEnter func(string) bool) (target string, done, hitMax bool, errMsg string) {
	switch {
	case r.Complete:
		if !stage.AllowComplete && len(stage.Transitions) > 0 {
			return "", false, false, fmt.Sprintf("stage %q: the model completed the run but the stage does not allow_complete", stage.Name)
		}
		return "", true, false, ""
	case r.Next != "":
		for _, t := range stage.Transitions {
			if t.Target == r.Next {
				return r.Next, true, false, ""
			}
		}
		return "", false, false, fmt.Sprintf("stage %q: the model chose %q, which is not one of its transitions", stage.Name, r.Next)
	case len(stage.Transitions) == 0:
		return "", true, false, ""
	}
	if t, ok := stage.TransitionFor(blueprint.CondAlways); ok {
		return t.Target, true, false, ""
	}
	if iteration >= stage.MaxIterations {
		if t, ok := stage.TransitionFor(blueprint.CondMaxIterations); ok {
			if canEnter(t.Target) {
				return t.Target, true, true, ""
			}
			return "", false, true, fmt.Sprintf("stage %q reached max_iterations (%d) and its max_iterations target %q is out of max_revisits", stage.Name, stage.MaxIterations, t.Target)
		}
		return "", false, true, fmt.Sprintf("stage %q reached max_iterations (%d) and declares no max_iterations transition", stage.Name, stage.MaxIterations)
	}
	return "", false, false, ""
}

// move enters target, or completes the run when target is empty.
func (st *State) move(bp *blueprint.Blueprint, target string) {
	if target == "" {
		st.Outcome = OutcomeComplete
		return
	}
	_, idx, ok := bp.Stage(target)
	if !ok {
		st.Outcome, st.Message = OutcomeError, fmt.Sprintf("transition target %q is not a stage", target)
		return
	}
	st.carryOver(bp, target)
	st.endVisit()
	st.Stage, st.StageIndex, st.Iteration, st.Turns, st.Inbox, st.Notices = target, idx, 0, nil, nil, nil
	st.Handoff, st.Directive, st.PointChoices = "", "", nil
	st.enterStage(target)
	st.Failure, st.FailedAttempts, st.FailureAt = nil, 0, time.Time{}
	st.Moves++
}
