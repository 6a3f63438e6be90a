package runstate

import (
	"strings"
	"testing"
	"time"

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
			ans, err := CheckAnswer(st, "p", nil, AnswerSpec{Name: "n", By: "ann", Point: "p", Decision: tt.decision, Text: tt.text})
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

// TestCheckpointStyles: an Approve must fit the point's style (confirm: no
// text; multiple_choice: one of its options; free_text: some text), and
// text naming an abort option aborts whatever the style. What does not fit
// is rejected, so the run keeps waiting.
func TestCheckpointStyles(t *testing.T) {
	confirm := blueprint.InteractionPoint{Name: "p", Style: blueprint.StyleConfirm}
	confirmAbort := blueprint.InteractionPoint{Name: "p", Style: blueprint.StyleConfirm, AbortOptions: []string{"stop"}}
	choice := blueprint.InteractionPoint{Name: "p", Style: blueprint.StyleMultipleChoice, Options: []string{"blue", "green", "abandon"}, AbortOptions: []string{"abandon"}}
	free := blueprint.InteractionPoint{Name: "p", Style: blueprint.StyleFreeText, AbortOptions: []string{"cancel"}}
	s := func(v string) *string { return &v }
	tests := []struct {
		name     string
		point    blueprint.InteractionPoint
		decision string
		text     *string
		input    *string
		err      string
		approved bool
		choice   string
		abort    string
	}{
		{name: "confirm approve", point: confirm, decision: DecisionApprove, approved: true},
		{name: "confirm deny", point: confirm, decision: DecisionDeny},
		{name: "confirm deny with a reason", point: confirm, decision: DecisionDeny, text: s("not now")},
		{name: "confirm approve with text", point: confirm, decision: DecisionApprove, text: s("yes please"), err: "is a confirmation: answer Approve or Deny without text"},
		{name: "confirm abort option", point: confirmAbort, decision: DecisionApprove, text: s("stop"), abort: "stop"},
		{name: "confirm names its abort options", point: confirmAbort, decision: DecisionApprove, text: s("go"), err: `(or with ["stop"] to abort the run)`},
		{name: "choice", point: choice, decision: DecisionApprove, text: s("green"), approved: true, choice: "green"},
		{name: "choice not offered", point: choice, decision: DecisionApprove, text: s("red"), err: `is multiple_choice: answer Approve with one of ["blue","green","abandon"] as text, not "red"`},
		{name: "choice is exact", point: choice, decision: DecisionApprove, text: s("Green"), err: "not \"Green\""},
		{name: "choice missing", point: choice, decision: DecisionApprove, err: "is multiple_choice"},
		{name: "choice as input", point: choice, decision: DecisionApprove, input: s(`"green"`), err: "with text, not input"},
		{name: "choice abort option", point: choice, decision: DecisionApprove, text: s("abandon"), abort: "abandon"},
		{name: "choice deny", point: choice, decision: DecisionDeny},
		{name: "free text", point: free, decision: DecisionApprove, text: s("ship it on Friday"), approved: true, choice: "ship it on Friday"},
		{name: "free text empty", point: free, decision: DecisionApprove, text: s("  "), err: "is free_text"},
		{name: "free text missing", point: free, decision: DecisionApprove, err: "is free_text"},
		{name: "free text abort option", point: free, decision: DecisionApprove, text: s("cancel"), abort: "cancel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &journal.State{Interaction: &journal.PendingInteraction{Stage: "a", Point: tt.point}}
			ans, err := CheckAnswer(st, "p", nil, AnswerSpec{Name: "n", By: "ann", Point: "p", Decision: tt.decision, Text: tt.text, Input: tt.input})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ans.Approved != tt.approved || ans.Choice != tt.choice || ans.Abort != tt.abort {
				t.Errorf("answer %+v, want approved %v choice %q abort %q", ans, tt.approved, tt.choice, tt.abort)
			}
		})
	}
}

// TestRequiredPoint: a required point is never passed by policy: neither
// yolo nor the interaction timeout moves it, while a point that is not
// required is passed by both.
func TestRequiredPoint(t *testing.T) {
	bp := &blueprint.Blueprint{Limits: blueprint.Limits{InteractionTimeoutSeconds: 60}}
	asked := journal.Entry{Kind: journal.QuestionAsked, Point: "approve-plan", At: now.Add(-time.Hour)}
	facts := func(required, yolo bool) Facts {
		f := running()
		f.Blueprint, f.Yolo = bp, yolo
		f.State.Interaction = interaction(blueprint.UnattendedAutoApprove)
		f.State.Interaction.Point.Required = required
		f.State.Apply(nil, asked)
		return f
	}
	for _, tt := range []struct {
		name           string
		required, yolo bool
		want           ActionKind
		expired        bool
	}{
		{name: "yolo passes a point that is not required", yolo: true, want: ActAnswerInteraction},
		{name: "timeout passes a point that is not required", want: ActAnswerInteraction, expired: true},
		{name: "yolo does not pass a required point", required: true, yolo: true, want: ActPark},
		{name: "a required point never expires", required: true, want: ActPark},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := Decide(facts(tt.required, tt.yolo))
			if a.Kind != tt.want {
				t.Fatalf("action %+v, want %s", a, tt.want)
			}
			if got := a.Answer != nil && a.Answer.Expired; got != tt.expired {
				t.Errorf("expired answer %v, want %v", got, tt.expired)
			}
			if a.Kind == ActPark && (a.RetryAt != nil || !strings.Contains(a.Markers.InteractionPoint.Prompt, "required: only a person's answer passes it")) {
				t.Errorf("park %+v: a required point sets no retry and says it is required", a)
			}
		})
	}
}
