package controllers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/a2aserver"
	"github.com/agentrun-dev/agentrun-operator/internal/egress"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
)

// a2aAgent asks a question (ask_user), then completes with its output.
const a2aAgent = `[agent]
name = "deployer"
description = "Deploys, after asking where."
[agent.title]
enabled = false
[agent.a2a]
expose = true
[[agent.a2a.skills]]
id = "deploy"
name = "Deploy"
description = "Deploys the service to the environment it is told."
tags = ["ops"]

[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.work.script]]
text = "asking"
tool_calls = [{name = "ask_user", arguments = '{"question":"Which environment?"}'}]
[[stages.work.script]]
complete = true
output = "deployed to staging"
`

// a2aCallerRules are what an A2A caller needs: runs to start, read, follow
// and cancel, answers to give and follow, and the blueprint to read.
var a2aCallerRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"agentrun.dev"}, Resources: []string{"agentruns"}, Verbs: []string{"create", "get", "list", "watch", "patch"}},
	{APIGroups: []string{"agentrun.dev"}, Resources: []string{"agentrunanswers"}, Verbs: []string{"create", "get", "list", "watch"}},
	{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}},
}

// saToken makes a ServiceAccount in ns bound to a Role of rules (none when
// nil) and returns a token the TokenRequest API issued for it: a real
// bearer token the API server authenticates.
func saToken(t *testing.T, ns, name string, rules []rbacv1.PolicyRule) string {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	objs := []client.Object{sa}
	if rules != nil {
		objs = append(objs, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}})
	}
	for _, o := range objs {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	tr := &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}
	if err := k8s.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// startA2A serves the A2A endpoint for ns on loopback, with no
// credentials of its own.
func startA2A(t *testing.T, ns string) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	s, err := a2aserver.New(a2aserver.Config{Namespace: ns, APIServer: env.Config, Scheme: manager.Scheme(), PublicURL: "http://" + srv.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = s.Handler()
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// a2aClient resolves the agent card with token and returns the SDK's
// client for it, authenticating with the card's own security scheme.
func a2aClient(t *testing.T, base, agent, token string) (context.Context, *a2aclient.Client, *a2a.AgentCard) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	card, err := agentcard.NewResolver(nil).Resolve(ctx, base+"/agents/"+agent, agentcard.WithRequestHeader("Authorization", "Bearer "+token))
	if err != nil {
		t.Fatalf("resolving the agent card: %v", err)
	}
	creds := a2aclient.NewInMemoryCredentialsStore()
	var scheme a2a.SecuritySchemeName
	for name := range card.SecuritySchemes {
		scheme = name
	}
	creds.Set("s", scheme, a2aclient.AuthCredential(token))
	c, err := a2aclient.NewFromCard(ctx, card, a2aclient.WithInterceptors(&a2aclient.AuthInterceptor{Service: creds}))
	if err != nil {
		t.Fatal(err)
	}
	return a2aclient.WithSessionID(ctx, "s"), c, card
}

func textMessage(text string) *a2a.MessageSendParams {
	return &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: text})}
}

// collect drains a stream into the states it went through, the artifacts
// it carried and the last event's task id.
func collect(t *testing.T, events func(func(a2a.Event, error) bool)) (states []a2a.TaskState, artifacts []string, id a2a.TaskID, question string) {
	t.Helper()
	for ev, err := range events {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		switch e := ev.(type) {
		case *a2a.Task:
			states, id = append(states, e.Status.State), e.ID
			if m := e.Status.Message; m != nil {
				question = m.Parts[0].(a2a.TextPart).Text
			}
		case *a2a.TaskStatusUpdateEvent:
			states, id = append(states, e.Status.State), e.TaskID
			if m := e.Status.Message; m != nil {
				question = m.Parts[0].(a2a.TextPart).Text
			}
		case *a2a.TaskArtifactUpdateEvent:
			artifacts = append(artifacts, e.Artifact.Parts[0].(a2a.TextPart).Text)
		}
	}
	return states, artifacts, id, question
}

// TestA2AStreamsARunThroughAQuestionToItsOutput: the SDK's client reads
// the agent card, starts a run with message/stream (as the caller: the run
// exists in the namespace), follows it to input-required with the run's
// question, answers it over A2A (an AgentRunAnswer by the caller), and
// streams on to completed with the output as an artifact; tasks/get agrees.
func TestA2AStreamsARunThroughAQuestionToItsOutput(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "deployer", map[string]string{"agent.toml": a2aAgent})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	base := startA2A(t, ns)
	token := saToken(t, ns, "caller", a2aCallerRules)
	ctx, c, card := a2aClient(t, base, "deployer", token)
	if card.Name != "deployer" || len(card.Skills) != 1 || card.Skills[0].ID != "deploy" || !card.Capabilities.Streaming {
		t.Errorf("card = %+v", card)
	}

	states, _, id, question := collect(t, c.SendStreamingMessage(ctx, textMessage("deploy the web service")))
	if len(states) == 0 || states[0] != a2a.TaskStateSubmitted || states[len(states)-1] != a2a.TaskStateInputRequired || !strings.Contains(question, "Which environment?") {
		t.Fatalf("first stream: states %v, question %q; want submitted ... input-required with the question", states, question)
	}
	name := strings.TrimPrefix(string(id), ns+"/")
	run := getRun(t, ns, name)
	if run.Spec.Task != "deploy the web service" || run.Spec.Agent != "deployer" {
		t.Errorf("run spec = %+v", run.Spec)
	}

	answer := a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "staging"})
	answer.TaskID = id
	states, artifacts, _, _ := collect(t, c.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: answer}))
	if len(states) == 0 || states[len(states)-1] != a2a.TaskStateCompleted || len(artifacts) != 1 || artifacts[0] != "deployed to staging" {
		t.Fatalf("second stream: states %v, artifacts %q; want ... completed with the output", states, artifacts)
	}
	var answers arv1.AgentRunAnswerList
	if err := k8s.List(context.Background(), &answers, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(answers.Items) != 1 || answers.Items[0].Spec.By != "system:serviceaccount:"+ns+":caller" || *answers.Items[0].Spec.Text != "staging" {
		t.Errorf("answers = %+v, want one by the caller with its text", answers.Items)
	}
	task, err := c.GetTask(ctx, &a2a.TaskQueryParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if task.Status.State != a2a.TaskStateCompleted || len(task.Artifacts) != 1 || task.Artifacts[0].Parts[0].(a2a.TextPart).Text != "deployed to staging" {
		t.Errorf("tasks/get = %+v", task)
	}
	// Resubscribing to an ended task gives the task and ends.
	states, _, _, _ = collect(t, c.ResubscribeToTask(ctx, &a2a.TaskIDParams{ID: id}))
	if len(states) != 1 || states[0] != a2a.TaskStateCompleted {
		t.Errorf("resubscribe states = %v", states)
	}
}

// TestA2ACancelAndRefusals: a blocking message/send returns the task at
// input-required; tasks/cancel sets spec.cancel and the task ends
// canceled; a caller without "create agentruns" is refused by the API
// server, and a request with no token by the endpoint.
func TestA2ACancelAndRefusals(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "deployer", map[string]string{"agent.toml": a2aAgent})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	base := startA2A(t, ns)
	ctx, c, _ := a2aClient(t, base, "deployer", saToken(t, ns, "caller", a2aCallerRules))

	res, err := c.SendMessage(ctx, textMessage("deploy"))
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2a.Task)
	if !ok || task.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("message/send = %#v, want the task at input-required", res)
	}
	if _, err := c.CancelTask(ctx, &a2a.TaskIDParams{ID: task.ID}); err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(string(task.ID), ns+"/")
	if !getRun(t, ns, name).Spec.Cancel {
		t.Error("tasks/cancel did not set spec.cancel")
	}
	waitFor(t, ns, name, 20*time.Second, "Cancelled", phaseIs(arv1.PhaseCancelled))
	states, _, _, _ := collect(t, c.ResubscribeToTask(ctx, &a2a.TaskIDParams{ID: task.ID}))
	if len(states) != 1 || states[0] != a2a.TaskStateCanceled {
		t.Errorf("states after cancel = %v, want canceled", states)
	}
	if _, err := c.CancelTask(ctx, &a2a.TaskIDParams{ID: task.ID}); !errors.Is(err, a2a.ErrTaskNotCancelable) {
		t.Errorf("cancelling an ended task: %v", err)
	}

	reader := []rbacv1.PolicyRule{
		{APIGroups: []string{"agentrun.dev"}, Resources: []string{"agentruns"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}},
	}
	rctx, reader2, _ := a2aClient(t, base, "deployer", saToken(t, ns, "reader", reader))
	_, err = reader2.SendMessage(rctx, textMessage("deploy"))
	if err == nil || !strings.Contains(err.Error(), `cannot create resource "agentruns"`) {
		t.Errorf("a caller without create agentruns: %v, want the API server's refusal", err)
	}
	var runs arv1.AgentRunList
	if err := k8s.List(context.Background(), &runs, client.InNamespace(ns)); err != nil || len(runs.Items) != 1 {
		t.Errorf("runs = %d (%v), want only the caller's", len(runs.Items), err)
	}
	if _, err := agentcard.NewResolver(nil).Resolve(ctx, base+"/agents/deployer"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("card without a token: %v, want 401", err)
	}

	// A blueprint that does not set [agent.a2a] expose = true is not an
	// A2A agent: no card, and a message to it starts nothing.
	createConfigMap(t, ns, "hidden", map[string]string{"agent.toml": strings.Replace(a2aAgent, "expose = true", "expose = false", 1)})
	callerToken := saToken(t, ns, "caller2", a2aCallerRules)
	if _, err := agentcard.NewResolver(nil).Resolve(ctx, base+"/agents/hidden", agentcard.WithRequestHeader("Authorization", "Bearer "+callerToken)); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("the card of an agent not exposed: %v, want 404", err)
	}
	body := `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"text","text":"deploy"}]}}}`
	req, err := http.NewRequest(http.MethodPost, base+"/agents/hidden", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+callerToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !strings.Contains(string(answer), `"error"`) || !strings.Contains(string(answer), "does not expose its agent over A2A") {
		t.Errorf("message/send to an agent not exposed: %s, want a JSON-RPC error saying it is not exposed", answer)
	}
	if err := k8s.List(context.Background(), &runs, client.InNamespace(ns)); err != nil || len(runs.Items) != 1 {
		t.Errorf("runs = %d (%v) after a message to an agent not exposed, want still one", len(runs.Items), err)
	}
}

// echoAgent is a remote A2A agent served by the SDK's own server: it
// answers every message with "bonjour: " and the message's text.
type echoAgent struct{ calls atomic.Int64 }

func (e *echoAgent) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	e.calls.Add(1)
	text := ""
	for _, p := range rc.Message.Parts {
		if tp, ok := p.(a2a.TextPart); ok {
			text += tp.Text
		}
	}
	return q.Write(ctx, a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: "bonjour: " + text}))
}

func (e *echoAgent) Cancel(context.Context, *a2asrv.RequestContext, eventqueue.Queue) error {
	return nil
}

// serveEchoAgent serves the echo agent's card at <url>/.well-known/agent-card.json
// and its JSON-RPC at <url>/rpc, listening on addr.
func serveEchoAgent(t *testing.T, addr string) (string, *echoAgent) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	agent := &echoAgent{}
	srv := httptest.NewUnstartedServer(nil)
	_ = srv.Listener.Close()
	srv.Listener = l
	base := "http://" + l.Addr().String()
	card := &a2a.AgentCard{Name: "echo", Description: "Greets in French.", URL: base + "/rpc", Version: "1",
		PreferredTransport: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2aserver.ProtocolVersion,
		DefaultInputModes: []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
		Skills: []a2a.AgentSkill{{ID: "greet", Name: "Greet", Description: "Says hello.", Tags: []string{"fr"}}}}
	mux := http.NewServeMux()
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	mux.Handle("/rpc", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(agent)))
	srv.Config.Handler = mux
	srv.Start()
	t.Cleanup(srv.Close)
	return base, agent
}

// a2aToolAgent calls the A2A agent at url as the tool "greeter".
func a2aToolAgent(url string) string {
	return fmt.Sprintf(`[agent]
name = "caller"
[agent.title]
enabled = false
[a2a_agents.greeter]
url = %q
[tools.greeter]
permission = "allow"
effect = "idempotent"
[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.work.script]]
text = "asking the greeter"
tool_calls = [{name = "greeter", arguments = '{"message":"le monde"}'}]
[[stages.work.script]]
complete = true
output = "greeted"
`, url)
}

// TestStageCallsARemoteA2AAgent: a stage's call of an [a2a_agents] tool
// reaches a loopback agent served by the SDK's server, through the SDK's
// client, and its answer is journaled as the call's result, with the
// intent naming the agent as the call's server.
func TestStageCallsARemoteA2AAgent(t *testing.T) {
	base, agent := serveEchoAgent(t, "127.0.0.1:0")
	startManager(t, managerOpts{})
	ns, run := toolRun(t, a2aToolAgent(base))
	waitFor(t, ns, "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	done := entriesOf(t, ns, run, journal.ToolCallCompleted)
	if len(done) != 1 || done[0].Tool != "greeter" || done[0].Result != "bonjour: le monde" || done[0].IsError {
		t.Fatalf("completions = %+v, want the agent's answer", done)
	}
	intents := entriesOf(t, ns, run, journal.ToolCallRequested)
	if len(intents) != 1 || intents[0].Server != "greeter" || intents[0].Effect != "idempotent" {
		t.Errorf("intents = %+v", intents)
	}
	if n := agent.calls.Load(); n != 1 {
		t.Errorf("the agent was called %d times, want 1", n)
	}
}

// TestA2AAgentRefusedByEgressParksTheRun: an agent on a loopback address
// the default egress policy refuses parks the run on EgressRefused with
// the refusal and the setting that would allow it; nothing reaches it.
func TestA2AAgentRefusedByEgressParksTheRun(t *testing.T) {
	f := startEgressManager(t, manager.Options{})
	ns, _ := toolRun(t, a2aToolAgent(f.loopback.URL()))
	run := waitFor(t, ns, "r", 30*time.Second, "NeedsSetup EgressRefused",
		refusedWith(refusalText(recorderAddr, "", ns, reasonLoopback, egress.RuleLoopback), "--egress-allow-cidr=127.0.0.0/8"))
	if !strings.Contains(run.Status.WaitingOn.Remedy, `A2A agent "greeter" at `+f.loopback.URL()) {
		t.Errorf("remedy %q does not name the agent and its URL", run.Status.WaitingOn.Remedy)
	}
	f.loopback.sawNothing(t, "A2A")
}

// rpcCall posts one JSON-RPC request to the agent's endpoint with token
// and returns the HTTP response's status, headers and body.
func rpcCall(t *testing.T, url, token, method, params string) (int, http.Header, string) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":7,"method":"` + method + `","params":` + params + `}`
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(answer)
}

// rpcErrorCode is the JSON-RPC error code in an answer (plain JSON, or the
// data of a Server-Sent Event), 0 for none.
func rpcErrorCode(t *testing.T, answer string) int {
	t.Helper()
	answer = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(answer), "data: "))
	if i := strings.Index(answer, "\ndata: "); i >= 0 { // an SDK event: id line, then data
		answer = strings.TrimSpace(answer[i+len("\ndata: "):])
	}
	var r struct {
		Error *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(answer), &r); err != nil {
		t.Fatalf("not a JSON-RPC answer: %q: %v", answer, err)
	}
	if r.Error == nil {
		return 0
	}
	return r.Error.Code
}

// TestA2AServesNoTaskOfAnAgentNotExposed: a run of an agent whose
// blueprint does not expose it over A2A is not served by any method:
// tasks/get, tasks/cancel (which leaves spec.cancel alone), an answer
// (message/send with its task id), message/stream and tasks/resubscribe
// all answer unsupported operation (-32004), through the SDK's own client
// as over the wire.
func TestA2AServesNoTaskOfAnAgentNotExposed(t *testing.T) {
	ns := newNamespace(t)
	createConfigMap(t, ns, "deployer", map[string]string{"agent.toml": a2aAgent})
	createConfigMap(t, ns, "hidden", map[string]string{"agent.toml": strings.Replace(a2aAgent, "expose = true", "expose = false", 1)})
	createRun(t, ns, "internal", "hidden")
	base := startA2A(t, ns)
	token := saToken(t, ns, "caller", a2aCallerRules)
	ctx, _, card := a2aClient(t, base, "deployer", token)
	hiddenCard := *card
	hiddenCard.URL = base + "/agents/hidden"
	creds := a2aclient.NewInMemoryCredentialsStore()
	creds.Set("s", "kubernetes", a2aclient.AuthCredential(token))
	c, err := a2aclient.NewFromCard(ctx, &hiddenCard, a2aclient.WithInterceptors(&a2aclient.AuthInterceptor{Service: creds}))
	if err != nil {
		t.Fatal(err)
	}
	id := a2a.TaskID(ns + "/internal")

	if task, err := c.GetTask(ctx, &a2a.TaskQueryParams{ID: id}); !errors.Is(err, a2a.ErrUnsupportedOperation) {
		t.Errorf("tasks/get of a run of an agent not exposed = %+v, %v; want unsupported operation", task, err)
	}
	if task, err := c.CancelTask(ctx, &a2a.TaskIDParams{ID: id}); !errors.Is(err, a2a.ErrUnsupportedOperation) {
		t.Errorf("tasks/cancel = %+v, %v; want unsupported operation", task, err)
	}
	if getRun(t, ns, "internal").Spec.Cancel {
		t.Error("tasks/cancel of a run of an agent not exposed set spec.cancel")
	}
	answer := a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "staging"})
	answer.TaskID = id
	if res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: answer}); !errors.Is(err, a2a.ErrUnsupportedOperation) {
		t.Errorf("message/send with the task id = %+v, %v; want unsupported operation", res, err)
	}
	for ev, err := range c.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: answer}) {
		if !errors.Is(err, a2a.ErrUnsupportedOperation) {
			t.Errorf("message/stream with the task id = %+v, %v; want unsupported operation", ev, err)
		}
		break
	}
	for ev, err := range c.ResubscribeToTask(ctx, &a2a.TaskIDParams{ID: id}) {
		if !errors.Is(err, a2a.ErrUnsupportedOperation) {
			t.Errorf("tasks/resubscribe = %+v, %v; want unsupported operation", ev, err)
		}
		break
	}
	if status, _, body := rpcCall(t, base+"/agents/hidden", token, "tasks/get", `{"id":"`+string(id)+`"}`); status != http.StatusOK || rpcErrorCode(t, body) != -32004 {
		t.Errorf("tasks/get over the wire: HTTP %d %s; want 200 with error -32004", status, body)
	}
}

// TestA2ARefusesWrongParamsAndBadTokens: params of the wrong shape are
// invalid params (-32602, as JSON-RPC says), not a parse error (-32700,
// kept for a body that is not JSON), for plain and streaming methods; a
// token the API server does not accept is HTTP 401 with WWW-Authenticate,
// like no token at all, on the methods as on the card.
func TestA2ARefusesWrongParamsAndBadTokens(t *testing.T) {
	ns := newNamespace(t)
	createConfigMap(t, ns, "deployer", map[string]string{"agent.toml": a2aAgent})
	base := startA2A(t, ns)
	token := saToken(t, ns, "caller", a2aCallerRules)
	url := base + "/agents/deployer"
	for _, tc := range []struct{ method, params string }{
		{"tasks/get", `{"id":5}`},
		{"tasks/cancel", `"` + ns + `/x"`},
		{"message/send", `{"message":{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"picture"}]}}`},
		{"message/send", `null`},
		{"message/stream", `[1,2]`},
		{"tasks/resubscribe", `{"id":["a"]}`},
	} {
		status, _, body := rpcCall(t, url, token, tc.method, tc.params)
		if code := rpcErrorCode(t, body); status != http.StatusOK || code != -32602 {
			t.Errorf("%s with params %s: HTTP %d, error %d (%s); want 200 with -32602 invalid params", tc.method, tc.params, status, code, body)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,`))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	notJSON, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if code := rpcErrorCode(t, string(notJSON)); code != -32700 {
		t.Errorf("a body that is not JSON: error %d (%s), want -32700 parse error", code, notJSON)
	}

	for _, bad := range []string{"not-a-token", token + "x"} {
		status, header, body := rpcCall(t, url, bad, "tasks/get", `{"id":"`+ns+`/x"}`)
		if status != http.StatusUnauthorized || !strings.HasPrefix(header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("tasks/get with a token the API server refuses: HTTP %d, WWW-Authenticate %q, %s; want 401 with a Bearer challenge",
				status, header.Get("WWW-Authenticate"), body)
		}
	}
	if _, err := agentcard.NewResolver(nil).Resolve(context.Background(), url, agentcard.WithRequestHeader("Authorization", "Bearer not-a-token")); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("card with a token the API server refuses: %v, want 401", err)
	}
}
