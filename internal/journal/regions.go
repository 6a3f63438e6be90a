package journal

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
)

// MaxRegionBytes caps one region's content: each write is one journal
// entry, and an entry must fit a journal chunk with room to spare.
const MaxRegionBytes = 128 << 10

// Who wrote a region, as RegionWritten's By says when no person did.
const (
	BySpec  = "spec"
	ByModel = "model"
	// ByFanOut is followed by the fan-out stage's name.
	ByFanOut = "fan-out "
)

// Region is a region's content as last written.
type Region struct {
	Content string
	// By says who wrote it: BySpec, ByModel, ByFanOut+stage, or the person
	// who edited it at a checkpoint.
	By  string
	Seq int64
	At  time.Time
	// Seeded: the run's spec gave the region its first content.
	Seeded bool
}

// writeRegion folds a RegionWritten. A region keeps its seeded mark, so
// seeding is done once whatever is written later.
func (st *State) writeRegion(e *Entry) {
	if e.Region == "" {
		return
	}
	if st.Regions == nil {
		st.Regions = map[string]Region{}
	}
	old := st.Regions[e.Region]
	st.Regions[e.Region] = Region{Content: e.Content, By: e.By, Seq: e.Seq, At: e.At, Seeded: old.Seeded || e.Seeded}
}

// Seeded reports whether the spec's content for region is journaled.
func (st *State) Seeded(region string) bool { return st.Regions[region].Seeded }

// filled reports whether a region holds content (whitespace is empty: a
// draft of blanks is not a draft).
func (st *State) filled(region string) bool {
	return strings.TrimSpace(st.Regions[region].Content) != ""
}

// emptyRegions are the regions the transition from stage to target
// requires that are still empty.
func (st *State) emptyRegions(stage *blueprint.Stage, target string) []string {
	t, ok := stage.Transition(target)
	if !ok {
		return nil
	}
	var out []string
	for _, r := range t.RequireRegions {
		if !st.filled(r) {
			out = append(out, r)
		}
	}
	return out
}

// refuseMove keeps the run in stage because the transition to target
// needs regions that are empty: the model is told on its next turn, and
// once the stage is out of iterations its max_iterations transition is
// taken (if that one is not gated too), else the run ends in Error.
func (st *State) refuseMove(bp *blueprint.Blueprint, stage *blueprint.Stage, target string, missing []string, hitMax bool) {
	names, _ := json.Marshal(missing)
	why := fmt.Sprintf("the transition to %q needs the region(s) %s, which are empty; write them with the write_region tool first", target, names)
	if n := len(st.Turns); n > 0 {
		st.Turns[n-1].Refused = why
	}
	if !hitMax && st.Iteration < stage.MaxIterations {
		return
	}
	st.MaxIterationsHit = true
	if t, ok := stage.TransitionFor(blueprint.CondMaxIterations); ok && !hitMax && len(st.emptyRegions(stage, t.Target)) == 0 {
		st.leave(bp, stage.Name, t.Target)
		return
	}
	st.Outcome = OutcomeError
	st.Message = fmt.Sprintf("stage %q reached max_iterations (%d): %s", stage.Name, stage.MaxIterations, why)
}

// RequiredRegionsAbandoned reports a finished run that left a region
// empty which a transition of a stage it entered requires (the seeds'
// required_regions_abandoned): whatever it handed back, the document the
// blueprint asked for was never written.
func (st *State) RequiredRegionsAbandoned(bp *blueprint.Blueprint) bool {
	if st.Outcome == OutcomeNone {
		return false
	}
	for _, s := range bp.Stages {
		if _, entered := st.Stages[s.Name]; !entered {
			continue
		}
		for _, t := range s.Transitions {
			if slices.ContainsFunc(t.RequireRegions, func(r string) bool { return !st.filled(r) }) {
				return true
			}
		}
	}
	return false
}

// sentBack applies a checkpoint answer that sends the stage back with a
// person's instructions (a directives choice): the run enters the stage
// again, its turns start afresh, and the next call carries the
// instructions.
func (st *State) sentBack(bp *blueprint.Blueprint, in *PendingInteraction, e *Entry) bool {
	if e.Directive == "" {
		return false
	}
	st.move(bp, in.Stage)
	st.Directive = e.Directive
	return true
}

// handOff remembers, after a checkpoint whose draft a person edited, which
// region the next stage is given.
func (st *State) handOff(e *Entry) {
	if e.Region != "" && st.Outcome == OutcomeNone {
		st.Handoff = e.Region
	}
}

// Document is the region a call of the current stage is given: the
// stage's document_region, else the draft a person just edited.
func (st *State) Document(bp *blueprint.Blueprint) (string, bool) {
	name := st.Handoff
	if s, _, ok := bp.Stage(st.Stage); ok && s.DocumentRegion != "" {
		name = s.DocumentRegion
	}
	if name == "" {
		return "", false
	}
	return name, true
}

// Regions returns the regions' content from the entries alone, without a
// blueprint: what `kubectl agentrun regions` shows.
func Regions(entries []Entry) map[string]Region {
	var st State
	for i := range entries {
		if entries[i].Kind == RegionWritten {
			st.writeRegion(&entries[i])
		}
	}
	return st.Regions
}
