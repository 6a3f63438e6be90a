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

// listener completes at once with the messages its only call shows.
const listener = `[agent]
name = "listener"
[stages.work]
accepts_messages = true
allow_complete = true
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.work.script]]
complete = true
output = "heard: {messages}"
`

// earlySender spawns a listener, sends it a message at once, waits for it
// and completes.
const earlySender = `[agent]
name = "sender"
[agent.title]
enabled = false
[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.work.transitions.other]
condition = "llm_choice"
[[stages.work.script]]
spawn = [{agent = "listener", task = "listen"}]
[[stages.work.script]]
tool_calls = [{name = "send_to_agent", arguments = '{"name": "c0", "message": "use blue"}'}]
[[stages.work.script]]
tool_calls = [{name = "wait_for_agent", arguments = '{"name": "c0"}'}]
[[stages.work.script]]
complete = true
output = "done"
[stages.other]
`

// agentToolResults are the run's completions of tool, in journal order.
func agentToolResults(t *testing.T, ns string, run *arv1.AgentRun, tool string) []journal.Entry {
	t.Helper()
	var out []journal.Entry
	for _, e := range entriesOf(t, ns, run, journal.ToolCallCompleted) {
		if e.Tool == tool {
			out = append(out, e)
		}
	}
	return out
}

// TestSendToAgentBeforeItStarts: a message sent to a sub-agent that has
// not started (its blueprint is not there yet, so it cannot be ahead of
// the parent whatever the machine's load) is queued, not refused: the
// parent's model is told it waits; it survives a manager restart on the
// child; the child, once it starts, shows it in its first call exactly
// once, and the parent's wait delivers what the child made of it.
func TestSendToAgentBeforeItStarts(t *testing.T) {
	h1 := startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createConfigMap(t, ns, "sender", map[string]string{"agent.toml": earlySender})
	run := createRun(t, ns, "r", "sender")
	waitFor(t, ns, "r", 30*time.Second, "waiting for r-c0", waitingOn(arv1.WaitChildren))
	waitFor(t, ns, "r-c0", 30*time.Second, "the child waiting for its blueprint", blockedOn(arv1.BlockerBlueprintMissing))

	sends := agentToolResults(t, ns, run, builtin.SendToAgent)
	if len(sends) != 1 || sends[0].IsError || !strings.Contains(sends[0].Result, `"queued":true`) || !strings.Contains(sends[0].Result, "has not started yet") {
		t.Fatalf("send_to_agent = %+v, want one result saying the message is queued until the child starts", sends)
	}
	h1.stop()

	startManager(t, managerOpts{})
	createConfigMap(t, ns, "listener", map[string]string{"agent.toml": listener})
	waitFor(t, ns, "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	waits := agentToolResults(t, ns, run, builtin.WaitForAgent)
	if len(waits) != 1 || !strings.Contains(waits[0].Result, `"output":"heard: use blue"`) || !strings.Contains(waits[0].Result, `"success":true`) {
		t.Errorf("wait_for_agent = %+v, want the child's output showing the message", waits)
	}
	if strings.Contains(waits[0].Result, "messagesNotTakenIn") {
		t.Errorf("wait_for_agent = %s lists a message as not taken in", waits[0].Result)
	}
	child := getRun(t, ns, "r-c0")
	if got := entriesOf(t, ns, child, journal.MessageReceived); len(got) != 1 || got[0].Text != "use blue" {
		t.Errorf("the child took in %+v, want the message once", got)
	}
}

// twoStep waits for a signal in a stage that takes no messages, then
// moves to one that does and completes with the messages it shows.
const twoStep = `[agent]
name = "two-step"
[stages.plan]
[stages.plan.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.plan.transitions.work]
condition = "llm_choice"
[[stages.plan.script]]
tool_calls = [{name = "wait_for_signal", arguments = '{"reason": "go"}'}]
[[stages.plan.script]]
next = "work"
[stages.work]
accepts_messages = true
allow_complete = true
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.work.script]]
complete = true
output = "heard: {messages}"
`

// skipper waits for a signal in a stage that takes no messages, then
// completes there, never reaching its stage that does.
const skipper = `[agent]
name = "skipper"
[stages.plan]
allow_complete = true
[stages.plan.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.plan.transitions.work]
condition = "llm_choice"
[[stages.plan.script]]
tool_calls = [{name = "wait_for_signal", arguments = '{"reason": "go"}'}]
[[stages.plan.script]]
complete = true
output = "skipped"
[stages.work]
accepts_messages = true
`

// threeSender spawns a two-step, a skipper and a child whose blueprint
// takes no messages, sends each a message, and waits for the first two.
const threeSender = `[agent]
name = "sender"
[agent.title]
enabled = false
[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.work.transitions.other]
condition = "llm_choice"
[[stages.work.script]]
spawn = [{agent = "two-step", task = "a"}, {agent = "skipper", task = "b"}, {agent = "signaller", task = "c"}]
[[stages.work.script]]
tool_calls = [
  {name = "send_to_agent", arguments = '{"name": "c0", "message": "for c0"}'},
  {name = "send_to_agent", arguments = '{"name": "c1", "message": "for c1"}'},
  {name = "send_to_agent", arguments = '{"name": "c2", "message": "for c2"}'},
]
[[stages.work.script]]
tool_calls = [{name = "wait_for_agent", arguments = '{"name": "c0"}'}, {name = "wait_for_agent", arguments = '{"name": "c1"}'}]
[[stages.work.script]]
complete = true
output = "done"
[stages.other]
`

// TestSendToAgentWaitsForAStageThatTakesIt: whether a child has started,
// or is in a stage that takes no messages, a message waits for a stage
// that takes it (shown there once); a child that ends before reaching one
// has the message listed as not taken in when its result is delivered;
// only a child whose blueprint has no such stage at all is refused.
func TestSendToAgentWaitsForAStageThatTakesIt(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createConfigMap(t, ns, "two-step", map[string]string{"agent.toml": twoStep})
	createConfigMap(t, ns, "skipper", map[string]string{"agent.toml": skipper})
	createConfigMap(t, ns, "signaller", map[string]string{"agent.toml": signalChild})
	createConfigMap(t, ns, "sender", map[string]string{"agent.toml": threeSender})
	run := createRun(t, ns, "r", "sender")
	waitFor(t, ns, "r", 30*time.Second, "waiting for r-c0", waitingOn(arv1.WaitChildren))

	sends := agentToolResults(t, ns, run, builtin.SendToAgent)
	if len(sends) != 3 {
		t.Fatalf("send_to_agent results = %+v, want 3", sends)
	}
	for _, s := range sends[:2] {
		if s.IsError || !strings.Contains(s.Result, `"queued":true`) {
			t.Errorf("send_to_agent = %+v, want the message queued", s)
		}
	}
	if c2 := sends[2]; !c2.IsError || !strings.Contains(c2.Result, "no stage that accepts messages") {
		t.Errorf("send_to_agent to a child taking no messages = %+v, want a refusal saying why", c2)
	}
	for _, name := range []string{"r-c0", "r-c1"} {
		w := waitFor(t, ns, name, 30*time.Second, "on its signal", waitingOn(arv1.WaitSignal)).Status.WaitingOn
		a := &arv1.AgentRunAnswer{ObjectMeta: metav1.ObjectMeta{Name: name + "-go", Namespace: ns},
			Spec: arv1.AgentRunAnswerSpec{Run: name, Point: w.Point, By: "admin", Input: ptr.To(`{}`)}}
		if err := k8s.Create(context.Background(), a); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ns, "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	waits := agentToolResults(t, ns, run, builtin.WaitForAgent)
	if len(waits) != 2 {
		t.Fatalf("wait_for_agent results = %+v, want 2", waits)
	}
	if c0 := waits[0].Result; !strings.Contains(c0, `"output":"heard: for c0"`) || strings.Contains(c0, "messagesNotTakenIn") {
		t.Errorf("r-c0's result = %s, want the message shown in its stage that takes messages", c0)
	}
	if c1 := waits[1].Result; !strings.Contains(c1, `"output":"skipped"`) || !strings.Contains(c1, `"messagesNotTakenIn":["for c1"]`) {
		t.Errorf("r-c1's result = %s, want the message it never took in listed", c1)
	}
	for name, want := range map[string]int{"r-c0": 1, "r-c1": 0, "r-c2": 0} {
		if got := entriesOf(t, ns, getRun(t, ns, name), journal.MessageReceived); len(got) != want {
			t.Errorf("%s took in %+v, want %d message(s)", name, got, want)
		}
	}
}
