package blueprint

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/money"
)

const fullManifest = `[agent]
name = "reviewer"
version = "1"
description = "Reviews a change."
entry_stage = "plan"
max_child_depth = 2

[agent.output]
format = "json"
instructions = "Return findings."
example = '{"findings": []}'
schema = '{"type": "object"}'
validator = "findings.rhai"

[agent.tool_permissions]
ask_user = "allow"
spawn_agent = "ask"
sleep = "deny"

[agent.title]
enabled = false
model = "demo/scripted-1"

[mcp_servers.tracker]
url = "http://tracker.tools.svc:8080/mcp"
auth_secret = "tracker-token"
tools = ["create_ticket", "read_doc"]
level = "internal"

[mcp_servers.wiki]
url = "https://wiki.example/mcp"

[tools.create_ticket]
effect = "write"
permission = "ask"
level = "private"

[yolo_profiles.ci]
approve = ["create_ticket"]
waive_taint = true

[limits]
interaction_timeout_secs = 60

[stages.plan]
system_prompt_file = "plan.md"
transition_prompt = "Pick the next stage."
max_iterations = 10
available_tools = ["ask_user", "submit_output"]

[stages.plan.model]
models = [{provider = "demo", model = "scripted-1"}, {provider = "backup", model = "x"}]

[stages.plan.transitions.split]
hint = "when the plan is ready"
transform = "clear"

[stages.plan.transitions.plan]
condition = "max_iterations"

[stages.plan.transitions.work]
condition = "stuck"
stuck_after_iterations = 4
stuck_after_minutes = 30
stuck_after_same_file_edits = 5
stuck_after_tool_calls = 100
transform = "custom"

[stages.plan.transitions.work.transform_config]
carry = ["conversation"]
clear = ["scratch"]
compact_prompt = "Keep the decisions."

[[stages.plan.script]]
text = "Thinking."
usage = {prompt = 10, completion = 5, cached = 2, cache_write = 1}
cost_usd = "0.0012"
delay_ms = 5
tool_calls = [{name = "ask_user", arguments = '{"q": "ok?"}'}]

[[stages.plan.script]]
text = "Plan ready."
next = "split"

[stages.split]
mode = "fan_out"
system_prompt = "Split the work."
worker_stage = "work"
merge_stage = "approve"
max_workers = 0
max_items = 8
on_worker_failure = "fail_all"
max_attempts = 2

[stages.split.transitions.approve]
condition = "always"

[[stages.split.script]]
items = ["a", "b"]

[stages.work]
system_prompt = "Do one item."
max_revisits = 2
require_output = true
allow_complete = true

[[stages.work.script]]
error = {status = 401, message = "invalid key"}

[[stages.work.script]]
output = '{"findings": []}'
complete = true

[stages.approve]
mode = "interactive_points"
requires_children = true
allow_complete = true

[[stages.approve.interaction_points]]
name = "approve-plan"
prompt = "Approve the plan?"
required = true
unattended = "ask"
style = "multiple_choice"
options = ["yes", "no"]
abort_options = ["no"]

[[stages.approve.interaction_points]]
name = "notes"
`

func ptr[T any](v T) *T { return &v }

func TestParseFull(t *testing.T) {
	files := map[string]string{"agent.toml": fullManifest, "plan.md": "You plan.\n", "findings.rhai": "fn validate(c) { () }"}
	bp, err := Parse(files)
	if err != nil {
		t.Fatal(err)
	}
	want := &Blueprint{
		ManifestKey: "agent.toml",
		Agent: AgentSection{
			Name: "reviewer", Version: "1", Description: "Reviews a change.",
			EntryStage: "plan", MaxChildDepth: ptr[int32](2),
			Output: &Output{
				Format: "json", Instructions: "Return findings.", Example: `{"findings": []}`,
				Schema: `{"type": "object"}`, Validator: "findings.rhai",
			},
			ToolPermissions: map[string]string{"ask_user": "allow", "spawn_agent": "ask", "sleep": "deny"},
			Title:           Title{Enabled: false, Model: "demo/scripted-1"},
			Clearance:       "private",
		},
		MCPServers: []MCPServer{
			{Name: "tracker", URL: "http://tracker.tools.svc:8080/mcp", AuthSecret: "tracker-token", AuthKey: "token", Tools: []string{"create_ticket", "read_doc"}, Level: "internal"},
			{Name: "wiki", URL: "https://wiki.example/mcp", Level: "public"},
		},
		Tools:        map[string]ToolConfig{"create_ticket": {Effect: "write", Permission: "ask", Level: "private"}},
		YoloProfiles: map[string]YoloProfile{"ci": {Name: "ci", Approve: []string{"create_ticket"}, WaiveTaint: true}},
		Limits:       Limits{InteractionTimeoutSeconds: 60},
		Stages: []*Stage{
			{
				Name: "plan", Mode: "autonomous", SystemPrompt: "You plan.\n", SystemPromptFile: "plan.md",
				TransitionPrompt: "Pick the next stage.", MaxIterations: 10,
				AvailableTools: []string{"ask_user", "submit_output"},
				Models:         []ModelRef{{"demo", "scripted-1"}, {"backup", "x"}},
				Transitions: []Transition{
					{Target: "split", Condition: "llm_choice", Hint: "when the plan is ready", Transform: "clear"},
					{Target: "plan", Condition: "max_iterations", Transform: "direct"},
					{
						Target: "work", Condition: "stuck", Transform: "custom",
						Stuck:           &StuckThresholds{Iterations: 4, Minutes: 30, SameFileEdits: 5, ToolCalls: 100},
						TransformConfig: &TransformConfig{Carry: []string{"conversation"}, Clear: []string{"scratch"}, CompactPrompt: "Keep the decisions."},
					},
				},
				Script: []ScriptStep{
					{
						Text:      "Thinking.",
						Usage:     ScriptUsage{Prompt: 10, Completion: 5, Cached: 2, CacheWrite: 1},
						CostUSD:   ptr(money.MustParseUSD("0.0012")),
						DelayMS:   5,
						ToolCalls: []ScriptToolCall{{Name: "ask_user", Arguments: `{"q": "ok?"}`}},
					},
					{Text: "Plan ready.", Next: "split"},
				},
			},
			{
				Name: "split", Mode: "fan_out", SystemPrompt: "Split the work.", MaxIterations: 25,
				Transitions: []Transition{{Target: "approve", Condition: "always", Transform: "direct"}},
				FanOut: &FanOutSpec{
					WorkerStage: "work", MergeStage: "approve", MaxWorkers: 0, MaxItems: 8,
					OnWorkerFailure: "fail_all", MaxAttempts: 2,
				},
				Script: []ScriptStep{{Items: []string{"a", "b"}}},
			},
			{
				Name: "work", Mode: "autonomous", SystemPrompt: "Do one item.", MaxIterations: 25,
				RequireOutput: true, AllowComplete: true, MaxRevisits: ptr(2),
				Script: []ScriptStep{
					{Error: &ScriptError{Status: 401, Message: "invalid key"}},
					{Output: `{"findings": []}`, Complete: true},
				},
			},
			{
				Name: "approve", Mode: "interactive_points", MaxIterations: 25,
				RequiresChildren: true, AllowComplete: true,
				InteractionPoints: []InteractionPoint{
					{
						Name: "approve-plan", Prompt: "Approve the plan?", Required: true, Unattended: "ask",
						Style: "multiple_choice", Options: []string{"yes", "no"}, AbortOptions: []string{"no"},
					},
					{Name: "notes", Unattended: "auto_approve", Style: "confirm"},
				},
			},
		},
	}
	if !reflect.DeepEqual(bp, want) {
		for i := range max(len(bp.Stages), len(want.Stages)) {
			if i < len(bp.Stages) && i < len(want.Stages) && !reflect.DeepEqual(bp.Stages[i], want.Stages[i]) {
				t.Errorf("stage %d:\n got %+v\nwant %+v", i, *bp.Stages[i], *want.Stages[i])
			}
		}
		if !reflect.DeepEqual(bp.Agent, want.Agent) {
			t.Errorf("agent:\n got %+v\nwant %+v", bp.Agent, want.Agent)
		}
		t.Fatal("parsed blueprint differs")
	}

	if s, i, ok := bp.Stage("work"); !ok || i != 2 || s.Name != "work" {
		t.Errorf("Stage(work) = %v, %d, %v", s, i, ok)
	}
	if _, i, ok := bp.Stage("nope"); ok || i != -1 {
		t.Errorf("Stage(nope) found")
	}
	if e := bp.EntryStage(); e.Name != "plan" {
		t.Errorf("EntryStage = %s", e.Name)
	}
	if tr, ok := bp.Stages[0].TransitionFor("max_iterations"); !ok || tr.Target != "plan" {
		t.Errorf("TransitionFor(max_iterations) = %+v, %v", tr, ok)
	}
	if _, ok := bp.Stages[0].TransitionFor("error"); ok {
		t.Errorf("TransitionFor(error) found")
	}
}

func TestStageOrderAndDefaults(t *testing.T) {
	src := `[agent]
name = "order"

[stages.zeta.transitions.alpha]
[stages.zeta.transitions.mid]
condition = "error"

[stages.alpha]
system_prompt = "a"

[stages.mid]
`
	bp, err := Parse(map[string]string{"agent.leviath": src})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range bp.Stages {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, ","); got != "zeta,alpha,mid" {
		t.Errorf("stage order %s", got)
	}
	if bp.ManifestKey != "agent.leviath" || bp.Agent.EntryStage != "zeta" || bp.EntryStage().Name != "zeta" {
		t.Errorf("entry %q from %q", bp.Agent.EntryStage, bp.ManifestKey)
	}
	z := bp.Stages[0]
	if len(z.Transitions) != 2 || z.Transitions[0].Target != "alpha" || z.Transitions[0].Condition != "llm_choice" || z.Transitions[1].Target != "mid" {
		t.Errorf("transitions %+v", z.Transitions)
	}
	if z.Mode != "autonomous" || z.MaxIterations != 25 || z.FanOut != nil {
		t.Errorf("defaults %+v", z)
	}
	if !bp.Agent.Title.Enabled || bp.Agent.MaxChildDepth != nil || bp.Agent.Output != nil {
		t.Errorf("agent defaults %+v", bp.Agent)
	}
}

func TestFanOutDefaults(t *testing.T) {
	src := `[agent]
name = "f"
[stages.split]
mode = "fan_out"
worker_agent = "other-blueprint"
[agent.output]
`
	bp, err := Parse(map[string]string{"agent.toml": src})
	if err != nil {
		t.Fatal(err)
	}
	want := &FanOutSpec{WorkerAgent: "other-blueprint", MaxWorkers: 30, OnWorkerFailure: "continue", MaxAttempts: 3}
	if !reflect.DeepEqual(bp.Stages[0].FanOut, want) {
		t.Errorf("got %+v", bp.Stages[0].FanOut)
	}
	if bp.Agent.Output == nil || bp.Agent.Output.Format != "text" {
		t.Errorf("output %+v", bp.Agent.Output)
	}
}

func TestAgentTomlPreferred(t *testing.T) {
	bp, err := Parse(map[string]string{
		"agent.toml":    "[agent]\nname = \"new\"\n[stages.a]\n",
		"agent.leviath": "not toml at all",
	})
	if err != nil || bp.Agent.Name != "new" {
		t.Fatalf("%v %v", bp, err)
	}
}

func TestParseErrors(t *testing.T) {
	const head = "[agent]\nname = \"x\"\n" // lines 1-2
	tests := []struct {
		name  string
		files map[string]string
		key   string
		line  int
		msg   string
	}{
		{
			name:  "no manifest",
			files: map[string]string{"plan.md": "x"},
			key:   "agent.toml", line: 0, msg: `no "agent.toml" key`,
		},
		{
			name:  "syntax error",
			files: map[string]string{"agent.toml": head + "[stages.a]\nmode = = 1\n"},
			key:   "agent.toml", line: 4, msg: "expected value",
		},
		{
			name:  "syntax error in legacy key",
			files: map[string]string{"agent.leviath": "[agent\n"},
			key:   "agent.leviath", line: 1, msg: "",
		},
		{
			name:  "type mismatch",
			files: map[string]string{"agent.toml": head + "[stages.a]\nmax_iterations = \"ten\"\n"},
			key:   "agent.toml", line: 4, msg: `"stages.a.max_iterations"`,
		},
		{
			name:  "unknown key",
			files: map[string]string{"agent.toml": head + "[stages.a]\nmode = \"autonomous\"\nbogus = 1\n"},
			key:   "agent.toml", line: 5, msg: `unknown key "stages.a.bogus"`,
		},
		{
			name:  "unknown table reported once",
			files: map[string]string{"agent.toml": head + "\n[extra]\nx = 1\n[stages.a]\n"},
			key:   "agent.toml", line: 4, msg: `unknown key "extra"`,
		},
		{
			name:  "unknown key in script element",
			files: map[string]string{"agent.toml": head + "[stages.a]\n[[stages.a.script]]\ntext = \"a\"\n[[stages.a.script]]\nnxt = \"b\"\n"},
			key:   "agent.toml", line: 7, msg: `unknown key "stages.a.script.nxt"`,
		},
		{
			name:  "missing name",
			files: map[string]string{"agent.toml": "[agent]\nversion = \"1\"\n[stages.a]\n"},
			key:   "agent.toml", line: 1, msg: "agent.name is required",
		},
		{
			name:  "no stages",
			files: map[string]string{"agent.toml": head},
			key:   "agent.toml", line: 0, msg: "no stages",
		},
		{
			name: "bad transition target",
			files: map[string]string{"agent.toml": head + `
[stages.plan]
[stages.review]
system_prompt = "r"

[stages.review.transitions.nope]
hint = "never"
`},
			key: "agent.toml", line: 8, msg: `stage "review": transition target "nope" is not a stage`,
		},
		{
			name:  "bad entry stage",
			files: map[string]string{"agent.toml": "[agent]\nname = \"x\"\nentry_stage = \"zz\"\n[stages.a]\n"},
			key:   "agent.toml", line: 3, msg: `entry_stage "zz" is not a stage`,
		},
		{
			name:  "bad mode enum",
			files: map[string]string{"agent.toml": head + "[stages.a]\nmode = \"solo\"\n"},
			key:   "agent.toml", line: 4, msg: `mode "solo" is not one of autonomous, interactive_points, fan_out`,
		},
		{
			name:  "bad condition enum",
			files: map[string]string{"agent.toml": head + "[stages.a]\n[stages.a.transitions.a]\ncondition = \"sometimes\"\n"},
			key:   "agent.toml", line: 5, msg: `condition "sometimes" is not one of`,
		},
		{
			name:  "bad tool permission",
			files: map[string]string{"agent.toml": head + "[agent.tool_permissions]\nsleep = \"maybe\"\n[stages.a]\n"},
			key:   "agent.toml", line: 4, msg: `tool_permissions.sleep "maybe"`,
		},
		{
			name:  "bad output format",
			files: map[string]string{"agent.toml": head + "[agent.output]\nformat = \"yaml\"\n[stages.a]\n"},
			key:   "agent.toml", line: 4, msg: `agent.output.format "yaml"`,
		},
		{
			name:  "schema not json",
			files: map[string]string{"agent.toml": head + "[agent.output]\nformat = \"json\"\nschema = \"{nope\"\n[stages.a]\n"},
			key:   "agent.toml", line: 5, msg: "not a JSON object",
		},
		{
			name:  "missing prompt file",
			files: map[string]string{"agent.toml": head + "[stages.a]\n\nsystem_prompt_file = \"a.md\"\n"},
			key:   "agent.toml", line: 5, msg: `system_prompt_file "a.md" is not a key`,
		},
		{
			name:  "both prompts",
			files: map[string]string{"agent.toml": head + "[stages.a]\nsystem_prompt = \"x\"\nsystem_prompt_file = \"a.md\"\n", "a.md": "x"},
			key:   "agent.toml", line: 5, msg: "not both",
		},
		{
			name: "bad script next",
			files: map[string]string{"agent.toml": head + `[stages.a]
[stages.a.transitions.b]
[stages.b]
[[stages.a.script]]
text = "one"
[[stages.a.script]]
text = "two"
next = "c"
`},
			key: "agent.toml", line: 10, msg: `stage "a": script step 2: next "c" is not a transition`,
		},
		{
			name: "script complete without allow_complete",
			files: map[string]string{"agent.toml": head + `[stages.a]
[stages.a.transitions.a]
[[stages.a.script]]
complete = true
`},
			key: "agent.toml", line: 6, msg: "allow_complete",
		},
		{
			name:  "bad script cost",
			files: map[string]string{"agent.toml": head + "[stages.a]\n[[stages.a.script]]\ncost_usd = \"-1\"\n"},
			key:   "agent.toml", line: 5, msg: "cost_usd",
		},
		{
			name:  "script tool call arguments",
			files: map[string]string{"agent.toml": head + "[stages.a]\n[[stages.a.script]]\ntool_calls = [{name = \"t\", arguments = \"[1]\"}]\n"},
			key:   "agent.toml", line: 5, msg: "not a JSON object",
		},
		{
			name:  "script items outside fan_out",
			files: map[string]string{"agent.toml": head + "[stages.a]\n[[stages.a.script]]\nitems = [\"x\"]\n"},
			key:   "agent.toml", line: 5, msg: "items are only valid",
		},
		{
			name:  "max_iterations 0",
			files: map[string]string{"agent.toml": head + "[stages.a]\nmax_iterations = 0\n"},
			key:   "agent.toml", line: 4, msg: "max_iterations must be >= 1",
		},
		{
			name:  "fan_out with both worker fields",
			files: map[string]string{"agent.toml": head + "[stages.a]\nmode = \"fan_out\"\nworker_agent = \"w\"\nworker_stage = \"b\"\n[stages.b]\n"},
			key:   "agent.toml", line: 6, msg: "exactly one of worker_agent, worker_stage and worker_query",
		},
		{
			name:  "fan_out with neither worker field",
			files: map[string]string{"agent.toml": head + "[stages.a]\nmode = \"fan_out\"\n"},
			key:   "agent.toml", line: 3, msg: "exactly one of",
		},
		{
			name:  "fan_out field outside fan_out",
			files: map[string]string{"agent.toml": head + "[stages.a]\nmax_workers = 3\n"},
			key:   "agent.toml", line: 4, msg: "max_workers is only valid",
		},
		{
			name:  "fan_out worker stage missing",
			files: map[string]string{"agent.toml": head + "[stages.a]\nmode = \"fan_out\"\nworker_stage = \"ghost\"\n"},
			key:   "agent.toml", line: 5, msg: `worker_stage "ghost" is not a stage`,
		},
		{
			name:  "model entry missing provider",
			files: map[string]string{"agent.toml": head + "[stages.a]\n[stages.a.model]\nmodels = [{model = \"m\"}]\n"},
			key:   "agent.toml", line: 5, msg: "needs both provider and model",
		},
		{
			name: "interaction point bad style",
			files: map[string]string{"agent.toml": head + `[stages.a]
mode = "interactive_points"
[[stages.a.interaction_points]]
name = "p"
style = "essay"
`},
			key: "agent.toml", line: 7, msg: `style "essay"`,
		},
		{
			name:  "interactive_points without points",
			files: map[string]string{"agent.toml": head + "[stages.a]\nmode = \"interactive_points\"\n"},
			key:   "agent.toml", line: 4, msg: "needs at least one",
		},
		{
			name:  "title model without provider",
			files: map[string]string{"agent.toml": head + "[agent.title]\nmodel = \"gpt\"\n[stages.a]\n"},
			key:   "agent.toml", line: 4, msg: `"provider/model"`,
		},
		{
			name:  "mcp server without url scheme",
			files: map[string]string{"agent.toml": head + "[stages.a]\n[mcp_servers.t]\nurl = \"tracker:8080\"\n"},
			key:   "agent.toml", line: 5, msg: `mcp_servers.t.url must be an http(s) URL`,
		},
		{
			name:  "mcp auth key without secret",
			files: map[string]string{"agent.toml": head + "[stages.a]\n[mcp_servers.t]\nurl = \"http://t/mcp\"\nauth_key = \"k\"\n"},
			key:   "agent.toml", line: 6, msg: `auth_key needs auth_secret`,
		},
		{
			name:  "mcp server claims a built-in tool",
			files: map[string]string{"agent.toml": head + "[stages.a]\n[mcp_servers.t]\nurl = \"http://t/mcp\"\ntools = [\"ask_user\"]\n"},
			key:   "agent.toml", line: 6, msg: `"ask_user" is a built-in tool name`,
		},
		{
			name:  "bad tool effect",
			files: map[string]string{"agent.toml": head + "[stages.a]\n[tools.x]\neffect = \"maybe\"\n"},
			key:   "agent.toml", line: 5, msg: `tools.x.effect`,
		},
		{
			name:  "bad tool permission",
			files: map[string]string{"agent.toml": head + "[stages.a]\n[tools.x]\npermission = \"sometimes\"\n"},
			key:   "agent.toml", line: 5, msg: `tools.x.permission`,
		},
		{
			name:  "bad clearance",
			files: map[string]string{"agent.toml": "[agent]\nname = \"x\"\nclearance = \"top\"\n[stages.a]\n"},
			key:   "agent.toml", line: 3, msg: `agent.clearance`,
		},
		{
			name:  "negative max_revisits",
			files: map[string]string{"agent.toml": head + "[stages.a]\nmax_revisits = -1\n"},
			key:   "agent.toml", line: 4, msg: `max_revisits must be >= 0`,
		},
		{
			name:  "stuck edge without threshold",
			files: map[string]string{"agent.toml": head + "[stages.a.transitions.b]\ncondition = \"stuck\"\n[stages.b]\n"},
			key:   "agent.toml", line: 4, msg: `condition stuck needs at least one of stuck_after_iterations`,
		},
		{
			name:  "threshold on a non-stuck edge",
			files: map[string]string{"agent.toml": head + "[stages.a.transitions.b]\nhint = \"x\"\nstuck_after_minutes = 5\n[stages.b]\n"},
			key:   "agent.toml", line: 3, msg: `stuck_after_* thresholds need condition = "stuck"`,
		},
		{
			name:  "zero stuck threshold",
			files: map[string]string{"agent.toml": head + "[stages.a.transitions.b]\ncondition = \"stuck\"\nstuck_after_tool_calls = 0\n[stages.b]\n"},
			key:   "agent.toml", line: 5, msg: `stuck_after_tool_calls must be >= 1, got 0`,
		},
		{
			name:  "unknown stuck key",
			files: map[string]string{"agent.toml": head + "[stages.a.transitions.b]\ncondition = \"stuck\"\nstuck_after_turns = 3\n[stages.b]\n"},
			key:   "agent.toml", line: 5, msg: `unknown key "stages.a.transitions.b.stuck_after_turns"`,
		},
		{
			name:  "bad transform",
			files: map[string]string{"agent.toml": head + "[stages.a.transitions.b]\ntransform = \"shrink\"\n[stages.b]\n"},
			key:   "agent.toml", line: 4, msg: `transform "shrink" is not one of direct, clear, compact, summarize, custom`,
		},
		{
			name:  "transform_config without custom",
			files: map[string]string{"agent.toml": head + "[stages.a.transitions.b]\ntransform = \"clear\"\n[stages.a.transitions.b.transform_config]\ncarry = [\"conversation\"]\n[stages.b]\n"},
			key:   "agent.toml", line: 5, msg: `transform_config needs transform = "custom"`,
		},
		{
			name:  "custom without transform_config",
			files: map[string]string{"agent.toml": head + "[stages.a.transitions.b]\ntransform = \"custom\"\n[stages.b]\n"},
			key:   "agent.toml", line: 4, msg: `needs a transform_config table`,
		},
		{
			name:  "region in two transform lists",
			files: map[string]string{"agent.toml": head + "[stages.a.transitions.b]\ntransform = \"custom\"\n[stages.a.transitions.b.transform_config]\ncarry = [\"conversation\"]\nclear = [\"conversation\"]\n[stages.b]\n"},
			key:   "agent.toml", line: 7, msg: `region "conversation" in both carry and clear`,
		},
		{
			name:  "unknown transform_config key",
			files: map[string]string{"agent.toml": head + "[stages.a.transitions.b]\ntransform = \"custom\"\n[stages.a.transitions.b.transform_config]\nkeep = [\"x\"]\n[stages.b]\n"},
			key:   "agent.toml", line: 6, msg: `unknown key "stages.a.transitions.b.transform_config.keep"`,
		},
		{
			name:  "validator is not a file",
			files: map[string]string{"agent.toml": head + "[agent.output]\nvalidator = \"validators/a2ui.rhai\"\n[stages.a]\n"},
			key:   "agent.toml", line: 4, msg: `validator "validators/a2ui.rhai" is not a key of the blueprint ConfigMap; ConfigMap keys are flat`,
		},
		{
			name:  "negative interaction timeout",
			files: map[string]string{"agent.toml": head + "[stages.a]\n[limits]\ninteraction_timeout_secs = -1\n"},
			key:   "agent.toml", line: 5, msg: `interaction_timeout_secs must be >= 0`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.files)
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("want *ParseError, got %T %v", err, err)
			}
			if pe.Key != tt.key || pe.Line != tt.line || !strings.Contains(pe.Message, tt.msg) {
				t.Errorf("got key %q line %d msg %q; want key %q line %d msg containing %q", pe.Key, pe.Line, pe.Message, tt.key, tt.line, tt.msg)
			}
		})
	}
}

func TestParseErrorString(t *testing.T) {
	e := &ParseError{Key: "agent.toml", Line: 12, Message: `stage "review": transition target "nope" is not a stage`}
	if got := e.Error(); got != `agent.toml line 12: stage "review": transition target "nope" is not a stage` {
		t.Errorf("got %q", got)
	}
	e.Line = 0
	if got := e.Error(); got != `agent.toml: stage "review": transition target "nope" is not a stage` {
		t.Errorf("got %q", got)
	}
}

func TestHash(t *testing.T) {
	a := map[string]string{"agent.toml": "x", "plan.md": "y"}
	b := map[string]string{"plan.md": "y", "agent.toml": "x"}
	if Hash(a) != Hash(b) || len(Hash(a)) != 64 {
		t.Errorf("hash not stable: %s %s", Hash(a), Hash(b))
	}
	for _, other := range []map[string]string{
		{"agent.toml": "x", "plan.md": "z"},
		{"agent.toml": "xp", "lan.md": "y"},
		{"agent.toml": "x"},
		{},
	} {
		if Hash(other) == Hash(a) {
			t.Errorf("collision with %v", other)
		}
	}
}

func TestToolPolicy(t *testing.T) {
	bp, err := Parse(map[string]string{"agent.toml": `[agent]
name = "x"
clearance = "internal"
[agent.tool_permissions]
read_doc = "deny"
[mcp_servers.tracker]
url = "http://tracker/mcp"
tools = ["create_ticket", "read_doc"]
level = "internal"
[mcp_servers.wiki]
url = "http://wiki/mcp"
level = "private"
[tools.create_ticket]
permission = "allow"
level = "public"
[stages.a]
`})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ tool, effect, want string }{
		{"create_ticket", EffectWrite, PermAllow}, // the tool's table wins
		{"read_doc", EffectRead, PermDeny},        // then agent.tool_permissions
		{"search", EffectRead, PermAllow},         // reads default to allow
		{"search", EffectIdempotent, PermAsk},     // anything else asks
		{"search", EffectWrite, PermAsk},
	} {
		if got := bp.Permission("", c.tool, c.effect); got != c.want {
			t.Errorf("Permission(%s, %s) = %s, want %s", c.tool, c.effect, got, c.want)
		}
	}
	for _, c := range []struct{ tool, server, level string }{
		{"create_ticket", "tracker", LevelPublic}, // the tool's level overrides its server's
		{"read_doc", "tracker", LevelInternal},
		{"search", "wiki", LevelPrivate}, // the one server with no list offers the rest
	} {
		s, ok := bp.ServerFor(c.tool)
		if !ok || s.Name != c.server {
			t.Errorf("ServerFor(%s) = %v %v, want %s", c.tool, s.Name, ok, c.server)
		}
		if got := bp.ToolLevel(c.tool); got != c.level {
			t.Errorf("ToolLevel(%s) = %s, want %s", c.tool, got, c.level)
		}
	}
	if LevelRank("nonsense") <= LevelRank(LevelPrivate) {
		t.Error("an unknown level must rank above every known one (fail closed)")
	}
}
