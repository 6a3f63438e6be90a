package journal

import (
	"testing"
)

const forkManifest = `[agent]
name = "three"
[stages.plan]
[stages.plan.transitions.build]
[stages.build]
[stages.build.transitions.ship]
[stages.ship]
allow_complete = true
`

func forkEntries() []Entry {
	cost := int64(1000)
	return []Entry{
		{Seq: 0, Kind: ModelCallRequested, Stage: "plan", Snapshot: "snap-a"},
		{Seq: 1, Kind: ModelCallCompleted, Call: 0, Stage: "plan", Response: &Response{Next: "build"}, Usage: &Usage{Prompt: 10, Completion: 1}, CostNanoUSD: &cost},
		{Seq: 2, Kind: ModelCallRequested, Stage: "build"},
		{Seq: 3, Kind: ModelCallCompleted, Call: 2, Stage: "build", Response: &Response{Next: "ship"}, Usage: &Usage{Prompt: 20, Completion: 2}},
		{Seq: 4, Kind: ModelCallRequested, Stage: "ship"},
		{Seq: 5, Kind: ModelCallFailed, Call: 4, Stage: "ship", Failure: &Failure{Class: FailFatal, Message: "bad"}},
	}
}

// TestStageStartCutsWhereTheStageWasEntered: the cut is right after the
// entry that moved the run into the stage; the entry stage cuts at 0; a
// stage not in the blueprint or never entered is refused.
func TestStageStartCutsWhereTheStageWasEntered(t *testing.T) {
	bp := mustParse(t, forkManifest)
	es := forkEntries()
	for stage, want := range map[string]int{"plan": 0, "build": 2, "ship": 4} {
		if n, err := StageStart(bp, es, stage); err != nil || n != want {
			t.Errorf("StageStart(%s) = %d, %v; want %d", stage, n, err, want)
		}
	}
	if _, err := StageStart(bp, es, "deploy"); err == nil || err.Error() != `stage "deploy" is not a stage of the source's blueprint` {
		t.Errorf("unknown stage: %v", err)
	}
	if _, err := StageStart(bp, es[:2], "ship"); err == nil || err.Error() != `the source never entered stage "ship"` {
		t.Errorf("stage not reached: %v", err)
	}
}

// TestInheritedUsageIsKeptApart: inherited calls count in
// State.Inherited, never in the run's own counters, and Inherit leaves
// the source's entries as they were.
func TestInheritedUsageIsKeptApart(t *testing.T) {
	bp := mustParse(t, forkManifest)
	es := forkEntries()
	in := Inherit(es, 4)
	if es[0].Inherited || es[0].Snapshot != "snap-a" {
		t.Fatalf("Inherit changed the source's entries: %+v", es[0])
	}
	if !in[3].Inherited || in[0].Snapshot != "" {
		t.Fatalf("inherited entries %+v", in)
	}
	cost := int64(500)
	own := append(append([]Entry{}, in...), Entry{Seq: 4, Kind: ModelCallRequested, Stage: "ship"},
		Entry{Seq: 5, Kind: ModelCallCompleted, Call: 4, Stage: "ship", Response: &Response{Complete: true}, Usage: &Usage{Prompt: 5, Completion: 1}, CostNanoUSD: &cost})
	st := Fold(bp, own)
	if st.Outcome != OutcomeComplete || st.ModelCalls != 1 || st.Usage.Prompt != 5 || st.PricedNanoUSD != 500 || st.UnpricedCalls != 0 {
		t.Errorf("own: outcome %s calls %d usage %+v priced %d unpriced %d", st.Outcome, st.ModelCalls, st.Usage, st.PricedNanoUSD, st.UnpricedCalls)
	}
	want := Spend{Usage: Usage{Prompt: 30, Completion: 3}, ModelCalls: 2, PricedNanoUSD: 1000, UnpricedCalls: 1, CostInexact: true}
	if st.Inherited != want {
		t.Errorf("inherited %+v, want %+v", st.Inherited, want)
	}
}
