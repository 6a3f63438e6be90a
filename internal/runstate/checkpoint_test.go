package runstate

import (
	"strings"
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// TestCheckpointAnswers: a checkpoint takes Approve and Deny, and Edit and
// Revise only where its point offers edit_options or directives, each with
// the text it needs.
func TestCheckpointAnswers(t *testing.T) {
	plain := blueprint.InteractionPoint{Name: "p"}
	rich := blueprint.InteractionPoint{Name: "p", EditOptions: []string{"edit"}, Directives: []string{"revise"}, DocumentRegion: "draft"}
	s := func(v string) *string { return &v }
	tests := []struct {
		name      string
		point     blueprint.InteractionPoint
		decision  string
		text      *string
		err       string
		edit      *string
		directive string
	}{
		{name: "approve", point: plain, decision: DecisionApprove},
		{name: "edit not offered", point: plain, decision: DecisionEdit, text: s("x"), err: "decision Approve, Deny, not \"Edit\""},
		{name: "revise not offered", point: plain, decision: DecisionRevise, text: s("x"), err: "not \"Revise\""},
		{name: "edit", point: rich, decision: DecisionEdit, text: s("my draft"), edit: s("my draft")},
		{name: "edit to empty", point: rich, decision: DecisionEdit, text: s(""), edit: s("")},
		{name: "edit without text", point: rich, decision: DecisionEdit, err: "needs the edited draft"},
		{name: "revise", point: rich, decision: DecisionRevise, text: s("shorter"), directive: "shorter"},
		{name: "revise without instructions", point: rich, decision: DecisionRevise, text: s("  "), err: "needs the instructions"},
		{name: "done is no checkpoint answer", point: rich, decision: DecisionDone, err: "Approve, Deny, Edit, Revise"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &journal.State{Interaction: &journal.PendingInteraction{Stage: "a", Point: tt.point}}
			ans, err := CheckAnswer(st, "p", AnswerSpec{Name: "n", By: "ann", Point: "p", Decision: tt.decision, Text: tt.text})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !ans.Approved || ans.Directive != tt.directive || (ans.Edit == nil) != (tt.edit == nil) || (ans.Edit != nil && *ans.Edit != *tt.edit) {
				t.Errorf("answer %+v", ans)
			}
		})
	}
}

// TestPointPrompt: a checkpoint's question names its draft and the extra
// answers it takes, and is the bare prompt otherwise.
func TestPointPrompt(t *testing.T) {
	bp, err := blueprint.Parse(map[string]string{"agent.toml": `[agent]
name = "p"
[stages.a]
document_region = "draft"
[[stages.a.interaction_points]]
name = "rich"
prompt = "Ready?"
edit_options = ["edit"]
directives = ["revise"]
[[stages.a.interaction_points]]
name = "doc"
prompt = "Ready?"
[stages.b]
[[stages.b.interaction_points]]
name = "plain"
prompt = "Ready?"
`})
	if err != nil {
		t.Fatal(err)
	}
	a, _, _ := bp.Stage("a")
	b, _, _ := bp.Stage("b")
	for _, tc := range []struct {
		in   journal.PendingInteraction
		want string
	}{
		{journal.PendingInteraction{Stage: "a", Point: a.InteractionPoints[0]}, `Ready? [the draft is region "draft"; answer Edit with your edit of it; answer Revise with instructions to send the stage back]`},
		{journal.PendingInteraction{Stage: "a", Point: a.InteractionPoints[1]}, `Ready? [the draft is region "draft"]`},
		{journal.PendingInteraction{Stage: "b", Point: b.InteractionPoints[0]}, "Ready?"},
	} {
		if got := pointPrompt(bp, &tc.in); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.in.Point.Name, got, tc.want)
		}
	}
}

// TestDecideSeedsRegionsFirst: a spawned run journals its spec regions
// before any step (no provider is resolved meanwhile), parks on the setup
// problem when a source is gone, and a pause holds both.
func TestDecideSeedsRegionsFirst(t *testing.T) {
	seed := &journal.Entry{Kind: journal.RegionWritten, Region: "draft", Content: "x", By: journal.BySpec, Seeded: true}
	block := &SetupBlock{Blocker: "RegionMissing", Remedy: "Create the ConfigMap", Refs: []string{"ConfigMap/drafts"}}
	f := running()
	f.SeedRegion = seed
	if NeedsProvider(f) {
		t.Error("a provider is resolved before the regions are seeded")
	}
	if a := Decide(f); a.Kind != ActSeedRegion {
		t.Errorf("seeding: %s", a.Kind)
	}
	f.SeedRegion, f.SeedBlock = nil, block
	if a := Decide(f); a.Kind != ActPark || a.Markers.Setup != block {
		t.Errorf("a gone source: %+v", a)
	}
	f.Paused = true
	if a := Decide(f); a.Kind != ActHold {
		t.Errorf("paused: %s", a.Kind)
	}
	f.Paused, f.SeedBlock = false, nil
	if !NeedsProvider(f) {
		t.Error("once seeded, the run wants its provider again")
	}
}
