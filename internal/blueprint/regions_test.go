package blueprint

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

const regionsManifest = `[agent]
name = "writer"

[stages.draft]
document_region = "draft"
[stages.draft.model]
models = [{provider = "demo", model = "scripted-1"}]
allow_user_default = true
[stages.draft.transitions.split]
require_regions = ["draft", "notes"]
region = "draft"
[stages.draft.transitions.draft]
condition = "max_iterations"
region = "outline"

[[stages.draft.interaction_points]]
name = "review"
prompt = "Is the draft right?"
style = "multiple_choice"
options = ["approve", "edit", "revise", "abort"]
abort_options = ["abort"]
edit_options = ["edit"]
directives = ["revise"]

[[stages.draft.interaction_points]]
name = "sign-off"
document_region = "summary"

[stages.split]
mode = "fan_out"
worker_query = "Review this section."
results_region = "reviews"
split_prompt = "One item per section."
system_prompt = "Split the draft."
merge_stage = "merge"

[stages.merge]
allow_complete = true
`

func TestRegionKeys(t *testing.T) {
	bp, err := Parse(map[string]string{"agent.toml": regionsManifest})
	if err != nil {
		t.Fatal(err)
	}
	draft, _, _ := bp.Stage("draft")
	if draft.DocumentRegion != "draft" || !draft.AllowUserDefault {
		t.Errorf("draft stage: document_region %q, allow_user_default %v", draft.DocumentRegion, draft.AllowUserDefault)
	}
	if got := draft.Transitions[0].RequireRegions; !reflect.DeepEqual(got, []string{"draft", "notes"}) {
		t.Errorf("require_regions merged with region: %v", got)
	}
	if got := draft.Transitions[1].RequireRegions; !reflect.DeepEqual(got, []string{"outline"}) {
		t.Errorf("region alone: %v", got)
	}
	ip := draft.InteractionPoints[0]
	if !reflect.DeepEqual(ip.EditOptions, []string{"edit"}) || !reflect.DeepEqual(ip.Directives, []string{"revise"}) {
		t.Errorf("point choices: %+v", ip)
	}
	if got := draft.PointDocument(ip); got != "draft" {
		t.Errorf("a point without document_region shows its stage's: %q", got)
	}
	if got := draft.PointDocument(draft.InteractionPoints[1]); got != "summary" {
		t.Errorf("a point's own document_region wins: %q", got)
	}
	split, _, _ := bp.Stage("split")
	fo := split.FanOut
	if fo.ResultsRegion != "reviews" || fo.SplitPrompt != "One item per section." || fo.WorkerStage != "split-query" {
		t.Errorf("fan-out: %+v", fo)
	}
	if got := split.Prompt(); got != "Split the draft.\n\nOne item per section." {
		t.Errorf("fan-out prompt %q", got)
	}
	q, i, ok := bp.Stage("split-query")
	if !ok || i != len(bp.Stages)-1 || q.SystemPrompt != "Review this section." || q.MaxIterations != 1 || !q.AllowComplete {
		t.Errorf("synthesised query stage: %+v at %d", q, i)
	}
	if got := bp.RegionNames(); !reflect.DeepEqual(got, []string{"draft", "notes", "outline", "reviews", "summary"}) {
		t.Errorf("region names %v", got)
	}
}

func TestRegionKeyErrors(t *testing.T) {
	const head = "[agent]\nname = \"x\"\n" // lines 1-2
	tests := []struct {
		name, src string
		line      int
		msg       string
	}{
		{"bad document region", head + "[stages.a]\ndocument_region = \"Draft\"\n", 4, `document_region "Draft" is not a region name`},
		{"bad required region", head + "[stages.a]\n[stages.a.transitions.a]\nrequire_regions = [\"ok\", \"no way\"]\n", 5, `require_regions entry "no way" is not a region name`},
		{"bad region", head + "[stages.a]\n[stages.a.transitions.a]\nregion = \"-x\"\n", 5, `region "-x" is not a region name`},
		{"results region outside fan-out", head + "[stages.a]\nresults_region = \"r\"\n", 4, `results_region is only valid with mode = "fan_out"`},
		{"split prompt outside fan-out", head + "[stages.a]\nsplit_prompt = \"s\"\n", 4, `split_prompt is only valid`},
		{"worker query outside fan-out", head + "[stages.a]\nworker_query = \"q\"\n", 4, `worker_query is only valid`},
		{"two worker kinds", head + "[stages.a]\nmode = \"fan_out\"\nworker_query = \"q\"\nworker_agent = \"b\"\n", 0, "exactly one of worker_agent, worker_stage and worker_query"},
		{"query stage name taken", head + "[stages.a]\nmode = \"fan_out\"\nworker_query = \"q\"\n[stages.a-query]\n", 5, `needs the stage name "a-query"`},
		{"edit option not an option", head + "[stages.a]\ndocument_region = \"d\"\n[[stages.a.interaction_points]]\nname = \"p\"\noptions = [\"ok\"]\nedit_options = [\"edit\"]\n", 8, `edit_options entry "edit" is not one of options`},
		{"directive also abort", head + "[stages.a]\n[[stages.a.interaction_points]]\nname = \"p\"\nabort_options = [\"no\"]\ndirectives = [\"no\"]\n", 7, `"no" is in both abort_options and directives`},
		{"edit without draft", head + "[stages.a]\n[[stages.a.interaction_points]]\nname = \"p\"\nedit_options = [\"edit\"]\n", 6, "edit_options need a document_region"},
		{"unknown transition key", head + "[stages.a]\n[stages.a.transitions.a]\nregions = [\"x\"]\n", 5, `unknown key "stages.a.transitions.a.regions"`},
		{"unknown point key", head + "[stages.a]\n[[stages.a.interaction_points]]\nname = \"p\"\nedit = true\n", 6, `unknown key "stages.a.interaction_points.edit"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(map[string]string{"agent.toml": tt.src})
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("want *ParseError, got %T %v", err, err)
			}
			if (tt.line != 0 && pe.Line != tt.line) || !strings.Contains(pe.Message, tt.msg) {
				t.Errorf("got line %d %q; want line %d containing %q", pe.Line, pe.Message, tt.line, tt.msg)
			}
		})
	}
}

func TestValidRegionName(t *testing.T) {
	for name, want := range map[string]bool{
		"draft": true, "results_2": true, "a-b": true, "": false, "Draft": false, "2draft": false,
		"a b": false, strings.Repeat("a", 63): true, strings.Repeat("a", 64): false,
	} {
		if got := ValidRegionName(name); got != want {
			t.Errorf("ValidRegionName(%q) = %v, want %v", name, got, want)
		}
	}
}
