package providers

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

func TestParseCostUSD(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want int64
		ok   bool
	}{
		{"0.0012", 1_200_000, true},
		{"0.000000001", 1, true},
		{"12.5", 12_500_000_000, true},
		{"1.2e-05", 12_000, true},
		{"1E-9", 1, true},
		{"0.00000000049", 0, true},
		{"0.0000000005", 1, true},
		{"0.1234567894", 123_456_789, true},
		{`"0.25"`, 250_000_000, true},
		{"null", 0, false},
		{"", 0, false},
		{"-0.5", 0, false},
		{"abc", 0, false},
		{"1e30", 0, false},
	} {
		got, ok := parseCostUSD(tc.raw)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseCostUSD(%q) = %d, %v; want %d, %v", tc.raw, got, ok, tc.want, tc.ok)
		}
	}
}

func TestRedactEmptyKey(t *testing.T) {
	if got := Redact("message", ""); got != "message" {
		t.Errorf("redact with no key = %q, want the message unchanged", got)
	}
	if got := Redact("key k3y here k3y", "k3y"); got != "key [redacted] here [redacted]" {
		t.Errorf("redact = %q", got)
	}
}

func TestSaysCredits(t *testing.T) {
	for s, want := range map[string]bool{
		"insufficient_quota": true,
		"You exceeded your current quota, please check your plan and billing details.": true,
		"Your credit balance is too low to access the Anthropic API.":                  true,
		"billing_error": true,
		"Rate limit reached for gpt-4o on tokens per min (TPM)": false,
		"Quota exceeded for metric: requests per minute":        false,
		"rate_limit_error": false,
	} {
		if got := saysCredits(s); got != want {
			t.Errorf("saysCredits(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestUserContentCarriesDocumentAndDirective: the user message gives the
// model the document its stage works on (an empty one says so) and a
// person's instructions to a stage sent back, after the task.
func TestUserContentCarriesDocumentAndDirective(t *testing.T) {
	got := userContent(Request{Task: "Write it.", Directive: "shorter, please", Document: &Document{Name: "draft", Content: "# Draft"}})
	want := "Write it.\n\nA person sent this stage back with these instructions:\nshorter, please\n\nRegion \"draft\", the document this stage works on (replace it with the write_region tool):\n# Draft"
	if got != want {
		t.Errorf("userContent = %q, want %q", got, want)
	}
	if got := userContent(Request{Task: "T", Document: &Document{Name: "draft", Content: " \n"}}); !strings.HasSuffix(got, "write_region tool):\n(empty)") {
		t.Errorf("an empty document: %q", got)
	}
	if got := userContent(Request{Task: "T"}); got != "T" {
		t.Errorf("no document, no directive: %q", got)
	}
}

// TestScriptedFillsDocumentAndDirective: a script's {document} and
// {directive} are what the call carried, JSON-escaped in tool arguments.
func TestScriptedFillsDocumentAndDirective(t *testing.T) {
	s := NewScripted()
	req := Request{RunUID: "u", Task: "t", Directive: "say \"hi\"", Document: &Document{Name: "d", Content: "line 1\nline \"2\""},
		Script: []blueprint.ScriptStep{{Output: "doc={document} dir={directive}", ToolCalls: []blueprint.ScriptToolCall{{Name: "write_region", Arguments: `{"region":"d","content":"{document}|{directive}"}`}}}}}
	res, err := s.Call(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if want := "doc=line 1\nline \"2\" dir=say \"hi\""; res.Response.Output != want {
		t.Errorf("output %q, want %q", res.Response.Output, want)
	}
	var args struct{ Content string }
	if err := json.Unmarshal([]byte(res.Response.Calls[0].Arguments), &args); err != nil || args.Content != "line 1\nline \"2\"|say \"hi\"" {
		t.Errorf("arguments %s (%v)", res.Response.Calls[0].Arguments, err)
	}
}

// TestUserContentCarriesNoteAndTransitionPrompt: why the stage was entered
// and how to leave it reach the model in the user message, after the task
// and output instructions.
func TestUserContentCarriesNoteAndTransitionPrompt(t *testing.T) {
	got := userContent(Request{Task: "fix it", OutputInstructions: "a diff", StageNote: "model call failed: boom", TransitionPrompt: "Targets:\n- review"})
	want := "fix it\n\nOutput: a diff\n\nWhy this stage was entered: model call failed: boom\n\nTargets:\n- review"
	if got != want {
		t.Errorf("user content %q, want %q", got, want)
	}
	if got := userContent(Request{Task: "fix it"}); got != "fix it" {
		t.Errorf("plain request: %q", got)
	}
}

// TestCallsCarryCheckpointChoices: what people answered at the checkpoints
// before the stage reaches its model in the user message (after a
// directive, before the document) and in a script's {choices}.
func TestCallsCarryCheckpointChoices(t *testing.T) {
	choices := []journal.PointChoice{{Point: "colour", Text: "green"}, {Point: "why", Text: "it matches"}}
	got := userContent(Request{Task: "Build it.", Choices: choices, Document: &Document{Name: "d", Content: "x"}})
	want := "Build it.\n\nAt checkpoint \"colour\" a person answered:\ngreen\n\nAt checkpoint \"why\" a person answered:\nit matches\n\nRegion \"d\""
	if !strings.HasPrefix(got, want) {
		t.Errorf("userContent = %q, want it to start %q", got, want)
	}
	res, err := NewScripted().Call(context.Background(), Request{RunUID: "u", Task: "t", Choices: choices,
		Script: []blueprint.ScriptStep{{Output: "chose={choices}"}}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "chose=colour: green | why: it matches"; res.Response.Output != want {
		t.Errorf("output %q, want %q", res.Response.Output, want)
	}
}
