package consolebrowser_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/console"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool/mcptest"
)

// TestConsoleSteersAsTheSignedInUser: dave (agentrun-editor) opens a run
// parked on a ToolApproval and clicks Pause: the API server's run is
// paused and the page, fed by its stream, offers Resume; Resume unpauses
// it and the run waits on its approval again; Cancel run ends it Cancelled
// and the page offers no more steering. erin, a viewer only, is shown no
// steering buttons, and the pause she crafts by hand is refused by the API
// server (403 passed on) and leaves the run as it was.
func TestConsoleSteersAsTheSignedInUser(t *testing.T) {
	ctx := browser(t)
	srv := mcptest.New(t, mcptest.Options{})
	startManager(t)
	ns := newNamespace(t)
	createConfigMap(t, ns, "tooling", "agent.toml", fmt.Sprintf(toolAgent, srv.URL()))
	createConfigMap(t, ns, "agentrun-providers", "providers.toml", scriptedProviders)
	createRun(t, ns, "steer-me", "tooling")
	waitRun(t, ns, "steer-me", "ToolApproval", waitingOn(arv1.WaitToolApproval))
	bind(t, ns, "agentrun-editor", userSubject("dave"))
	bind(t, ns, "agentrun-viewer", userSubject("erin"))

	viewerCannotSteer(t, ns)

	dave, addr := serveConsole(t, console.Options{Mode: console.Local, Config: userConfig(t, "dave"), Namespace: ns})
	if err := chromedp.Do(ctx, chromedp.Navigate(dave.LocalURL(addr)), chromedp.WaitVisible(chromedp.CSS(`#runs`)),
		openRun(ns, "steer-me"), chromedp.WaitVisible(chromedp.CSS(`#pause`))); err != nil {
		t.Fatalf("dave opening steer-me: %v", err)
	}

	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#pause`))); err != nil {
		t.Fatalf("clicking Pause: %v", err)
	}
	waitRun(t, ns, "steer-me", "spec.paused and phase Paused", func(r *arv1.AgentRun) bool {
		return r.Spec.Paused && r.Status.Phase == arv1.PhasePaused
	})
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#resume`))); err != nil {
		t.Fatalf("the page offers no Resume once the run is paused: %v", err)
	}
	// The spec's pause and the status's phase reach the page as two
	// updates: the badge follows the second.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("phase").textContent === "Paused"`,
		chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		phase, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#phase`)))
		t.Errorf("the page's phase badge says %q (%v), want %s", phase, err, arv1.PhasePaused)
	}
	screenshot(t, ctx, "paused")

	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#resume`))); err != nil {
		t.Fatalf("clicking Resume: %v", err)
	}
	waitRun(t, ns, "steer-me", "unpaused and waiting on its approval again", func(r *arv1.AgentRun) bool {
		return !r.Spec.Paused && waitingOn(arv1.WaitToolApproval)(r)
	})
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#pause`))); err != nil {
		t.Fatalf("the page offers no Pause once the run is resumed: %v", err)
	}

	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#cancel`))); err != nil {
		t.Fatalf("clicking Cancel run: %v", err)
	}
	run := waitRun(t, ns, "steer-me", "Cancelled", phaseIs(arv1.PhaseCancelled))
	if !run.Spec.Cancel {
		t.Errorf("steer-me ended %s without spec.cancel set", run.Status.Phase)
	}
	if err := chromedp.Do(ctx, chromedp.WaitNotPresent(chromedp.CSS(`#cancel`)), chromedp.WaitNotPresent(chromedp.CSS(`#pause`))); err != nil {
		t.Fatalf("the page still offers steering once the run is Cancelled: %v", err)
	}
	if srv.Executed("create_ticket") != 0 {
		t.Errorf("create_ticket executed %d times; the call waiting on approval was never approved", srv.Executed("create_ticket"))
	}
}

// viewerCannotSteer: erin may view runs, not pause, resume or cancel them.
func viewerCannotSteer(t *testing.T, ns string) {
	ctx := browser(t)
	erin, addr := serveConsole(t, console.Options{Mode: console.Local, Config: userConfig(t, "erin"), Namespace: ns})
	if err := chromedp.Do(ctx, chromedp.Navigate(erin.LocalURL(addr)), chromedp.WaitVisible(chromedp.CSS(`#runs`)),
		openRun(ns, "steer-me"), chromedp.WaitVisible(chromedp.CSS(`#no-answer`))); err != nil {
		t.Fatalf("erin opening steer-me: %v", err)
	}
	buttons, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#pause, #resume, #cancel").length`))
	if err != nil {
		t.Fatal(err)
	}
	if buttons != 0 {
		t.Errorf("erin sees %d steering buttons, want none", buttons)
	}
	got, err := postFromPage(ctx, "/api/steer", map[string]any{"namespace": ns, "name": "steer-me", "action": "pause"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != 403 || got.Body["from"] != "the API server" || !strings.Contains(got.Body["error"], "forbidden") {
		t.Fatalf("erin's crafted pause: %+v, want the API server's 403", got)
	}
	run := waitRun(t, ns, "steer-me", "ToolApproval", waitingOn(arv1.WaitToolApproval))
	if run.Spec.Paused {
		t.Error("steer-me is paused after erin's refused pause")
	}
}
