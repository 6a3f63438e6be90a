package a2atool

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"

	"github.com/agentrun-dev/agentrun-operator/internal/mcptool"
)

// agent answers with a completed task carrying an artifact, or fails the
// task when the message says "fail".
type agent struct{}

func (agent) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	text := rc.Message.Parts[0].(a2a.TextPart).Text
	task := &a2a.Task{ID: rc.TaskID, ContextID: rc.ContextID, Status: a2a.TaskStatus{State: a2a.TaskStateCompleted}}
	if text == "fail" {
		task.Status = a2a.TaskStatus{State: a2a.TaskStateFailed, Message: a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: "no can do"})}
	} else {
		task.Artifacts = []*a2a.Artifact{{ID: "a", Parts: a2a.ContentParts{a2a.TextPart{Text: "done: " + text}}}}
	}
	return q.Write(ctx, task)
}

func (agent) Cancel(context.Context, *a2asrv.RequestContext, eventqueue.Queue) error { return nil }

// serve runs the agent with the SDK's server on loopback and records the
// Authorization header of every JSON-RPC call.
func serve(t *testing.T) (string, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var auths []string
	srv := httptest.NewUnstartedServer(nil)
	base := "http://" + srv.Listener.Addr().String()
	card := &a2a.AgentCard{Name: "worker", Description: "Does work.", URL: base + "/rpc", Version: "1", ProtocolVersion: "0.3.0",
		PreferredTransport: a2a.TransportProtocolJSONRPC, Skills: []a2a.AgentSkill{{ID: "w", Name: "Work", Description: "Works hard."}}}
	mux := http.NewServeMux()
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	rpc := a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(agent{}))
	mux.Handle("/rpc", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		rpc.ServeHTTP(w, r)
	}))
	srv.Config.Handler = mux
	srv.Start()
	t.Cleanup(srv.Close)
	return base, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), auths...) }
}

func TestListAndCall(t *testing.T) {
	base, auths := serve(t)
	ctx := context.Background()
	s := mcptool.Server{Name: "worker", URL: base, Token: "tok", Protocol: mcptool.ProtocolA2A}
	tools, err := List(ctx, http.DefaultClient, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools) != 1 || tools[0].Name != "worker" || tools[0].Effect != mcptool.EffectWrite ||
		!strings.Contains(tools[0].Description, "Does work.") || !strings.Contains(tools[0].Description, "Work: Works hard.") {
		t.Errorf("tools = %+v", tools)
	}
	res, err := Call(ctx, http.DefaultClient, s, json.RawMessage(`{"message":"sweep"}`))
	if err != nil || res.IsError || res.Text != "done: sweep" {
		t.Errorf("call = %+v %v", res, err)
	}
	res, err = Call(ctx, http.DefaultClient, s, json.RawMessage(`{"message":"fail"}`))
	if err != nil || !res.IsError || !strings.Contains(res.Text, "failed: no can do") {
		t.Errorf("failing call = %+v %v", res, err)
	}
	if res, _ := Call(ctx, http.DefaultClient, s, json.RawMessage(`{}`)); !res.IsError {
		t.Errorf("a call with no message = %+v", res)
	}
	if a := auths(); len(a) != 2 || a[0] != "Bearer tok" {
		t.Errorf("Authorization headers = %q", a)
	}
}

func TestUnreachableAgentIsNotSent(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	_, err := Call(context.Background(), http.DefaultClient, mcptool.Server{Name: "gone", URL: srv.URL, Protocol: mcptool.ProtocolA2A}, json.RawMessage(`{"message":"x"}`))
	ce, ok := err.(*mcptool.CallError)
	if !ok || !ce.NotSent {
		t.Errorf("err = %#v, want a CallError that was not sent", err)
	}
}
