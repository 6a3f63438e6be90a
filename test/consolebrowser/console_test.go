package consolebrowser_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/console"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool/mcptest"
)

// TestConsoleAnswersAsTheSignedInUser: with a manager running, a run parked
// on a ToolApproval is listed first although newer runs finished; alice
// (viewer and answerer) opens it, clicks Approve with a reason and edited
// arguments, and the AgentRunAnswer the API server stores names her and
// carries both, and the run completes. bob, a viewer
// only, sees the wait but no answer button, and the answer he crafts by
// hand is refused by the API server (403 passed on).
func TestConsoleAnswersAsTheSignedInUser(t *testing.T) {
	ctx := browser(t)
	srv := mcptest.New(t, mcptest.Options{})
	startManager(t)
	ns := newNamespace(t)
	createConfigMap(t, ns, "tooling", "agent.toml", fmt.Sprintf(toolAgent, srv.URL()))
	createConfigMap(t, ns, "quick", "agent.toml", quickAgent)
	createConfigMap(t, ns, "agentrun-providers", "providers.toml", scriptedProviders)
	createRun(t, ns, "approve-me", "tooling")
	waitRun(t, ns, "approve-me", "ToolApproval", waitingOn(arv1.WaitToolApproval))
	createRun(t, ns, "bob-sees", "tooling")
	waitRun(t, ns, "bob-sees", "ToolApproval", waitingOn(arv1.WaitToolApproval))
	for _, n := range []string{"newer-1", "newer-2"} {
		createRun(t, ns, n, "quick")
		waitRun(t, ns, n, "Complete", phaseIs(arv1.PhaseComplete))
	}
	for _, role := range []string{"agentrun-viewer", "agentrun-answerer"} {
		bind(t, ns, role, userSubject("alice"))
	}
	bind(t, ns, "agentrun-viewer", userSubject("bob"))

	alice, addr := serveConsole(t, console.Options{Mode: console.Local, Config: userConfig(t, "alice"), Namespace: ns})
	if err := chromedp.Do(ctx, chromedp.Navigate(alice.LocalURL(addr)),
		chromedp.WaitVisible(chromedp.CSS(`#runs tbody tr[data-run="`+ns+`/newer-2"]`))); err != nil {
		t.Fatalf("opening the list: %v", err)
	}
	rows, err := rowsInOrder(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 || !strings.HasSuffix(rows[0], "/bob-sees") || !strings.HasSuffix(rows[1], "/approve-me") {
		t.Fatalf("rows = %s; want the two runs needing a person first (newest first), then the finished ones", joined(rows))
	}
	screenshot(t, ctx, "list")

	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`a[href*="name=approve-me"]`)), chromedp.WaitVisible(chromedp.CSS(`#approve`))); err != nil {
		t.Fatalf("opening approve-me: %v", err)
	}
	who, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#who`)))
	if err != nil {
		t.Fatal(err)
	}
	if who != "signed in as alice" {
		t.Errorf("header says %q, want alice", who)
	}
	screenshot(t, ctx, "run")
	// She approves the call with a reason and edited arguments.
	const edited = `{"title":"ship it, carefully"}`
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`#edit-args`), edited), chromedp.SendKeys(chromedp.CSS(`#reason`), "checked the diff"),
		chromedp.Click(chromedp.CSS(`#approve`)), chromedp.WaitVisible(chromedp.CSS(`#output`))); err != nil {
		t.Fatalf("approving: %v", err)
	}
	var answers arv1.AgentRunAnswerList
	if err := admin.List(context.Background(), &answers, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(answers.Items) != 1 || answers.Items[0].Spec.By != "alice" || answers.Items[0].Spec.Decision != arv1.DecisionApprove ||
		answers.Items[0].Spec.Run != "approve-me" || answers.Items[0].Spec.Reason != "checked the diff" ||
		answers.Items[0].Spec.Args == nil || string(answers.Items[0].Spec.Args.Raw) != edited {
		t.Fatalf("answers = %+v, want alice's one approval of approve-me, with her reason and edited arguments", answers.Items)
	}
	waitRun(t, ns, "approve-me", "Complete", phaseIs(arv1.PhaseComplete))
	if srv.Executed("create_ticket") != 1 {
		t.Errorf("create_ticket executed %d times, want once after the approval", srv.Executed("create_ticket"))
	}

	viewerCannotAnswer(t, ns)
}

// viewerCannotAnswer: bob may view runs, not answer them.
func viewerCannotAnswer(t *testing.T, ns string) {
	ctx := browser(t)
	bob, addr := serveConsole(t, console.Options{Mode: console.Local, Config: userConfig(t, "bob"), Namespace: ns})
	if err := chromedp.Do(ctx, chromedp.Navigate(bob.LocalURL(addr)), chromedp.WaitVisible(chromedp.CSS(`#runs`)),
		openRun(ns, "bob-sees"), chromedp.WaitVisible(chromedp.CSS(`#no-answer`))); err != nil {
		t.Fatalf("bob opening bob-sees: %v", err)
	}
	buttons, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#approve, #deny, #pause, #cancel").length`))
	if err != nil {
		t.Fatal(err)
	}
	if buttons != 0 {
		t.Errorf("bob sees %d answer or steering buttons, want none", buttons)
	}
	run := waitRun(t, ns, "bob-sees", "ToolApproval", waitingOn(arv1.WaitToolApproval))
	got, err := postFromPage(ctx, "/api/answer", map[string]any{"namespace": ns, "name": "bob-sees", "point": run.Status.WaitingOn.Point, "command": "approve"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != 403 || got.Body["from"] != "the API server" || !strings.Contains(got.Body["error"], "forbidden") {
		t.Fatalf("bob's crafted answer: %+v, want the API server's 403", got)
	}
	var answers arv1.AgentRunAnswerList
	if err := admin.List(context.Background(), &answers, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, a := range answers.Items {
		if a.Spec.Run == "bob-sees" {
			t.Errorf("an answer to bob-sees exists: %+v", a.Spec)
		}
	}
}

// TestConsoleTokenSeesOnlyWhatItMayList: in a cluster, carol signs in
// with her ServiceAccount token; she may view runs in her namespace only,
// so the console (whose own configuration is the admin's) lists hers and
// passes on the API server's refusal for another namespace.
func TestConsoleTokenSeesOnlyWhatItMayList(t *testing.T) {
	ctx := browser(t)
	mine, other := newNamespace(t), newNamespace(t)
	createRun(t, mine, "carols-run", "nobody")
	createRun(t, other, "hidden-run", "nobody")
	token := serviceAccountToken(t, mine, "carol")
	bind(t, mine, "agentrun-viewer", rbacSA(mine, "carol"))
	_, addr := serveConsole(t, console.Options{Mode: console.InCluster, Config: env.Config, Namespace: mine})
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+addr+"/"), chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), token), chromedp.Click(chromedp.CSS(`#signin`)),
		chromedp.WaitVisible(chromedp.CSS(`#runs tbody tr[data-run="`+mine+`/carols-run"]`))); err != nil {
		t.Fatalf("carol signing in: %v", err)
	}
	who, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#who`)))
	if err != nil {
		t.Fatal(err)
	}
	if want := "signed in as system:serviceaccount:" + mine + ":carol"; who != want {
		t.Errorf("header %q, want %q", who, want)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.hash = "#/?namespace=`+other+`"`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#stream-error`))); err != nil {
		t.Fatalf("carol listing %s: %v", other, err)
	}
	msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#stream-error`)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, "403") || !strings.Contains(msg, "forbidden") || strings.Contains(msg, "hidden-run") {
		t.Errorf("listing another namespace says %q, want the API server's 403", msg)
	}
	rows, err := rowsInOrder(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 0 {
		t.Errorf("carol sees %s in %s", joined(rows), other)
	}
}

func rbacSA(ns, name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: "ServiceAccount", Namespace: ns, Name: name}
}
