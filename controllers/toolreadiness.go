package controllers

// Tool readiness: a stage's model call is held until every tool of its
// required_tools can be called.

import (
	"context"
	"fmt"
	"slices"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
	"github.com/agentrun-dev/agentrun-operator/internal/toolcatalog"
)

// requiredTools holds the stage's model call until every tool of its
// required_tools is available: built-in tools always are; an MCP tool
// needs its server's token, a listing, and the tool in it. What is missing
// is a NeedsSetup blocker naming the tool and the stage, woken like the
// server's own (its Secret changing, a retry after a failed listing); a
// listing under way holds the turn (ToolsPending) until it is known.
func (ts *toolSettler) requiredTools(ctx context.Context, run *arv1.AgentRun, f *facts, stage *blueprint.Stage) error {
	if stage == nil {
		return nil
	}
	for _, tool := range stage.RequiredTools {
		if blueprint.IsBuiltin(tool) {
			continue
		}
		block, pending, err := ts.requiredTool(ctx, run, f, stage.Name, tool)
		if err != nil || pending {
			f.ToolsPending = f.ToolsPending || pending
			return err
		}
		if block != nil {
			block.Remedy = clipTo(fmt.Sprintf("Stage %q requires tool %q (required_tools). %s", stage.Name, tool, block.Remedy), 1024)
			f.Setup = block
			if len(block.Refs) == 0 {
				// Nothing to watch: look again as a failed listing would.
				retry := f.Now.Add(toolcatalog.DefaultRetry)
				f.SetupRetryAt = &retry
			}
			return nil
		}
	}
	return nil
}

// requiredTool says what stands between the run and one required MCP tool.
func (ts *toolSettler) requiredTool(ctx context.Context, run *arv1.AgentRun, f *facts, stage, tool string) (*runstate.SetupBlock, bool, error) {
	srv, ok := f.Blueprint.ServerIn(stage, tool)
	if !ok {
		// The parser refuses this; a snapshot from an older parser may not.
		return &runstate.SetupBlock{Blocker: arv1.BlockerToolServerUnavailable, Remedy: "No MCP server of the blueprint can offer it; add one that does."}, false, nil
	}
	conn, block, err := ts.toolServer(ctx, run, srv)
	if err != nil || block != nil {
		return block, false, err
	}
	e := ts.lookupTools(run, f, conn)
	switch {
	case e.Pending():
		return nil, true, nil
	case e.Unavailable():
		return toolServerBlock(run, srv, e.Err), false, nil
	}
	if !slices.ContainsFunc(e.Tools, func(t mcptool.Tool) bool { return t.Name == tool }) {
		return &runstate.SetupBlock{Blocker: arv1.BlockerToolServerUnavailable, Remedy: fmt.Sprintf(
			"MCP server %q at %s does not list it. Deploy a version of the server that offers it (or change required_tools); the run looks again every %s.",
			srv.Name, srv.URL, toolcatalog.DefaultRetry)}, false, nil
	}
	return nil, false, nil
}

// workerRefused is why a fan-out worker may not start in its entry stage
// (allow_as_worker = false), or nil: checked before it spawns, so such a
// worker ends in Error saying so rather than running the stage.
func workerRefused(run *arv1.AgentRun, bp *blueprint.Blueprint) error {
	if run.Labels[arv1.LabelChildKind] != string(runstate.ChildWorker) {
		return nil
	}
	if msg := bp.WorkerEntryError(bp.EntryStage().Name); msg != "" {
		return fmt.Errorf("%s", msg)
	}
	return nil
}
