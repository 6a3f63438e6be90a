package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// A database store enforces quotas (AgentRunQuota, ClusterAgentRunQuota)
// in the same transactions as the journal, so replicas never race past
// one: a model call's intent reserves the call's worst case against each
// quota its run counts towards, refused (ErrQuotaExceeded) when that
// would take a quota past its limit, and the call's completion settles
// the reservation to what it cost. A run's start takes its runs and
// activeRuns holds the same way (Quotas.StartRun).

// QuotaLimit is one quota as a charge meets it: which quota, which period,
// and its limits (nil: not limited; counted all the same, so a limit added
// later finds the period's use).
type QuotaLimit struct {
	// Key names the quota: "AgentRunQuota/<ns>/<name>" or
	// "ClusterAgentRunQuota/<name>".
	Key string
	// Period is when the quota's current period began (Unix
	// microseconds); 0 for a running total.
	Period int64
	// ResetAt is when the period ends; zero for a running total.
	ResetAt time.Time
	// Cost (nano-USD), Tokens, Runs and ActiveRuns are the limits.
	Cost, Tokens, Runs, ActiveRuns *int64
}

// Charge is what one model call's intent reserves: its worst case, against
// every quota its run counts towards.
type Charge struct {
	// Seq is the seq of the call's intent.
	Seq int64
	// Quotas are the quotas, each once.
	Quotas []QuotaLimit
	// Cost is the call's worst-case cost in nano-USD (an unpriced model's
	// at the unpriced worst-case rates), Tokens its worst-case tokens.
	Cost, Tokens int64
}

type chargeKey struct{}

// WithCharges is ctx carrying cs (nil ones left out): a model call's
// intent appended with it reserves its charge, and a completion appended
// together with its intent (which then reserved nothing) counts against
// it. A call without a charge counts against no quota.
func WithCharges(ctx context.Context, cs ...*Charge) context.Context {
	var keep []*Charge
	for _, c := range cs {
		if c != nil {
			keep = append(keep, c)
		}
	}
	if len(keep) == 0 {
		return ctx
	}
	return context.WithValue(ctx, chargeKey{}, keep)
}

// ChargeFor is the charge ctx carries for the intent seq, nil when none.
func ChargeFor(ctx context.Context, seq int64) *Charge {
	cs, _ := ctx.Value(chargeKey{}).([]*Charge)
	for _, c := range cs {
		if c.Seq == seq {
			return c
		}
	}
	return nil
}

// ErrQuotaExceeded is a quota with no room for the call or the run. Nothing
// was written; the run waits on QuotaExceeded until the quota's period
// resets or it is raised.
var ErrQuotaExceeded = errors.New("a quota has no room")

// QuotaExceededError says which quota has no room for what.
type QuotaExceededError struct {
	// Quota is the quota's key.
	Quota string
	// Resource is the limit with no room.
	Resource arv1.QuotaResource
	// Used is what is used of it (with the calls in flight), Hard the
	// limit, Need what was asked for (a call's worst case; 1 for a run),
	// in the resource's unit (nano-USD for cost).
	Used, Hard, Need int64
	// ResetAt is when the quota's period resets; zero when none will lift
	// the wait.
	ResetAt time.Time
	// Period is the quota's period it was refused in (0: none).
	Period int64
}

func (e *QuotaExceededError) Error() string {
	return fmt.Sprintf("quota %s has no room: %s used %d of %d, %d more asked", e.Quota, e.Resource, e.Used, e.Hard, e.Need)
}

// Is makes errors.Is(err, ErrQuotaExceeded) hold.
func (e *QuotaExceededError) Is(target error) bool { return target == ErrQuotaExceeded }

// QuotaUse is what a quota's runs have used in one period.
type QuotaUse struct {
	// Cost and Tokens settled by answered calls; UnpricedCalls counts those
	// priced at the unpriced worst case.
	Cost, Tokens, UnpricedCalls int64
	// ReservedCost, ReservedTokens and InFlight are the calls in flight.
	ReservedCost, ReservedTokens, InFlight int64
	// RefusedCost and RefusedTokens are the worst case of the last call
	// refused for want of room (0 once such a call fits again): while it
	// would not fit, the quota has no room for a new run either.
	RefusedCost, RefusedTokens int64
	// Runs started in the period; ActiveRuns started and not ended.
	Runs, ActiveRuns int64
}

// Holder is a run holding part of a quota: an activeRuns slot or a call's
// reservation.
type Holder struct {
	UID             types.UID
	Namespace, Name string
}

// Quotas is what a database store keeps of quotas.
type Quotas interface {
	// StartRun counts a run's start against limits, all or none: a runs
	// and an activeRuns hold in each (where it has such a limit, and
	// counted where it has none), refused (a QuotaExceededError) when a
	// limit has no room, or when a quota's cost or tokens are used up
	// (nothing left, or no room for the last call refused). A run that
	// holds its slots already is not counted twice.
	StartRun(ctx context.Context, run RunRef, limits []QuotaLimit) error
	// EndRun gives back what a run holds: its activeRuns slots, and the
	// reservations of calls it will never answer. It returns the quotas
	// whose activeRuns slot it gave back.
	EndRun(ctx context.Context, uid types.UID) ([]string, error)
	// QuotaUse reads what a quota has used in the period.
	QuotaUse(ctx context.Context, key string, period int64) (QuotaUse, error)
	// QuotaHolders lists the runs holding part of a quota.
	QuotaHolders(ctx context.Context, key string) ([]Holder, error)
}
