package controllers_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/providers/providertest"
)

// threeStageDirect goes a -> b -> c over llm_choice edges with the default
// transform (direct), c completing the run.
func threeStageDirect(model string) string {
	return fmt.Sprintf(`
[agent]
name = "three"
[agent.title]
enabled = false
[stages.a]
system_prompt = "Plan."
[stages.a.model]
models = [%[1]s]
[stages.a.transitions.b]
condition = "llm_choice"
[stages.b]
system_prompt = "Build."
[stages.b.model]
models = [%[1]s]
[stages.b.transitions.c]
condition = "llm_choice"
[stages.c]
system_prompt = "Review."
allow_complete = true
[stages.c.model]
models = [%[1]s]
`, model)
}

// wireCall is a tool call as a request carried it, with the result the
// request gave it.
type wireCall struct {
	id, name, args string
	result         string
	answered       bool
}

// conversation reads a request's messages in either wire format: the
// texts by role, in order, and the tool calls with their results.
func conversation(t *testing.T, r providertest.Request) (texts []string, calls []wireCall) {
	t.Helper()
	byID := map[string]int{}
	text := func(role string, v any) {
		switch c := v.(type) {
		case string:
			texts = append(texts, role+": "+c)
		case []any:
			for _, b := range c {
				bm, _ := b.(map[string]any)
				switch bm["type"] {
				case "text":
					texts = append(texts, fmt.Sprintf("%s: %v", role, bm["text"]))
				case "tool_use":
					in, _ := json.Marshal(bm["input"])
					byID[fmt.Sprint(bm["id"])] = len(calls)
					calls = append(calls, wireCall{id: fmt.Sprint(bm["id"]), name: fmt.Sprint(bm["name"]), args: string(in)})
				case "tool_result":
					var res []string
					inner, _ := bm["content"].([]any)
					for _, ib := range inner {
						res = append(res, fmt.Sprint(ib.(map[string]any)["text"]))
					}
					if i, ok := byID[fmt.Sprint(bm["tool_use_id"])]; ok {
						calls[i].result, calls[i].answered = strings.Join(res, ""), true
					}
				}
			}
		}
	}
	for _, m := range r.Messages() {
		role := fmt.Sprint(m["role"])
		for _, tc := range asList(m["tool_calls"]) {
			f, _ := tc["function"].(map[string]any)
			byID[fmt.Sprint(tc["id"])] = len(calls)
			calls = append(calls, wireCall{id: fmt.Sprint(tc["id"]), name: fmt.Sprint(f["name"]), args: fmt.Sprint(f["arguments"])})
		}
		if role == "tool" {
			if i, ok := byID[fmt.Sprint(m["tool_call_id"])]; ok {
				calls[i].result, calls[i].answered = fmt.Sprint(m["content"]), true
			}
			continue
		}
		if m["content"] != nil {
			text(role, m["content"])
		}
	}
	return texts, calls
}

func asList(v any) []map[string]any {
	l, _ := v.([]any)
	out := make([]map[string]any, 0, len(l))
	for _, e := range l {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// TestLaterStagesSeeTheMovesThatHappened runs a three-stage run with the
// default direct transform over both wires, against fakes that refuse
// what each API refuses (alternating roles, empty text, tool calls without
// their results). Each later call carries the model's transition calls
// with their results, and where a message is needed that nobody wrote, the
// one documented marker stands: no "Continue." nobody said, no "(no text)".
func TestLaterStagesSeeTheMovesThatHappened(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	oa, an := providertest.NewOpenAIServer(t), providertest.NewAnthropicServer(t)
	for _, srv := range []*providertest.Server{oa, an} {
		srv.Push(
			providertest.Reply{Text: "Thinking it over.", PromptTokens: 1, CompletionTokens: 1},
			providertest.Reply{ToolCall: &providertest.ToolCall{ID: "mv-1", Name: "transition", Args: `{"target":"b"}`}, PromptTokens: 1, CompletionTokens: 1},
			providertest.Reply{Text: "Built.", ToolCall: &providertest.ToolCall{ID: "mv-2", Name: "transition", Args: `{"target":"c"}`}, PromptTokens: 1, CompletionTokens: 1},
			providertest.Reply{ToolCall: &providertest.ToolCall{ID: "mv-3", Name: "complete", Args: `{"output":"shipped"}`}, PromptTokens: 1, CompletionTokens: 1},
		)
	}
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": providerConfig(
		openAIEntry("oa", oa.URL, false),
		anthropicEntry("an", an.URL, ""),
	)})
	createSecret(t, ns, "oa-key", map[string]string{"api-key": "sk-oa"})
	createSecret(t, ns, "an-key", map[string]string{"api-key": "sk-an"})
	createConfigMap(t, ns, "three-oa", map[string]string{"agent.toml": threeStageDirect(`{provider = "oa", model = "gpt-x"}`)})
	createConfigMap(t, ns, "three-an", map[string]string{"agent.toml": threeStageDirect(`{provider = "an", model = "claude-x"}`)})
	createRun(t, ns, "oa", "three-oa")
	createRun(t, ns, "an", "three-an")

	for name, srv := range map[string]*providertest.Server{"oa": oa, "an": an} {
		t.Run(name, func(t *testing.T) {
			done := waitFor(t, ns, name, 30*time.Second, "Complete", func(r *arv1.AgentRun) bool {
				return r.Status.Phase == arv1.PhaseComplete || r.Status.Phase == arv1.PhaseError
			})
			if done.Status.Phase != arv1.PhaseComplete {
				t.Fatalf("run ended %s: %s", done.Status.Phase, done.Status.Error)
			}
			reqs := srv.All()
			if len(reqs) != 4 {
				t.Fatalf("server saw %d requests, want 4", len(reqs))
			}
			for i, r := range reqs {
				if b := string(r.Body); strings.Contains(b, "Continue.") || strings.Contains(b, "(no text)") {
					t.Errorf("request %d carries words nobody wrote: %s", i+1, b)
				}
			}
			// Stage a's second call: its text-only first answer, then the
			// marker where the roles need a user message nobody wrote.
			texts, _ := conversation(t, reqs[1])
			if got := strings.Join(texts[len(texts)-2:], " | "); got != "assistant: Thinking it over. | user: "+providers.NoMessage {
				t.Errorf("stage a's second call ends %q", got)
			}
			// Stage b's call shows the move into b with its result.
			_, calls := conversation(t, reqs[2])
			want := []wireCall{{id: "mv-1", name: "transition", args: `{"target":"b"}`, result: `Transition to stage "b" accepted.`, answered: true}}
			if fmt.Sprint(calls) != fmt.Sprint(want) {
				t.Errorf("stage b's call carries calls %+v, want %+v", calls, want)
			}
			// Stage c's call shows both moves, and b's text beside its call.
			texts, calls = conversation(t, reqs[3])
			want = append(want, wireCall{id: "mv-2", name: "transition", args: `{"target":"c"}`, result: `Transition to stage "c" accepted.`, answered: true})
			if fmt.Sprint(calls) != fmt.Sprint(want) {
				t.Errorf("stage c's call carries calls %+v, want %+v", calls, want)
			}
			if !strings.Contains(strings.Join(texts, "\n"), "assistant: Built.") {
				t.Errorf("stage c's call lacks b's text: %q", texts)
			}
		})
	}
}
