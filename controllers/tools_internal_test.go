package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/builtin"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
	"github.com/agentrun-dev/agentrun-operator/internal/toolcatalog"
)

// TestToolFactsResolvesTheHeadCall: the settler resolves the run's next
// tool call from the tool catalog alone (no server here needs a token, so
// nothing is read from the API server): a built-in, a server's listed tool
// with its effect, a tool nobody offers, a server not listed yet (queued
// for a listing, the run waiting on it), one whose listing failed (a
// setup blocker with its retry), an A2A agent, and a started write, which
// is left for a person.
func TestToolFactsResolvesTheHeadCall(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	retry := 30 * time.Second
	run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", UID: "u"}}
	bp := &blueprint.Blueprint{
		MCPServers: []blueprint.MCPServer{
			{Name: "tickets", URL: "http://tickets", Tools: []string{"search", "create_ticket", "retired"}},
			{Name: "wiki", URL: "http://wiki", Tools: []string{"read_page"}},
			{Name: "down", URL: "http://down", Tools: []string{"ping"}},
		},
		Tools:     map[string]blueprint.ToolConfig{"create_ticket": {Effect: blueprint.EffectIdempotent}},
		A2AAgents: []blueprint.A2AAgent{{Name: "helper", URL: "http://helper"}},
	}
	catalog := toolcatalog.New(0, retry)
	schema := json.RawMessage(`{"type":"object"}`)
	listed := func(server string, tools ...mcptool.Tool) {
		catalog.Finish(toolcatalog.KeyIn("ns", mcptool.Server{Name: server, URL: "http://" + server}), tools, nil, now)
	}
	listed("tickets",
		mcptool.Tool{Name: "search", Effect: mcptool.EffectRead, InputSchema: schema},
		mcptool.Tool{Name: "create_ticket", Effect: mcptool.EffectRead})
	a2a := a2aConn(bp.A2AAgents[0]).server
	catalog.Finish(toolcatalog.KeyIn("ns", a2a), []mcptool.Tool{{Name: "helper"}}, nil, now)
	catalog.Finish(toolcatalog.KeyIn("ns", mcptool.Server{Name: "down", URL: "http://down"}), nil, errors.New("connection refused"), now.Add(-time.Second))

	started := &journal.Entry{Seq: 7, Kind: journal.ToolCallRequested, Effect: blueprint.EffectWrite}
	failedRetry := now.Add(-time.Second).Add(retry)
	cases := []struct {
		name    string
		call    string // "" for no call due
		intent  *journal.Entry
		want    *runstate.ToolFact
		server  string // the resolved call's server ("" for none)
		listing string // the server queued for a listing ("" for none)
	}{
		{name: "no call due"},
		{name: "a built-in", call: builtin.AskUser, want: &runstate.ToolFact{Known: true, Effect: blueprint.EffectRead}},
		{name: "a listed tool with the server's effect", call: "search", server: "tickets",
			want: &runstate.ToolFact{Known: true, Server: "tickets", Effect: blueprint.EffectRead, InputSchema: string(schema)}},
		{name: "the blueprint's effect over the server's", call: "create_ticket", server: "tickets",
			want: &runstate.ToolFact{Known: true, Server: "tickets", Effect: blueprint.EffectIdempotent}},
		{name: "a tool no server offers", call: "nope", want: &runstate.ToolFact{Known: false}},
		{name: "a tool its server no longer lists", call: "retired",
			want: &runstate.ToolFact{Known: false, Server: "tickets", Effect: blueprint.EffectWrite}},
		{name: "a server never listed", call: "read_page", listing: "wiki",
			want: &runstate.ToolFact{Known: true, Server: "wiki", Effect: blueprint.EffectWrite, Pending: true}},
		{name: "a server whose listing failed", call: "ping",
			want: &runstate.ToolFact{Known: true, Server: "down", Effect: blueprint.EffectWrite, SetupRetryAt: &failedRetry,
				Setup: &runstate.SetupBlock{Blocker: arv1.BlockerToolServerUnavailable}}},
		{name: "an A2A agent", call: "helper", server: "helper",
			want: &runstate.ToolFact{Known: true, Server: "helper", Effect: blueprint.EffectWrite}},
		{name: "a started write", call: "create_ticket", intent: started},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts := &toolSettler{catalog: catalog, unstarted: newUnstartedIntents()}
			f := &facts{Facts: runstate.Facts{Blueprint: bp, Now: now}}
			if c.call != "" {
				f.State.Calls = []journal.CallState{{ToolCall: journal.ToolCall{Name: c.call}, Intent: c.intent}}
			}
			if err := ts.toolFacts(context.Background(), run, f, false); err != nil {
				t.Fatal(err)
			}
			checkToolFact(t, f.Tool, c.want)
			switch {
			case c.server == "" && f.tool != nil:
				t.Errorf("resolved to server %q, want nothing resolved", f.tool.server.Name)
			case c.server != "" && (f.tool == nil || f.tool.server.Name != c.server || f.tool.effect != c.want.Effect):
				t.Errorf("resolved to %+v, want server %q with effect %q", f.tool, c.server, c.want.Effect)
			}
			var listings []string
			for _, l := range f.listings {
				listings = append(listings, l.server.Name)
			}
			if (c.listing == "" && len(listings) > 0) || (c.listing != "" && (len(listings) != 1 || listings[0] != c.listing)) {
				t.Errorf("listings queued: %q, want %q", listings, c.listing)
			}
		})
	}
}

// checkToolFact compares a ToolFact, the setup block by its blocker only
// (its remedy's wording is toolServerBlock's).
func checkToolFact(t *testing.T, got, want *runstate.ToolFact) {
	t.Helper()
	if got == nil || want == nil {
		if got != want {
			t.Errorf("tool fact %+v, want %+v", got, want)
		}
		return
	}
	if got.Known != want.Known || got.Server != want.Server || got.Effect != want.Effect || got.Pending != want.Pending || got.InputSchema != want.InputSchema {
		t.Errorf("tool fact %+v, want %+v", *got, *want)
	}
	if (got.Setup == nil) != (want.Setup == nil) || (got.Setup != nil && got.Setup.Blocker != want.Setup.Blocker) {
		t.Errorf("setup block %+v, want %+v", got.Setup, want.Setup)
	}
	if (got.SetupRetryAt == nil) != (want.SetupRetryAt == nil) || (got.SetupRetryAt != nil && !got.SetupRetryAt.Equal(*want.SetupRetryAt)) {
		t.Errorf("setup retry at %v, want %v", got.SetupRetryAt, want.SetupRetryAt)
	}
}
