package journal

import (
	"fmt"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
)

// CallState is one tool call of the model's last answer and how far it got.
type CallState struct {
	Index int
	ToolCall
	// Approved: the ToolApproval gate was passed (by a person or policy).
	Approved bool
	// TaintCleared: the TaintGate was passed for this call.
	TaintCleared bool
	// Policy is the tool policies' journaled decision on this call (nil:
	// not evaluated yet, or no rule matched); PolicyApproved: a person
	// approved the call its RequireApproval held.
	Policy         *PolicyDecision
	PolicyApproved bool
	// EditedBy is who approved the call with edited arguments (Arguments
	// are then theirs, not the model's); "" when the model's stand.
	EditedBy string
	// ReasonRequired, when set, names the rule (a tool policy's
	// RequireApproval with requireReason) that makes an answer approving or
	// denying this call carry a reason. The policy wiring sets it where it
	// folds its decision; an answer without a reason is refused.
	ReasonRequired string
	// Intent is the journaled intent with no completion yet.
	Intent *Entry
	Done   bool
	Result string
	// IsError: the result is an error or a refusal the model is told of.
	IsError bool
}

// ToolResult is a finished tool call as the model is told it.
type ToolResult struct {
	ToolCall
	Result  string
	IsError bool
}

// HeadCall is the next tool call to settle, or nil when none is due.
func (st *State) HeadCall() *CallState {
	for i := range st.Calls {
		if !st.Calls[i].Done {
			return &st.Calls[i]
		}
	}
	return nil
}

// PendingTool is a tool call whose intent is journaled and whose
// completion is not, if any.
func (st *State) PendingTool() *Entry {
	if h := st.HeadCall(); h != nil {
		return h.Intent
	}
	return nil
}

// CallPoint names the question about the head tool call, so an answer can
// say which call it answers: "call-<seq>-<i>", seq being the model answer's
// completion and i the call's index in it.
func (st *State) CallPoint() string {
	if h := st.HeadCall(); h != nil {
		return fmt.Sprintf("call-%d-%d", st.callsFrom, h.Index)
	}
	return ""
}

// startCalls queues an answer's tool calls; the answer's move waits for them.
func (st *State) startCalls(e *Entry, r *Response) {
	st.Calls = make([]CallState, len(r.Calls))
	for i, c := range r.Calls {
		st.Calls[i] = CallState{Index: i, ToolCall: c}
	}
	after := *e
	rest := *r
	rest.Calls = nil
	after.Response = &rest
	st.afterCalls = &after
	st.callsFrom = e.Seq
}

// applyTool folds the tool-call entries.
func (st *State) applyTool(bp *blueprint.Blueprint, e *Entry) {
	h := st.HeadCall()
	if h == nil || h.Index != e.Index {
		return
	}
	switch e.Kind {
	case ToolCallDecided:
		st.remember(e.Message)
		if !e.Approved {
			why := "denied"
			switch {
			case e.Expired:
				why = "denied: nobody answered in time"
			case e.By != "":
				why = "denied by " + e.By
			}
			msg := "The call was not made: " + why + "."
			if e.Result != "" {
				msg += " Reason: " + e.Result
			}
			st.finishCall(bp, h, msg, true)
			return
		}
		switch e.Gate {
		case GateTaint:
			h.TaintCleared = true
		case GatePolicy:
			// A person approved this exact call: that answers the
			// blueprint's ask too.
			h.PolicyApproved, h.Approved = true, true
		default:
			h.Approved = true
		}
		if e.Gate != GateTaint && e.Input != "" {
			// A person approved the call with edited arguments: the call
			// is made with them, and the model is told so. The policies'
			// decision was on the model's arguments, so it is made again
			// on these (a person's edit never escapes a Deny).
			h.Arguments, h.EditedBy = e.Input, e.By
			h.Policy = nil
			if e.Gate != GatePolicy {
				// Whoever answered a policy's RequireApproval saw other
				// arguments: it asks again if it still holds the call.
				h.PolicyApproved = false
			}
		}
		if e.Auto {
			st.GatesForced = true
		}
	case ToolCallRequested:
		if h.Intent != nil {
			return
		}
		c := *e
		h.Intent = &c
	case ToolCallCompleted:
		if (h.Intent != nil && e.Call != h.Intent.Seq) || (h.Intent == nil && e.Call != 0) {
			return // a completion of another (older) intent
		}
		st.remember(e.Message)
		st.delivered(e)
		if !e.IsError && blueprint.LevelRank(bp.ToolLevelIn(st.Stage, h.Name)) > blueprint.LevelRank(bp.Agent.Clearance) {
			st.Tainted, st.TaintSource = true, h.Name
		}
		st.finishCall(bp, h, e.Result, e.IsError)
	case ToolPolicyDecided:
		st.applyPolicy(bp, h, e)
	case ToolCallRetried:
		if h.Intent == nil || e.Call != h.Intent.Seq {
			return
		}
		st.remember(e.Message)
		h.Intent = nil
	}
}

// AppliedAnswers names the AgentRunAnswers the entries applied, without
// folding them (a finished run's answers are settled from this).
func AppliedAnswers(entries []Entry) map[string]bool {
	out := map[string]bool{}
	for _, e := range entries {
		switch e.Kind {
		case InteractionAnswered, ToolCallDecided, ToolCallCompleted, ToolCallRetried, RunAbandoned:
			if e.Message != "" {
				out[e.Message] = true // these kinds name the answer they apply in Message
			}
		}
	}
	return out
}

// remember records an applied AgentRunAnswer's name.
func (st *State) remember(answer string) {
	if answer == "" {
		return
	}
	if st.Answers == nil {
		st.Answers = map[string]bool{}
	}
	st.Answers[answer] = true
}

// finishCall settles the head call; once every call is settled the model's
// answer moves the run on as it would have without tools, and its turn
// carries the results for the next call.
func (st *State) finishCall(bp *blueprint.Blueprint, h *CallState, result string, isError bool) {
	h.Done, h.Result, h.IsError, h.Intent = true, result, isError, nil
	if st.HeadCall() != nil {
		return
	}
	if n := len(st.Turns); n > 0 {
		for _, c := range st.Calls {
			st.Turns[n-1].Tools = append(st.Turns[n-1].Tools, ToolResult{ToolCall: c.ToolCall, Result: c.Result, IsError: c.IsError})
		}
	}
	st.countEdits(st.Calls)
	after := st.afterCalls
	st.Calls, st.afterCalls = nil, nil
	switch {
	case after == nil:
	case movesOn(bp, st, after.Response):
		st.advance(bp, after)
	default:
		// The agent loop goes on unless the visit is measurably stuck.
		if stage, _, ok := bp.Stage(st.Stage); ok {
			st.stuck(bp, stage, after.At)
		}
	}
}

// movesOn says whether an answer whose tool calls are settled moves the run
// itself. One that only called tools stays in the stage: the model is
// called again with the results (the agent loop), unless the stage is out
// of iterations.
func movesOn(bp *blueprint.Blueprint, st *State, r *Response) bool {
	if r == nil {
		return false
	}
	if r.Next != "" || r.Complete || r.SleepSeconds > 0 || len(r.Items) > 0 || len(r.Spawns) > 0 {
		return true
	}
	stage, _, ok := bp.Stage(st.Stage)
	return !ok || st.Iteration >= stage.MaxIterations
}

// abandon ends the run over a dangling write, keeping the write on record.
func (st *State) abandon(e *Entry) {
	st.remember(e.Message)
	st.Outcome = OutcomeCancelled
	who := e.By
	if who == "" {
		who = "a person"
	}
	st.Message = "abandoned by " + who
	if p := st.PendingTool(); p != nil {
		st.Message += fmt.Sprintf(" with the outcome of write %s (seq %d) unknown", p.Tool, p.Seq)
	}
}

// AskedAt is when the question at point was shown to a person, if it is
// the one the run waits on.
func (st *State) AskedAt(point string) (time.Time, bool) {
	if point == "" || st.asked != point {
		return time.Time{}, false
	}
	return st.askedAt, true
}
