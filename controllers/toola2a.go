package controllers

// A2A agents as tools: a blueprint's [a2a_agents.<name>] is one tool,
// named <name>, whose "listing" is the agent's card and whose calls go
// through the same intents, journal, lanes and egress policy as MCP
// tool calls (internal/a2atool does the protocol).

import (
	"errors"
	"fmt"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/egress"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
	"github.com/agentrun-dev/agentrun-operator/internal/toolcatalog"
)

// a2aConn is the agent as a server the tool catalog lists and steps call.
func a2aConn(a blueprint.A2AAgent) serverConn {
	return serverConn{spec: blueprint.MCPServer{Name: a.Name, URL: a.URL},
		server: mcptool.Server{Name: a.Name, URL: a.URL, Protocol: mcptool.ProtocolA2A}}
}

// a2aToolFacts resolves a call of the A2A agent a, as toolFacts does an
// MCP tool: its effect (the blueprint's override, else write), and
// whether its card could be read (else the setup block, EgressRefused
// when the egress policy refused it).
func (ts *toolSettler) a2aToolFacts(run *arv1.AgentRun, f *facts, a blueprint.A2AAgent) {
	fact := &runstate.ToolFact{Known: true, Server: a.Name, Effect: blueprint.EffectWrite}
	if e := f.Blueprint.Tools[a.Name].Effect; e != "" {
		fact.Effect = e
	}
	f.Tool = fact
	conn := a2aConn(a)
	e := ts.lookupTools(run, f, conn)
	switch {
	case e.Pending():
		fact.Pending = true
	case e.Unavailable():
		retry := e.RetryAt
		if !retry.After(f.Now) {
			retry = f.Now.Add(toolcatalog.DefaultRetry)
		}
		fact.Setup, fact.SetupRetryAt = a2aBlock(a, e.Err), &retry
	default:
		f.tool = &resolvedTool{server: conn.server, effect: fact.Effect}
	}
}

// a2aBlock explains an agent whose card could not be read.
func a2aBlock(a blueprint.A2AAgent, err error) *runstate.SetupBlock {
	var refusal *egress.Refusal
	if errors.As(err, &refusal) {
		return &runstate.SetupBlock{Blocker: arv1.BlockerEgressRefused, Remedy: clipTo(fmt.Sprintf(
			"The manager's egress policy refused A2A agent %q at %s: %s. %s The run retries every %s.",
			a.Name, a.URL, refusal.Error(), refusal.Remedy(), toolcatalog.DefaultRetry), 1024)}
	}
	return &runstate.SetupBlock{Blocker: arv1.BlockerToolServerUnavailable, Remedy: clipTo(fmt.Sprintf(
		"A2A agent %q at %s could not be used: %s. Check the agent and its url in the blueprint; the run retries every %s.",
		a.Name, a.URL, stableError(err), toolcatalog.DefaultRetry), 1024)}
}

// offerA2A adds the blueprint's A2A agents the stage may call to the
// offer, described by the blueprint or else by the agent's card.
func (ts *toolSettler) offerA2A(run *arv1.AgentRun, f *facts, o *offer, allowed func(string) bool) {
	for _, a := range f.Blueprint.A2AAgents {
		effect := blueprint.EffectWrite
		if e := f.Blueprint.Tools[a.Name].Effect; e != "" {
			effect = e
		}
		if !allowed(a.Name) || f.Blueprint.Permission(f.State.Stage, a.Name, effect) == blueprint.PermDeny {
			continue
		}
		e := ts.lookupTools(run, f, a2aConn(a))
		switch {
		case e.Pending():
			f.ToolsPending = true
		case e.Unavailable():
			b := a2aBlock(a, e.Err)
			o.skipped = append(o.skipped, skippedServer{server: a.Name, why: b.Remedy, blocker: b.Blocker})
		case len(e.Tools) == 1:
			t := providers.ToolSpec{Name: a.Name, Description: e.Tools[0].Description, InputSchema: e.Tools[0].InputSchema}
			if a.Description != "" {
				t.Description = a.Description
			}
			o.tools = append(o.tools, t)
		}
	}
}
