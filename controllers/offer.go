package controllers

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/builtin"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
)

// offeredTools are the tools the model may call in the stage: the built-in
// ones (not the blocking ones under yolo: nobody would answer) and each MCP
// server's listed tools, without denied ones, narrowed by the stage's
// available_tools. A server that cannot be listed now offers nothing this
// turn; the run is not held up by a tool the model may not need.
func (r *AgentRunReconciler) offeredTools(ctx context.Context, run *arv1.AgentRun, bp *blueprint.Blueprint, stage *blueprint.Stage) []providers.ToolSpec {
	offer := func(name string) bool {
		return stage == nil || len(stage.AvailableTools) == 0 || slices.Contains(stage.AvailableTools, name)
	}
	var out []providers.ToolSpec
	for _, t := range builtin.RunTools {
		if offer(t.Name) && !(runstate.IsUnattended(run.Spec.Yolo, run.Spec.YoloProfile, bp) && builtin.Blocking(t.Name)) {
			out = append(out, t)
		}
	}
	for _, srv := range bp.MCPServers {
		conn, block, err := r.toolServer(ctx, run, srv)
		if err == nil && block == nil {
			var tools []mcptool.Tool
			if tools, err = r.toolCatalog.list(ctx, conn); err == nil {
				out = append(out, offerable(bp, srv, tools, offer)...)
				continue
			}
			block = toolServerBlock(run, srv, err)
		}
		// The model cannot call what it is not offered, so say so where
		// people look: a Warning event with the remedy.
		why := "it could not be read"
		if block != nil {
			why = block.Remedy
		}
		r.Recorder.Eventf(run, nil, corev1.EventTypeWarning, string(arv1.BlockerToolServerUnavailable), "OfferTools",
			"The tools of MCP server %q are not offered to the model this turn: %s", srv.Name, clipTo(why, 600))
	}
	return out
}

// offerable is a server's listed tools the model may be offered: within the
// server's filter, really from this server, allowed in the stage, and not
// denied.
func offerable(bp *blueprint.Blueprint, srv blueprint.MCPServer, tools []mcptool.Tool, offer func(string) bool) []providers.ToolSpec {
	var out []providers.ToolSpec
	for _, t := range tools {
		if len(srv.Tools) > 0 && !slices.Contains(srv.Tools, t.Name) {
			continue
		}
		if s, ok := bp.ServerFor(t.Name); !ok || s.Name != srv.Name || !offer(t.Name) {
			continue
		}
		effect := string(t.Effect)
		if e := bp.Tools[t.Name].Effect; e != "" {
			effect = e
		}
		if bp.Permission(t.Name, effect) == blueprint.PermDeny {
			continue
		}
		out = append(out, providers.ToolSpec{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema})
	}
	return out
}
