package runstate

import (
	"strconv"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/money"
)

// Spent is what a budget is checked against, all from recorded data.
type Spent struct {
	Steps     int64
	Tokens    int64
	CostNano  int64
	ToolCalls int64
	Working   time.Duration
}

// CheckBudgets returns the first budget reached, in the seeds' order (steps,
// tokens, cost, wall time) and then tool calls, each firing at
// observed >= limit. Nil when every budget has room for another call.
func CheckBudgets(b *arv1.Budgets, s Spent) *BudgetHit {
	if b == nil {
		return nil
	}
	if b.Steps != nil && s.Steps >= *b.Steps {
		return &BudgetHit{Kind: arv1.BudgetSteps, Limit: strconv.FormatInt(*b.Steps, 10), Observed: strconv.FormatInt(s.Steps, 10)}
	}
	if b.Tokens != nil && s.Tokens >= *b.Tokens {
		return &BudgetHit{Kind: arv1.BudgetTokens, Limit: strconv.FormatInt(*b.Tokens, 10), Observed: strconv.FormatInt(s.Tokens, 10)}
	}
	if b.CostUSD != "" {
		if limit, err := money.ParseUSD(b.CostUSD); err == nil && money.NanoUSD(s.CostNano) >= limit {
			return &BudgetHit{Kind: arv1.BudgetCostUSD, Limit: limit.String(), Observed: money.NanoUSD(s.CostNano).String()}
		}
	}
	if b.WallTime != "" {
		if limit, err := time.ParseDuration(b.WallTime); err == nil && s.Working >= limit {
			return &BudgetHit{Kind: arv1.BudgetWallTime, Limit: strconv.FormatInt(int64(limit/time.Second), 10), Observed: strconv.FormatInt(int64(s.Working/time.Second), 10)}
		}
	}
	if b.ToolCalls != nil && s.ToolCalls >= *b.ToolCalls {
		return &BudgetHit{Kind: arv1.BudgetToolCalls, Limit: strconv.FormatInt(*b.ToolCalls, 10), Observed: strconv.FormatInt(s.ToolCalls, 10)}
	}
	return nil
}
