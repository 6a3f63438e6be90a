package providers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// Scripted is the deterministic, network-free provider: it answers from the
// stage's [[stages.<s>.script]] entries, one per iteration (the last one
// repeats). A stage with no script answers "ok" and asks to complete the
// run (which a stage with transitions must allow_complete). It counts calls per run so tests can
// prove no completed step is issued twice.
type Scripted struct {
	mu     sync.Mutex
	calls  map[string]int
	titles map[string]int
	merged map[string][]string
}

// NewScripted returns a scripted provider that counts each run's calls
// (for tests; the counts grow with every run it serves).
func NewScripted() *Scripted {
	return &Scripted{calls: map[string]int{}, titles: map[string]int{}, merged: map[string][]string{}}
}

// NewUncountedScripted returns a scripted provider that keeps nothing per
// run: the manager's own, which serves runs for as long as it lives.
func NewUncountedScripted() *Scripted { return &Scripted{} }

// Merged is the child outputs the run's last merging call received.
func (s *Scripted) Merged(runUID string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.merged[runUID]
}

// Calls is how many calls the run has made.
func (s *Scripted) Calls(runUID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[runUID]
}

// TitleCalls is how many titling calls the run has made (apart from Calls).
func (s *Scripted) TitleCalls(runUID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.titles[runUID]
}

// Call implements Provider.
func (s *Scripted) Call(ctx context.Context, req Request) (Result, error) {
	if req.Purpose == "title" {
		s.mu.Lock()
		if s.titles != nil {
			s.titles[req.RunUID]++
		}
		s.mu.Unlock()
		free := int64(0) // network-free and exact: it costs nothing
		return Result{Response: journal.Response{Text: scriptedTitle(req.Task)}, CostNanoUSD: &free}, nil
	}
	if req.Purpose == journal.PurposeCompact {
		return Result{Response: journal.Response{Text: scriptedSummary(req.History)}, Usage: journal.Usage{Prompt: 1, Completion: 1}}, nil
	}
	s.mu.Lock()
	if s.calls != nil {
		s.calls[req.RunUID]++
		if len(req.ChildOutputs) > 0 {
			s.merged[req.RunUID] = req.ChildOutputs
		}
	}
	s.mu.Unlock()

	if len(req.Script) == 0 {
		return Result{Response: journal.Response{Text: "ok", Complete: true}, Usage: journal.Usage{Prompt: 1, Completion: 1}, ResponseModel: req.Model, FinishReason: "tool_calls"}, nil
	}
	i := req.Iteration
	if i >= len(req.Script) {
		i = len(req.Script) - 1
	}
	step := req.Script[i]
	if step.DelayMS > 0 {
		t := time.NewTimer(time.Duration(step.DelayMS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-t.C:
		}
	}
	if e := step.Error; e != nil && (e.Times == 0 || req.Attempt < e.Times) && strings.Contains(req.Task, e.WhenTask) {
		// Classified as a real provider's answer would be (a 429 saying
		// insufficient_quota is out of credits, not a rate limit).
		return Result{}, apiFailure{status: e.Status, kind: e.Type, message: e.Message}.classify("")
	}
	fill := scriptFiller(req)
	res := Result{
		Response: journal.Response{Text: fill(step.Text), Next: step.Next, Complete: step.Complete, Output: fill(step.Output), Items: step.Items},
		Usage:    journal.Usage{Prompt: step.Usage.Prompt, Completion: step.Usage.Completion, Cached: step.Usage.Cached, CacheWrite: step.Usage.CacheWrite},
	}
	res.Response.ToolCalls = len(step.ToolCalls) + len(step.Spawn)
	if step.SleepSeconds > 0 {
		res.Response.SleepSeconds = step.SleepSeconds
		res.Response.ToolCalls++ // the sleep tool
	}
	if step.Next != "" || step.Complete {
		res.Response.ToolCalls++ // the transition or complete tool
	}
	for i, tc := range step.ToolCalls {
		args := tc.Arguments
		if args == "" {
			args = "{}"
		}
		res.Response.Calls = append(res.Response.Calls, journal.ToolCall{ID: fmt.Sprintf("call_%d_%d", req.Seq, i), Name: tc.Name, Arguments: fillJSON(args, req)})
	}
	for _, sp := range step.Spawn {
		res.Response.Spawns = append(res.Response.Spawns, journal.Spawn{Agent: sp.Agent, Task: sp.Task})
	}
	if step.CostUSD != nil {
		n := int64(*step.CostUSD)
		res.CostNanoUSD = &n
	}
	// It answers as the model asked for, and says why it stopped as
	// OpenAI's API would: it called tools (the built-in ones included), or
	// it was done talking.
	res.ResponseModel, res.FinishReason = req.Model, "stop"
	if res.Response.ToolCalls > 0 {
		res.FinishReason = "tool_calls"
	}
	return res, nil
}

// scriptedTitle is the first words of the task, as a network-free title.
func scriptedTitle(task string) string {
	if i := strings.Index(task, "Task: "); i >= 0 {
		task = task[i+len("Task: "):]
	}
	words := strings.Fields(task)
	if len(words) > 8 {
		words = words[:8]
	}
	return strings.TrimRight(strings.Join(words, " "), ".,;:")
}

// placeholders are the script placeholders a test reads what the model was
// sent from, with their values for req: {task}, {messages} (what its
// parent sent it that the call shows, joined by " | "), {document} (the
// content of the document the call carries), {directive} (a person's
// instructions to a stage sent back), {choices} (what people answered at
// the checkpoints before this stage, "point: text" joined by " | "),
// {note} (why the stage was entered),
// {history} (the texts of the turns it was shown, joined by " | "),
// {transitions} (the transition prompt), {instructions} (the output
// instructions) and {system} (the system prompt).
func placeholders(req Request) []string {
	doc := ""
	if req.Document != nil {
		doc = req.Document.Content
	}
	choices := make([]string, 0, len(req.Choices))
	for _, c := range req.Choices {
		choices = append(choices, c.Point+": "+c.Text)
	}
	texts := make([]string, 0, len(req.History))
	for _, t := range req.History {
		texts = append(texts, t.Assistant)
	}
	return []string{"{task}", req.Task, "{messages}", strings.Join(AllMessages(req), " | "),
		"{document}", doc, "{directive}", req.Directive, "{choices}", strings.Join(choices, " | "), "{note}", req.StageNote, "{history}", strings.Join(texts, " | "),
		"{transitions}", req.TransitionPrompt, "{instructions}", req.OutputInstructions, "{system}", req.SystemPrompt}
}

// scriptFiller fills the placeholders in a scripted text or output.
func scriptFiller(req Request) func(string) string {
	return strings.NewReplacer(placeholders(req)...).Replace
}

// fillJSON fills them in tool-call arguments: JSON-escaped, since the
// arguments are a JSON object and the values any text, except {task},
// which stays verbatim as it always was.
func fillJSON(args string, req Request) string {
	pairs := placeholders(req)
	for i := 2; i < len(pairs); i += 2 {
		b, _ := json.Marshal(pairs[i+1])
		pairs[i+1] = string(b[1 : len(b)-1])
	}
	return strings.NewReplacer(pairs...).Replace(args)
}

// scriptedSummary is a network-free summary of the turns a compact edge
// carries: their count and texts.
func scriptedSummary(turns []Turn) string {
	texts := make([]string, 0, len(turns))
	for _, t := range turns {
		texts = append(texts, t.Assistant)
	}
	return fmt.Sprintf("%d turns: %s", len(turns), strings.Join(texts, "; "))
}
