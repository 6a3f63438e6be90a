package historyclient

import (
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"

	hv1 "github.com/agentrun-dev/agentrun-operator/api/history/v1alpha1"
	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// Row is a record as a listing shows it: the columns of `kubectl get
// agentrunrecords` (printed by the server), `kubectl agentrun history`
// and the console's history page, so the three read alike.
type Row struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	Agent     string `json:"agent"`
	Phase     string `json:"phase"`
	Model     string `json:"model"`
	Tokens    int64  `json:"tokens"`
	Calls     int64  `json:"calls"`
	// Cost is "$AMOUNT", or "unknown" (with the priced part) when a call
	// could not be priced: never $0 for an unknown cost.
	Cost string `json:"cost"`
	// Duration is start (or creation) to finish.
	Duration string `json:"duration"`
	// Finished is how long before now the run finished; FinishedAt is
	// RFC 3339.
	Finished   string `json:"finished"`
	FinishedAt string `json:"finishedAt"`
}

// RowOf is rec's row at now.
func RowOf(rec *hv1.AgentRunRecord, now time.Time) Row {
	u := rec.Status.Usage
	return Row{Namespace: rec.Namespace, Name: rec.Name, UID: string(rec.UID), Agent: rec.Spec.Agent, Phase: string(rec.Status.Phase),
		Model: rec.Status.Model, Tokens: u.TotalTokens, Calls: u.ModelCalls, Cost: CostCell(u), Duration: runDuration(rec),
		Finished: duration.HumanDuration(now.Sub(rec.Archive.FinishedAt.Time)), FinishedAt: rec.Archive.FinishedAt.UTC().Format(time.RFC3339)}
}

// CostCell is a run's cost as its status shows it: a USD amount, or
// "unknown" (with the priced part) when a call could not be priced.
func CostCell(u arv1.Usage) string {
	switch u.CostUSD {
	case "unknown":
		if u.CostPricedUSD != "" && u.CostPricedUSD != "0" {
			return "unknown (≥$" + u.CostPricedUSD + ")"
		}
		return "unknown"
	case "":
		if u.UnpricedCalls > 0 || u.LostCalls > 0 {
			return "unknown"
		}
		return "$0"
	}
	return "$" + u.CostUSD
}

// runDuration is start (or creation) to finish.
func runDuration(rec *hv1.AgentRunRecord) string {
	start := rec.CreationTimestamp.Time
	if s := rec.Status.StartedAt; s != nil {
		start = s.Time
	}
	if start.IsZero() {
		return "-"
	}
	d := rec.Archive.FinishedAt.Sub(start)
	if d < 0 {
		d = 0
	}
	if d < time.Minute {
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	return duration.HumanDuration(d)
}
