// Package runstate decides what a run does next and how it reads, as pure
// functions of recorded facts: Decide picks the next action, and
// DeriveWaitingOn turns the controller's markers into status.waitingOn.
package runstate

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// Markers are the facts a wait can be derived from. Each is set by the part
// of the controller that observed it; none is stored as a wait by itself.
type Markers struct {
	Setup               *SetupBlock
	NeedsReconciliation *DanglingWrite
	Budget              *BudgetHit
	TaintGate           bool
	InteractionPoint    *Question
	FanOutOutstanding   *int32
	ChildrenOutstanding *int32
	// HubRequest is a pending question to a person: ToolApproval or
	// UserPrompt.
	HubRequest arv1.WaitReason
	SleepUntil *time.Time
	Signal     string
	// Ask is the point and question of a TaintGate, hub request, Signal or
	// NeedsReconciliation wait, so an answer can name what it answers.
	Ask *Question
	// AwaitedChild names the sub-agent a wait_for_agent waits on (a
	// Children(1) wait), shown in the summary.
	AwaitedChild string
	// RateLimited: the run's call is in flight but held by a provider's
	// limit.
	RateLimited *RateLimit
	// Quota: a quota has no room for the run's next model call.
	Quota *QuotaHit
}

// QuotaHit is a quota with no room for a run's next model call, as the
// store refused it.
type QuotaHit struct {
	// Quota is the quota's key, Resource its limit with no room; Used and
	// Hard as people read them (dollars for cost).
	Quota      string
	Resource   arv1.QuotaResource
	Used, Hard string
	// ResetAt is when the quota's period resets (nil: nothing resets it).
	ResetAt *time.Time
	// NeedsAPerson: only raising the quota can lift it.
	NeedsAPerson bool
}

// RateLimit is the limit holding a run's call: the provider and model,
// and when the call is expected to go (zero: unknown, a concurrency bound).
type RateLimit struct {
	Provider, Model string
	RetryAt         time.Time
}

// Question is what a person is asked: a checkpoint or prompt name and text.
type Question struct {
	Point  string
	Prompt string
	// Subject names what is asked about in the listing's summary: the tool
	// of a ToolApproval or TaintGate, "question" or "review" for a
	// UserPrompt.
	Subject string
	// InputSchema is the JSON Schema an answer must satisfy (UserPrompt
	// questions and Signal).
	InputSchema string
}

// SetupBlock is a NeedsSetup cause.
type SetupBlock struct {
	Blocker arv1.SetupBlocker
	Remedy  string
	// Refs are the objects it waits on, as "Kind/name".
	Refs []string
}

// DanglingWrite is a write call with an intent and no completion.
type DanglingWrite struct {
	Seq  int64
	Tool string
}

// BudgetHit is a reached budget.
type BudgetHit struct {
	Kind     arv1.BudgetKind
	Limit    string
	Observed string
}

// DeriveWaitingOn is the one place a wait is derived, in precedence order:
// NeedsSetup > NeedsReconciliation > BudgetExceeded > QuotaExceeded > TaintGate >
// InteractionPoint > FanOutWorkers > Children > ToolApproval|UserPrompt >
// Sleeping > Signal. The first four come before the seeds' hub requests
// because they block every other answer; healthy waits come last among the
// person-waits' peers so a person-wait is never hidden behind them. since is
// kept from prev when the reason is unchanged.
func DeriveWaitingOn(m Markers, prev *arv1.WaitingOn, now time.Time) *arv1.WaitingOn {
	w := derive(m)
	if w == nil {
		return nil
	}
	if q := m.Ask; q != nil && w.Reason != arv1.WaitNeedsSetup && w.Reason != arv1.WaitBudgetExceeded && w.Point == "" {
		w.Point, w.Question = Clip(q.Point, 253), Clip(q.Prompt, 2048)
	}
	w.NeedsAPerson = w.Reason.NeedsAPerson()
	if m.Quota != nil && w.Reason == arv1.WaitQuotaExceeded {
		w.NeedsAPerson = m.Quota.NeedsAPerson
	}
	w.Summary = summary(w)
	if q := m.Ask; q != nil && q.InputSchema != "" && (w.Reason == arv1.WaitUserPrompt || w.Reason == arv1.WaitSignal) && len(q.InputSchema) <= 8192 {
		w.InputSchema = q.InputSchema
	}
	if q := m.Ask; q != nil && q.Subject != "" && (w.Reason == arv1.WaitToolApproval || w.Reason == arv1.WaitTaintGate || w.Reason == arv1.WaitUserPrompt) {
		w.Summary = Clip(fmt.Sprintf("%s: %s", w.Reason, q.Subject), 128)
	}
	if m.AwaitedChild != "" && w.Reason == arv1.WaitChildren {
		w.Summary = Clip(fmt.Sprintf("%s: wait_for_agent %s", w.Summary, m.AwaitedChild), 128)
	}
	since := metav1.NewTime(now)
	if prev != nil && prev.Reason == w.Reason && prev.Since != nil {
		since = *prev.Since
	}
	w.Since = &since
	return w
}

func derive(m Markers) *arv1.WaitingOn {
	switch {
	case m.Setup != nil:
		return &arv1.WaitingOn{Reason: arv1.WaitNeedsSetup, Blocker: m.Setup.Blocker, Remedy: m.Setup.Remedy}
	case m.NeedsReconciliation != nil:
		seq := m.NeedsReconciliation.Seq
		return &arv1.WaitingOn{Reason: arv1.WaitNeedsReconciliation, Seq: &seq, Tool: m.NeedsReconciliation.Tool}
	case m.Budget != nil:
		return &arv1.WaitingOn{Reason: arv1.WaitBudgetExceeded, Budget: &arv1.BudgetLimit{Kind: m.Budget.Kind, Limit: m.Budget.Limit}, Observed: m.Budget.Observed}
	case m.Quota != nil:
		w := &arv1.WaitingOn{Reason: arv1.WaitQuotaExceeded, Quota: Clip(m.Quota.Quota, 512), Resource: m.Quota.Resource, Used: Clip(m.Quota.Used, 64), Hard: Clip(m.Quota.Hard, 64)}
		if at := m.Quota.ResetAt; at != nil {
			t := metav1.NewTime(*at)
			w.ResetAt = &t
		}
		return w
	case m.TaintGate:
		return &arv1.WaitingOn{Reason: arv1.WaitTaintGate}
	case m.InteractionPoint != nil:
		return &arv1.WaitingOn{Reason: arv1.WaitInteractionPoint, Point: Clip(m.InteractionPoint.Point, 253), Question: Clip(m.InteractionPoint.Prompt, 2048)}
	case m.FanOutOutstanding != nil:
		n := *m.FanOutOutstanding
		return &arv1.WaitingOn{Reason: arv1.WaitFanOutWorkers, Outstanding: &n}
	case m.ChildrenOutstanding != nil:
		n := *m.ChildrenOutstanding
		return &arv1.WaitingOn{Reason: arv1.WaitChildren, Outstanding: &n}
	case m.HubRequest != "":
		return &arv1.WaitingOn{Reason: m.HubRequest}
	case m.SleepUntil != nil:
		t := metav1.NewTime(*m.SleepUntil)
		return &arv1.WaitingOn{Reason: arv1.WaitSleeping, WakeAt: &t}
	case m.Signal != "":
		return &arv1.WaitingOn{Reason: arv1.WaitSignal, Signal: m.Signal}
	case m.RateLimited != nil:
		w := &arv1.WaitingOn{Reason: arv1.WaitRateLimited, Provider: Clip(m.RateLimited.Provider, 253), Model: Clip(m.RateLimited.Model, 253)}
		if at := m.RateLimited.RetryAt; !at.IsZero() {
			t := metav1.NewTime(at)
			w.RetryAt = &t
		}
		return w
	}
	return nil
}

// summary renders a wait for the WAITING column.
func summary(w *arv1.WaitingOn) string {
	switch w.Reason {
	case arv1.WaitFanOutWorkers, arv1.WaitChildren:
		return fmt.Sprintf("%s(%d)", w.Reason, *w.Outstanding)
	case arv1.WaitNeedsSetup:
		return fmt.Sprintf("NeedsSetup: %s", w.Blocker)
	case arv1.WaitBudgetExceeded:
		return fmt.Sprintf("BudgetExceeded: %s", w.Budget.Kind)
	case arv1.WaitNeedsReconciliation:
		tool := w.Tool
		if len(tool) > 80 {
			tool = tool[:77] + "..."
		}
		return fmt.Sprintf("NeedsReconciliation: %s#%d", tool, *w.Seq)
	case arv1.WaitSleeping:
		return "Sleeping until " + w.WakeAt.UTC().Format(time.RFC3339)
	case arv1.WaitRateLimited:
		return Clip(fmt.Sprintf("RateLimited: %s/%s", w.Provider, w.Model), 128)
	case arv1.WaitQuotaExceeded:
		return Clip(fmt.Sprintf("QuotaExceeded: %s %s", w.Quota, w.Resource), 128)
	}
	return string(w.Reason)
}

// Clip bounds a string to n bytes (the CRD's limit for a status field),
// marking the cut.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
