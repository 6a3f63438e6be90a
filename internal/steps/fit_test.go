package steps

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/output"
)

// TestFitJournal: an answer whose every part is within its cap but which
// is still too large to journal (many tool calls, or output JSON escapes
// sixfold) is replaced by a note the model reads; one that fits is kept
// as it is.
func TestFitJournal(t *testing.T) {
	args := `{"body":"` + strings.Repeat("a", MaxToolArguments-20) + `"}`
	var calls []journal.ToolCall
	for range 12 {
		calls = append(calls, journal.ToolCall{Name: "write_file", Arguments: args})
	}
	for _, tc := range []struct {
		name string
		r    journal.Response
		fits bool
	}{
		{"an ordinary answer", journal.Response{Text: "done", Complete: true, Output: "the result", ToolCalls: 1}, true},
		{"the largest text and output of plain characters", journal.Response{Text: strings.Repeat("t", MaxAnswerText), Complete: true, Output: strings.Repeat("o", output.MaxBytes), ToolCalls: 1}, true},
		{"twelve tool calls of the largest arguments", journal.Response{Text: "writing", Calls: calls, ToolCalls: 12}, false},
		{"an output of control characters", journal.Response{Complete: true, Output: strings.Repeat("\x01", output.MaxBytes), ToolCalls: 1}, false},
	} {
		r := tc.r
		fitJournal(&r)
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > MaxAnswerEntry {
			t.Errorf("%s: %d bytes journaled after fitJournal, over %d", tc.name, len(b), MaxAnswerEntry)
		}
		kept := r.Text == tc.r.Text && r.Output == tc.r.Output && len(r.Calls) == len(tc.r.Calls) && r.Complete == tc.r.Complete
		switch {
		case tc.fits && !kept:
			t.Errorf("%s: changed to %q, want it kept", tc.name, r.Text)
		case !tc.fits && (kept || r.Complete || r.Output != "" || len(r.Calls) != 0 || !strings.Contains(r.Text, "the answer was dropped") || r.ToolCalls != tc.r.ToolCalls):
			t.Errorf("%s: %q complete %v, %d calls, toolCalls %d; want it dropped with a note, nothing acted on, its tool calls still counted",
				tc.name, clip(r.Text, 200), r.Complete, len(r.Calls), r.ToolCalls)
		}
	}
}
