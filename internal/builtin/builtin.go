// Package builtin defines the operator's own tools once: the moves every
// HTTP provider offers the model (transition, complete, spawn_agent,
// fan_out, sleep), which map onto the answer itself, and the run tools the
// operator executes without an MCP server (ask_user, present_for_review,
// wait_for_signal, write_region, and the agent tools check_agent,
// wait_for_agent, send_to_agent, kill_agent). The blueprint parser, the
// providers and the
// offer a model sees all read them from here, so they cannot disagree.
package builtin

import (
	"encoding/json"
	"slices"
)

// Spec is a tool as a model is offered it.
type Spec struct {
	Name        string
	Description string
	// InputSchema is the arguments' JSON Schema, an object; empty means
	// {"type":"object"}.
	InputSchema json.RawMessage
}

// The moves: answered by the provider mapping onto the model's response.
const (
	Transition = "transition"
	Complete   = "complete"
	SpawnAgent = "spawn_agent"
	FanOut     = "fan_out"
	Sleep      = "sleep"
)

// The run tools: executed by the operator itself.
const (
	// AskUser asks a person a question (free text, a choice, or a
	// confirmation) and parks the run on UserPrompt until answered.
	AskUser = "ask_user"
	// PresentForReview shows a person work to approve or send back.
	PresentForReview = "present_for_review"
	// WaitForSignal waits for an external system's signal.
	WaitForSignal = "wait_for_signal"
	// CheckAgent reports a sub-agent's phase and output.
	CheckAgent = "check_agent"
	// WaitForAgent blocks the turn until a sub-agent finishes, then
	// delivers its result, once (the seeds' Koda rule): a result the drain
	// delivered before is not delivered again.
	WaitForAgent = "wait_for_agent"
	// SendToAgent leaves a message for a sub-agent, which it sees in its
	// next model turn in a stage that accepts_messages (at once, or once it
	// reaches one).
	SendToAgent = "send_to_agent"
	// KillAgent cancels a sub-agent and, through it, its own children.
	KillAgent = "kill_agent"
	// WriteRegion replaces a region's content (a draft, notes): the
	// regions a transition's require_regions wait for are filled with it.
	WriteRegion = "write_region"
)

// AgentTools are the run tools that act on the run's own sub-agents; a
// name resolves only among the run's children.
var AgentTools = []string{CheckAgent, WaitForAgent, SendToAgent, KillAgent}

// Moves are offered before any other tool and win a name clash, so a tool
// server cannot shadow the run's own moves.
var Moves = []Spec{
	{Name: Transition, Description: "Move the run to the next stage. Call this when the current stage's work is done and another stage should continue.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"target":{"type":"string","description":"Name of the stage to move to."}},"required":["target"]}`)},
	{Name: Complete, Description: "Finish the whole run with its final output. Call this when the task is done.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"output":{"type":"string","description":"The run's final output."}},"required":["output"]}`)},
	{Name: SpawnAgent, Description: "Start a sub-agent from a blueprint to work on a task.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"blueprint":{"type":"string","description":"Name of the agent blueprint to run."},"task":{"type":"string","description":"The sub-agent's task."}},"required":["blueprint","task"]}`)},
	{Name: FanOut, Description: "Split the work into items, each handled by its own worker.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"items":{"type":"array","items":{"type":"string"},"description":"The work items, one per worker."}},"required":["items"]}`)},
	{Name: Sleep, Description: "Pause the run for a number of seconds before continuing.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"seconds":{"type":"integer","minimum":1,"description":"How long to sleep, in seconds."}},"required":["seconds"]}`)},
}

// RunTools are the tools the operator executes for the run.
var RunTools = []Spec{
	{Name: AskUser, Description: "Ask the person attending this run a question and wait for the answer. Use options for a choice, style confirm for yes/no, input_schema for structured answers.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"question":{"type":"string"},"style":{"type":"string","enum":["free_text","choice","confirm"]},"options":{"type":"array","items":{"type":"string"}},"input_schema":{"type":"object"}},"required":["question"]}`)},
	{Name: PresentForReview, Description: "Show work to a person for review; the answer says whether it was approved and any feedback.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"summary":{"type":"string"},"content":{"type":"string"}},"required":["content"]}`)},
	{Name: WaitForSignal, Description: "Wait until an external system signals this run (for example a build or deployment finishing); the signal's payload is the result.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"reason":{"type":"string"},"input_schema":{"type":"object"}},"required":["reason"]}`)},
	{Name: CheckAgent, Description: "Report a sub-agent's phase, what it waits on, and its output once complete.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`)},
	{Name: WaitForAgent, Description: "Wait until one of this run's sub-agents finishes and return its result (phase, success, output or error). A result is delivered once: a sub-agent that finished while you were not waiting for it has its result given to you in a message before your next turn, and waiting on it then, or again, says it was already delivered.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string","description":"The sub-agent's name."}},"required":["name"]}`)},
	{Name: SendToAgent, Description: "Send a message to one of this run's sub-agents; it sees the message in its next turn in a stage that accepts messages. A sub-agent not in such a stage yet (or not started yet) gets it once it is; the result says whether the message waits.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string","description":"The sub-agent's name."},"message":{"type":"string"}},"required":["name","message"]}`)},
	{Name: KillAgent, Description: "Cancel one of this run's sub-agents, and with it every run it started.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string","description":"The sub-agent's name."}},"required":["name"]}`)},
	{Name: WriteRegion, Description: "Replace the content of one of the run's regions (its named documents, such as the draft the stage works on). A transition that requires a region waits until it holds content.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"region":{"type":"string","description":"The region's name."},"content":{"type":"string","description":"The region's new content, in full."}},"required":["region","content"]}`)},
}

// RunToolNames are the run tools' names.
var RunToolNames = func() []string {
	out := make([]string, len(RunTools))
	for i, t := range RunTools {
		out[i] = t.Name
	}
	return out
}()

// IsRunTool reports whether name is a run tool.
func IsRunTool(name string) bool { return slices.Contains(RunToolNames, name) }

// Blocking reports whether the tool waits on a person, so it is never
// offered to a run nobody attends.
func Blocking(name string) bool { return name == AskUser || name == PresentForReview }
