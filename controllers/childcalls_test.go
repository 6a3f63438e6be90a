package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/builtin"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// signalChild waits on a signal, then completes with its output.
const signalChild = `[agent]
name = "signaller"
[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.work.script]]
tool_calls = [{name = "wait_for_signal", arguments = '{"reason": "go"}'}]
[[stages.work.script]]
complete = true
output = "child done"
`

// waitingParent spawns the signaller, waits for it, sleeps (a restart is
// made there), waits for it again and completes.
const waitingParent = `[agent]
name = "parent"
[agent.title]
enabled = false
[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.work.transitions.other]
condition = "llm_choice"
[[stages.work.script]]
spawn = [{agent = "signaller", task = "wait for go"}]
[[stages.work.script]]
tool_calls = [{name = "wait_for_agent", arguments = '{"name": "r-c0"}'}]
[[stages.work.script]]
sleep_seconds = 3
[[stages.work.script]]
tool_calls = [{name = "wait_for_agent", arguments = '{"name": "c0"}'}]
[[stages.work.script]]
complete = true
output = "done"
[stages.other]
`

// TestWaitForAgentDeliversOnceAcrossRestarts: a run waiting for its
// sub-agent parks visibly (Children(1), naming it, needing nobody) and
// survives a manager restart; the sub-agent finishing under the new manager
// wakes it through the watch of owned runs, its result is delivered once,
// and after another restart a second wait says it was already delivered.
func TestWaitForAgentDeliversOnceAcrossRestarts(t *testing.T) {
	h1 := startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createConfigMap(t, ns, "signaller", map[string]string{"agent.toml": signalChild})
	createConfigMap(t, ns, "parent", map[string]string{"agent.toml": waitingParent})
	run := createRun(t, ns, "r", "parent")
	w := waitFor(t, ns, "r", 30*time.Second, "waiting for r-c0", waitingOn(arv1.WaitChildren)).Status.WaitingOn
	if w.NeedsAPerson || w.Outstanding == nil || *w.Outstanding != 1 || !strings.Contains(w.Summary, "wait_for_agent r-c0") {
		t.Errorf("waitingOn = %+v, want Children(1) naming r-c0 and needing nobody", w)
	}
	cw := waitFor(t, ns, "r-c0", 30*time.Second, "the child on its signal", waitingOn(arv1.WaitSignal)).Status.WaitingOn
	h1.stop()

	h2 := startManager(t, managerOpts{})
	a := &arv1.AgentRunAnswer{ObjectMeta: metav1.ObjectMeta{Name: "go", Namespace: ns},
		Spec: arv1.AgentRunAnswerSpec{Run: "r-c0", Point: cw.Point, By: "admin", Input: ptr.To(`{}`)}}
	if err := k8s.Create(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ns, "r", 30*time.Second, "sleeping after the delivery", waitingOn(arv1.WaitSleeping))
	h2.stop()

	startManager(t, managerOpts{})
	waitFor(t, ns, "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	var waits []journal.Entry
	for _, e := range entriesOf(t, ns, run, journal.ToolCallCompleted) {
		if e.Tool == builtin.WaitForAgent {
			waits = append(waits, e)
		}
	}
	if len(waits) != 2 {
		t.Fatalf("wait_for_agent completions = %+v, want 2", waits)
	}
	if first := waits[0]; first.IsError || first.Child != "r-c0" || !strings.Contains(first.Result, `"output":"child done"`) || !strings.Contains(first.Result, `"phase":"Complete"`) {
		t.Errorf("first wait = %+v, want the child's output delivered", first)
	}
	if second := waits[1]; !second.IsError || second.Child != "" || !strings.Contains(second.Result, "already delivered") || strings.Contains(second.Result, "child done") {
		t.Errorf("second wait = %+v, want 'already delivered' and no output", second)
	}
}

// longNapper sleeps for ten minutes.
const longNapper = `[agent]
name = "napper"
[stages.nap]
[stages.nap.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.nap.transitions.nap]
condition = "llm_choice"
[[stages.nap.script]]
sleep_seconds = 600
`

// spawningNapper spawns a napper and then sleeps itself.
const spawningNapper = `[agent]
name = "other"
[stages.nap]
[stages.nap.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.nap.transitions.nap]
condition = "llm_choice"
[[stages.nap.script]]
spawn = [{agent = "napper", task = "nap"}]
[[stages.nap.script]]
sleep_seconds = 600
`

// meddler tries every agent tool on runs that are not its children.
const meddler = `[agent]
name = "meddler"
[agent.title]
enabled = false
[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.work.transitions.other]
condition = "llm_choice"
[[stages.work.script]]
tool_calls = [
  {name = "kill_agent", arguments = '{"name": "stranger"}'},
  {name = "kill_agent", arguments = '{"name": "other-c0"}'},
  {name = "send_to_agent", arguments = '{"name": "other-c0", "message": "hi"}'},
  {name = "wait_for_agent", arguments = '{"name": "other-c0"}'},
  {name = "check_agent", arguments = '{"name": "stranger"}'},
]
[[stages.work.script]]
complete = true
output = "done"
[stages.other]
`

// TestAgentToolsActOnOwnChildrenOnly: a run naming a top-level run and
// another run's child in every agent tool is refused each time, and
// nothing happens to them: no cancel, no message, no wait.
func TestAgentToolsActOnOwnChildrenOnly(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createConfigMap(t, ns, "napper", map[string]string{"agent.toml": longNapper})
	createConfigMap(t, ns, "other", map[string]string{"agent.toml": spawningNapper})
	createConfigMap(t, ns, "meddler", map[string]string{"agent.toml": meddler})
	createRun(t, ns, "stranger", "napper")
	createRun(t, ns, "other", "other")
	waitFor(t, ns, "other", 30*time.Second, "the other run sleeping", waitingOn(arv1.WaitSleeping))
	waitFor(t, ns, "other-c0", 30*time.Second, "the other run's child sleeping", waitingOn(arv1.WaitSleeping))
	waitFor(t, ns, "stranger", 30*time.Second, "the stranger sleeping", waitingOn(arv1.WaitSleeping))

	run := createRun(t, ns, "r", "meddler")
	waitFor(t, ns, "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	done := entriesOf(t, ns, run, journal.ToolCallCompleted)
	if len(done) != 5 {
		t.Fatalf("completions = %+v, want 5", done)
	}
	for _, e := range done {
		if !e.IsError || !strings.Contains(e.Result, "is not a sub-agent of this run") || e.Child != "" {
			t.Errorf("%s = %+v, want a refusal", e.Tool, e)
		}
	}
	for _, name := range []string{"stranger", "other-c0"} {
		var got arv1.AgentRun
		if err := k8s.Get(context.Background(), keyOf(ns, name), &got); err != nil {
			t.Fatal(err)
		}
		if got.Spec.Cancel || got.Status.Phase.IsTerminal() {
			t.Errorf("%s: cancel %v phase %s, want untouched", name, got.Spec.Cancel, got.Status.Phase)
		}
		for k := range got.Annotations {
			if strings.HasPrefix(k, "message.agentrun.dev/") {
				t.Errorf("%s got a message: %s", name, k)
			}
		}
	}
}
