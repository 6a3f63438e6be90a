package runstate

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/agentrun-dev/agentrun-operator/internal/builtin"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// ActReceiveMessage journals a message the parent sent (Action.Received)
// before the model is called, so the call shows it.
const ActReceiveMessage ActionKind = "ReceiveMessage"

// ActDeliverResults journals the results of the run's sub-agents that
// finished and were not delivered yet (Action.Deliver) before the model is
// called, so the call shows them: the seeds' Koda drain.
const ActDeliverResults ActionKind = "DeliverResults"

// Message is a message from the run's parent waiting to be taken in.
type Message struct {
	// ID is unique per parent (the parent's tool call point).
	ID   string
	Text string
}

// AgentArgs are the agent tools' arguments.
type AgentArgs struct {
	Name    string `json:"name"`
	Message string `json:"message,omitempty"`
}

// MaxMessageBytes bounds one send_to_agent message: it travels in an
// annotation of the child and is journaled by it.
const MaxMessageBytes = 8 << 10

// ResolveChild finds the sub-agent a tool call names among the run's own
// children, by its name or by its name without the "<run>-" prefix. A run
// never sees another run's children, whatever the name: that is the
// seeds' rule that list, cancel and wait are scoped to the spawner.
func ResolveChild(children []ChildFact, run, name string) (ChildFact, bool) {
	if name == "" {
		return ChildFact{}, false
	}
	for _, c := range children {
		if c.Name == name || c.Name == run+"-"+name {
			return c, true
		}
	}
	return ChildFact{}, false
}

// childOf resolves the head call's sub-agent, or says why it cannot.
func (f Facts) childOf(h *journal.CallState) (ChildFact, AgentArgs, string) {
	var a AgentArgs
	if err := json.Unmarshal([]byte(h.Arguments), &a); err != nil || a.Name == "" {
		return ChildFact{}, a, fmt.Sprintf("%s needs the name of one of this run's sub-agents. %s", h.Name, f.childList())
	}
	c, ok := ResolveChild(f.Children, f.RunName, a.Name)
	if !ok {
		return ChildFact{}, a, fmt.Sprintf("%q is not a sub-agent of this run: a run sees and acts on its own sub-agents only. %s", a.Name, f.childList())
	}
	return c, a, ""
}

// childList names the run's sub-agents for a refusal, so the model can
// correct the name.
func (f Facts) childList() string {
	var names []string
	for _, c := range f.Children {
		names = append(names, c.Name)
	}
	if len(names) == 0 {
		return "This run has no sub-agents."
	}
	slices.Sort(names)
	if len(names) > 20 {
		names = append(names[:20], fmt.Sprintf("and %d more", len(names)-20))
	}
	return "Its sub-agents are: " + strings.Join(names, ", ") + "."
}

// decideAgentTool settles the agent tools: a name outside the run's
// children is refused; wait_for_agent parks until its sub-agent is final,
// then delivers its result once; the others are carried out at once by
// the controller (which reads and writes the child).
func decideAgentTool(f Facts, h *journal.CallState) Action {
	c, args, refusal := f.childOf(h)
	switch {
	case refusal != "":
		return completed(refusal, true)
	case h.Name == builtin.SendToAgent && len(args.Message) > MaxMessageBytes:
		return completed(fmt.Sprintf("The message is %d bytes; send_to_agent takes at most %d.", len(args.Message), MaxMessageBytes), true)
	case h.Name != builtin.WaitForAgent:
		return Action{Kind: ActToolCall}
	case f.State.Delivered[c.Name]:
		return completed(fmt.Sprintf("The result of sub-agent %q was already delivered (by an earlier wait_for_agent, or in a message from the run when it finished); a result is delivered once.", c.Name), true)
	case !c.terminal():
		one := int32(1)
		// Woken by the child's phase change (the watch of owned runs).
		return Action{Kind: ActPark, Markers: Markers{ChildrenOutstanding: &one, AwaitedChild: c.Name}}
	}
	return Action{Kind: ActToolCall}
}

// receiveMessage takes in the parent's next message where the run is
// about to call its model in a stage that accepts messages. A message
// that arrives while the stage does not accept them waits for one that
// does.
func receiveMessage(f Facts) (Action, bool) {
	if f.Blueprint == nil || len(f.Messages) == 0 {
		return Action{}, false
	}
	stage, _, ok := f.Blueprint.Stage(f.State.Stage)
	if !ok || !stage.AcceptsMessages {
		return Action{}, false
	}
	for _, m := range f.Messages {
		if !f.State.Received[m.ID] {
			return Action{Kind: ActReceiveMessage, Received: &m}, true
		}
	}
	return Action{}, false
}

// drainResults names the sub-agents whose results are due to the model:
// those that finished (Complete, Error or Cancelled) and whose result
// neither wait_for_agent nor an earlier drain delivered, in spawn order.
// It never waits for a sub-agent still running: the call goes ahead with
// what has finished. Fan-out workers are not drained: their merge stage
// is given their outputs.
func drainResults(f Facts) (Action, bool) {
	var due []ChildFact
	for _, c := range f.Children {
		if c.Kind == ChildSubagent && c.terminal() && !f.State.Delivered[c.Name] {
			due = append(due, c)
		}
	}
	if len(due) == 0 {
		return Action{}, false
	}
	slices.SortFunc(due, func(a, b ChildFact) int { return a.Index - b.Index })
	names := make([]string, len(due))
	for i, c := range due {
		names[i] = c.Name
	}
	return Action{Kind: ActDeliverResults, Deliver: names}, true
}
