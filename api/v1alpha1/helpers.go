package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NeedsAPerson reports whether the run is parked on something only a person
// can clear. False for running runs and for healthy waits (workers,
// children, sleeping, signal).
func (r *AgentRun) NeedsAPerson() bool {
	return r.Status.WaitingOn != nil && r.Status.WaitingOn.Reason.NeedsAPerson()
}

// The three spans a reader can ask a run about answer different questions, so
// every surface reads them from here and none does its own arithmetic:
//   - age: how long since it was created; says nothing about work done.
//   - working time: how long it actually worked (the active clock).
//   - last moved: how long since it made progress; a health signal.

// AgeSeconds is the time since the run was created, at now.
func (r *AgentRun) AgeSeconds(now time.Time) int64 {
	return nonNegativeSeconds(now.Sub(r.CreationTimestamp.Time))
}

// ActiveRuntimeSeconds is how long the run has actually worked, at now. A run
// with no clock falls back to updatedAt - startedAt: a finished run claiming
// to have taken no time is the worse answer. A present but empty clock is a
// genuine zero.
func (r *AgentRun) ActiveRuntimeSeconds(now time.Time) int64 {
	c := r.Status.Active
	if c == nil {
		if r.Status.StartedAt == nil || r.Status.UpdatedAt == nil {
			return 0
		}
		return nonNegativeSeconds(r.Status.UpdatedAt.Sub(r.Status.StartedAt.Time))
	}
	return c.TotalSeconds(now)
}

// LastMovedSeconds is the time since the run last made progress, at now, and
// false when it never has (no lastProgressAt yet).
func (r *AgentRun) LastMovedSeconds(now time.Time) (int64, bool) {
	if r.Status.LastProgressAt == nil {
		return 0, false
	}
	return nonNegativeSeconds(now.Sub(r.Status.LastProgressAt.Time)), true
}

// TotalSeconds is banked time plus the open span, a negative span counting 0.
func (c *ActiveClock) TotalSeconds(now time.Time) int64 {
	total := c.BankedSeconds
	if c.Since != nil {
		total += nonNegativeSeconds(now.Sub(c.Since.Time))
	}
	return total
}

func nonNegativeSeconds(d time.Duration) int64 {
	if d < 0 {
		return 0
	}
	return int64(d / time.Second)
}

// OwnedName names an object the run owns: "<run>-<suffix>", or
// "<uid>-<suffix>" when the run's name is too long for that.
func (r *AgentRun) OwnedName(suffix string) string {
	if n := r.Name + "-" + suffix; len(n) <= 253 {
		return n
	}
	return string(r.UID) + "-" + suffix
}

// OwnerReference makes the run the controller owner of an object, so the
// garbage collector deletes it with the run.
func (r *AgentRun) OwnerReference() metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{
		APIVersion:         GroupVersion.String(),
		Kind:               "AgentRun",
		Name:               r.Name,
		UID:                r.UID,
		Controller:         &yes,
		BlockOwnerDeletion: &yes,
	}
}

// DefaultSystemNamespace is the namespace config/default installs the
// manager in. The manager's egress and priority-class ConfigMaps and its
// Leases are there unless it says otherwise (POD_NAMESPACE, the chart's
// release namespace, or a flag).
const DefaultSystemNamespace = "agentrun-system"
