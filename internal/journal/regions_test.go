package journal

import (
	"slices"
	"strings"
	"testing"
)

// regionGated: draft may move to review only once the "draft" region holds
// content; out of iterations it gives up.
const regionGated = `[agent]
name = "regions"

[stages.draft]
document_region = "draft"
max_iterations = 2
[stages.draft.transitions.review]
require_regions = ["draft"]
[stages.draft.transitions.giveup]
condition = "max_iterations"

[stages.review]
allow_complete = true
[[stages.review.interaction_points]]
name = "check"
document_region = "draft"
edit_options = ["edit"]
directives = ["revise"]

[stages.giveup]
allow_complete = true
`

func wrote(seq int64, region, content, by string) Entry {
	return Entry{Seq: seq, Kind: RegionWritten, At: at(seq), Region: region, Content: content, By: by}
}

// TestFoldRequireRegions: a gated transition is refused while its region
// is empty (the model is told why), taken once it is written, and running
// out of iterations with it empty takes the max_iterations transition and
// marks the region abandoned.
func TestFoldRequireRegions(t *testing.T) {
	bp := mustParse(t, regionGated)
	tests := []struct {
		name      string
		entries   []Entry
		stage     string
		outcome   Outcome
		refused   bool
		abandoned bool
	}{
		{
			name:    "empty region refuses the move",
			entries: []Entry{req(0, "draft", 0), done(1, 0, Response{Next: "review"})},
			stage:   "draft", refused: true,
		},
		{
			name:    "whitespace is empty",
			entries: []Entry{wrote(0, "draft", "  \n", BySpec), req(1, "draft", 0), done(2, 1, Response{Next: "review"})},
			stage:   "draft", refused: true,
		},
		{
			name:    "written region lets it through",
			entries: []Entry{wrote(0, "draft", "# Draft", BySpec), req(1, "draft", 0), done(2, 1, Response{Next: "review"})},
			stage:   "review",
		},
		{
			name: "out of iterations gives up and abandons the region",
			entries: []Entry{
				req(0, "draft", 0), done(1, 0, Response{Next: "review"}),
				req(2, "draft", 1), done(3, 2, Response{Next: "review"}),
				req(4, "giveup", 0), done(5, 4, Response{Complete: true, Output: "gave up"}),
			},
			stage: "giveup", outcome: OutcomeComplete, abandoned: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := Fold(bp, tt.entries)
			if st.Stage != tt.stage || st.Outcome != tt.outcome {
				t.Fatalf("stage %q outcome %q (%s), want %q %q", st.Stage, st.Outcome, st.Message, tt.stage, tt.outcome)
			}
			refused := len(st.Turns) > 0 && strings.Contains(st.Turns[len(st.Turns)-1].Refused, `needs the region(s) ["draft"]`)
			if refused != tt.refused {
				t.Errorf("refusal on the last turn = %v, want %v (%+v)", refused, tt.refused, st.Turns)
			}
			if got := st.RequiredRegionsAbandoned(bp); got != tt.abandoned {
				t.Errorf("RequiredRegionsAbandoned = %v, want %v", got, tt.abandoned)
			}
		})
	}
}

// TestFoldRegionWrites: the last write wins, the seeded mark sticks, a
// write after the run ended changes nothing, and Regions reads the same
// content from the entries alone.
func TestFoldRegionWrites(t *testing.T) {
	bp := mustParse(t, regionGated)
	seed := wrote(0, "draft", "v1", BySpec)
	seed.Seeded = true
	entries := []Entry{seed, wrote(1, "draft", "v2", ByModel), wrote(2, "notes", "n", ByModel)}
	st := Fold(bp, entries)
	if r := st.Regions["draft"]; r.Content != "v2" || r.By != ByModel || !r.Seeded || !st.Seeded("draft") || st.Seeded("notes") {
		t.Fatalf("regions %+v", st.Regions)
	}
	if doc, ok := st.Document(bp); !ok || doc != "draft" {
		t.Errorf("document of stage draft = %q %v", doc, ok)
	}
	if got := Regions(entries); got["draft"].Content != "v2" || got["notes"].Content != "n" {
		t.Errorf("Regions(entries) = %+v", got)
	}
	ended := append(slices.Clone(entries), Entry{Seq: 3, Kind: RunCancelled, At: at(3)}, wrote(4, "draft", "late", ByModel))
	if got := Fold(bp, ended).Regions["draft"].Content; got != "v2" {
		t.Errorf("a write after the run ended applied: %q", got)
	}
}

// TestFoldCheckpointEditAndDirective: an edit at a checkpoint is the
// draft the next stage gets; a directive sends the stage back with the
// person's instructions, a new visit with fresh turns.
func TestFoldCheckpointEditAndDirective(t *testing.T) {
	bp := mustParse(t, `[agent]
name = "points"
[stages.write]
[stages.write.transitions.publish]
condition = "always"
[[stages.write.interaction_points]]
name = "check"
document_region = "draft"
edit_options = ["edit"]
directives = ["revise"]
[stages.publish]
allow_complete = true
`)
	base := []Entry{wrote(0, "draft", "first", ByModel), req(1, "write", 0), done(2, 1, Response{Text: "drafted"})}
	if st := Fold(bp, base); st.Interaction == nil || st.Interaction.Point.Name != "check" {
		t.Fatalf("not at the checkpoint: %+v", st.Interaction)
	}

	edited := append(slices.Clone(base), wrote(3, "draft", "edited by ann", "ann"),
		Entry{Seq: 4, Kind: InteractionAnswered, At: at(4), Point: "check", Approved: true, By: "ann", Region: "draft"})
	st := Fold(bp, edited)
	if st.Stage != "publish" || st.Handoff != "draft" || st.Regions["draft"].Content != "edited by ann" {
		t.Fatalf("after the edit: stage %q handoff %q regions %+v", st.Stage, st.Handoff, st.Regions)
	}
	if doc, ok := st.Document(bp); !ok || doc != "draft" {
		t.Errorf("the next stage is not given the edited draft: %q %v", doc, ok)
	}
	if st = Fold(bp, append(edited, req(5, "publish", 0), done(6, 5, Response{Complete: true}))); st.Outcome != OutcomeComplete {
		t.Errorf("publish did not complete: %q", st.Outcome)
	}

	revised := append(slices.Clone(base), Entry{Seq: 3, Kind: InteractionAnswered, At: at(3), Point: "check", Approved: true, By: "ann", Directive: "shorter, please"})
	st = Fold(bp, revised)
	if st.Stage != "write" || st.Directive != "shorter, please" || st.Iteration != 0 || len(st.Turns) != 0 || st.Stages["write"].Visits != 2 {
		t.Fatalf("after the directive: stage %q directive %q iteration %d turns %d visits %d", st.Stage, st.Directive, st.Iteration, len(st.Turns), st.Stages["write"].Visits)
	}
	// The instructions hold for the whole visit (every call of it carries
	// them), and end with it.
	revised = append(revised, req(4, "write", 0), done(5, 4, Response{Text: "shorter"}))
	st = Fold(bp, revised)
	if st.Interaction == nil || st.Directive != "shorter, please" {
		t.Fatalf("the revised stage must reach its checkpoint again, still under the directive: %+v %q", st.Interaction, st.Directive)
	}
	st = Fold(bp, append(revised, Entry{Seq: 6, Kind: InteractionAnswered, At: at(6), Point: "check", Approved: true, By: "ann"}))
	if st.Stage != "publish" || st.Directive != "" || st.Handoff != "" {
		t.Errorf("a plain approval moves on with no directive or handoff: %q %q %q", st.Stage, st.Directive, st.Handoff)
	}
}

// TestFoldGatedMaxIterationsTransition: when the stage's max_iterations
// transition is itself gated by an empty region, running out of
// iterations ends the run in Error, saying which region.
func TestFoldGatedMaxIterationsTransition(t *testing.T) {
	bp := mustParse(t, `[agent]
name = "g"
[stages.a]
max_iterations = 1
[stages.a.transitions.b]
condition = "max_iterations"
region = "summary"
[stages.b]
`)
	st := Fold(bp, []Entry{req(0, "a", 0), done(1, 0, Response{Text: "working"})})
	if st.Outcome != OutcomeError || !st.MaxIterationsHit || !strings.Contains(st.Message, `["summary"]`) {
		t.Fatalf("outcome %q hit %v message %q", st.Outcome, st.MaxIterationsHit, st.Message)
	}
	if !st.RequiredRegionsAbandoned(bp) {
		t.Error("the gated region is not reported abandoned")
	}
	st = Fold(bp, []Entry{wrote(0, "summary", "s", ByModel), req(1, "a", 0), done(2, 1, Response{Text: "working"})})
	if st.Stage != "b" || st.Outcome != OutcomeNone || st.RequiredRegionsAbandoned(bp) {
		t.Errorf("with the region written: stage %q outcome %q", st.Stage, st.Outcome)
	}
}

// TestFoldCheckpointChoices: the people's choices at a stage's points reach
// the next stage (in order, for its whole visit) and end with it; an abort
// option cancels the run naming the point and option; a directive drops
// the choices of the leave it interrupted.
func TestFoldCheckpointChoices(t *testing.T) {
	bp := mustParse(t, `[agent]
name = "points"
[stages.pick]
[stages.pick.transitions.build]
condition = "always"
[[stages.pick.interaction_points]]
name = "colour"
style = "multiple_choice"
options = ["blue", "green", "stop"]
abort_options = ["stop"]
[[stages.pick.interaction_points]]
name = "why"
style = "free_text"
directives = ["again"]
[stages.build]
[stages.build.transitions.ship]
condition = "always"
[stages.ship]
allow_complete = true
`)
	base := []Entry{req(0, "pick", 0), done(1, 0, Response{Text: "options ready"})}
	chose := func(seq int64, point, choice string) Entry {
		return Entry{Seq: seq, Kind: InteractionAnswered, At: at(seq), Point: point, Approved: true, By: "ann", Choice: choice}
	}
	first := append(slices.Clone(base), chose(2, "colour", "green"))
	st := Fold(bp, first)
	if st.Stage != "pick" || st.Interaction == nil || st.Interaction.Point.Name != "why" || len(st.PointChoices) != 0 {
		t.Fatalf("after the first point: stage %q interaction %+v choices %v", st.Stage, st.Interaction, st.PointChoices)
	}
	both := append(slices.Clone(first), chose(3, "why", "it matches the logo"))
	st = Fold(bp, both)
	want := []PointChoice{{"colour", "green"}, {"why", "it matches the logo"}}
	if st.Stage != "build" || !slices.Equal(st.PointChoices, want) {
		t.Fatalf("in build: stage %q choices %v, want %v", st.Stage, st.PointChoices, want)
	}
	st = Fold(bp, append(both, req(4, "build", 0), done(5, 4, Response{Text: "built"})))
	if st.Stage != "ship" || len(st.PointChoices) != 0 {
		t.Errorf("the choices end with build's visit: stage %q choices %v", st.Stage, st.PointChoices)
	}

	st = Fold(bp, append(base[:2:2], Entry{Seq: 2, Kind: InteractionAnswered, At: at(2), Point: "colour", By: "ann", Abort: "stop"}))
	if st.Outcome != OutcomeCancelled || st.Message != `interaction point "colour": abort option "stop" was chosen` {
		t.Errorf("abort: outcome %q message %q", st.Outcome, st.Message)
	}
	st = Fold(bp, append(base[:2:2], answer(2, "colour", false, false)))
	if st.Outcome != OutcomeCancelled || st.Message != `interaction point "colour" was declined` {
		t.Errorf("deny: outcome %q message %q", st.Outcome, st.Message)
	}

	revised := append(slices.Clone(first), Entry{Seq: 3, Kind: InteractionAnswered, At: at(3), Point: "why", Approved: true, By: "ann", Directive: "again"})
	revised = append(revised, req(4, "pick", 0), done(5, 4, Response{Text: "new options"}), chose(6, "colour", "blue"), chose(7, "why", "calm"))
	st = Fold(bp, revised)
	if want := []PointChoice{{"colour", "blue"}, {"why", "calm"}}; st.Stage != "build" || !slices.Equal(st.PointChoices, want) {
		t.Errorf("after a revision: stage %q choices %v, want %v", st.Stage, st.PointChoices, want)
	}
}
