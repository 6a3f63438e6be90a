package controllers

import (
	"strings"
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// TestOutputInstructionsShowTheExample: the example follows the
// instructions, marked as an example.
func TestOutputInstructionsShowTheExample(t *testing.T) {
	if got := outputInstructions("Be brief.", `{"ok": true}`); got != "Be brief.\n\nAn example of acceptable output:\n{\"ok\": true}" {
		t.Errorf("%q", got)
	}
	if got := outputInstructions("", "x"); got != "An example of acceptable output:\nx" {
		t.Errorf("%q", got)
	}
	if got := outputInstructions("Be brief.", ""); got != "Be brief." {
		t.Errorf("%q", got)
	}
}

// TestHistoryTellsRefusals: a refused move is told to the model like a
// refused output.
func TestHistoryTellsRefusals(t *testing.T) {
	h := history([]journal.Turn{{Text: "a", Refused: "stage \"x\" requires output"}, {Text: "b", Rejected: "not JSON"}, {Text: "c"}})
	if !strings.Contains(h[0].Feedback, "That was refused: stage \"x\" requires output") || !strings.Contains(h[1].Feedback, "Your output was refused: not JSON") || h[2].Feedback != "" {
		t.Errorf("%+v", h)
	}
}
