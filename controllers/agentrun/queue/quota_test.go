package queue

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/runqueue"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// TestQuotaStatusWakesTheRefusedThatFitItsUse: a quota's status update
// that shows no change of its exceeded limits (the refresh never saw it
// without room) still wakes, in their place in line, the runs waiting on
// its cost whose refused call fits what it now uses, as many as fit
// together, and drops their hits so they try again; the others, a waiter
// of another period, and a waiter on activeRuns stay.
func TestQuotaStatusWakesTheRefusedThatFitItsUse(t *testing.T) {
	const key = "AgentRunQuota/ns/daily"
	day := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	var woken []string
	g := newQuotaGate(nil, nil, nil, false, nil, func(ks ...types.NamespacedName) {
		for _, k := range ks {
			woken = append(woken, k.Name)
		}
	})
	wait := func(name string, created int, e store.QuotaExceededError) {
		uid := types.UID("uid-" + name)
		place := runqueue.Place{Root: day.Add(time.Duration(created) * time.Second), RootName: name, Name: name}
		g.hits[uid] = quotaHit{err: e}
		g.awaitAs(uid, types.NamespacedName{Namespace: "ns", Name: name}, place, refusal{err: &e, generation: 1})
	}
	refused := func(need, period int64) store.QuotaExceededError {
		return store.QuotaExceededError{Quota: key, Resource: arv1.QuotaCost, Used: 900_000, Hard: 1_000_000, Need: need, Period: period}
	}
	wait("second", 2, refused(400_000, day.UnixMicro()))
	wait("first", 1, refused(400_000, day.UnixMicro()))
	wait("third", 3, refused(400_000, day.UnixMicro()))
	wait("yesterday", 0, refused(1, day.AddDate(0, 0, -1).UnixMicro()))
	wait("slot", 0, store.QuotaExceededError{Quota: key, Resource: arv1.QuotaActiveRuns, Used: 2, Hard: 2, Need: 1})

	status := func(cost string) *quotaView {
		start := metav1.NewTime(day)
		return &quotaView{key: key, generation: 1, hard: arv1.QuotaHard{Cost: "1"},
			status: &arv1.AgentRunQuotaStatus{PeriodStart: &start, Used: arv1.QuotaUsed{Cost: cost}, Exceeded: []arv1.QuotaResource{arv1.QuotaCost}}}
	}
	// Still no room for a call of $0.0004.
	g.changed(status("0.0009"), status("0.00061"))
	if len(woken) != 0 {
		t.Fatalf("woken with $0.00061 used of $0.001: %v", woken)
	}
	// Settled: room for one such call, not two.
	g.changed(status("0.00061"), status("0.0005"))
	if !slices.Equal(woken, []string{"first"}) {
		t.Fatalf("woken with $0.0005 used: %v; want first, the one that fits, in its place in line", woken)
	}
	if _, hit := g.hits["uid-first"]; hit || !g.Has("uid-second") || !g.Has("uid-third") || !g.Has("uid-yesterday") || !g.Has("uid-slot") {
		t.Errorf("after the wake: hits %v, waiting %v", g.hits, g.waiting)
	}
}
