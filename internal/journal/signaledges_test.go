package journal

import (
	"strings"
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
)

// heldAlways: work leaves by an always edge held back by require_output,
// or, in the regions variant, by an empty required region; its stuck edge
// fires after two turns, well before max_iterations.
const heldAlways = `[agent]
name = "held"

[stages.work]
require_output = true
allow_complete = true
max_iterations = 5
[stages.work.transitions.review]
condition = "always"
[stages.work.transitions.rethink]
condition = "stuck"
stuck_after_iterations = 2
[stages.work.transitions.alt]
hint = "another way"

[stages.review]
allow_complete = true
[stages.rethink]
allow_complete = true
[stages.alt]
allow_complete = true
`

// heldByRegion is heldAlways with the always edge gated by a region
// instead of require_output.
var heldByRegion = strings.Replace(
	strings.Replace(heldAlways, "require_output = true\n", "", 1),
	"condition = \"always\"\n", "condition = \"always\"\nrequire_regions = [\"draft\"]\n", 1)

// TestStuckFiresWhileAlwaysIsHeldBack: a stuck edge is a runtime signal,
// so the gates of a stage's always edge (require_output, require_regions)
// do not hold it back: the run does not run on to max_iterations.
func TestStuckFiresWhileAlwaysIsHeldBack(t *testing.T) {
	twoTurns := func(r1, r2 Response) []Entry {
		return []Entry{req(0, "work", 0), done(1, 0, r1), req(2, "work", 1), done(3, 2, r2)}
	}
	text := Response{Text: "thinking"}
	cases := []struct {
		name     string
		manifest string
		entries  []Entry
		stage    string
		cond     string
		refused  string // the last turn's refusal, when the run stays
	}{
		{
			name: "require_output holds always back; stuck fires", manifest: heldAlways,
			entries: twoTurns(text, text), stage: "rethink", cond: blueprint.CondStuck,
		},
		{
			name: "an empty required region holds always back; stuck fires", manifest: heldByRegion,
			entries: twoTurns(text, text), stage: "rethink", cond: blueprint.CondStuck,
		},
		{
			name: "below the threshold the refusal is told", manifest: heldAlways,
			entries: []Entry{req(0, "work", 0), done(1, 0, text)}, stage: "work", refused: "requires output",
		},
		{
			name: "below the threshold the region refusal is told", manifest: heldByRegion,
			entries: []Entry{req(0, "work", 0), done(1, 0, text)}, stage: "work", refused: `needs the region(s) ["draft"]`,
		},
		{
			name: "an always edge that is not held back still wins", manifest: heldAlways,
			entries: twoTurns(text, Response{Text: "done", Output: "the text"}), stage: "review", cond: blueprint.CondAlways,
		},
		{
			name: "a model choice held back by require_output does not hold stuck back", manifest: heldAlways,
			entries: twoTurns(text, Response{Next: "alt"}), stage: "rethink", cond: blueprint.CondStuck,
		},
		{
			name: "a completion held back by require_output does not hold stuck back", manifest: heldAlways,
			entries: twoTurns(text, Response{Complete: true}), stage: "rethink", cond: blueprint.CondStuck,
		},
		{
			name: "a model choice that moves wins over the threshold", manifest: heldByRegion,
			entries: twoTurns(text, Response{Next: "alt"}), stage: "alt", cond: blueprint.CondLLMChoice,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bp := mustParse(t, tc.manifest)
			st := Fold(bp, tc.entries)
			if st.Stage != tc.stage || st.Outcome != OutcomeNone || st.MaxIterationsHit {
				t.Fatalf("stage %q outcome %q (%s) maxIterationsHit %v, want %q still running", st.Stage, st.Outcome, st.Message, st.MaxIterationsHit, tc.stage)
			}
			last := st.LastTransition()
			if tc.cond == "" {
				if last != nil {
					t.Fatalf("last transition %+v, want none", *last)
				}
				if n := len(st.Turns); n == 0 || !strings.Contains(st.Turns[n-1].Refused, tc.refused) {
					t.Fatalf("turns %+v, want the last refused with %q", st.Turns, tc.refused)
				}
				return
			}
			if last == nil || last.From != "work" || last.Condition != tc.cond {
				t.Fatalf("last transition %+v, want work -> %s by %q", last, tc.stage, tc.cond)
			}
			if tc.cond == blueprint.CondStuck && !strings.Contains(last.Reason, "stuck_after_iterations = 2") {
				t.Errorf("reason %q, want the threshold named", last.Reason)
			}
		})
	}
}

// TestStuckBeforeTheCapWhileHeldBack: a threshold reached on the stage's
// last iteration fires before the max_iterations cap, as it does in a stage
// without an always edge.
func TestStuckBeforeTheCapWhileHeldBack(t *testing.T) {
	bp := mustParse(t, strings.Replace(heldAlways, "max_iterations = 5", "max_iterations = 2", 1))
	text := Response{Text: "thinking"}
	st := Fold(bp, []Entry{req(0, "work", 0), done(1, 0, text), req(2, "work", 1), done(3, 2, text)})
	if st.Stage != "rethink" || st.Outcome != OutcomeNone || st.MaxIterationsHit {
		t.Fatalf("stage %q outcome %q (%s) maxIterationsHit %v, want rethink by the stuck edge", st.Stage, st.Outcome, st.Message, st.MaxIterationsHit)
	}
}

// TestStuckFiresWhileAlwaysIsOutOfRevisits: an always edge into a stage
// out of max_revisits, while another edge is open, holds the run in the
// stage (the model is told to choose); its stuck edge is read then too.
func TestStuckFiresWhileAlwaysIsOutOfRevisits(t *testing.T) {
	bp := mustParse(t, `[agent]
name = "spent"
[stages.work]
max_iterations = 5
[stages.work.transitions.review]
condition = "always"
[stages.work.transitions.alt]
hint = "another way"
[stages.work.transitions.rethink]
condition = "stuck"
stuck_after_iterations = 2
[stages.review]
max_revisits = 0
[stages.review.transitions.work]
hint = "again"
[stages.alt]
allow_complete = true
[stages.rethink]
allow_complete = true
`)
	text := Response{Text: "thinking"}
	st := Fold(bp, []Entry{
		req(0, "work", 0), done(1, 0, text),
		req(2, "review", 0), done(3, 2, Response{Next: "work"}),
		req(4, "work", 0), done(5, 4, text),
	})
	if st.Stage != "work" || len(st.Turns) != 1 || !strings.Contains(st.Turns[0].Refused, "choose one of: alt") {
		t.Fatalf("stage %q turns %+v, want work with the spent always edge refused", st.Stage, st.Turns)
	}
	st.Apply(bp, req(6, "work", 1))
	st.Apply(bp, done(7, 6, text))
	if last := st.LastTransition(); st.Stage != "rethink" || last == nil || last.Condition != blueprint.CondStuck {
		t.Fatalf("stage %q last %+v, want rethink by the stuck edge", st.Stage, last)
	}
}
