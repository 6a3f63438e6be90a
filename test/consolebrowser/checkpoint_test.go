package consolebrowser_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/console"
)

// TestConsoleRevisesAndPassesACheckpoint: a run parks on a blueprint
// checkpoint that offers directives; frank (viewer and answerer) opens it,
// sends the stage back with instructions (Revise), and the AgentRunAnswer
// the API server stores names him with decision Revise and his text; the
// stage runs again and the run parks on the same checkpoint a second
// time, which the page shows; he approves it and the run completes through
// the next stage.
func TestConsoleRevisesAndPassesACheckpoint(t *testing.T) {
	ctx := browser(t)
	startManager(t)
	ns := newNamespace(t)
	createConfigMap(t, ns, "gated", "agent.toml", checkpointAgent)
	createConfigMap(t, ns, "agentrun-providers", "providers.toml", scriptedProviders)
	createRun(t, ns, "revise-me", "gated")
	first := waitRun(t, ns, "revise-me", "InteractionPoint", waitingOn(arv1.WaitInteractionPoint))
	for _, role := range []string{"agentrun-viewer", "agentrun-answerer"} {
		bind(t, ns, role, userSubject("frank"))
	}

	frank, addr := serveConsole(t, console.Options{Mode: console.Local, Config: userConfig(t, "frank"), Namespace: ns})
	if err := chromedp.Do(ctx, chromedp.Navigate(frank.LocalURL(addr)), chromedp.WaitVisible(chromedp.CSS(`#runs`)),
		openRun(ns, "revise-me"), chromedp.WaitVisible(chromedp.CSS(`#send-revise`))); err != nil {
		t.Fatalf("frank opening revise-me: %v", err)
	}
	screenshot(t, ctx, "checkpoint")
	const instructions = "name the risks first"
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`#revise`), instructions), chromedp.Click(chromedp.CSS(`#send-revise`))); err != nil {
		t.Fatalf("sending the stage back: %v", err)
	}
	waitRun(t, ns, "revise-me", "the checkpoint again, after a second visit of plan", func(r *arv1.AgentRun) bool {
		return waitingOn(arv1.WaitInteractionPoint)(r) && stageVisits(r, "plan") == 2
	})
	answers := listAnswers(t, ns)
	if len(answers) != 1 || answers[0].Spec.By != "frank" || answers[0].Spec.Decision != arv1.DecisionRevise ||
		answers[0].Spec.Text == nil || *answers[0].Spec.Text != instructions || answers[0].Spec.Point != first.Status.WaitingOn.Point {
		t.Fatalf("answers = %+v, want frank's one Revise of %q with his instructions", answers, first.Status.WaitingOn.Point)
	}

	// The page follows the run to its second stop and offers the answer
	// buttons again; Approve passes it.
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#approve`))); err != nil {
		t.Fatalf("the page offers no Approve at the second stop: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#approve`)), chromedp.WaitVisible(chromedp.CSS(`#output`))); err != nil {
		t.Fatalf("approving the checkpoint: %v", err)
	}
	done := waitRun(t, ns, "revise-me", "Complete", phaseIs(arv1.PhaseComplete))
	if stageVisits(done, "plan") != 2 || stageVisits(done, "build") != 1 {
		t.Errorf("stages %+v, want plan visited twice and build once", done.Status.Stages)
	}
	// Each answer was taken once: the Revise at the first stop, the
	// Approve at the second.
	deadline := time.Now().Add(30 * time.Second)
	for {
		answers := listAnswers(t, ns)
		applied := map[arv1.AnswerDecision]int{}
		for _, a := range answers {
			if a.Status.State == arv1.AnswerApplied && a.Spec.By == "frank" {
				applied[a.Spec.Decision]++
			}
		}
		if len(answers) == 2 && applied[arv1.DecisionRevise] == 1 && applied[arv1.DecisionApprove] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("answers %+v, want frank's Revise and Approve, both Applied", answers)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// listAnswers is the AgentRunAnswers of ns, oldest first.
func listAnswers(t *testing.T, ns string) []arv1.AgentRunAnswer {
	t.Helper()
	var list arv1.AgentRunAnswerList
	if err := admin.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b arv1.AgentRunAnswer) int {
		return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
	})
	return list.Items
}

// stageVisits is how many times the run entered stage name.
func stageVisits(r *arv1.AgentRun, name string) int32 {
	for _, s := range r.Status.Stages {
		if s.Name == name {
			return s.Visits
		}
	}
	return 0
}

// checkpointAgent plans, stops at a checkpoint that may send the plan back
// with a person's instructions, then builds.
const checkpointAgent = `[agent]
name = "gated"
[agent.title]
enabled = false

[stages.plan]
[stages.plan.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.plan.transitions.build]
condition = "always"
[[stages.plan.interaction_points]]
name = "approve-plan"
prompt = "Approve the plan?"
directives = ["revise"]
[[stages.plan.script]]
text = "plan v1"
[[stages.plan.script]]
text = "plan v2"

[stages.build]
allow_complete = true
[stages.build.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.build.script]]
complete = true
output = "built"
`
