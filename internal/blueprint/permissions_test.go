package blueprint

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestStageAndTopLevelPermissions: a stage's tool_permissions win in that
// stage only; Leviath's top-level [tool_permissions] is the agent's table;
// read_paths are kept as written.
func TestStageAndTopLevelPermissions(t *testing.T) {
	bp, err := Parse(map[string]string{"agent.toml": `[agent]
name = "x"
[agent.tool_permissions]
read_doc = "ask"
[tool_permissions]
search = "deny"
read_doc = "ask"
[read_paths]
allow = ["docs/README.md", "glob:src/**/*.go", "regex:^notes/.*\\.md$"]
[tools.create_ticket]
permission = "allow"
[stages.plan]
tool_permissions = {create_ticket = "deny", search = "allow"}
[stages.plan.transitions.build]
[stages.build]
`})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ stage, tool, effect, want string }{
		{"plan", "create_ticket", EffectWrite, PermDeny}, // the stage's table wins over the tool's
		{"build", "create_ticket", EffectWrite, PermAllow},
		{"plan", "search", EffectRead, PermAllow}, // and over the top-level table
		{"build", "search", EffectRead, PermDeny},
		{"build", "read_doc", EffectRead, PermAsk},
		{"plan", "other", EffectWrite, PermAsk},
	} {
		if got := bp.Permission(c.stage, c.tool, c.effect); got != c.want {
			t.Errorf("Permission(%s, %s, %s) = %s, want %s", c.stage, c.tool, c.effect, got, c.want)
		}
	}
	if !slices.Equal(bp.ReadPaths, []string{"docs/README.md", "glob:src/**/*.go", `regex:^notes/.*\.md$`}) {
		t.Errorf("read paths %q", bp.ReadPaths)
	}
}

func TestPermissionAndReadPathErrors(t *testing.T) {
	const head = "[agent]\nname = \"x\"\n" // lines 1-2
	for _, c := range []struct {
		name, manifest string
		line           int
		msg            string
	}{
		{"stage permission", head + "[stages.a]\ntool_permissions = {x = \"sometimes\"}\n", 4, `stage "a": tool_permissions.x`},
		{"top-level permission", head + "[tool_permissions]\nx = \"never\"\n[stages.a]\n", 4, "tool_permissions.x"},
		{"two policies", head + "[agent.tool_permissions]\nx = \"allow\"\n[tool_permissions]\nx = \"deny\"\n[stages.a]\n", 6, `"deny" here and "allow" in [agent.tool_permissions]`},
		{"bad regex", head + "[read_paths]\nallow = [\"regex:(\"]\n[stages.a]\n", 4, `read_paths.allow[0] "regex:(": is not a regular expression`},
		{"bad glob", head + "[read_paths]\nallow = [\"glob:[\"]\n[stages.a]\n", 4, "is not a glob pattern"},
		{"empty path", head + "[read_paths]\nallow = [\"ok\", \" \"]\n[stages.a]\n", 4, "read_paths.allow[1]"},
		{"unknown read_paths key", head + "[read_paths]\ndeny = [\"x\"]\n[stages.a]\n", 4, "read_paths.deny"},
		{"denied required tool", head + "[stages.a]\nrequired_tools = [\"ask_user\"]\ntool_permissions = {ask_user = \"deny\"}\n", 4, `required tool "ask_user" is denied`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(map[string]string{"agent.toml": c.manifest})
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("want *ParseError, got %v", err)
			}
			if pe.Line != c.line || !strings.Contains(pe.Message, c.msg) {
				t.Errorf("line %d %q, want line %d containing %q", pe.Line, pe.Message, c.line, c.msg)
			}
		})
	}
}
