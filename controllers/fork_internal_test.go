package controllers

import (
	"context"
	"testing"

	"k8s.io/utils/ptr"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// TestForkCut: an entry cut is taken as asked within the source's journal
// and refused past its end; a stage cut reads the source's snapshot (its
// status's, else the one its journal started from) and cuts where the
// source entered the stage, seen from the source's own entry stage; a
// source that never started, a stage it never entered and an entry stage
// its blueprint lacks are refused, saying why.
func TestForkCut(t *testing.T) {
	bp, err := blueprint.Parse(map[string]string{"agent.toml": `[agent]
name = "three"
[stages.plan]
[stages.plan.transitions.build]
[stages.build]
[stages.build.transitions.ship]
[stages.ship]
allow_complete = true
`})
	if err != nil {
		t.Fatal(err)
	}
	cc := &childCalls{blueprints: &blueprints{parsed: newBlueprintCache()}}
	cc.blueprints.parsed.Put("ns/snap-a", bp)
	entries := []journal.Entry{
		{Seq: 0, Kind: journal.ModelCallRequested, Stage: "plan", Snapshot: "snap-a"},
		{Seq: 1, Kind: journal.ModelCallCompleted, Call: 0, Stage: "plan", Response: &journal.Response{Next: "build"}},
		{Seq: 2, Kind: journal.ModelCallRequested, Stage: "build"},
	}
	source := func(snapshot, entryStage string) *arv1.AgentRun {
		src := &arv1.AgentRun{}
		src.Name, src.Namespace = "src", "ns"
		src.Status.BlueprintSnapshot, src.Spec.EntryStage = snapshot, entryStage
		return src
	}
	cases := []struct {
		name    string
		src     *arv1.AgentRun
		entries []journal.Entry
		fo      arv1.ForkSource
		want    int
		refusal string
	}{
		{name: "an entry", src: source("", ""), entries: entries, fo: arv1.ForkSource{Entry: ptr.To[int64](2)}, want: 2},
		{name: "the whole journal", src: source("", ""), entries: entries, fo: arv1.ForkSource{Entry: ptr.To[int64](3)}, want: 3},
		{name: "past the journal's end", src: source("", ""), entries: entries, fo: arv1.ForkSource{Entry: ptr.To[int64](4)},
			refusal: "entry 4 is out of range: the journal of src holds 3 entries"},
		{name: "a stage, by the status's snapshot", src: source("snap-a", ""), entries: entries, fo: arv1.ForkSource{Stage: "build"}, want: 2},
		{name: "a stage, by the snapshot the journal started from", src: source("", ""), entries: entries, fo: arv1.ForkSource{Stage: "build"}, want: 2},
		{name: "the entry stage", src: source("snap-a", ""), entries: entries, fo: arv1.ForkSource{Stage: "plan"}, want: 0},
		{name: "a source that never started", src: source("", ""), fo: arv1.ForkSource{Stage: "build"},
			refusal: `src has not started, so it has no stage "build" to fork from`},
		{name: "a stage never entered", src: source("snap-a", ""), entries: entries, fo: arv1.ForkSource{Stage: "ship"},
			refusal: `the source never entered stage "ship" (src)`},
		{name: "a worker's entry stage its blueprint lacks", src: source("snap-a", "deploy"), entries: entries, fo: arv1.ForkSource{Stage: "build"},
			refusal: `the blueprint snapshot snap-a of src: spec.entryStage "deploy" is not a stage of the blueprint`},
		{name: "a worker entered at build", src: source("snap-a", "build"), entries: entries[2:], fo: arv1.ForkSource{Stage: "build"}, want: 0},
	}
	for _, c := range cases {
		n, refusal, err := cc.forkCut(context.Background(), c.src, c.entries, &c.fo)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if n != c.want || refusal != c.refusal {
			t.Errorf("%s: forkCut = %d, %q; want %d, %q", c.name, n, refusal, c.want, c.refusal)
		}
	}
}
