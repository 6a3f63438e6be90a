package wirestatus

import (
	"fmt"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// Empty is how a listing shows a cell with nothing in it.
const Empty = "-"

// PsRow is one run as a listing shows it (`kubectl agentrun ps`). The cells
// are rendered here, from the API's own span helpers, so no listing does its
// own arithmetic.
type PsRow struct {
	Namespace string
	Name      string
	// Parent is the name of the run that owns this one in the same
	// namespace (ParentOf), "" for a top-level run.
	Parent string
	// Phase is status.phase (Queued before the controller has taken the run
	// up), Empty where no phase was read at all.
	Phase string
	// Waiting is status.waitingOn.summary (the reason when the summary is
	// empty), Empty while not parked.
	Waiting string
	// Stage is status.stage ("name i/n"), Empty when none.
	Stage string
	// Tokens is usage.totalTokens (prompt + completion when the total was
	// not written).
	Tokens int64
	// Cost is usage.costUSD verbatim ("unknown" stays "unknown"), Empty when
	// unset.
	Cost string
	// Working is the active runtime, humanised (Duration).
	Working string
	// LastMoved is the time since the run last made progress, humanised,
	// Empty when it never has.
	LastMoved string
	// NeedsAPerson: the run is parked on something only a person can clear.
	NeedsAPerson bool
	// State is the wire status token (Status(run, now)["state"]).
	State string
	// Created is the run's creation time, for ordering.
	Created time.Time
}

// NewPsRow renders run at now.
func NewPsRow(run *arv1.AgentRun, now time.Time) PsRow {
	st := &run.Status
	row := PsRow{
		Namespace:    run.Namespace,
		Name:         run.Name,
		Parent:       ParentOf(run),
		Phase:        orEmpty(string(st.Phase)),
		Waiting:      Empty,
		Stage:        orEmpty(st.Stage),
		Tokens:       st.Usage.TotalTokens,
		Cost:         orEmpty(st.Usage.CostUSD),
		Working:      Duration(run.ActiveRuntimeSeconds(now)),
		LastMoved:    Empty,
		NeedsAPerson: run.NeedsAPerson(),
		State:        Status(run, now).String("state"),
		Created:      run.CreationTimestamp.Time,
	}
	if row.Tokens == 0 {
		row.Tokens = st.Usage.PromptTokens + st.Usage.CompletionTokens
	}
	if w := st.WaitingOn; w != nil {
		row.Waiting = w.Summary
		if row.Waiting == "" {
			row.Waiting = string(w.Reason)
		}
	}
	if s, ok := run.LastMovedSeconds(now); ok {
		row.LastMoved = Duration(s)
	}
	return row
}

// ParentOf is the name of the run that owns run: status.parentRun, else the
// name of its controller owner reference when that is an AgentRun. "" for a
// top-level run.
func ParentOf(run *arv1.AgentRun) string {
	if run.Status.ParentRun != "" {
		return run.Status.ParentRun
	}
	for _, ref := range run.OwnerReferences {
		if ref.Controller != nil && *ref.Controller && ref.Kind == "AgentRun" && groupOf(ref.APIVersion) == arv1.GroupVersion.Group {
			return ref.Name
		}
	}
	return ""
}

func groupOf(apiVersion string) string {
	for i := 0; i < len(apiVersion); i++ {
		if apiVersion[i] == '/' {
			return apiVersion[:i]
		}
	}
	return ""
}

// Duration humanises whole seconds the way listings show spans: "45s",
// "3m12s", "2h5m", "3d4h". Negative counts as 0.
func Duration(seconds int64) string {
	if seconds < 0 {
		seconds = 0
	}
	switch {
	case seconds < 60:
		return fmt.Sprintf("%ds", seconds)
	case seconds < 3600:
		return fmt.Sprintf("%dm%ds", seconds/60, seconds%60)
	case seconds < 86400:
		return fmt.Sprintf("%dh%dm", seconds/3600, seconds%3600/60)
	}
	return fmt.Sprintf("%dd%dh", seconds/86400, seconds%86400/3600)
}

func orEmpty(s string) string {
	if s == "" {
		return Empty
	}
	return s
}
