package providers_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/providers/providertest"
)

// sdkProvider is one real-SDK provider with its loopback server.
type sdkProvider struct {
	name string
	new  func(t *testing.T) (*providertest.Server, providers.Provider)
}

var sdkProviders = []sdkProvider{
	{"openai", func(t *testing.T) (*providertest.Server, providers.Provider) {
		srv := providertest.NewOpenAIServer(t)
		return srv, providers.NewOpenAI(srv.URL, nil)
	}},
	{"anthropic", func(t *testing.T) (*providertest.Server, providers.Provider) {
		srv := providertest.NewAnthropicServer(t)
		return srv, providers.NewAnthropic(srv.URL, nil)
	}},
}

const searchSchema = `{"type":"object","properties":{"q":{"type":"string","description":"Query."}},"required":["q"]}`

// toolRequest offers the run's own tools: one with a schema, one without,
// one clashing with a built-in and a repeated name.
func toolRequest() providers.Request {
	req := baseRequest()
	req.Tools = []providers.ToolSpec{
		{Name: "search", Description: "Search the docs.", InputSchema: json.RawMessage(searchSchema)},
		{Name: "ask_user", Description: "Ask the user a question."},
		{Name: "sleep", Description: "A tool server's own sleep.", InputSchema: json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer"}}}`)},
		{Name: "search", Description: "A second search.", InputSchema: json.RawMessage(`{"type":"object"}`)},
	}
	return req
}

func decode(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad test JSON %s: %v", s, err)
	}
	return v
}

func TestToolsOffered(t *testing.T) {
	want := map[string]string{
		"transition":  `{"type":"object","properties":{"target":{"type":"string","description":"Name of the stage to move to."}},"required":["target"]}`,
		"complete":    `{"type":"object","properties":{"output":{"type":"string","description":"The run's final output."}},"required":["output"]}`,
		"spawn_agent": `{"type":"object","properties":{"blueprint":{"type":"string","description":"Name of the agent blueprint to run."},"task":{"type":"string","description":"The sub-agent's task."}},"required":["blueprint","task"]}`,
		"fan_out":     `{"type":"object","properties":{"items":{"type":"array","items":{"type":"string"},"description":"The work items, one per worker."}},"required":["items"]}`,
		"sleep":       `{"type":"object","properties":{"seconds":{"type":"integer","minimum":1,"description":"How long to sleep, in seconds."}},"required":["seconds"]}`,
		"search":      searchSchema,
		"ask_user":    `{"type":"object"}`,
	}
	for _, sp := range sdkProviders {
		t.Run(sp.name, func(t *testing.T) {
			srv, p := sp.new(t)
			mustCall(t, p, toolRequest())
			got := srv.Last().Tools()
			var names []string
			for name, schema := range got {
				names = append(names, name)
				if d, _ := schema["$description"].(string); d == "" {
					t.Errorf("tool %s has no description", name)
				}
				delete(schema, "$description")
			}
			sort.Strings(names)
			if want := []string{"ask_user", "complete", "fan_out", "search", "sleep", "spawn_agent", "transition"}; !reflect.DeepEqual(names, want) {
				t.Errorf("tools offered = %v, want %v (one of each name)", names, want)
			}
			for name, schema := range want {
				if w := decode(t, schema); !reflect.DeepEqual(any(got[name]), w) {
					t.Errorf("tool %s schema = %v, want %v", name, got[name], w)
				}
			}
			if d := srv.Last().Tools()["search"]["$description"]; d != "Search the docs." {
				t.Errorf("search description = %v, want the first search tool's", d)
			}
		})
	}
}

func TestToolCallsToOfferedTools(t *testing.T) {
	for _, sp := range sdkProviders {
		t.Run(sp.name, func(t *testing.T) {
			srv, p := sp.new(t)
			srv.Push(providertest.Reply{Text: "Looking it up.", ToolCalls: []providertest.ToolCall{
				{ID: "id-1", Name: "search", Args: `{"q":"pods"}`},
				{ID: "id-2", Name: "ask_user", Args: ""},
				{ID: "id-3", Name: "search", Args: `["not","an","object"]`},
				{ID: "id-4", Name: "transition", Args: `{"target":"review"}`},
			}})
			got := mustCall(t, p, toolRequest()).Response
			want := journal.Response{
				Text: "Looking it up.", Next: "review", ToolCalls: 4,
				Calls: []journal.ToolCall{
					{ID: "id-1", Name: "search", Arguments: `{"q":"pods"}`},
					{ID: "id-2", Name: "ask_user", Arguments: `{}`},
					{ID: "id-3", Name: "search", Arguments: `["not","an","object"]`},
				},
				Moves: []journal.Move{move("id-4", "transition", `{"target":"review"}`, "")},
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Response = %+v, want %+v", got, want)
			}
		})
	}
}

func TestBuiltinTools(t *testing.T) {
	for _, sp := range sdkProviders {
		t.Run(sp.name, func(t *testing.T) {
			srv, p := sp.new(t)
			srv.Push(providertest.Reply{ToolCalls: []providertest.ToolCall{
				{Name: "spawn_agent", Args: `{"blueprint":"researcher","task":"dig"}`},
				{Name: "spawn_agent", Args: `{"task":"no blueprint"}`},
				{Name: "sleep", Args: `{"seconds":0}`},
				{Name: "sleep", Args: `{"seconds":30}`},
				{Name: "sleep", Args: `{"seconds":5}`},
				{Name: "spawn_agent", Args: `{"blueprint":"writer","task":"draft"}`},
				{Name: "fan_out", Args: `{"items":["a","b"]}`},
				{Name: "complete", Args: `{"output":"done"}`},
				{Name: "transition", Args: `{"target":"late"}`},
			}})
			// The request's own "sleep" loses to the built-in. Every call
			// is kept as made, each ignored one with why.
			got := mustCall(t, p, toolRequest()).Response
			wantMoves := []string{
				"spawn_agent", `spawn_agent: the arguments must be an object with a non-empty "blueprint"`,
				`sleep: the arguments must be an object with "seconds" of at least 1`, "sleep",
				"sleep: an earlier sleep call in the same answer decides", "spawn_agent", "fan_out", "complete",
				"transition: an earlier transition or complete call in the same answer decides",
			}
			if m := moveNames(&got); !reflect.DeepEqual(m, wantMoves) {
				t.Errorf("Moves = %q, want %q", m, wantMoves)
			}
			want := journal.Response{
				Complete: true, Output: "done", ToolCalls: 9,
				Spawns:       []journal.Spawn{{Agent: "researcher", Task: "dig"}, {Agent: "writer", Task: "draft"}},
				Items:        []string{"a", "b"},
				SleepSeconds: 30,
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Response = %+v, want %+v", got, want)
			}
		})
	}
}

func TestUnknownToolsCountedNotCalled(t *testing.T) {
	for _, sp := range sdkProviders {
		t.Run(sp.name, func(t *testing.T) {
			srv, p := sp.new(t)
			srv.Push(providertest.Reply{ToolCalls: []providertest.ToolCall{
				{Name: "shell", Args: `{"cmd":"ls"}`},
				{Name: "search", Args: `{"q":"x"}`}, // not offered on this request
			}})
			got := mustCall(t, p, baseRequest()).Response
			wantMoves := []string{`shell: no tool named "shell" is offered`, `search: no tool named "search" is offered`}
			if m := moveNames(&got); !reflect.DeepEqual(m, wantMoves) {
				t.Errorf("Moves = %q, want %q", m, wantMoves)
			}
			if want := (journal.Response{ToolCalls: 2}); !reflect.DeepEqual(got, want) {
				t.Errorf("Response = %+v, want %+v", got, want)
			}
		})
	}
}

// move is a journaled move.
func move(id, name, args, ignored string) journal.Move {
	return journal.Move{ToolCall: journal.ToolCall{ID: id, Name: name, Arguments: args}, Ignored: ignored}
}

// moveNames takes an answer's moves out of it, as "name" or "name: why
// ignored", checking each kept its id.
func moveNames(r *journal.Response) []string {
	var out []string
	for _, m := range r.Moves {
		s := m.Name
		if m.ID == "" {
			s += " (no id)"
		}
		if m.Ignored != "" {
			s += ": " + m.Ignored
		}
		out = append(out, s)
	}
	r.Moves = nil
	return out
}

// toolHistory has a turn with tool calls (one without an ID), a turn with
// a refused call, empty text and feedback, and a plain turn.
func toolHistory() []providers.Turn {
	return []providers.Turn{
		{Assistant: "Let me look.", Tools: []journal.ToolResult{
			{ToolCall: journal.ToolCall{ID: "c1", Name: "search", Arguments: `{"q":"go"}`}, Result: "found it"},
			{ToolCall: journal.ToolCall{Name: "ask_user", Arguments: `{"question":"which?"}`}, Result: "denied", IsError: true},
		}},
		{Feedback: "Output rejected: not JSON.", Tools: []journal.ToolResult{
			{ToolCall: journal.ToolCall{Name: "search", Arguments: `not json`}, IsError: true},
		}},
		{Assistant: "Plain"},
	}
}

func assertMessages(t *testing.T, got []map[string]any, want string) {
	t.Helper()
	w := decode(t, want).([]any)
	if len(got) != len(w) {
		t.Fatalf("got %d messages, want %d:\n%v", len(got), len(w), got)
	}
	for i := range w {
		if !reflect.DeepEqual(any(got[i]), w[i]) {
			gb, _ := json.Marshal(got[i])
			wb, _ := json.Marshal(w[i])
			t.Errorf("message %d =\n%s\nwant\n%s", i, gb, wb)
		}
	}
}

func TestOpenAIToolHistory(t *testing.T) {
	srv := providertest.NewOpenAIServer(t)
	req := baseRequest()
	req.History = toolHistory()
	mustCall(t, providers.NewOpenAI(srv.URL, nil), req)
	assertMessages(t, srv.Last().Messages(), `[
		{"role":"system","content":"You are a careful planner."},
		{"role":"user","content":"Write a haiku about Kubernetes."},
		{"role":"assistant","content":"Let me look.","tool_calls":[
			{"id":"c1","type":"function","function":{"name":"search","arguments":"{\"q\":\"go\"}"}},
			{"id":"call_1","type":"function","function":{"name":"ask_user","arguments":"{\"question\":\"which?\"}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"found it"},
		{"role":"tool","tool_call_id":"call_1","content":"ERROR: denied"},
		{"role":"assistant","tool_calls":[
			{"id":"call_2","type":"function","function":{"name":"search","arguments":"not json"}}]},
		{"role":"tool","tool_call_id":"call_2","content":"ERROR: "},
		{"role":"user","content":"Output rejected: not JSON."},
		{"role":"assistant","content":"Plain"},
		{"role":"user","content":"[agentrun: no message]"}
	]`)
}

func TestAnthropicToolHistory(t *testing.T) {
	srv := providertest.NewAnthropicServer(t)
	req := baseRequest()
	req.History = toolHistory()
	mustCall(t, providers.NewAnthropic(srv.URL, nil), req)
	assertMessages(t, srv.Last().Messages(), `[
		{"role":"user","content":[{"type":"text","text":"Write a haiku about Kubernetes."}]},
		{"role":"assistant","content":[
			{"type":"text","text":"Let me look."},
			{"type":"tool_use","id":"c1","name":"search","input":{"q":"go"}},
			{"type":"tool_use","id":"call_1","name":"ask_user","input":{"question":"which?"}}]},
		{"role":"user","content":[
			{"type":"tool_result","tool_use_id":"c1","content":[{"type":"text","text":"found it"}],"is_error":false},
			{"type":"tool_result","tool_use_id":"call_1","content":[{"type":"text","text":"denied"}],"is_error":true}]},
		{"role":"assistant","content":[
			{"type":"tool_use","id":"call_2","name":"search","input":{}}]},
		{"role":"user","content":[
			{"type":"tool_result","tool_use_id":"call_2","is_error":true},
			{"type":"text","text":"Output rejected: not JSON."}]},
		{"role":"assistant","content":[{"type":"text","text":"Plain"}]},
		{"role":"user","content":[{"type":"text","text":"[agentrun: no message]"}]}
	]`)
}

// TestEmptyTurnsTakeTheMarker: an answer with neither text nor tool calls,
// followed by nothing anyone said, is sent with NoMessage in both places,
// which each fake (refusing empty text and repeated roles) takes.
func TestEmptyTurnsTakeTheMarker(t *testing.T) {
	for _, sp := range sdkProviders {
		t.Run(sp.name, func(t *testing.T) {
			srv, p := sp.new(t)
			req := baseRequest()
			req.History = []providers.Turn{{Assistant: " "}, {Assistant: "Second."}}
			mustCall(t, p, req)
			var texts []string
			for _, m := range srv.Last().Messages() {
				switch c := m["content"].(type) {
				case string:
					texts = append(texts, fmt.Sprint(m["role"], ": ", c))
				case []any:
					texts = append(texts, fmt.Sprint(m["role"], ": ", c[0].(map[string]any)["text"]))
				}
			}
			want := []string{"user: Write a haiku about Kubernetes.",
				"assistant: " + providers.NoMessage, "user: " + providers.NoMessage,
				"assistant: Second.", "user: " + providers.NoMessage}
			if sp.name == "openai" {
				want = append([]string{"system: You are a careful planner."}, want...)
			}
			if !reflect.DeepEqual(texts, want) {
				t.Errorf("messages %q, want %q", texts, want)
			}
		})
	}
}
