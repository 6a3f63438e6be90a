package blueprint

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/agentrun-dev/agentrun-operator/internal/builtin"
)

// Tool effects: what a call does to the world, which decides what happens
// to a call a restart interrupted (read and idempotent calls re-execute, a
// write waits for a person).
const (
	EffectRead       = "read"
	EffectIdempotent = "idempotent"
	EffectWrite      = "write"
)

// Sensitivity levels, lowest first. A tool result from a source above the
// run's clearance taints the run's context.
const (
	LevelPublic   = "public"
	LevelInternal = "internal"
	LevelPrivate  = "private"
)

// Levels lists the sensitivity levels in order.
var Levels = []string{LevelPublic, LevelInternal, LevelPrivate}

// LevelRank orders levels; an unknown level ranks highest (fails closed).
func LevelRank(level string) int {
	if i := slices.Index(Levels, level); i >= 0 {
		return i
	}
	return len(Levels)
}

// DefaultInteractionTimeoutSeconds is how long a question to a person stays
// open (the seeds' [limits] interaction_timeout_secs); 0 means never.
const DefaultInteractionTimeoutSeconds = 3600

// MCPServer is an [mcp_servers.<name>] table: an MCP server the run's tools
// come from, reached over streamable HTTP at an in-cluster URL.
type MCPServer struct {
	Name string
	URL  string
	// AuthSecret and AuthKey name the Secret (in the run's namespace) and
	// key holding a bearer token; empty AuthSecret means no auth.
	AuthSecret string
	AuthKey    string
	// Tools filters what the server lists; empty means every tool.
	Tools []string
	// Level is the sensitivity of the server's results.
	Level string
}

// ToolConfig is a [tools.<name>] table: blueprint overrides for one tool.
type ToolConfig struct {
	// Effect overrides the server's annotations; empty keeps them.
	Effect string
	// Permission is allow, ask or deny; empty falls back to
	// agent.tool_permissions, then to the effect's default.
	Permission string
	// Level overrides the server's level for this tool's results.
	Level string
}

// YoloProfile is a [yolo_profiles.<name>] table: what a run started with
// yoloProfile may do without a person. Bare yolo approves every "ask" tool
// and waives the taint gate; a profile only what it lists. No profile ever
// lifts a "deny".
type YoloProfile struct {
	Name string
	// Approve lists the "ask" tools approved without a person.
	Approve []string
	// WaiveTaint lets writes through after tainted input.
	WaiveTaint bool
}

// Limits is the [limits] table.
type Limits struct {
	// InteractionTimeoutSeconds bounds how long a question to a person
	// stays open: an expired approval is a denial, an expired question
	// tells the model nobody answered. 0 means never.
	InteractionTimeoutSeconds int
}

type rawMCPServer struct {
	URL        string   `toml:"url"`
	AuthSecret string   `toml:"auth_secret"`
	AuthKey    string   `toml:"auth_key"`
	Tools      []string `toml:"tools"`
	Level      string   `toml:"level"`
}

type rawToolConfig struct {
	Effect     string `toml:"effect"`
	Permission string `toml:"permission"`
	Level      string `toml:"level"`
}

type rawYoloProfile struct {
	Approve    []string `toml:"approve"`
	WaiveTaint bool     `toml:"waive_taint"`
}

type rawLimits struct {
	InteractionTimeoutSecs *int `toml:"interaction_timeout_secs"`
}

// tools validates the tool tables: servers, per-tool overrides, yolo
// profiles, clearance and limits.
func (p *parser) tools(raw *rawManifest, bp *Blueprint) *ParseError {
	for _, name := range sortedKeys(raw.MCPServers) {
		r := raw.MCPServers[name]
		at := func(key ...string) int { return p.line(append([]string{"mcp_servers", name}, key...)...) }
		u, err := url.Parse(r.URL)
		if r.URL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return p.errf(at("url"), "mcp_servers.%s.url must be an http(s) URL, got %q", name, r.URL)
		}
		s := MCPServer{Name: name, URL: r.URL, AuthSecret: r.AuthSecret, AuthKey: r.AuthKey, Tools: r.Tools, Level: r.Level}
		if s.AuthSecret != "" && s.AuthKey == "" {
			s.AuthKey = "token"
		}
		if s.AuthSecret == "" && r.AuthKey != "" {
			return p.errf(at("auth_key"), "mcp_servers.%s.auth_key needs auth_secret", name)
		}
		if s.Level == "" {
			s.Level = LevelPublic
		}
		if err := p.enum(at("level"), fmt.Sprintf("mcp_servers.%s.level", name), s.Level, Levels...); err != nil {
			return err
		}
		for i, t := range s.Tools {
			if strings.TrimSpace(t) == "" {
				return p.errf(at("tools"), "mcp_servers.%s.tools[%d] is empty", name, i)
			}
			if builtin.IsRunTool(t) {
				return p.errf(at("tools"), "mcp_servers.%s.tools: %q is a built-in tool name", name, t)
			}
		}
		bp.MCPServers = append(bp.MCPServers, s)
	}
	bp.Tools = map[string]ToolConfig{}
	for _, name := range sortedKeys(raw.Tools) {
		r := raw.Tools[name]
		at := func(key string) int { return p.line("tools", name, key) }
		if r.Effect != "" {
			if err := p.enum(at("effect"), fmt.Sprintf("tools.%s.effect", name), r.Effect, EffectRead, EffectIdempotent, EffectWrite); err != nil {
				return err
			}
		}
		if r.Permission != "" {
			if err := p.enum(at("permission"), fmt.Sprintf("tools.%s.permission", name), r.Permission, PermAllow, PermAsk, PermDeny); err != nil {
				return err
			}
		}
		if r.Level != "" {
			if err := p.enum(at("level"), fmt.Sprintf("tools.%s.level", name), r.Level, Levels...); err != nil {
				return err
			}
		}
		bp.Tools[name] = ToolConfig(r)
	}
	bp.YoloProfiles = map[string]YoloProfile{}
	for _, name := range sortedKeys(raw.YoloProfiles) {
		r := raw.YoloProfiles[name]
		bp.YoloProfiles[name] = YoloProfile{Name: name, Approve: r.Approve, WaiveTaint: r.WaiveTaint}
	}
	bp.Agent.Clearance = raw.Agent.Clearance
	if bp.Agent.Clearance == "" {
		bp.Agent.Clearance = LevelPrivate
	}
	if err := p.enum(p.line("agent", "clearance"), "agent.clearance", bp.Agent.Clearance, Levels...); err != nil {
		return err
	}
	bp.Limits.InteractionTimeoutSeconds = DefaultInteractionTimeoutSeconds
	if t := raw.Limits.InteractionTimeoutSecs; t != nil {
		if *t < 0 {
			return p.errf(p.line("limits", "interaction_timeout_secs"), "limits.interaction_timeout_secs must be >= 0, got %d", *t)
		}
		bp.Limits.InteractionTimeoutSeconds = *t
	}
	return nil
}

// ServerFor returns the MCP server that offers tool: the one whose tools
// list names it, else the only server with no list. ok is false when no
// server (or more than one unlisted server) could offer it.
func (b *Blueprint) ServerFor(tool string) (MCPServer, bool) {
	var open []MCPServer
	for _, s := range b.MCPServers {
		if slices.Contains(s.Tools, tool) {
			return s, true
		}
		if len(s.Tools) == 0 {
			open = append(open, s)
		}
	}
	if len(open) == 1 {
		return open[0], true
	}
	return MCPServer{}, false
}

// Permission is the policy for a tool called in stage given its effect:
// the stage's tool_permissions, then the tool's table, then
// agent.tool_permissions (or the top-level [tool_permissions]), then allow
// for reads and ask for anything else.
func (b *Blueprint) Permission(stage, tool, effect string) string {
	if s, _, ok := b.Stage(stage); ok {
		if p, ok := s.ToolPermissions[tool]; ok {
			return p
		}
	}
	if c, ok := b.Tools[tool]; ok && c.Permission != "" {
		return c.Permission
	}
	if p, ok := b.Agent.ToolPermissions[tool]; ok {
		return p
	}
	if effect == EffectRead {
		return PermAllow
	}
	return PermAsk
}

// ToolLevel is the sensitivity of a tool's results: its table's level, else
// public for built-in tools, else its server's.
func (b *Blueprint) ToolLevel(tool string) string {
	if c, ok := b.Tools[tool]; ok && c.Level != "" {
		return c.Level
	}
	if builtin.IsRunTool(tool) {
		return LevelPublic // a person's answer or the run's own children
	}
	if a, ok := b.A2AAgent(tool); ok {
		return a.Level
	}
	if s, ok := b.ServerFor(tool); ok {
		return s.Level
	}
	return LevelPublic
}
