package blueprint

import (
	"errors"
	"strings"
	"testing"
)

func TestA2AParse(t *testing.T) {
	bp, err := Parse(map[string]string{"agent.toml": `[agent]
name = "x"
[agent.a2a]
expose = true
[[agent.a2a.skills]]
id = "summarize"
name = "Summarize"
description = "Summarizes a text."
tags = ["text"]
examples = ["summarize this"]
[a2a_agents.translator]
url = "http://translator.agents.svc:8080/"
level = "internal"
[a2a_agents.plain]
url = "https://plain.example/a2a"
[stages.a]
`})
	if err != nil {
		t.Fatal(err)
	}
	a := bp.Agent.A2A
	if a == nil || !a.Expose || len(a.Skills) != 1 || a.Skills[0].ID != "summarize" || a.Skills[0].Tags[0] != "text" || a.Skills[0].Examples[0] != "summarize this" {
		t.Fatalf("agent.a2a = %+v", a)
	}
	tr, ok := bp.A2AAgent("translator")
	if !ok || tr.URL != "http://translator.agents.svc:8080/" || tr.Level != LevelInternal || tr.Description != "" || bp.ToolLevel("translator") != LevelInternal {
		t.Errorf("translator = %+v, %v", tr, ok)
	}
	if p, _ := bp.A2AAgent("plain"); p.Level != LevelPublic {
		t.Errorf("plain level = %q, want public by default", p.Level)
	}
	if _, ok := bp.A2AAgent("nope"); ok {
		t.Error("an undeclared agent was found")
	}
	bare, err := Parse(map[string]string{"agent.toml": "[agent]\nname = \"x\"\n[stages.a]\n"})
	if err != nil || bare.Agent.A2A != nil || len(bare.A2AAgents) != 0 {
		t.Errorf("no a2a tables: %+v %v %v", bare.Agent.A2A, bare.A2AAgents, err)
	}
}

func TestA2AParseErrors(t *testing.T) {
	const head = "[agent]\nname = \"x\"\n"
	tests := []struct{ name, toml, msg string }{
		{"expose without skills", "[agent.a2a]\nexpose = true\n", "agent.a2a.expose needs at least one"},
		{"skill without description", "[agent.a2a]\n[[agent.a2a.skills]]\nid = \"a\"\nname = \"A\"\n", "agent.a2a.skills[0] needs id, name and description"},
		{"duplicate skill", "[agent.a2a]\n[[agent.a2a.skills]]\nid = \"a\"\nname = \"A\"\ndescription = \"d\"\n[[agent.a2a.skills]]\nid = \"a\"\nname = \"B\"\ndescription = \"d\"\n", `id "a" is used twice`},
		{"agent without url", "[a2a_agents.t]\n", "a2a_agents.t.url must be an http(s) URL"},
		{"agent with a bad scheme", "[a2a_agents.t]\nurl = \"ftp://x/\"\n", "a2a_agents.t.url must be an http(s) URL"},
		{"agent named like a built-in", "[a2a_agents.ask_user]\nurl = \"http://x/\"\n", "is a built-in tool name"},
		{"agent name no model takes", "[a2a_agents.\"a b\"]\nurl = \"http://x/\"\n", "may hold only letters"},
		{"agent with a bad level", "[a2a_agents.t]\nurl = \"http://x/\"\nlevel = \"secret\"\n", `a2a_agents.t.level "secret" is not one of`},
		{"unknown key", "[a2a_agents.t]\nurl = \"http://x/\"\nbogus = 1\n", `unknown key "a2a_agents.t.bogus"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(map[string]string{"agent.toml": head + tt.toml + "[stages.a]\n"})
			var pe *ParseError
			if !errors.As(err, &pe) || !strings.Contains(pe.Message, tt.msg) {
				t.Errorf("err = %v, want a ParseError containing %q", err, tt.msg)
			}
		})
	}
}
