package journal

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
)

// TransitionRecord is the last stage change: which edge the run took and,
// for the runtime's own signals (error, stuck, dead_end, max_iterations),
// why, so status and the next stage can say what happened.
type TransitionRecord struct {
	From, To string
	// Condition is the edge's condition; empty for a fan-out's move to
	// its merge stage, which has no edge.
	Condition string
	// Reason explains a runtime signal; empty for the model's choice.
	Reason string
}

// The edits a stuck_after_same_file_edits threshold counts: Leviath's
// write and edit tools, whatever server offers them.
var fileEditTools = []string{"write_file", "edit_file"}

// visit is what the stage visit in progress has done, for the stuck
// thresholds; it starts empty on every stage entry.
type visit struct {
	toolCalls int
	fileEdits map[string]int
}

// LastTransition is the last stage change, if the run has changed stage.
func (st *State) LastTransition() *TransitionRecord { return st.last }

// Note is why the run entered the current stage when a runtime signal
// took it there (an error, stuck or dead_end edge): the recovery stage is
// told what went wrong instead of working it out again.
func (st *State) Note() string { return st.note }

// Carried are the turns the current stage received from the stages before
// it over their edges' transforms, oldest first; the model sees them before
// the stage's own turns.
func (st *State) Carried() []Turn { return st.carried }

// CanEnter says whether max_revisits lets the run enter target now: a
// stage may be re-entered that many times after its first visit. (A
// target that is no stage is not refused here: moving there ends the run
// naming it.)
func (st *State) CanEnter(bp *blueprint.Blueprint, target string) bool {
	s, _, ok := bp.Stage(target)
	if !ok || s.MaxRevisits == nil {
		return true
	}
	visits := st.Stages[target].Visits
	return visits == 0 || visits-1 < *s.MaxRevisits
}

// isNormal: the edges a finished stage leaves by, which max_revisits and
// dead_end are about; the others fire on runtime signals.
func isNormal(t blueprint.Transition) bool {
	return t.Condition == blueprint.CondLLMChoice || t.Condition == blueprint.CondAlways
}

// Choices are the edges the model may choose now: the stage's llm_choice
// edges whose targets have revisits left.
func (st *State) Choices(bp *blueprint.Blueprint, stage *blueprint.Stage) []blueprint.Transition {
	var out []blueprint.Transition
	for _, t := range stage.Transitions {
		if t.Condition == blueprint.CondLLMChoice && st.CanEnter(bp, t.Target) {
			out = append(out, t)
		}
	}
	return out
}

// signalEdge is the stage's first edge with cond whose target may still be
// entered: an edge into a stage out of revisits is as good as absent, so
// a runtime loop is bounded by the same max_revisits as the model's.
func (st *State) signalEdge(bp *blueprint.Blueprint, stage *blueprint.Stage, cond string) (blueprint.Transition, bool) {
	for _, t := range stage.Transitions {
		if t.Condition == cond && st.CanEnter(bp, t.Target) {
			return t, true
		}
	}
	return blueprint.Transition{}, false
}

// fail is a terminal failure in the current stage (a model call no setup
// change fixes, a refused child, a failed fan-out): the stage's error edge
// takes it, recording why; without one the run ends in Error.
func (st *State) fail(bp *blueprint.Blueprint, why string) {
	if stage, _, ok := bp.Stage(st.Stage); ok {
		if t, ok := st.signalEdge(bp, stage, blueprint.CondError); ok {
			if r, ok := st.Stages[st.Stage]; ok {
				r.Failed = true
				st.Stages[st.Stage] = r
			}
			st.take(bp, t, why)
			return
		}
	}
	st.Outcome, st.Message = OutcomeError, why
}

// take follows a runtime-signal edge. It skips the stage's interaction
// points: those approve a stage's finished work, and a stage that failed
// or got stuck did not finish it.
func (st *State) take(bp *blueprint.Blueprint, t blueprint.Transition, why string) {
	st.reason = why
	st.move(bp, t.Target)
}

// refuse turns down the move an answer asked for (leaving without the
// required output, entering a stage out of revisits): the model is told
// why and tries again, until the stage runs out of iterations.
func (st *State) refuse(bp *blueprint.Blueprint, stage *blueprint.Stage, why string) {
	if n := len(st.Turns); n > 0 {
		st.Turns[n-1].Refused = why
	}
	if st.Iteration < stage.MaxIterations {
		return
	}
	st.MaxIterationsHit = true
	if t, ok := st.signalEdge(bp, stage, blueprint.CondMaxIterations); ok {
		st.reason = cutOff(stage)
		st.leave(bp, stage.Name, t.Target)
		return
	}
	st.Outcome = OutcomeError
	st.Message = fmt.Sprintf("stage %q reached max_iterations (%d) and could not leave: %s", stage.Name, stage.MaxIterations, why)
}

// finishing checks a stage's finished answer against require_output and
// max_revisits before it leaves for target ("" completes the run). It
// reports false when the run does not leave: the answer was refused, or
// the stage was stranded and a dead_end or error edge (or the run's end)
// took over.
func (st *State) finishing(bp *blueprint.Blueprint, stage *blueprint.Stage, target string) bool {
	if stage.RequireOutput && (st.Output == nil || st.Output.Stage != stage.Name) {
		st.refuse(bp, stage, fmt.Sprintf("stage %q requires output before it is left: submit it with the complete tool's output (with your transition or completion)", stage.Name))
		return false
	}
	if target == "" || st.CanEnter(bp, target) {
		return true
	}
	if open := st.openTargets(bp, stage); len(open) > 0 {
		st.refuse(bp, stage, fmt.Sprintf("stage %q has used its max_revisits; choose one of: %s", target, strings.Join(open, ", ")))
		return false
	}
	st.strand(bp, stage)
	return false
}

// openTargets are the targets of the stage's normal edges that have
// revisits left.
func (st *State) openTargets(bp *blueprint.Blueprint, stage *blueprint.Stage) []string {
	var open []string
	for _, t := range stage.Transitions {
		if isNormal(t) && st.CanEnter(bp, t.Target) {
			open = append(open, t.Target)
		}
	}
	return open
}

// heldBack says whether the move an answer leads to (the model's choice,
// its completion, or the stage's always edge; target "" completes the run)
// will be refused, keeping the run in the stage: require_output unmet, a
// required region empty, or a target out of revisits while another is open
// (with none open the stage is stranded, and dead_end moves it).
func (st *State) heldBack(bp *blueprint.Blueprint, stage *blueprint.Stage, target string) bool {
	switch {
	case stage.RequireOutput && (st.Output == nil || st.Output.Stage != stage.Name):
		return true
	case target == "":
		return false
	case !st.CanEnter(bp, target):
		return len(st.openTargets(bp, stage)) > 0
	}
	return len(st.emptyRegions(stage, target)) > 0
}

// stuckWhileHeld reads the stage's stuck edges when the answer's move is
// held back: the run stays in the stage as after an answer that asks for no
// move, and runtime-signal edges are not held back by the gates of the
// normal ones (docs/blueprints.md). The refusal is told only if no stuck
// threshold fires.
func (st *State) stuckWhileHeld(bp *blueprint.Blueprint, stage *blueprint.Stage, target string, at time.Time) bool {
	return st.heldBack(bp, stage, target) && st.stuck(bp, stage, at)
}

// strand is a finished stage whose every normal target is out of
// revisits: its dead_end edge is taken, else its error edge (dead_end wins
// when both exist, since an error edge also carries provider failures),
// else the run ends in Error.
func (st *State) strand(bp *blueprint.Blueprint, stage *blueprint.Stage) {
	why := fmt.Sprintf("stage %q finished, and every stage it may go on to is out of max_revisits", stage.Name)
	if n := len(st.Turns); n > 0 {
		// The move the answer asked for was not made: the turn, carried
		// on, says so rather than leave it looking taken.
		st.Turns[n-1].Refused = why
	}
	if t, ok := st.signalEdge(bp, stage, blueprint.CondDeadEnd); ok {
		st.take(bp, t, why)
		return
	}
	st.fail(bp, why)
}

// stuck checks the current visit against the stage's stuck edges, after
// an answer that keeps the run in the stage; the first edge whose
// threshold is reached is taken. at is the answer's time, so the fold
// reads no clock.
func (st *State) stuck(bp *blueprint.Blueprint, stage *blueprint.Stage, at time.Time) bool {
	for _, t := range stage.Transitions {
		if t.Condition != blueprint.CondStuck || t.Stuck == nil || !st.CanEnter(bp, t.Target) {
			continue
		}
		if why := st.stuckReason(stage, t.Stuck, at); why != "" {
			st.take(bp, t, why)
			return true
		}
	}
	return false
}

// stuckReason names the first threshold the visit has reached, or "".
func (st *State) stuckReason(stage *blueprint.Stage, th *blueprint.StuckThresholds, at time.Time) string {
	in := fmt.Sprintf("stage %q is stuck: ", stage.Name)
	if n := th.Iterations; n > 0 && st.Iteration >= n {
		return in + fmt.Sprintf("%d model turns in this visit (stuck_after_iterations = %d)", st.Iteration, n)
	}
	if n := th.ToolCalls; n > 0 && st.visit.toolCalls >= n {
		return in + fmt.Sprintf("%d tool calls in this visit (stuck_after_tool_calls = %d)", st.visit.toolCalls, n)
	}
	if n := th.Minutes; n > 0 {
		if d := at.Sub(st.Stages[stage.Name].LastEntered); d >= time.Duration(n)*time.Minute {
			return in + fmt.Sprintf("%d minutes in this visit (stuck_after_minutes = %d)", int(d/time.Minute), n)
		}
	}
	if n := th.SameFileEdits; n > 0 {
		for _, path := range sortedPaths(st.visit.fileEdits) {
			if c := st.visit.fileEdits[path]; c >= n {
				return in + fmt.Sprintf("%d edits of %s in this visit (stuck_after_same_file_edits = %d)", c, path, n)
			}
		}
	}
	return ""
}

func sortedPaths(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// countEdits adds a settled answer's successful write_file and edit_file
// calls to the visit, by their path argument.
func (st *State) countEdits(calls []CallState) {
	for _, c := range calls {
		if c.IsError || !slices.Contains(fileEditTools, c.Name) {
			continue
		}
		var a struct {
			Path string `json:"path"`
		}
		if json.Unmarshal([]byte(c.Arguments), &a) != nil || a.Path == "" {
			continue
		}
		if st.visit.fileEdits == nil {
			st.visit.fileEdits = map[string]int{}
		}
		st.visit.fileEdits[a.Path]++
	}
}

// carry is what target receives of the stage being left over edge t: the
// turns it had received and its own (direct), nothing (clear), the same
// turns to be summarized first (compact, summarize: compact is true), or,
// for a custom transform, what its config says of the conversation
// region (carried when it names it nowhere).
func carry(t blueprint.Transition, received, own []Turn) (turns []Turn, compact bool) {
	mode := t.Transform
	if c := t.TransformConfig; mode == blueprint.TransformCustom && c != nil {
		mode = blueprint.TransformDirect
		switch {
		case slices.Contains(c.Clear, blueprint.RegionConversation):
			mode = blueprint.TransformClear
		case slices.Contains(c.Compact, blueprint.RegionConversation):
			mode = blueprint.TransformCompact
		}
	}
	if mode == blueprint.TransformClear {
		return nil, false
	}
	out := make([]Turn, 0, len(received)+len(own))
	out = append(append(out, received...), own...)
	if len(out) == 0 {
		return nil, false
	}
	return out, mode == blueprint.TransformCompact || mode == blueprint.TransformSummarize
}

// PurposeCompact marks the summarization call a compact (or summarize)
// edge makes before the stage it enters takes its first turn.
const PurposeCompact = "compact"

// CompactJob is a summarization due: the turns a compact edge carries and
// the edge's compact_prompt.
type CompactJob struct {
	From   string
	Turns  []Turn
	Prompt string
}

// Compacting is the summarization due before the current stage's first
// turn, if any.
func (st *State) Compacting() *CompactJob { return st.compacting }

// stays: the answer asks for no move of its own, so the stage would run
// another iteration (or hit its cap); that is when stuck edges are read.
func stays(stage *blueprint.Stage, r *Response) bool {
	if r.Complete || r.Next != "" || stage.FanOut != nil || len(stage.Transitions) == 0 {
		return false
	}
	_, always := stage.TransitionFor(blueprint.CondAlways)
	return !always
}

// carryOver records the stage change being made toward target and what
// target receives over the edge.
func (st *State) carryOver(bp *blueprint.Blueprint, target string) {
	rec := &TransitionRecord{From: st.Stage, To: target, Reason: st.reason}
	edge := blueprint.Transition{Transform: blueprint.TransformDirect}
	if s, _, ok := bp.Stage(st.Stage); ok {
		if t, ok := s.Transition(target); ok {
			edge, rec.Condition = t, t.Condition
		}
	}
	st.last, st.note, st.reason = rec, st.reason, ""
	st.visit = visit{}
	turns, compact := carry(edge, st.carried, st.Turns)
	st.carried, st.compacting = turns, nil
	if compact {
		job := &CompactJob{From: rec.From, Turns: turns}
		if c := edge.TransformConfig; c != nil {
			job.Prompt = c.CompactPrompt
		}
		st.carried, st.compacting = nil, job
	}
}

// compacted takes the summary as what the stage received: billed like
// any call, but no turn of a stage.
func (st *State) compacted(e *Entry) {
	st.account(e)
	job := st.compacting
	st.compacting = nil
	text := ""
	if e.Response != nil {
		text = strings.TrimSpace(e.Response.Text)
	}
	if job == nil || text == "" {
		if job != nil {
			st.carried = job.Turns // nothing to summarize with: carried as is
		}
		return
	}
	st.carried = []Turn{{Text: fmt.Sprintf("Summary of the work before stage %q: %s", st.Stage, text)}}
}

// compactFailed settles a summarization no setup change can fix: the
// turns are carried as they are, so a broken summary never costs the run
// its work. Other failures park or fail over like any call's (false).
func (st *State) compactFailed(e *Entry) bool {
	if e.Failure == nil || e.Failure.Class != FailFatal || st.compacting == nil {
		return false
	}
	st.carried, st.compacting = st.compacting.Turns, nil
	return true
}

// cutOff is what the stage after an iteration cap is told: the work was
// cut off, not finished.
func cutOff(stage *blueprint.Stage) string {
	return fmt.Sprintf("stage %q reached max_iterations (%d): its work was cut off, not finished", stage.Name, stage.MaxIterations)
}
