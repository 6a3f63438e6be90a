package plugin

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/priority"
)

// TestOrderTreesIsThePsOrder: the console's order is the listing's, row
// for row, with each run's depth in its tree.
func TestOrderTreesIsThePsOrder(t *testing.T) {
	runs := fixtureRuns()
	var buf bytes.Buffer
	if err := RenderPs(&buf, runs, fixedNow, true, nil, priority.Classes{}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	at := strings.Index(lines[0], "RUN")
	if at < 0 {
		t.Fatalf("no RUN column in %q", lines[0])
	}
	runCol := len([]rune(lines[0][:at]))
	lines = lines[1 : len(lines)-2] // header; blank line and footer
	ordered, needing := OrderTrees(runs, fixedNow, nil, priority.Classes{})
	if len(ordered) != len(lines) {
		t.Fatalf("%d ordered runs, %d listed", len(ordered), len(lines))
	}
	for i, tr := range ordered {
		line := []rune(lines[i])
		rest := strings.TrimLeft(string(line[runCol:]), "│├└─ ")
		name := strings.Fields(rest)[0]
		depth := (len(line) - runCol - len([]rune(rest))) / 3
		if ns := strings.Fields(lines[i])[0]; ns != tr.Row.Namespace || name != tr.Row.Name || depth != tr.Depth {
			t.Errorf("row %d: console %s/%s at depth %d, ps %s/%s at depth %d", i, tr.Row.Namespace, tr.Row.Name, tr.Depth, ns, name, depth)
		}
	}
	if !ordered[0].TreeNeedsAPerson || needing == 0 {
		t.Errorf("first tree needs a person = %v, needing = %d; the fixture has runs needing a person", ordered[0].TreeNeedsAPerson, needing)
	}
}

// TestBuildAnswerChecksLikeTheCommands: the console's answers go through
// the commands' checks: the wrong command for the wait, and a malformed
// answer, are refused; a fitting one names the point and the user.
func TestBuildAnswerChecksLikeTheCommands(t *testing.T) {
	run := waitRun(waitTool)
	run.Namespace = "team-a"
	ans, err := BuildAnswer(AnswerRequest{Command: "approve"}, run, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if ans.Spec.By != "alice" || ans.Spec.Point != waitTool.Point || ans.Spec.Decision != arv1.DecisionApprove || ans.Namespace != "team-a" || ans.Spec.Run != run.Name {
		t.Errorf("answer = %+v in %s", ans.Spec, ans.Namespace)
	}
	text := "prod"
	if _, err := BuildAnswer(AnswerRequest{Command: "answer", Text: &text}, run, "alice"); err == nil ||
		!strings.Contains(err.Error(), "which answer does not answer") {
		t.Errorf("answering a tool approval: %v", err)
	}
	if _, err := BuildAnswer(AnswerRequest{Command: "resolve"}, run, "alice"); err == nil || !strings.Contains(err.Error(), "exactly one of --done") {
		t.Errorf("a resolve without a verdict: %v", err)
	}
	if _, err := BuildAnswer(AnswerRequest{Command: "delete"}, run, "alice"); err == nil {
		t.Error("an unknown command was taken")
	}
	edited, why := `{"title":"smaller"}`, "too broad"
	ans, err = BuildAnswer(AnswerRequest{Command: "approve", Args: &edited, Reason: &why}, run, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if ans.Spec.Args == nil || string(ans.Spec.Args.Raw) != edited || ans.Spec.Reason != why {
		t.Errorf("approve with edited args and a reason: %+v", ans.Spec)
	}
	// A page gives JSON only: a path (which the command would read) or
	// stdin is refused, so no file of the console's machine is read.
	for _, bad := range []string{"/etc/passwd", "-", `["a"]`, " "} {
		if _, err := BuildAnswer(AnswerRequest{Command: "approve", Args: &bad}, run, "alice"); err == nil || !errors.Is(err, ErrBadAnswer) {
			t.Errorf("approve with args %q: %v, want it refused", bad, err)
		}
	}
}
