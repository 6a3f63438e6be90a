package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/quota"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
)

// TestLostCallLedgerMatchesJournalWhenReissueStatusWriteFails: a manager
// stops while a run's model call is in flight (its intent journaled, its
// worst case reserved in the PostgreSQL ledger), as a replica that dies
// mid-call. The quota ($0.03) has no room for the reissue on top of the
// lost dispatch counted at its worst case: the manager that takes the run
// over issues the intent again, counting the dispatch lost, the append is
// refused and rolled back, and the lost dispatch is settled apart
// (lostAfterRefusal). The run parks until the quota is raised; the
// reconcile that then issues the intent again writes status (the run
// waited on the quota, so the write cannot wait) and that write fails
// (503s injected into the API server's answers). Were the reissued seq
// taken for one never started (unstartedIntents), it would be issued once
// more without counting the dispatch the ledger counted lost. On a
// database store the reissue's step starts before that status write, so
// this passes without unstartedIntents' Lost too: it guards the sequence
// (TestReissueCountsADispatchItDidNotIssue tests the mechanism). The run completes with
// one lost call in status.usage.lostCalls and in its journal's last
// intent, and the ledger counts exactly that many lost (unpriced) calls,
// the answered call's cost on top, with nothing left reserved.
func TestLostCallLedgerMatchesJournalWhenReissueStatusWriteFails(t *testing.T) {
	ctx := context.Background()
	dsn := storeDSNFor(t, "postgres")
	ledger := storeReader(t, dsn)
	h1 := startManager(t, managerOpts{store: dsn, quotaPolicy: quotaPolicy, identity: "first"})
	waitPolicyDatabase(t, true)
	ns := newNamespace(t)
	createConfigMap(t, ns, "slow", map[string]string{"agent.toml": fmt.Sprintf(pricedCall, "slow", 3000)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": pricedProviders})
	q := createQuota(t, ns, "budget", arv1.AgentRunQuotaSpec{Hard: arv1.QuotaHard{Cost: "0.03"}})
	key := quota.Key(arv1.KindAgentRunQuota, ns, "budget")

	run := createRun(t, ns, "r", "slow")
	inFlight := ledgerWait(t, ledger, key, "the call reserved and sent", func(u store.QuotaUse) bool {
		return u.InFlight == 1 && h1.scripted.Calls(string(run.UID)) == 1
	})
	h1.stop()

	faults := &statusFaults{ns: ns, fail: map[int]bool{}, attempts: map[string]int{}}
	h2 := startManager(t, managerOpts{store: dsn, quotaPolicy: quotaPolicy, identity: "second",
		quotaStatusInterval: 200 * time.Millisecond, wrap: faults.wrap})
	parked := waitFor(t, ns, "r", 30*time.Second, "QuotaExceeded after the takeover", quotaWait)
	if parked.Status.Driver != "second" {
		t.Errorf("parked by %q, want the second manager", parked.Status.Driver)
	}
	use, err := ledger.QuotaUse(ctx, key, 0)
	if err != nil {
		t.Fatal(err)
	}
	if use.UnpricedCalls != 1 || use.InFlight != 0 || use.ReservedCost != 0 || use.Cost != inFlight.ReservedCost {
		t.Errorf("the ledger as the run parks: %+v; want the dead manager's dispatch lost at its worst case ($%d nano), nothing reserved", use, inFlight.ReservedCost)
	}
	if lost := lastIntentLost(t, dsn, ns, run); lost != 0 {
		t.Errorf("the journal's intent counts %d lost dispatches while the reissue is refused; want 0 (the refused append rolled back)", lost)
	}

	// The next two status writes of the run fail: the first is the
	// reconcile's that issues the intent again once the quota has room.
	faults.mu.Lock()
	n := faults.attempts["r"]
	faults.fail[n+1], faults.fail[n+2] = true, true
	faults.mu.Unlock()
	orig := q.DeepCopy()
	q.Spec.Hard.Cost = "1"
	if err := k8s.Patch(ctx, q, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	done := waitFor(t, ns, "r", 40*time.Second, "Complete after the raise", phaseIs(arv1.PhaseComplete))

	faults.mu.Lock()
	failed := faults.failed
	faults.mu.Unlock()
	if failed != 2 {
		t.Fatalf("%d status writes of the run failed after the raise; want 2", failed)
	}
	u := done.Status.Usage
	served := h1.scripted.Calls(string(run.UID)) + h2.scripted.Calls(string(run.UID))
	if u.LostCalls != 1 || u.ModelCalls != 1 || int(u.ModelCalls+u.LostCalls) != served {
		t.Errorf("usage %+v; the provider served %d: want 1 answered call and 1 lost", u, served)
	}
	lost := lastIntentLost(t, dsn, ns, run)
	use, err = ledger.QuotaUse(ctx, key, 0)
	if err != nil {
		t.Fatal(err)
	}
	if use.UnpricedCalls != u.LostCalls || int64(lost) != u.LostCalls {
		t.Errorf("the ledger counts %d lost calls, the journal's intent %d, status.usage.lostCalls %d; want them equal", use.UnpricedCalls, lost, u.LostCalls)
	}
	// One answered call ($0.0101) and the lost one at its worst case.
	if use.Cost != 10_100_000+inFlight.ReservedCost || use.ReservedCost != 0 || use.InFlight != 0 {
		t.Errorf("the ledger: %+v; want $0.0101 answered plus the lost call's reservation ($%d nano), nothing reserved", use, inFlight.ReservedCost)
	}
}

// ledgerWait polls the quota's running-total ledger until cond holds.
func ledgerWait(t *testing.T, ledger *sqlstore.Store, key, what string, cond func(store.QuotaUse) bool) store.QuotaUse {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		u, err := ledger.QuotaUse(context.Background(), key, 0)
		if err == nil && cond(u) {
			return u
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: the ledger %+v (%v)", what, u, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lastIntentLost is the Lost of the run's last model-call intent in its
// journal.
func lastIntentLost(t *testing.T, dsn, ns string, run *arv1.AgentRun) int {
	t.Helper()
	lost := -1
	for _, e := range journalEntriesIn(t, dsn, ns, run) {
		if e.Kind == journal.ModelCallRequested {
			lost = e.Lost
		}
	}
	if lost < 0 {
		t.Fatal("the journal holds no model-call intent")
	}
	return lost
}
