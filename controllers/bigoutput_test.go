package controllers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/output"
)

// TestOversizedOutputIsCutToFitTheJournal: a model completes the run with
// 800 KiB of output, more than a journal chunk can hold beside the stored
// copy (a ConfigMap holds 1 MiB). The run still completes: its journal
// keeps the output cut to the stored cap with its true length, and the
// status says how long it was and that it was truncated. (Before, the
// answer could never be journaled and the run stayed Running, showing
// nothing.)
func TestOversizedOutputIsCutToFitTheJournal(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	const size = 800 << 10
	bp := `[agent]
name = "big"
[agent.title]
enabled = false
[stages.only]
allow_complete = true
[stages.only.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.only.script]]
complete = true
output = "` + strings.Repeat("x", size) + `"
`
	createConfigMap(t, ns, "big", map[string]string{"agent.toml": bp})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createRun(t, ns, "big-output", "big")
	run := waitFor(t, ns, "big-output", 60*time.Second, "Complete", func(r *arv1.AgentRun) bool { return r.Status.Phase == arv1.PhaseComplete })

	fo := run.Status.FinalOutput
	if fo == nil || fo.Bytes != size || !fo.Truncated {
		t.Fatalf("finalOutput = %+v, want %d bytes, truncated", fo, size)
	}
	if got := finalOutput(t, run); got != strings.Repeat("x", output.MaxBytes) {
		t.Errorf("stored output is %d bytes, want the first %d", len(got), output.MaxBytes)
	}
	done := entriesOf(t, ns, run, journal.ModelCallCompleted)
	if len(done) != 1 || done[0].Response == nil || len(done[0].Response.Output) != output.MaxBytes || done[0].Response.OutputBytes != size {
		t.Fatalf("completions %+v, want one whose output is cut to %d bytes and records %d", summarize(done), output.MaxBytes, size)
	}
}

// summarize is what a test failure shows of completions: not their output.
func summarize(es []journal.Entry) []string {
	var out []string
	for _, e := range es {
		s := string(e.Kind)
		if r := e.Response; r != nil {
			s += fmt.Sprintf(" with %d bytes of output, outputBytes %d", len(r.Output), r.OutputBytes)
		}
		out = append(out, s)
	}
	return out
}
