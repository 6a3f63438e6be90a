package blueprint

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

const toolAreaManifest = `[agent]
name = "x"
[mcp_servers.a]
url = "http://a.tools.svc/mcp"
[mcp_servers.b]
url = "http://b.tools.svc/mcp"

[stages.plan]
required_tools = ["ask_user", "search"]
allow_blocking_tools = true
accepts_messages = true
[stages.plan.tool_routing]
search = "b"

[stages.split]
mode = "fan_out"
worker_stage = "work"
allow_blocking_tools = false

[stages.work]
allow_as_worker = true

[stages.solo]
allow_as_worker = false
`

// TestStageToolKeys: the tool area's stage keys parse into the stage, and
// the keys' defaults are the zero value (blocking tools offered, any stage
// a worker stage, no messages).
func TestStageToolKeys(t *testing.T) {
	bp, err := Parse(map[string]string{"agent.toml": toolAreaManifest})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]StageTools{
		"plan":  {RequiredTools: []string{"ask_user", "search"}, ToolRouting: map[string]string{"search": "b"}, AcceptsMessages: true},
		"split": {HideBlockingTools: true},
		"work":  {},
		"solo":  {RefuseWorkers: true},
	}
	for name, w := range want {
		s, _, _ := bp.Stage(name)
		if !reflect.DeepEqual(s.StageTools, w) {
			t.Errorf("stage %s: got %+v, want %+v", name, s.StageTools, w)
		}
	}
	// Two open servers: only the routing resolves search, and only in plan.
	if srv, ok := bp.ServerIn("plan", "search"); !ok || srv.Name != "b" {
		t.Errorf("ServerIn(plan, search) = %v, %v", srv.Name, ok)
	}
	if _, ok := bp.ServerIn("work", "search"); ok {
		t.Errorf("ServerIn(work, search) resolved without routing")
	}
	if msg := bp.WorkerEntryError("solo"); !strings.Contains(msg, "allow_as_worker = false") {
		t.Errorf("WorkerEntryError(solo) = %q", msg)
	}
	if msg := bp.WorkerEntryError("work"); msg != "" {
		t.Errorf("WorkerEntryError(work) = %q", msg)
	}
	s, _, _ := bp.Stage("plan")
	if !s.Requires("search") || s.Requires("read_doc") {
		t.Errorf("Requires: %v", s.RequiredTools)
	}
}

// TestStageToolKeyErrors: each tool key's contradictions are refused with
// the key's line.
func TestStageToolKeyErrors(t *testing.T) {
	const head = "[agent]\nname = \"x\"\n[mcp_servers.a]\nurl = \"http://a.svc/mcp\"\ntools = [\"read_doc\"]\n" // lines 1-5
	tests := []struct {
		name, body string
		line       int
		msg        string
	}{
		{"required tool no server offers", "[stages.s]\nrequired_tools = [\"search\"]\n", 7, `required tool "search" is not built in and no MCP server`},
		{"required tool outside available_tools", "[stages.s]\navailable_tools = [\"read_doc\"]\nrequired_tools = [\"ask_user\"]\n", 8, `not in the stage's available_tools`},
		{"required tool denied", "[agent.tool_permissions]\nread_doc = \"deny\"\n[stages.s]\nrequired_tools = [\"read_doc\"]\n", 9, `denied by the blueprint's tool permissions`},
		{"required blocking tool hidden", "[stages.s]\nallow_blocking_tools = false\nrequired_tools = [\"ask_user\"]\n", 8, `waits on a person`},
		{"empty required tool", "[stages.s]\nrequired_tools = [\"\"]\n", 7, `required_tools[0] is empty`},
		{"routing to no server", "[stages.s]\n[stages.s.tool_routing]\nsearch = \"nope\"\n", 8, `not an [mcp_servers] table`},
		{"routing outside the server's list", "[stages.s]\n[stages.s.tool_routing]\nsearch = \"a\"\n", 8, `leaves "search" out`},
		{"routing a built-in tool", "[stages.s]\n[stages.s.tool_routing]\nask_user = \"a\"\n", 8, `is a built-in tool`},
		{"worker stage refusing workers", "[stages.s]\nmode = \"fan_out\"\nworker_stage = \"w\"\n[stages.w]\nallow_as_worker = false\n", 8, `sets allow_as_worker = false`},
		{"bad type", "[stages.s]\naccepts_messages = \"yes\"\n", 7, `accepts_messages`},
		{"still unknown", "[stages.s]\naccepts_message = true\n", 7, `unknown key "stages.s.accepts_message"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(map[string]string{"agent.toml": head + tt.body})
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("want *ParseError, got %T %v", err, err)
			}
			if pe.Line != tt.line || !strings.Contains(pe.Message, tt.msg) {
				t.Errorf("got line %d %q; want line %d containing %q", pe.Line, pe.Message, tt.line, tt.msg)
			}
		})
	}
}
