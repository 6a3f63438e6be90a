package blueprint

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/agentrun-dev/agentrun-operator/internal/builtin"
)

// A2A is the [agent.a2a] table: whether the A2A endpoint offers this
// blueprint's agent to other agents, and the skills its agent card lists.
type A2A struct {
	// Expose lets the A2A endpoint serve an agent card for the blueprint
	// and start runs of it; false (the default) keeps it off A2A.
	Expose bool
	// Skills are what the agent card tells callers the agent can do.
	Skills []A2ASkill
}

// A2ASkill is one [[agent.a2a.skills]] entry, an A2A AgentSkill.
type A2ASkill struct {
	ID          string
	Name        string
	Description string
	Tags        []string
	Examples    []string
}

// A2AAgent is an [a2a_agents.<name>] table: a remote A2A agent a stage may
// call as a tool named <name>.
type A2AAgent struct {
	Name string
	// URL is the agent's JSON-RPC endpoint (its card's url).
	URL string
	// Description is what the model is told the tool does; empty: the
	// agent card's description and skills.
	Description string
	// Level is the sensitivity of the agent's answers.
	Level string
}

type rawA2A struct {
	Expose bool          `toml:"expose"`
	Skills []rawA2ASkill `toml:"skills"`
}

type rawA2ASkill struct {
	ID          string   `toml:"id"`
	Name        string   `toml:"name"`
	Description string   `toml:"description"`
	Tags        []string `toml:"tags"`
	Examples    []string `toml:"examples"`
}

type rawA2AAgent struct {
	URL         string `toml:"url"`
	Description string `toml:"description"`
	Level       string `toml:"level"`
}

// toolNameRE is what model APIs accept as a function name.
var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// a2a validates [agent.a2a] and the [a2a_agents] tables.
func (p *parser) a2a(raw *rawManifest, bp *Blueprint) *ParseError {
	if r := raw.Agent.A2A; r != nil {
		a := &A2A{Expose: r.Expose}
		seen := map[string]bool{}
		for i, s := range r.Skills {
			at := p.line("agent", "a2a", "skills")
			if strings.TrimSpace(s.ID) == "" || strings.TrimSpace(s.Name) == "" || strings.TrimSpace(s.Description) == "" {
				return p.errf(at, "agent.a2a.skills[%d] needs id, name and description", i)
			}
			if seen[s.ID] {
				return p.errf(at, "agent.a2a.skills[%d]: id %q is used twice", i, s.ID)
			}
			seen[s.ID] = true
			a.Skills = append(a.Skills, A2ASkill(s))
		}
		if a.Expose && len(a.Skills) == 0 {
			return p.errf(p.line("agent", "a2a", "expose"), "agent.a2a.expose needs at least one [[agent.a2a.skills]] entry (id, name, description) for the agent card")
		}
		bp.Agent.A2A = a
	}
	for _, name := range sortedKeys(raw.A2AAgents) {
		r := raw.A2AAgents[name]
		at := func(key string) int { return p.line("a2a_agents", name, key) }
		if !toolNameRE.MatchString(name) {
			return p.errf(p.line("a2a_agents", name), "a2a_agents.%s: the name is the tool's name, so it may hold only letters, digits, _ and - (at most 64)", name)
		}
		if builtin.IsRunTool(name) {
			return p.errf(p.line("a2a_agents", name), "a2a_agents.%s: %q is a built-in tool name", name, name)
		}
		u, err := url.Parse(r.URL)
		if r.URL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return p.errf(at("url"), "a2a_agents.%s.url must be an http(s) URL, got %q", name, r.URL)
		}
		a := A2AAgent{Name: name, URL: r.URL, Description: r.Description, Level: r.Level}
		if a.Level == "" {
			a.Level = LevelPublic
		}
		if err := p.enum(at("level"), fmt.Sprintf("a2a_agents.%s.level", name), a.Level, Levels...); err != nil {
			return err
		}
		bp.A2AAgents = append(bp.A2AAgents, a)
	}
	return nil
}

// A2AAgent returns the [a2a_agents] table that offers tool.
func (b *Blueprint) A2AAgent(tool string) (A2AAgent, bool) {
	for _, a := range b.A2AAgents {
		if a.Name == tool {
			return a, true
		}
	}
	return A2AAgent{}, false
}
