package journal

import (
	"fmt"

	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
)

// Spend is what a set of calls consumed: the counters State keeps for the
// run's own calls, kept once more for the calls a fork inherited.
type Spend struct {
	Usage         Usage
	ModelCalls    int64
	ToolCalls     int64
	PricedNanoUSD int64
	UnpricedCalls int64
	LostCalls     int64
	CostInexact   bool
}

// add accounts for one completed call.
func (s *Spend) add(e *Entry) {
	if e.Response != nil {
		s.ToolCalls += int64(e.Response.ToolCalls)
	}
	if u := e.Usage; u != nil {
		s.Usage.Prompt += u.Prompt
		s.Usage.Completion += u.Completion
		s.Usage.Cached += u.Cached
		s.Usage.CacheWrite += u.CacheWrite
	}
	if e.CostNanoUSD == nil {
		s.UnpricedCalls++
		return
	}
	s.PricedNanoUSD += *e.CostNanoUSD
	if !e.CostExact {
		s.CostInexact = true
	}
}

// Own is the run's own spend (not what a fork inherited).
func (st *State) Own() Spend {
	return Spend{
		Usage: st.Usage, ModelCalls: st.ModelCalls, ToolCalls: st.ToolCalls, PricedNanoUSD: st.PricedNanoUSD,
		UnpricedCalls: st.UnpricedCalls, LostCalls: st.LostCalls, CostInexact: st.CostInexact,
	}
}

// StageStart is how many of a run's entries come before the run first
// entered stage (folded over the run's blueprint bp): a fork from stage
// inherits exactly those. The entry stage starts at 0. A stage the
// blueprint lacks, or one the journal never entered, is an error that
// says so.
func StageStart(bp *blueprint.Blueprint, entries []Entry, stage string) (int, error) {
	if _, _, ok := bp.Stage(stage); !ok {
		return 0, fmt.Errorf("stage %q is not a stage of the source's blueprint", stage)
	}
	st := Fold(bp, nil)
	if st.Stage == stage {
		return 0, nil
	}
	for i := range entries {
		st.Apply(bp, entries[i])
		if st.Stage == stage && st.Outcome == OutcomeNone {
			return i + 1, nil
		}
	}
	return 0, fmt.Errorf("the source never entered stage %q", stage)
}

// Inherit is the first n entries as a fork inherits them: marked
// Inherited, and bound to no snapshot (the fork snapshots its own
// blueprint). entries is not modified.
func Inherit(entries []Entry, n int) []Entry {
	out := make([]Entry, n)
	copy(out, entries[:n])
	for i := range out {
		out[i].Inherited, out[i].Snapshot = true, ""
	}
	return out
}
