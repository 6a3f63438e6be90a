package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/builtin"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/providers/providertest"
)

// quickChild completes at once.
const quickChild = `[agent]
name = "quick"
[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.work.script]]
complete = true
output = "quick done"
`

// boss is a parent driven by a real model over HTTP, staying in its stage
// until it completes.
func boss(provider, model string) string {
	return fmt.Sprintf(`[agent]
name = "boss"
[agent.title]
enabled = false
[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = %q, model = %q}]
[stages.work.transitions.other]
condition = "llm_choice"
[stages.other]
`, provider, model)
}

// wirePiece is one text a request carries, with the role of the message
// that carries it ("tool" for OpenAI tool results).
type wirePiece struct{ role, text string }

// wirePieces are the texts of a request's messages, on either wire.
func wirePieces(req providertest.Request) []wirePiece {
	var out []wirePiece
	for _, m := range req.Messages() {
		role, _ := m["role"].(string)
		switch c := m["content"].(type) {
		case string:
			out = append(out, wirePiece{role, c})
		case []any:
			for _, b := range c {
				blk, _ := b.(map[string]any)
				if s, ok := blk["text"].(string); ok {
					out = append(out, wirePiece{role, s})
				}
				if s, ok := blk["content"].(string); ok {
					out = append(out, wirePiece{"tool", s})
				}
			}
		}
	}
	return out
}

// drained counts the drain's messages about child in a request, and says
// whether each was a user message.
func drained(req providertest.Request, child string) (n int, user bool, text string) {
	mark := fmt.Sprintf("[agentrun: sub-agent %q finished.", child)
	user = true
	for _, p := range wirePieces(req) {
		if c := strings.Count(p.text, mark); c > 0 {
			n += c
			user = user && p.role == "user"
			text = p.text
		}
	}
	return n, user, text
}

// TestDrainDeliversFinishedSubAgentsOnce: a parent driven over the OpenAI
// and the Anthropic wire spawns two sub-agents, kills one and waits on a
// signal. Its next model call, made after both finished, carries their
// results as a user message, machine-marked, naming each sub-agent, with
// success true and the output, or success false and why. A manager
// restart while that call is in flight makes the call again with each
// result once (the journal, not the children, says what was delivered);
// wait_for_agent on a drained sub-agent is told it was already delivered;
// and each result is journaled once.
func TestDrainDeliversFinishedSubAgentsOnce(t *testing.T) {
	for _, wire := range []string{"openai", "anthropic"} {
		t.Run(wire, func(t *testing.T) { drainAcrossRestart(t, wire) })
	}
}

func drainAcrossRestart(t *testing.T, wire string) {
	h1 := startManager(t, managerOpts{})
	ns := newNamespace(t)
	srv, entry, bp := providertest.NewOpenAIServer(t), "", ""
	if wire == "anthropic" {
		srv = providertest.NewAnthropicServer(t)
		entry = fmt.Sprintf("[providers.an]\ntype = \"anthropic\"\nbase_url = %q\nmodels = [\"claude-x\"]\napi_key_secret = {name = \"an-key\", key = \"api-key\"}\n", srv.URL)
		bp = boss("an", "claude-x")
		createSecret(t, ns, "an-key", map[string]string{"api-key": "sk-ant-test"})
	} else {
		entry, bp = openAIEntry("oa", srv.URL, false), boss("oa", "gpt-x")
		createSecret(t, ns, "oa-key", map[string]string{"api-key": "sk-openai-test"})
	}
	call := func(name, args string) providertest.ToolCall { return providertest.ToolCall{Name: name, Args: args} }
	srv.Push(
		providertest.Reply{ToolCall: ptr.To(call("spawn_agent", `{"blueprint":"quick","task":"q"}`)), ToolCalls: []providertest.ToolCall{call("spawn_agent", `{"blueprint":"signaller","task":"s"}`)}},
		providertest.Reply{ToolCall: ptr.To(call("kill_agent", `{"name":"c1"}`)), ToolCalls: []providertest.ToolCall{call("wait_for_signal", `{"reason":"go"}`)}},
		providertest.Reply{Text: "held", Delay: 10 * time.Minute}, // the restart is made here
		providertest.Reply{ToolCall: ptr.To(call("wait_for_agent", `{"name":"c0"}`))},
		providertest.Reply{ToolCall: ptr.To(call("complete", `{"output":"all done"}`))},
	)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": providerConfig(scriptedProviders, entry)})
	createConfigMap(t, ns, "quick", map[string]string{"agent.toml": quickChild})
	createConfigMap(t, ns, "signaller", map[string]string{"agent.toml": signalChild})
	createConfigMap(t, ns, "boss", map[string]string{"agent.toml": bp})
	run := createRun(t, ns, "r", "boss")

	w := waitFor(t, ns, "r", 30*time.Second, "on its signal", waitingOn(arv1.WaitSignal)).Status.WaitingOn
	waitFor(t, ns, "r-c0", 30*time.Second, "r-c0 Complete", phaseIs(arv1.PhaseComplete))
	waitFor(t, ns, "r-c1", 30*time.Second, "r-c1 Cancelled", phaseIs(arv1.PhaseCancelled))
	waitFor(t, ns, "r", 30*time.Second, "both children seen final", func(r *arv1.AgentRun) bool {
		c := r.Status.Children
		return c != nil && c.Succeeded == 1 && c.Failed == 1
	})
	if n := srv.Requests(); n != 2 {
		t.Fatalf("the model was called %d times before the signal, want 2", n)
	}
	for _, child := range []string{"r-c0", "r-c1"} {
		if n, _, _ := drained(srv.All()[1], child); n != 0 {
			t.Errorf("call 2, made before %s finished, shows its result", child)
		}
	}
	a := &arv1.AgentRunAnswer{ObjectMeta: metav1.ObjectMeta{Name: "go", Namespace: ns},
		Spec: arv1.AgentRunAnswerSpec{Run: "r", Point: w.Point, By: "admin", Input: ptr.To(`{}`)}}
	if err := k8s.Create(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "call 3", func() (bool, string) { return srv.Requests() >= 3, fmt.Sprint(srv.Requests()) })
	h1.stop()

	startManager(t, managerOpts{})
	waitFor(t, ns, "r", 60*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	reqs := srv.All()
	if len(reqs) != 5 {
		t.Fatalf("the model was called %d times, want 5 (call 3 made again after the restart)", len(reqs))
	}
	for i, req := range reqs[2:] {
		for _, child := range []string{"r-c0", "r-c1"} {
			if n, user, _ := drained(req, child); n != 1 || !user {
				t.Errorf("call %d shows %s's result %d times (in a user message: %v), want once, as a user message", i+3, child, n, user)
			}
		}
	}
	_, _, ok := drained(reqs[3], "r-c0")
	if !strings.Contains(ok, `"success":true`) || !strings.Contains(ok, `"output":"quick done"`) {
		t.Errorf("r-c0's result %q, want success true and its output", ok)
	}
	_, _, killed := drained(reqs[3], "r-c1")
	if !strings.Contains(killed, `"success":false`) || !strings.Contains(killed, "cancelled") {
		t.Errorf("r-c1's result %q, want success false and why", killed)
	}

	delivered := entriesOf(t, ns, run, journal.SubagentResultDelivered)
	if len(delivered) != 2 || delivered[0].Child != "r-c0" || delivered[1].Child != "r-c1" {
		t.Errorf("journaled deliveries %+v, want r-c0's and r-c1's once each", delivered)
	}
	waits := agentToolResults(t, ns, run, builtin.WaitForAgent)
	if len(waits) != 1 || !waits[0].IsError || !strings.Contains(waits[0].Result, "already delivered") || waits[0].Child != "" {
		t.Errorf("wait_for_agent on the drained r-c0 = %+v, want 'already delivered'", waits)
	}
}

// gatherer spawns a sub-agent in a stage that waits for its children,
// then moves to a stage that completes.
const gatherer = `[agent]
name = "gatherer"
[agent.title]
enabled = false
[stages.spawn]
requires_children = true
[stages.spawn.model]
models = [{provider = "oa", model = "gpt-x"}]
[stages.spawn.transitions.report]
condition = "llm_choice"
[stages.report]
allow_complete = true
[stages.report.model]
models = [{provider = "oa", model = "gpt-x"}]
[stages.report.transitions.spawn]
condition = "llm_choice"
`

// TestDrainBeforeAStagesFirstAnswer: the results of sub-agents a
// requires_children stage waited for reach the next stage's first call,
// with the task, once; its later calls still show them once.
func TestDrainBeforeAStagesFirstAnswer(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	srv := providertest.NewOpenAIServer(t)
	srv.Push(
		providertest.Reply{ToolCall: &providertest.ToolCall{Name: "spawn_agent", Args: `{"blueprint":"quick","task":"q"}`},
			ToolCalls: []providertest.ToolCall{{Name: "transition", Args: `{"target":"report"}`}}},
		providertest.Reply{Text: "reading"},
		providertest.Reply{ToolCall: &providertest.ToolCall{Name: "complete", Args: `{"output":"reported"}`}},
	)
	createSecret(t, ns, "oa-key", map[string]string{"api-key": "sk-openai-test"})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": providerConfig(scriptedProviders, openAIEntry("oa", srv.URL, false))})
	createConfigMap(t, ns, "quick", map[string]string{"agent.toml": quickChild})
	createConfigMap(t, ns, "gatherer", map[string]string{"agent.toml": gatherer})
	run := createRun(t, ns, "r", "gatherer")
	waitFor(t, ns, "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))

	reqs := srv.All()
	if len(reqs) != 3 {
		t.Fatalf("the model was called %d times, want 3", len(reqs))
	}
	if n, _, _ := drained(reqs[0], "r-c0"); n != 0 {
		t.Errorf("the first call shows a result before any sub-agent ran")
	}
	first := reqs[1].Messages()
	if n, user, _ := drained(reqs[1], "r-c0"); n != 1 || !user || !strings.Contains(fmt.Sprint(first[0]["content"]), "quick done") {
		t.Errorf("the report stage's first call shows r-c0's result %d times (user %v), want once with the task: %v", n, user, first)
	}
	if n, user, _ := drained(reqs[2], "r-c0"); n != 1 || !user {
		t.Errorf("the report stage's second call shows r-c0's result %d times (user %v), want once", n, user)
	}
	if got := entriesOf(t, ns, run, journal.SubagentResultDelivered); len(got) != 1 {
		t.Errorf("journaled deliveries %+v, want one", got)
	}
}
