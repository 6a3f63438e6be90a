package controllers_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// fanOutBlueprint splits into n items, runs each on its own "work" stage as
// a child run, and merges the workers' outputs.
func fanOutBlueprint(n, maxWorkers int, onFailure string, maxAttempts, workDelayMS int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf("%q", fmt.Sprintf("item-%02d", i))
	}
	return fmt.Sprintf(`
[agent]
name = "fan"
[stages.split]
mode = "fan_out"
worker_stage = "work"
merge_stage = "merge"
max_workers = %d
on_worker_failure = %q
max_attempts = %d
[stages.split.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.split.script]]
text = "split"
items = [%s]
usage = {prompt = 5, completion = 5}
[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.work.script]]
text = "worked"
complete = true
output = "done {task}"
delay_ms = %d
usage = {prompt = 10, completion = 1}
error = {status = 400, message = "cannot do this item", when_task = "bad", times = 0}
[stages.merge]
allow_complete = true
[stages.merge.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.merge.script]]
text = "merged"
complete = true
output = "merged"
usage = {prompt = 100, completion = 10}
`, maxWorkers, onFailure, maxAttempts, strings.Join(items, ", "), workDelayMS)
}

func listChildren(t *testing.T, ns string, parent *arv1.AgentRun) []arv1.AgentRun {
	t.Helper()
	var list arv1.AgentRunList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{arv1.LabelParentUID: string(parent.UID)}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// TestFanOutFiftyItemsFiveWorkers: never more than 5 workers at once, the
// parent reads as a healthy FanOutWorkers wait with the right count, and
// the merge stage sees all 50 outputs.
func TestFanOutFiftyItemsFiveWorkers(t *testing.T) {
	h := startManager(t, managerOpts{steps: 32})
	ns := newNamespace(t)
	createConfigMap(t, ns, "fan", map[string]string{"agent.toml": fanOutBlueprint(50, 5, "continue", 1, 150)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	parent := createRun(t, ns, "p", "fan")

	maxRunning, samples, waitSamples := 0, 0, 0
	lastOutstanding := int32(51)
	deadline := time.Now().Add(90 * time.Second)
	var run *arv1.AgentRun
	for {
		run = getRun(t, ns, "p")
		children := listChildren(t, ns, parent)
		running := 0
		for _, c := range children {
			if !c.Status.Phase.IsTerminal() {
				running++
			}
		}
		maxRunning = max(maxRunning, running)
		samples++
		if w := run.Status.WaitingOn; w != nil && run.Status.Phase == arv1.PhaseWaitingInput {
			if w.Reason != arv1.WaitFanOutWorkers || w.Outstanding == nil {
				t.Fatalf("parent waits on %+v, want FanOutWorkers", w)
			}
			if w.NeedsAPerson || run.NeedsAPerson() {
				t.Fatal("a fan-out parent reads as needing a person")
			}
			cs := run.Status.Children
			if cs == nil || *w.Outstanding != cs.Running+cs.Queued {
				t.Fatalf("outstanding %d != running+queued %+v", *w.Outstanding, cs)
			}
			if *w.Outstanding > lastOutstanding || *w.Outstanding > 50 {
				t.Fatalf("outstanding went from %d to %d", lastOutstanding, *w.Outstanding)
			}
			lastOutstanding = *w.Outstanding
			waitSamples++
		}
		if run.Status.Phase.IsTerminal() || time.Now().After(deadline) {
			break
		}
		time.Sleep(15 * time.Millisecond)
	}
	if run.Status.Phase != arv1.PhaseComplete {
		t.Fatalf("parent ended %s (%s)", run.Status.Phase, run.Status.Error)
	}
	t.Logf("%d samples, %d while waiting on workers; at most %d workers running", samples, waitSamples, maxRunning)
	if maxRunning > 5 {
		t.Errorf("%d workers ran at once, max_workers is 5", maxRunning)
	}
	if waitSamples < 3 {
		t.Errorf("only %d samples saw the FanOutWorkers wait", waitSamples)
	}
	merged := h.scripted.Merged(string(run.UID))
	if len(merged) != 50 {
		t.Fatalf("merge stage saw %d outputs, want 50", len(merged))
	}
	for i, m := range merged {
		if want := fmt.Sprintf("done item-%02d", i); m != want {
			t.Errorf("merged[%d] = %q, want %q", i, m, want)
		}
	}
	children := listChildren(t, ns, parent)
	if len(children) != 50 {
		t.Errorf("%d children, want 50", len(children))
	}
	for _, c := range children {
		if c.Spec.Depth != 1 || c.Status.ParentRun != "p" || c.Labels[arv1.LabelParent] != "p" {
			t.Errorf("child %s: depth %d parentRun %q label %q", c.Name, c.Spec.Depth, c.Status.ParentRun, c.Labels[arv1.LabelParent])
		}
		if ref := metaControllerOf(&c); ref == nil || ref.UID != parent.UID {
			t.Errorf("child %s is not controlled by the parent", c.Name)
		}
	}
	tu := run.Status.TreeUsage
	if tu == nil || tu.PromptTokens != 5+100+50*10 || tu.ModelCalls != 52 {
		t.Errorf("tree usage = %+v, want 605 prompt tokens over 52 calls", tu)
	}
	if run.Status.Usage.ModelCalls != 2 {
		t.Errorf("the parent's own usage counts %d calls, want 2", run.Status.Usage.ModelCalls)
	}
}

// TestFanOutChildNeedsSetupParentStaysHealthy: one worker parks on
// NeedsSetup; the parent still reads as a healthy wait, the child as needing
// a person, and fixing the Secret finishes both.
func TestFanOutChildNeedsSetupParentStaysHealthy(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "boss", map[string]string{"agent.toml": `
[agent]
name = "boss"
[stages.split]
mode = "fan_out"
worker_agent = "single"
[stages.split.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.split.script]]
items = ["only item"]
`})
	createConfigMap(t, ns, "single", map[string]string{"agent.toml": oneStage})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders + keyedProviders})
	parent := createRun(t, ns, "p", "boss")
	waitFor(t, ns, "p", 20*time.Second, "a child", func(*arv1.AgentRun) bool { return len(listChildren(t, ns, parent)) == 1 })
	child := listChildren(t, ns, parent)[0]
	waitFor(t, ns, child.Name, 20*time.Second, "child NeedsSetup", blockedOn(arv1.BlockerSecretMissing))
	p := waitFor(t, ns, "p", 10*time.Second, "parent FanOutWorkers(1)", func(r *arv1.AgentRun) bool {
		w := r.Status.WaitingOn
		return w != nil && w.Reason == arv1.WaitFanOutWorkers && *w.Outstanding == 1
	})
	if p.NeedsAPerson() {
		t.Error("the parent reads as needing a person because a child does")
	}
	if c := getRun(t, ns, child.Name); !c.NeedsAPerson() {
		t.Error("the child parked on NeedsSetup does not read as needing a person")
	}
	if a := p.Status.Active; a == nil || a.Since == nil {
		t.Error("the active clock stopped while the parent waits on its workers")
	}
	createSecret(t, ns, "model-creds", map[string]string{"api-key": "k"})
	waitFor(t, ns, "p", 20*time.Second, "parent Complete", phaseIs(arv1.PhaseComplete))
}

// TestFanOutFailurePolicies: continue finishes with the failed item
// recorded and retried up to max_attempts (attempts visible as children);
// fail_all ends the parent in Error and cancels the remaining workers.
func TestFanOutFailurePolicies(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	bp := func(onFailure string, workers int, delay int) string {
		return strings.Replace(fanOutBlueprint(4, workers, onFailure, 2, delay), `"item-01"`, `"bad-01"`, 1)
	}
	createConfigMap(t, ns, "fan-continue", map[string]string{"agent.toml": bp("continue", 4, 50)})
	createConfigMap(t, ns, "fan-failall", map[string]string{"agent.toml": bp("fail_all", 2, 3000)})
	cont := createRun(t, ns, "cont", "fan-continue")
	failAll := createRun(t, ns, "failall", "fan-failall")

	done := waitFor(t, ns, "cont", 30*time.Second, "continue: Complete", phaseIs(arv1.PhaseComplete))
	names := []string{}
	for _, c := range listChildren(t, ns, cont) {
		names = append(names, fmt.Sprintf("%s=%s(a%s)", c.Name, c.Status.Phase, c.Labels[arv1.LabelAttempt]))
	}
	sort.Strings(names)
	want := []string{"cont-w0=Complete(a1)", "cont-w1-a2=Error(a2)", "cont-w1=Error(a1)", "cont-w2=Complete(a1)", "cont-w3=Complete(a1)"}
	if fmt.Sprint(names) != fmt.Sprint(want) {
		t.Errorf("children = %v, want %v", names, want)
	}
	if cs := done.Status.Children; cs == nil || cs.Failed != 2 || cs.Succeeded != 3 || cs.Total != 5 {
		t.Errorf("children summary = %+v, want 5 total, 3 succeeded, 2 failed attempts", cs)
	}

	f := waitFor(t, ns, "failall", 30*time.Second, "fail_all: Error", phaseIs(arv1.PhaseError))
	if !strings.Contains(f.Status.Error, "fail_all") {
		t.Errorf("error %q does not say fail_all fired", f.Status.Error)
	}
	for _, c := range listChildren(t, ns, failAll) {
		c := waitFor(t, ns, c.Name, 20*time.Second, "worker terminal", func(r *arv1.AgentRun) bool { return r.Status.Phase.IsTerminal() })
		if c.Status.Phase == arv1.PhaseComplete {
			continue // finished before the failure
		}
		if c.Labels[arv1.LabelItem] != "1" && c.Status.Phase != arv1.PhaseCancelled {
			t.Errorf("worker %s ended %s after fail_all, want Cancelled", c.Name, c.Status.Phase)
		}
	}
}

// TestCancelAndDeleteParentCascade: cancelling a parent cancels every
// running child; deleting a parent leaves no child.
func TestCancelAndDeleteParentCascade(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "fan", map[string]string{"agent.toml": fanOutBlueprint(6, 3, "continue", 1, 5000)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	a := createRun(t, ns, "a", "fan")
	b := createRun(t, ns, "b", "fan")
	for _, p := range []*arv1.AgentRun{a, b} {
		waitFor(t, ns, p.Name, 20*time.Second, "3 workers running", func(*arv1.AgentRun) bool { return len(listChildren(t, ns, p)) == 3 })
	}
	patchSpec(t, ns, "a", func(r *arv1.AgentRun) { r.Spec.Cancel = true })
	waitFor(t, ns, "a", 10*time.Second, "parent Cancelled", phaseIs(arv1.PhaseCancelled))
	for _, c := range listChildren(t, ns, a) {
		waitFor(t, ns, c.Name, 10*time.Second, "child Cancelled", phaseIs(arv1.PhaseCancelled))
	}
	if n := len(listChildren(t, ns, a)); n != 3 {
		t.Errorf("%d children after cancel, want the 3 that were running (no new ones)", n)
	}

	if err := k8s.Delete(context.Background(), getRun(t, ns, "b")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var list arv1.AgentRunList
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{arv1.LabelParentUID: string(b.UID)}); err != nil {
			t.Fatal(err)
		}
		err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "b"}, &arv1.AgentRun{})
		if len(list.Items) == 0 && client.IgnoreNotFound(err) == nil && err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after deleting the parent: %d children remain, parent get: %v", len(list.Items), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDepthCapRefusesSpawn: a child beyond maxChildDepth is refused with a
// message naming the cap, never silently skipped.
func TestDepthCapRefusesSpawn(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "fan", map[string]string{"agent.toml": fanOutBlueprint(2, 2, "continue", 1, 0)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	p := createRun(t, ns, "p", "fan", func(r *arv1.AgentRun) { r.Spec.MaxChildDepth = ptrInt32(0) })
	run := waitFor(t, ns, "p", 20*time.Second, "Error", phaseIs(arv1.PhaseError))
	if !strings.Contains(run.Status.Error, "maxChildDepth is 0") {
		t.Errorf("error %q does not name the cap", run.Status.Error)
	}
	if n := len(listChildren(t, ns, p)); n != 0 {
		t.Errorf("%d children were created past the cap", n)
	}
}

// TestSubagentsAsChildren: a scripted spawn_agent in a requires_children
// stage parks on Children{outstanding} until the sub-agents finish.
func TestSubagentsAsChildren(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createConfigMap(t, ns, "helper", map[string]string{"agent.toml": strings.ReplaceAll(pacedThree, `name = "paced"`, `name = "helper"`)})
	createConfigMap(t, ns, "lead", map[string]string{"agent.toml": `
[agent]
name = "lead"
[stages.delegate]
requires_children = true
[stages.delegate.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.delegate.transitions.wrap]
condition = "always"
[[stages.delegate.script]]
text = "delegating"
spawn = [{agent = "helper", task = "first"}, {agent = "helper", task = "second"}]
[stages.wrap]
allow_complete = true
[stages.wrap.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.wrap.script]]
complete = true
`})
	p := createRun(t, ns, "p", "lead")
	w := waitFor(t, ns, "p", 20*time.Second, "Children wait", func(r *arv1.AgentRun) bool {
		return r.Status.WaitingOn != nil && r.Status.WaitingOn.Reason == arv1.WaitChildren
	})
	if *w.Status.WaitingOn.Outstanding != 2 || w.NeedsAPerson() {
		t.Errorf("waitingOn = %+v, want Children(2) not needing a person", w.Status.WaitingOn)
	}
	done := waitFor(t, ns, "p", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	kids := listChildren(t, ns, p)
	if len(kids) != 2 || kids[0].Labels[arv1.LabelChildKind] != "subagent" {
		t.Fatalf("children = %d (%v)", len(kids), kids)
	}
	if done.Status.CurrentStage != "wrap" || meta.FindStatusCondition(done.Status.Conditions, arv1.ConditionReady).Status != "True" {
		t.Errorf("parent ended at %s", done.Status.CurrentStage)
	}
}

func ptrInt32(v int32) *int32 { return &v }

// TestFanOutSurvivesManagerRestarts stops the manager while workers are
// being created and again while they run; after each restart there is
// exactly one child per item and the parent completes.
func TestFanOutSurvivesManagerRestarts(t *testing.T) {
	h1 := startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "fan", map[string]string{"agent.toml": fanOutBlueprint(12, 4, "continue", 1, 700)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	parent := createRun(t, ns, "p", "fan")
	waitFor(t, ns, "p", 20*time.Second, "first workers created", func(*arv1.AgentRun) bool { return len(listChildren(t, ns, parent)) > 0 })
	h1.stop() // while the first batch is being created

	h2 := startManager(t, managerOpts{})
	waitFor(t, ns, "p", 20*time.Second, "some workers done, others running", func(*arv1.AgentRun) bool {
		done, running := 0, 0
		for _, c := range listChildren(t, ns, parent) {
			if c.Status.Phase == arv1.PhaseComplete {
				done++
			} else if !c.Status.Phase.IsTerminal() && (c.Status.PendingCall != nil || h2.scripted.Calls(string(c.UID)) > 0) {
				// Mid-call, as its status or the provider shows it.
				running++
			}
		}
		return done > 0 && running > 0
	})
	h2.stop() // while workers are mid-call

	startManager(t, managerOpts{})
	run := waitFor(t, ns, "p", 60*time.Second, "parent Complete", phaseIs(arv1.PhaseComplete))
	perItem := map[string][]string{}
	for _, c := range listChildren(t, ns, parent) {
		perItem[c.Labels[arv1.LabelItem]] = append(perItem[c.Labels[arv1.LabelItem]], c.Name)
		if c.Status.Phase != arv1.PhaseComplete {
			t.Errorf("worker %s ended %s", c.Name, c.Status.Phase)
		}
	}
	if len(perItem) != 12 {
		t.Errorf("%d items have workers, want 12", len(perItem))
	}
	for item, names := range perItem {
		if len(names) != 1 {
			t.Errorf("item %s has %d workers: %v", item, len(names), names)
		}
	}
	if cs := run.Status.Children; cs == nil || cs.Total != 12 || cs.Succeeded != 12 {
		t.Errorf("children summary = %+v", cs)
	}
}

// TestPauseCascadesToChildren: pausing a fan-out parent pauses its running
// workers and starts no new ones; resuming resumes them and the parent
// completes.
func TestPauseCascadesToChildren(t *testing.T) {
	h := startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "fan", map[string]string{"agent.toml": fanOutBlueprint(4, 2, "continue", 1, 1500)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	p := createRun(t, ns, "p", "fan")
	waitFor(t, ns, "p", 20*time.Second, "2 workers running", func(*arv1.AgentRun) bool { return len(listChildren(t, ns, p)) == 2 })
	patchSpec(t, ns, "p", func(r *arv1.AgentRun) { r.Spec.Paused = true })
	waitFor(t, ns, "p", 10*time.Second, "parent Paused", phaseIs(arv1.PhasePaused))
	for _, c := range listChildren(t, ns, p) {
		waitFor(t, ns, c.Name, 10*time.Second, "child paused", func(r *arv1.AgentRun) bool { return r.Spec.Paused && r.Status.Phase == arv1.PhasePaused })
	}
	// The workers' calls in flight at the pause land (and may complete
	// them); wait until each has no call in flight and the paused parent's
	// record counts its children as they now stand: it has reconciled with
	// the slots they freed, and started nobody in their place.
	landed := func(*arv1.AgentRun) bool {
		cs := listChildren(t, ns, p)
		var running, succeeded, failed int32
		for _, c := range cs {
			switch {
			case !c.Status.Phase.IsTerminal():
				running++
			case c.Status.Phase == arv1.PhaseComplete:
				succeeded++
			default:
				failed++
			}
			if c.Status.PendingCall != nil || int(c.Status.Usage.ModelCalls) != h.scripted.Calls(string(c.UID)) {
				return false // a call still in flight or not yet recorded
			}
		}
		parent := getRun(t, ns, "p")
		sum := parent.Status.Children
		return parent.Status.Phase == arv1.PhasePaused && parent.Status.ObservedGeneration == parent.Generation &&
			sum != nil && sum.Total == int32(len(cs)) && sum.Running == running && sum.Succeeded == succeeded && sum.Failed == failed
	}
	waitFor(t, ns, "p", 10*time.Second, "the workers' calls landed and the paused parent counted them", landed)
	if n := len(listChildren(t, ns, p)); n != 2 {
		t.Errorf("%d workers while paused, want the 2 that were running", n)
	}
	// Nothing says no worker will start later while paused: look for a
	// second (no worker is made, the parent stays Paused).
	if err := holdsFor(time.Second, func() error {
		if n := len(listChildren(t, ns, p)); n != 2 {
			return fmt.Errorf("%d workers while paused, want the 2 that were running", n)
		}
		if r := getRun(t, ns, "p"); r.Status.Phase != arv1.PhasePaused {
			return fmt.Errorf("the parent left Paused: %s", r.Status.Phase)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	patchSpec(t, ns, "p", func(r *arv1.AgentRun) { r.Spec.Paused = false })
	done := waitFor(t, ns, "p", 30*time.Second, "parent Complete after resume", phaseIs(arv1.PhaseComplete))
	if cs := done.Status.Children; cs == nil || cs.Succeeded != 4 {
		t.Errorf("children = %+v, want 4 succeeded", cs)
	}
}
