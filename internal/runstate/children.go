package runstate

import (
	"sort"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
)

// ChildKind says why a child run exists.
type ChildKind string

// Child kinds.
const (
	ChildWorker   ChildKind = "worker"
	ChildSubagent ChildKind = "subagent"
)

// ChildFact is what the parent observes of one child run.
type ChildFact struct {
	Name string
	Kind ChildKind
	// Index is the fan-out item (workers) or the spawn's position
	// (sub-agents).
	Index   int
	Attempt int
	Phase   arv1.Phase
}

func (c ChildFact) terminal() bool { return c.Phase.IsTerminal() }

func (c ChildFact) succeeded() bool {
	return c.Phase == arv1.PhaseComplete || c.Phase == arv1.PhaseCompleteInteractive
}

// ChildRequest is a child to create.
type ChildRequest struct {
	Kind    ChildKind
	Index   int
	Attempt int
}

// FanOutPlan is where a fan-out stands, derived from the children alone.
type FanOutPlan struct {
	// Create are the workers to start now, within max_workers.
	Create []ChildRequest
	// Running are workers not yet terminal; Queued are items waiting for a
	// worker (first attempts and retries).
	Running, Queued int
	Succeeded       int
	// Failed counts failed attempts; Retried the failed attempts given
	// another; FailedItems the items that failed every attempt.
	Failed, Retried, FailedItems int
	// Done: every item reached a final state (or fail_all fired).
	Done    bool
	FailAll bool
}

// Outstanding is running plus queued: the workers still to finish.
func (p FanOutPlan) Outstanding() int { return p.Running + p.Queued }

// PlanFanOut derives a fan-out's progress from its workers and picks the
// next ones to start. Pure: the same children always give the same plan.
// pending counts workers created but not yet visible to the caller (they
// hold their slots).
func PlanFanOut(items int, spec blueprint.FanOutSpec, children []ChildFact, paused bool) FanOutPlan {
	attempts := map[int][]ChildFact{}
	for _, c := range children {
		if c.Kind == ChildWorker && c.Index < items {
			attempts[c.Index] = append(attempts[c.Index], c)
		}
	}
	maxAttempts := spec.MaxAttempts
	if maxAttempts < 1 {
		maxAttempts = 1
	}
	var p FanOutPlan
	var queue []ChildRequest
	for i := range items {
		cs := attempts[i]
		sort.Slice(cs, func(a, b int) bool { return cs[a].Attempt < cs[b].Attempt })
		for _, c := range cs {
			if c.terminal() && !c.succeeded() {
				p.Failed++
			}
		}
		if len(cs) == 0 {
			p.Queued++
			queue = append(queue, ChildRequest{Kind: ChildWorker, Index: i, Attempt: 1})
			continue
		}
		latest := cs[len(cs)-1]
		switch {
		case !latest.terminal():
			p.Running++
		case latest.succeeded():
			p.Succeeded++
		case latest.Attempt < maxAttempts:
			p.Retried++
			p.Queued++
			queue = append(queue, ChildRequest{Kind: ChildWorker, Index: i, Attempt: latest.Attempt + 1})
		default:
			p.FailedItems++
		}
	}
	if p.FailedItems > 0 && spec.OnWorkerFailure == blueprint.OnWorkerFailureFailAll {
		p.Done, p.FailAll = true, true
		return p
	}
	if p.Outstanding() == 0 {
		p.Done = true
		return p
	}
	if paused {
		return p
	}
	free := len(queue)
	if spec.MaxWorkers > 0 {
		free = min(free, spec.MaxWorkers-p.Running)
	}
	if free > 0 {
		p.Create = queue[:free]
	}
	return p
}

// SubagentPlan is where a run's spawned sub-agents stand.
type SubagentPlan struct {
	Create      []ChildRequest
	Outstanding int
}

// PlanSubagents lists the spawned sub-agents still to create and counts
// those not yet terminal.
func PlanSubagents(spawned int, children []ChildFact) SubagentPlan {
	seen := map[int]ChildFact{}
	for _, c := range children {
		if c.Kind == ChildSubagent {
			seen[c.Index] = c
		}
	}
	var p SubagentPlan
	for i := range spawned {
		c, ok := seen[i]
		if !ok {
			p.Create = append(p.Create, ChildRequest{Kind: ChildSubagent, Index: i, Attempt: 1})
			p.Outstanding++
			continue
		}
		if !c.terminal() {
			p.Outstanding++
		}
	}
	return p
}
