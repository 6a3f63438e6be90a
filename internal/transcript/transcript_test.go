package transcript

import (
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// TestTranscriptShowsCheckpointChoices: a checkpoint's line says what the
// person chose, or which abort option ended the run.
func TestTranscriptShowsCheckpointChoices(t *testing.T) {
	for _, tc := range []struct {
		e    journal.Entry
		want string
	}{
		{journal.Entry{Kind: journal.InteractionAnswered, Point: "colour", Approved: true, By: "ann", Choice: "green"}, `colour approved by ann, answered "green"`},
		{journal.Entry{Kind: journal.InteractionAnswered, Point: "go", By: "ann", Abort: "abandon"}, `go denied by ann, abort option "abandon"`},
		{journal.Entry{Kind: journal.InteractionAnswered, Point: "go", Approved: true, By: "ann"}, `go approved by ann`},
	} {
		if kind, text := Describe(&tc.e); kind != "checkpoint" || text != tc.want {
			t.Errorf("%+v: %s %q, want checkpoint %q", tc.e, kind, text, tc.want)
		}
	}
}
