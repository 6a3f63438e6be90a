package controllers

// Tool offer: which tools the model is offered in a turn, and which
// servers' tools are left out (and why).

import (
	"context"
	"slices"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/builtin"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
)

// offer is what a model is offered in a turn, and the servers whose tools
// are left out of it (and why).
type offer struct {
	tools   []providers.ToolSpec
	skipped []skippedServer
}

type skippedServer struct {
	server string
	why    string
	// blocker is the setup blocker the skip would be (ToolServerUnavailable
	// when empty), the Event's reason.
	blocker arv1.SetupBlocker
}

// offerFacts works out the tools the model may call in the stage: the run
// tools (not the blocking ones under yolo: nobody would answer) and each
// MCP server's listed tools, without denied ones, narrowed by the stage's
// available_tools. It reads the tool catalog only. A server that is being
// listed for the first time holds the turn until it is known
// (ToolsPending); one that cannot be listed offers nothing this turn, so
// the run is not held up by a tool the model may not need. A scripted
// stage's calls are in its script, so it is offered nothing.
func (ts *toolSettler) offerFacts(ctx context.Context, run *arv1.AgentRun, f *facts, stage *blueprint.Stage) {
	if _, scripted := ts.providers[f.resolved.provider.Type]; scripted {
		return
	}
	allowed := func(name string) bool {
		return stage == nil || len(stage.AvailableTools) == 0 || slices.Contains(stage.AvailableTools, name)
	}
	o := &offer{}
	unattended := runstate.IsUnattended(run.Spec.Yolo, run.Spec.YoloProfile, f.Blueprint)
	hasRegions := len(runRegions(run, f)) > 0
	for _, t := range builtin.RunTools {
		if t.Name == builtin.WriteRegion && !hasRegions {
			continue // a run with no regions has nothing to write
		}
		if allowed(t.Name) && !hidesBlocking(stage, t.Name, unattended) {
			o.tools = append(o.tools, t)
		}
	}
	for _, srv := range f.Blueprint.MCPServers {
		conn, block, err := ts.toolServer(ctx, run, srv)
		switch {
		case err != nil:
			o.skipped = append(o.skipped, skippedServer{server: srv.Name, why: "its token Secret could not be read"})
			continue
		case block != nil:
			o.skipped = append(o.skipped, skippedServer{server: srv.Name, why: block.Remedy})
			continue
		}
		e := ts.lookupTools(run, f, conn)
		switch {
		case e.Pending():
			f.ToolsPending = true
		case e.Unavailable():
			b := toolServerBlock(run, srv, e.Err)
			o.skipped = append(o.skipped, skippedServer{server: srv.Name, why: b.Remedy, blocker: b.Blocker})
		default:
			o.tools = append(o.tools, offerable(f.Blueprint, f.State.Stage, srv, e.Tools, allowed)...)
		}
	}
	ts.offerA2A(run, f, o, allowed)
	f.offer = o
}

// hidesBlocking says whether a tool that waits on a person is left out of
// the offer: in a stage with allow_blocking_tools = false, and in a run
// nobody attends, unless the stage requires it (required_tools hold under
// yolo).
func hidesBlocking(stage *blueprint.Stage, tool string, unattended bool) bool {
	if !builtin.Blocking(tool) {
		return false
	}
	if stage != nil && stage.HideBlockingTools {
		return true
	}
	return unattended && !stage.Requires(tool)
}

// offerable is a server's listed tools the model may be offered: within the
// server's filter, really from this server, allowed in the stage, and not
// denied.
func offerable(bp *blueprint.Blueprint, stage string, srv blueprint.MCPServer, tools []mcptool.Tool, allowed func(string) bool) []providers.ToolSpec {
	var out []providers.ToolSpec
	for _, t := range tools {
		if len(srv.Tools) > 0 && !slices.Contains(srv.Tools, t.Name) {
			continue
		}
		if s, ok := bp.ServerIn(stage, t.Name); !ok || s.Name != srv.Name || !allowed(t.Name) {
			continue
		}
		effect := string(t.Effect)
		if e := bp.Tools[t.Name].Effect; e != "" {
			effect = e
		}
		if bp.Permission(stage, t.Name, effect) == blueprint.PermDeny {
			continue
		}
		out = append(out, providers.ToolSpec{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema})
	}
	return out
}
