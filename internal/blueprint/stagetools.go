package blueprint

import (
	"fmt"
	"slices"
	"strings"

	"github.com/agentrun-dev/agentrun-operator/internal/builtin"
)

// StageTools are a stage's keys of the seeds' tool area. They are kept in
// one embedded struct so the parser's tool rules live in one file.
type StageTools struct {
	// RequiredTools must be available before the stage's model is called:
	// a built-in tool always is; an MCP tool needs its server usable and
	// listing it, else the run parks on NeedsSetup. A required tool is
	// offered even where policy would hide it (a blocking tool under
	// yolo), and a required blocking tool waits for a person even under
	// yolo, as the seeds' "required_tools still hold" says.
	RequiredTools []string
	// HideBlockingTools is allow_blocking_tools = false: the stage offers
	// none of the tools that wait on a person (ask_user,
	// present_for_review) and refuses a call to them. The key defaults to
	// true, so blueprints written before it keep their questions (and the
	// zero value is the default).
	HideBlockingTools bool
	// ToolRouting sends a tool's calls in this stage to a named MCP
	// server, overriding the blueprint-wide choice (ServerFor).
	ToolRouting map[string]string
	// RefuseWorkers is allow_as_worker = false: no fan-out may run this
	// stage as its worker_stage, and no worker may start in it. The key
	// defaults to true, as every stage could be a worker stage before it.
	RefuseWorkers bool
	// AcceptsMessages: while the run is in this stage its parent may send
	// it messages (send_to_agent); each is shown in the next model turn.
	AcceptsMessages bool
	// ToolPermissions are the stage's own allow/ask/deny per tool, which
	// win over the blueprint-wide ones while the run is in the stage.
	ToolPermissions map[string]string
}

// Requires reports whether tool is one of the stage's required tools.
func (s *Stage) Requires(tool string) bool {
	return s != nil && slices.Contains(s.RequiredTools, tool)
}

// ServerIn is ServerFor within a stage: the stage's tool_routing first.
func (b *Blueprint) ServerIn(stage, tool string) (MCPServer, bool) {
	if s, _, ok := b.Stage(stage); ok {
		if name, routed := s.ToolRouting[tool]; routed {
			i := slices.IndexFunc(b.MCPServers, func(m MCPServer) bool { return m.Name == name })
			if i < 0 {
				return MCPServer{}, false
			}
			return b.MCPServers[i], true
		}
	}
	return b.ServerFor(tool)
}

// ToolLevelIn is ToolLevel within a stage: a routed tool's results have
// its routed server's level.
func (b *Blueprint) ToolLevelIn(stage, tool string) string {
	if c, ok := b.Tools[tool]; ok && c.Level != "" {
		return c.Level
	}
	if isBuiltin(tool) {
		return LevelPublic
	}
	if s, ok := b.ServerIn(stage, tool); ok {
		return s.Level
	}
	return LevelPublic
}

// IsBuiltin reports whether tool is a move or a run tool, which no MCP
// server provides.
func IsBuiltin(tool string) bool { return isBuiltin(tool) }

// isBuiltin: a move or a run tool, which no MCP server provides.
func isBuiltin(tool string) bool {
	return builtin.IsRunTool(tool) || slices.ContainsFunc(builtin.Moves, func(m builtin.Spec) bool { return m.Name == tool })
}

// stageTools reads the tool keys of one stage. Checks that need the other
// stages or the servers are in crossCheckTools.
func (p *parser) stageTools(s *Stage, r rawStage) *ParseError {
	at := func(key ...string) int { return p.line(append([]string{"stages", s.Name}, key...)...) }
	s.StageTools = StageTools{
		RequiredTools: r.RequiredTools, ToolRouting: r.ToolRouting, AcceptsMessages: r.AcceptsMessages,
		HideBlockingTools: r.AllowBlockingTools != nil && !*r.AllowBlockingTools,
		RefuseWorkers:     r.AllowAsWorker != nil && !*r.AllowAsWorker,
		ToolPermissions:   r.ToolPermissions,
	}
	for _, tool := range sortedKeys(r.ToolPermissions) {
		if err := p.enum(at("tool_permissions", tool), fmt.Sprintf("stage %q: tool_permissions.%s", s.Name, tool), r.ToolPermissions[tool], PermAllow, PermAsk, PermDeny); err != nil {
			return err
		}
	}
	for i, tool := range r.RequiredTools {
		if strings.TrimSpace(tool) == "" {
			return p.errf(at("required_tools"), "stage %q: required_tools[%d] is empty", s.Name, i)
		}
		if len(s.AvailableTools) > 0 && !slices.Contains(s.AvailableTools, tool) && !isBuiltinMove(tool) {
			return p.errf(at("required_tools"), "stage %q: required tool %q is not in the stage's available_tools", s.Name, tool)
		}
		if builtin.Blocking(tool) && s.HideBlockingTools {
			return p.errf(at("required_tools"), "stage %q: required tool %q waits on a person, and the stage sets allow_blocking_tools = false", s.Name, tool)
		}
	}
	for _, tool := range sortedKeys(r.ToolRouting) {
		if isBuiltin(tool) {
			return p.errf(at("tool_routing", tool), "stage %q: tool_routing.%s: %q is a built-in tool, which no MCP server provides", s.Name, tool, tool)
		}
	}
	return nil
}

func isBuiltinMove(tool string) bool {
	return slices.ContainsFunc(builtin.Moves, func(m builtin.Spec) bool { return m.Name == tool })
}

// crossCheckTools validates what the stages' tool keys name: routed-to
// servers, required tools some server can offer and no policy denies, and
// worker stages that allow it.
func (p *parser) crossCheckTools(bp *Blueprint) *ParseError {
	for _, s := range bp.Stages {
		at := func(key ...string) int { return p.line(append([]string{"stages", s.Name}, key...)...) }
		for _, tool := range sortedKeys(s.ToolRouting) {
			name := s.ToolRouting[tool]
			i := slices.IndexFunc(bp.MCPServers, func(m MCPServer) bool { return m.Name == name })
			if i < 0 {
				return p.errf(at("tool_routing", tool), "stage %q: tool_routing.%s names %q, which is not an [mcp_servers] table", s.Name, tool, name)
			}
			if list := bp.MCPServers[i].Tools; len(list) > 0 && !slices.Contains(list, tool) {
				return p.errf(at("tool_routing", tool), "stage %q: tool_routing.%s names server %q, whose tools list leaves %q out", s.Name, tool, name, tool)
			}
		}
		for _, tool := range s.RequiredTools {
			if bp.Permission(s.Name, tool, EffectRead) == PermDeny {
				return p.errf(at("required_tools"), "stage %q: required tool %q is denied by the blueprint's tool permissions", s.Name, tool)
			}
			if _, ok := bp.ServerIn(s.Name, tool); !isBuiltin(tool) && !ok {
				return p.errf(at("required_tools"), "stage %q: required tool %q is not built in and no MCP server of the blueprint can offer it (name it in one server's tools, or route it with tool_routing)", s.Name, tool)
			}
		}
		if fo := s.FanOut; fo != nil && fo.WorkerStage != "" {
			if w, _, ok := bp.Stage(fo.WorkerStage); ok && w.RefuseWorkers {
				return p.errf(p.line("stages", s.Name, "worker_stage"), "stage %q: worker_stage %q sets allow_as_worker = false", s.Name, fo.WorkerStage)
			}
		}
	}
	return nil
}

// WorkerEntryError is why a fan-out worker may not start in stage, or ""
// when it may.
func (b *Blueprint) WorkerEntryError(stage string) string {
	s, _, ok := b.Stage(stage)
	if !ok || !s.RefuseWorkers {
		return ""
	}
	return fmt.Sprintf("stage %q sets allow_as_worker = false, so a fan-out worker may not run it", stage)
}
