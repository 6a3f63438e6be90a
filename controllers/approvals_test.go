package controllers_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool/mcptest"
	"github.com/agentrun-dev/agentrun-operator/internal/plugin"
	"github.com/agentrun-dev/agentrun-operator/internal/providers/providertest"
)

// TestApproveWithEditedArgsAndReasons: a person approves a write with
// edited arguments and a reason, and denies the next one with a reason.
// Arguments failing the tool's input schema are refused and the call stays
// pending; the MCP server receives exactly the edited arguments, once; the
// model is told the call ran with them; an approval sent for the first
// call after the run moved on to the second is refused, never applied to
// it; the denial's reason reaches the model; journal and transcript keep
// who edited what and both reasons.
func TestApproveWithEditedArgsAndReasons(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	oa := providertest.NewOpenAIServer(t)
	oa.Push(
		providertest.Reply{ToolCall: &providertest.ToolCall{ID: "c1", Name: "create_ticket", Args: `{"title":"drop the prod database"}`}, PromptTokens: 10, CompletionTokens: 2},
		providertest.Reply{ToolCall: &providertest.ToolCall{ID: "c2", Name: "create_ticket", Args: `{"title":"a second ticket"}`}, PromptTokens: 10, CompletionTokens: 2},
		providertest.Reply{ToolCall: &providertest.ToolCall{Name: "complete", Args: `{"output":"filed"}`}, PromptTokens: 10, CompletionTokens: 2},
	)
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	askTicketsAgent(t, ns, oa, srv)
	run := createRun(t, ns, "r", "tickets")
	w1 := waitFor(t, ns, "r", 30*time.Second, "ToolApproval", waitingOn(arv1.WaitToolApproval)).Status.WaitingOn
	alice := grantAnswering(t, ns, "alice")
	args := func(s string) func(*arv1.AgentRunAnswerSpec) {
		return func(a *arv1.AgentRunAnswerSpec) {
			a.Decision, a.Args = arv1.DecisionApprove, &runtime.RawExtension{Raw: []byte(s)}
		}
	}

	answer(t, alice, ns, "bad", "alice", w1, args(`{"title":42}`))
	if st := answerState(t, ns, "bad"); st.State != arv1.AnswerRejected || !strings.Contains(st.Message, "Args does not match the schema") {
		t.Errorf("args failing the schema: %+v, want Rejected saying they do not match the tool's schema", st)
	}
	if r := getRun(t, ns, "r"); r.Status.WaitingOn == nil || r.Status.WaitingOn.Point != w1.Point || srv.Calls("create_ticket") != 0 {
		t.Fatalf("after refused args: waitingOn %+v, create_ticket calls %d; want the call still pending, unmade", r.Status.WaitingOn, srv.Calls("create_ticket"))
	}

	answer(t, alice, ns, "edit", "alice", w1, func(a *arv1.AgentRunAnswerSpec) {
		args(`{"title": "ask the DBA first"}`)(a)
		a.Reason = "never drop prod"
	})
	if st := answerState(t, ns, "edit"); st.State != arv1.AnswerApplied {
		t.Fatalf("the edited approval: %+v, want Applied", st)
	}
	secondCall := func(r *arv1.AgentRun) bool {
		return waitingOn(arv1.WaitToolApproval)(r) && r.Status.WaitingOn.Point != w1.Point
	}
	w2 := waitFor(t, ns, "r", 30*time.Second, "ToolApproval of the second call", secondCall).Status.WaitingOn

	answer(t, alice, ns, "stale", "alice", w1, args(`{"title":"hijack"}`))
	want := fmt.Sprintf("The run waits on point %q, not on point %q", w2.Point, w1.Point)
	if st := answerState(t, ns, "stale"); st.State != arv1.AnswerRejected || st.Message != want {
		t.Errorf("an approval of the first call after the run moved on: %+v, want Rejected: %s", st, want)
	}
	answer(t, alice, ns, "no", "alice", w2, func(a *arv1.AgentRunAnswerSpec) {
		a.Decision, a.Reason = arv1.DecisionDeny, "one ticket is enough"
	})
	waitFor(t, ns, "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))

	var made []mcptest.Call
	for _, c := range srv.Log() {
		if c.Tool == "create_ticket" {
			made = append(made, c)
		}
	}
	if len(made) != 1 || !sameJSON(made[0].Args, `{"title":"ask the DBA first"}`) || !made[0].Executed {
		t.Errorf("create_ticket calls on the MCP server = %+v, want exactly one, with the edited arguments", made)
	}
	checkModelTold(t, oa.All())
	checkApprovalJournal(t, ns, run)
}

// checkModelTold: the model's second request shows the first call with the
// edited arguments and its result; the third tells it the person's reason
// for the denial.
func checkModelTold(t *testing.T, reqs []providertest.Request) {
	t.Helper()
	if len(reqs) != 3 {
		t.Fatalf("model requests = %d, want 3", len(reqs))
	}
	var calledWith, result string
	for _, m := range reqs[1].Messages() {
		if calls, ok := m["tool_calls"].([]any); ok && len(calls) == 1 {
			fn, _ := calls[0].(map[string]any)["function"].(map[string]any)
			calledWith, _ = fn["arguments"].(string)
		}
		if m["role"] == "tool" && m["tool_call_id"] == "c1" {
			result, _ = m["content"].(string)
		}
	}
	if !sameJSON(calledWith, `{"title":"ask the DBA first"}`) || result != "ticket 1 created: ask the DBA first" {
		t.Errorf("the model was told it called create_ticket with %s and got %q; want the edited call and its result", calledWith, result)
	}
	var denial string
	for _, m := range reqs[2].Messages() {
		if m["role"] == "tool" && m["tool_call_id"] == "c2" {
			denial, _ = m["content"].(string)
		}
	}
	if !strings.Contains(denial, "denied by alice") || !strings.Contains(denial, "one ticket is enough") {
		t.Errorf("the model was told %q about the denied call, want alice's reason", denial)
	}
}

// checkApprovalJournal: the journal records the edit (by whom, to what) and
// both reasons, the intent carries the edited arguments, and the transcript
// shows them.
func checkApprovalJournal(t *testing.T, ns string, run *arv1.AgentRun) {
	t.Helper()
	d := entriesOf(t, ns, run, journal.ToolCallDecided)
	if len(d) != 2 || !d[0].Approved || d[0].By != "alice" || d[0].Message != "edit" || d[0].Input != `{"title":"ask the DBA first"}` || d[0].Result != "never drop prod" ||
		d[1].Approved || d[1].By != "alice" || d[1].Message != "no" || d[1].Input != "" || d[1].Result != "one ticket is enough" {
		t.Errorf("decisions = %+v, want alice's edited approval with her reason, then her denial with hers", d)
	}
	if in := entriesOf(t, ns, run, journal.ToolCallRequested); len(in) != 1 || in[0].Input != `{"title":"ask the DBA first"}` {
		t.Errorf("intents = %+v, want one, with the edited arguments", in)
	}
	var buf bytes.Buffer
	if err := plugin.RenderTranscript(&buf, journalEntries(t, ns, string(run.UID)), nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`create_ticket approval approved by alice, arguments edited by alice to {"title":"ask the DBA first"}, reason "never drop prod"`,
		`create_ticket approval denied by alice, reason "one ticket is enough"`,
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("transcript lacks %q:\n%s", want, buf.String())
		}
	}
}

// sameJSON: a and b are the same JSON value, whatever the spacing.
func sameJSON(a, b string) bool {
	var x, y any
	return json.Unmarshal([]byte(a), &x) == nil && json.Unmarshal([]byte(b), &y) == nil && reflect.DeepEqual(x, y)
}

// TestEditedCallAPolicyDeniesIsDenied: the model's call passes the tool
// policies, a person approves it with edited arguments that a cluster
// policy denies, and the policies, evaluated again on the edit, deny it:
// the MCP server receives nothing, the model is told the policy's message,
// and the journal keeps the edit and the decision on it.
func TestEditedCallAPolicyDeniesIsDenied(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	oa := providertest.NewOpenAIServer(t)
	oa.Push(
		providertest.Reply{ToolCall: &providertest.ToolCall{ID: "c1", Name: "create_ticket", Args: `{"title":"printer jam"}`}, PromptTokens: 10, CompletionTokens: 2},
		providertest.Reply{ToolCall: &providertest.ToolCall{Name: "complete", Args: `{"output":"done"}`}, PromptTokens: 10, CompletionTokens: 2},
	)
	ns := newNamespace(t)
	const msg = "p0 tickets are opened by the on-call, not by agents"
	createPolicy(t, "", "edits-"+ns, arv1.ToolPolicyRule{Name: "no-p0", Action: arv1.ToolPolicyDeny, Message: msg,
		Match: fmt.Sprintf(`tool.name == "create_ticket" && args.?priority.orValue("") == "p0" && run.namespace == %q`, ns)})
	startManager(t, managerOpts{})
	askTicketsAgent(t, ns, oa, srv)
	run := createRun(t, ns, "r", "tickets")
	w := waitFor(t, ns, "r", 30*time.Second, "ToolApproval", waitingOn(arv1.WaitToolApproval)).Status.WaitingOn
	if strings.HasSuffix(w.Point, "-policy") {
		t.Fatalf("the model's own call is held by the policy (%s); it should only deny the edit", w.Point)
	}
	alice := grantAnswering(t, ns, "alice")
	answer(t, alice, ns, "edit", "alice", w, func(a *arv1.AgentRunAnswerSpec) {
		a.Decision, a.Args = arv1.DecisionApprove, &runtime.RawExtension{Raw: []byte(`{"title":"printer jam","priority":"p0"}`)}
	})
	waitFor(t, ns, "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	if n := srv.Calls("create_ticket"); n != 0 {
		t.Fatalf("the MCP server received create_ticket %d times; the policy denies the edited call", n)
	}
	reqs := oa.All()
	if len(reqs) != 2 {
		t.Fatalf("model requests = %d, want 2", len(reqs))
	}
	if told := toolMessage(reqs[1], "c1"); !strings.Contains(told, msg) || !strings.Contains(told, "rule no-p0") {
		t.Errorf("the model was told %q, want the policy's message", told)
	}
	d := entriesOf(t, ns, run, journal.ToolPolicyDecided)
	if len(d) != 1 || d[0].Policy.Action != journal.PolicyDeny || !sameJSON(d[0].Input, `{"title":"printer jam","priority":"p0"}`) {
		t.Errorf("policy decisions = %+v, want one Deny, on the edited arguments", d)
	}
	if in := entriesOf(t, ns, run, journal.ToolCallRequested); len(in) != 0 {
		t.Errorf("a denied call has intents %+v", in)
	}
}

// askTicketsAgent writes, in ns, the providers (oa, a loopback OpenAI
// server), its key and the blueprint "tickets": its stage's tools are on
// the MCP server srv, and write tools wait for approval (the default).
func askTicketsAgent(t *testing.T, ns string, oa *providertest.Server, srv *mcptest.Server) {
	t.Helper()
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": providerConfig(openAIEntry("oa", oa.URL, false))})
	createSecret(t, ns, "oa-key", map[string]string{"api-key": "sk-openai-test"})
	createConfigMap(t, ns, "tickets", map[string]string{"agent.toml": fmt.Sprintf(`[agent]
name = "tickets"
[agent.title]
enabled = false
[mcp_servers.tracker]
url = %q
[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "oa", model = "gpt-x"}]
`, srv.URL())})
}
