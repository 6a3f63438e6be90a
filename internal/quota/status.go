package quota

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/money"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// Exhausted lists the limits of l with no room left by u: activeRuns and
// runs at their limit; cost and tokens used up, or without room for the
// last call refused.
func Exhausted(l *store.QuotaLimit, u store.QuotaUse) []arv1.QuotaResource {
	var out []arv1.QuotaResource
	for _, r := range arv1.QuotaResources {
		hard, ok := Hard(l, r)
		if !ok {
			continue
		}
		used, refused := Used(u, r), int64(0)
		switch r {
		case arv1.QuotaCost:
			refused = u.RefusedCost
		case arv1.QuotaTokens:
			refused = u.RefusedTokens
		}
		if used >= hard || (refused > 0 && used+refused > hard) {
			out = append(out, r)
		}
	}
	return out
}

// Used is what u counts of r: for cost and tokens the answered calls plus
// the worst case of those in flight.
func Used(u store.QuotaUse, r arv1.QuotaResource) int64 {
	switch r {
	case arv1.QuotaCost:
		return u.Cost + u.ReservedCost
	case arv1.QuotaTokens:
		return u.Tokens + u.ReservedTokens
	case arv1.QuotaRuns:
		return u.Runs
	}
	return u.ActiveRuns
}

// Status is the quota's status from its use u at now, over the
// conditions it had (their transition times are kept). problem, when
// set, is why the use could not be read: Ready is False with it, and the
// counts are left as they were.
func Status(q *Quota, prev *arv1.AgentRunQuotaStatus, l *store.QuotaLimit, u store.QuotaUse, problem *Problem) arv1.AgentRunQuotaStatus {
	st := arv1.AgentRunQuotaStatus{ObservedGeneration: q.Generation, Conditions: slices.Clone(prev.Conditions)}
	if problem != nil && !problem.Counted {
		st.Used, st.InFlight, st.PeriodStart, st.ResetAt, st.Summary, st.Exceeded = prev.Used, prev.InFlight, prev.PeriodStart, prev.ResetAt, prev.Summary, prev.Exceeded
		setCondition(&st.Conditions, q.Generation, arv1.ConditionReady, metav1.ConditionFalse, problem.Reason, problem.Message)
		return st
	}
	if l.Period != 0 {
		start, end := metav1.NewTime(time.UnixMicro(l.Period)), metav1.NewTime(l.ResetAt)
		st.PeriodStart, st.ResetAt = &start, &end
	}
	var parts []string
	for _, r := range arv1.QuotaResources {
		hard, ok := Hard(l, r)
		if !ok {
			continue
		}
		used := Used(u, r)
		switch r {
		case arv1.QuotaCost:
			st.Used.Cost = money.NanoUSD(used).String()
		case arv1.QuotaTokens:
			st.Used.Tokens = &used
		case arv1.QuotaRuns:
			st.Used.Runs = &used
		case arv1.QuotaActiveRuns:
			n := int32(used)
			st.Used.ActiveRuns = &n
		}
		parts = append(parts, fmt.Sprintf("%s: %s/%s", r, Amount(r, used), Amount(r, hard)))
	}
	st.Used.UnpricedCalls = u.UnpricedCalls
	if u.InFlight > 0 || u.ReservedCost > 0 || u.ReservedTokens > 0 {
		tokens := u.ReservedTokens
		st.InFlight = arv1.QuotaInFlight{Cost: money.NanoUSD(u.ReservedCost).String(), Tokens: &tokens, Calls: u.InFlight}
	}
	st.Summary = clip(strings.Join(parts, ", "), 256)
	st.Exceeded = Exhausted(l, u)
	if problem != nil {
		setCondition(&st.Conditions, q.Generation, arv1.ConditionReady, metav1.ConditionFalse, problem.Reason, problem.Message)
	} else {
		setCondition(&st.Conditions, q.Generation, arv1.ConditionReady, metav1.ConditionTrue, arv1.ReasonCounted, countedMessage(u))
	}
	if len(st.Exceeded) == 0 {
		setCondition(&st.Conditions, q.Generation, arv1.ConditionExceeded, metav1.ConditionFalse, arv1.ReasonWithinQuota, "Every limit has room")
	} else {
		setCondition(&st.Conditions, q.Generation, arv1.ConditionExceeded, metav1.ConditionTrue, arv1.ReasonQuotaExceeded, exceededMessage(st.Exceeded, st.ResetAt))
	}
	return st
}

// Problem is why a quota's use could not be read (Ready is False with
// it), or, Counted, what of it is not counted.
type Problem struct {
	Reason, Message string
	// Counted: the counts shown are good; the problem is what they leave
	// out.
	Counted bool
}

func countedMessage(u store.QuotaUse) string {
	msg := "Counted from the runs' store"
	if u.UnpricedCalls > 0 {
		msg += fmt.Sprintf("; %d calls to models without a rate card are counted at the worst-case rates (prompt $150, completion $600 per million tokens), so cost is an upper bound", u.UnpricedCalls)
	}
	return msg
}

func exceededMessage(rs []arv1.QuotaResource, resetAt *metav1.Time) string {
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = string(r)
	}
	msg := strings.Join(names, ", ") + " has no room: runs that would exceed it wait (QuotaExceeded)"
	if resetAt != nil {
		msg += " until the period resets at " + resetAt.UTC().Format(time.RFC3339) + " or the quota is raised"
	} else {
		msg += " until the quota is raised (or, for activeRuns, runs finish)"
	}
	return msg
}

func setCondition(cs *[]metav1.Condition, gen int64, t string, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(cs, metav1.Condition{Type: t, Status: s, Reason: reason, Message: clip(msg, 32768), ObservedGeneration: gen})
}
