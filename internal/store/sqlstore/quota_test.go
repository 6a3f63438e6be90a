package sqlstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
)

var resetAt = time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)

// dayQuota is a quota of the day at, limited to cost nano-USD.
func dayQuota(key string, cost int64) store.QuotaLimit {
	return store.QuotaLimit{Key: key, Period: time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC).UnixMicro(), ResetAt: resetAt, Cost: ptr.To(cost)}
}

// charged is ctx carrying a charge of worst case cost for the intent seq.
func charged(ctx context.Context, seq, cost int64, quotas ...store.QuotaLimit) context.Context {
	return store.WithCharges(ctx, &store.Charge{Seq: seq, Quotas: quotas, Cost: cost, Tokens: 1000})
}

func costAnswer(seq, call, cost int64) journal.Entry {
	return answer(seq, call, "ok", ptr.To(cost))
}

func use(t *testing.T, s *sqlstore.Store, key string, period int64) store.QuotaUse {
	t.Helper()
	u, err := s.QuotaUse(context.Background(), key, period)
	must(t, err)
	return u
}

// TestQuotaReservesTheWorstCaseAndSettlesToTheCost: an intent reserves its
// charge in the append's transaction, its completion settles it to what
// the call cost; an intent that does not fit is refused with the quota,
// what is used, the limit and the reset, and nothing of that append is
// stored.
func TestQuotaReservesTheWorstCaseAndSettlesToTheCost(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s, run := open(t, dsn), newRun()
		q := dayQuota("ClusterAgentRunQuota/team", 1000)
		must(t, s.Append(charged(ctx, 0, 600, q), run, intent(0, 0)))
		if u := use(t, s, q.Key, q.Period); u.ReservedCost != 600 || u.Cost != 0 || u.InFlight != 1 || u.ReservedTokens != 1000 {
			t.Fatalf("after the intent: %+v", u)
		}
		// The completion and the next intent in one append: settled to 150,
		// then 600 more reserved (150 + 600 <= 1000).
		must(t, s.Append(charged(ctx, 2, 600, q), run, costAnswer(1, 0, 150), intent(2, 0)))
		if u := use(t, s, q.Key, q.Period); u.Cost != 150 || u.ReservedCost != 600 || u.Tokens != 15 || u.InFlight != 1 {
			t.Fatalf("after the first answer: %+v", u)
		}
		// The answer settles first (150 + 200), then the next worst case
		// (700) does not fit.
		err := s.Append(charged(ctx, 4, 700, q), run, costAnswer(3, 2, 200), intent(4, 0))
		var qe *store.QuotaExceededError
		if !errors.As(err, &qe) || !errors.Is(err, store.ErrQuotaExceeded) {
			t.Fatalf("an intent past the limit: %v", err)
		}
		if qe.Quota != q.Key || qe.Resource != arv1.QuotaCost || qe.Used != 350 || qe.Hard != 1000 || qe.Need != 700 || !qe.ResetAt.Equal(resetAt) {
			t.Errorf("refusal = %+v", qe)
		}
		es, err := open(t, dsn).Load(ctx, run, false)
		must(t, err)
		if len(es) != 3 {
			t.Fatalf("the refused append left %d entries, want the 3 before it", len(es))
		}
		// The answer alone is journaled and settled (an answer is never
		// refused: it was paid for).
		must(t, s.Append(ctx, run, costAnswer(3, 2, 200)))
		if u := use(t, s, q.Key, q.Period); u.Cost != 350 || u.ReservedCost != 0 || u.InFlight != 0 {
			t.Fatalf("after the last answer: %+v", u)
		}
		// The next period starts from nothing.
		next := q
		next.Period = resetAt.UnixMicro()
		must(t, s.Append(charged(ctx, 4, 600, next), run, intent(4, 0)))
		if u := use(t, s, q.Key, next.Period); u.ReservedCost != 600 {
			t.Fatalf("the next period: %+v", u)
		}
	})
}

// TestQuotaReissuedIntentKeepsOneReservation: an intent issued again under
// its seq by another replica (the first died with the call in flight)
// gives back the first reservation as it takes its own, and a failure
// settles to nothing: no reservation is left behind.
func TestQuotaReissuedIntentKeepsOneReservation(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		dead, run := open(t, dsn), newRun()
		q := dayQuota("AgentRunQuota/ns/budget", 2000)
		must(t, dead.Append(charged(ctx, 0, 600, q), run, intent(0, 0)))
		taker := open(t, dsn)
		must(t, taker.Append(charged(ctx, 0, 600, q), run, intent(0, 1)))
		if u := use(t, taker, q.Key, q.Period); u.ReservedCost != 600 || u.InFlight != 1 || u.Cost != 600 || u.UnpricedCalls != 1 {
			t.Fatalf("after the reissue (the lost dispatch counted at its worst case): %+v", u)
		}
		must(t, taker.Append(ctx, run, journal.Entry{Seq: 1, Kind: journal.ModelCallFailed, At: at, Call: 0, Failure: &journal.Failure{Class: journal.FailFatal}}))
		if u := use(t, taker, q.Key, q.Period); u.ReservedCost != 0 || u.Cost != 600 || u.InFlight != 0 {
			t.Fatalf("after the failure: %+v", u)
		}
		if h, err := taker.QuotaHolders(ctx, q.Key); err != nil || len(h) != 0 {
			t.Fatalf("holders after the failure: %v %v", h, err)
		}
	})
}

// TestQuotaAnswerSettledByAnotherProcess: a process that reads a run's
// journal afresh (a restarted manager) settles the reservation an earlier
// one made when it journals the call's answer, and a run that never
// reserved settles nothing: the reservations a journal holds are read with
// it.
func TestQuotaAnswerSettledByAnotherProcess(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		q := dayQuota("AgentRunQuota/ns/restart", 2000)
		before, run := open(t, dsn), newRun()
		must(t, before.Append(charged(ctx, 0, 600, q), run, intent(0, 0)))
		after := open(t, dsn)
		if _, err := after.Load(ctx, run, false); err != nil {
			t.Fatal(err)
		}
		must(t, after.Append(ctx, run, costAnswer(1, 0, 250)))
		if u := use(t, after, q.Key, q.Period); u.ReservedCost != 0 || u.Cost != 250 || u.InFlight != 0 {
			t.Fatalf("after the answer journaled by the restarted process: %+v", u)
		}
		// A run charged to no quota: its answer, in a fresh process,
		// changes no quota.
		free := newRun()
		must(t, before.Append(ctx, free, intent(0, 0)))
		must(t, open(t, dsn).Append(ctx, free, costAnswer(1, 0, 90)))
		if u := use(t, after, q.Key, q.Period); u.Cost != 250 || u.ReservedCost != 0 {
			t.Fatalf("a run charged to no quota changed it: %+v", u)
		}
	})
}

// TestQuotaLostCallCountedWhenItsReissueIsRefused: a dead replica's call
// is counted at its worst case when the run is taken over, even when the
// quota has no room to issue it again: its reservation is not left held
// while the run waits, and the reissue that fits later counts it once.
func TestQuotaLostCallCountedWhenItsReissueIsRefused(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		dead, run := open(t, dsn), newRun()
		q := dayQuota("AgentRunQuota/ns/budget", 1000)
		must(t, dead.Append(charged(ctx, 0, 600, q), run, intent(0, 0)))
		taker := open(t, dsn)
		if err := taker.Append(charged(ctx, 0, 600, q), run, intent(0, 1)); !errors.Is(err, store.ErrQuotaExceeded) {
			t.Fatalf("the reissue with no room: %v", err)
		}
		if u := use(t, taker, q.Key, q.Period); u.ReservedCost != 0 || u.InFlight != 0 || u.Cost != 600 || u.UnpricedCalls != 1 {
			t.Fatalf("after the refused reissue: %+v", u)
		}
		q = dayQuota("AgentRunQuota/ns/budget", 2000)
		must(t, taker.Append(charged(ctx, 0, 600, q), run, intent(0, 1)))
		if u := use(t, taker, q.Key, q.Period); u.ReservedCost != 600 || u.InFlight != 1 || u.Cost != 600 || u.UnpricedCalls != 1 {
			t.Fatalf("after the reissue once raised: %+v", u)
		}
	})
}

// TestQuotaAnswerJournaledWithItsIntentCountsItsCharge: an intent held
// until its answer (journaled together) reserves nothing, and its answer
// counts against its charge.
func TestQuotaAnswerJournaledWithItsIntentCountsItsCharge(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s, run := open(t, dsn), newRun()
		q := dayQuota("AgentRunQuota/ns/budget", 1000)
		must(t, s.Append(charged(ctx, 0, 600, q), run, intent(0, 0), costAnswer(1, 0, 70)))
		if u := use(t, s, q.Key, q.Period); u.Cost != 70 || u.ReservedCost != 0 || u.InFlight != 0 {
			t.Fatalf("%+v", u)
		}
	})
}

// TestQuotaConcurrentReplicasNeverPassTheLimit: three stores (three
// replicas' connection pools) append intents and answers of 40 runs at
// once against one quota: at no moment do the answered and the reserved
// exceed the limit, the calls admitted spend it down to less than one
// worst case, and once everything settled nothing is reserved.
func TestQuotaConcurrentReplicasNeverPassTheLimit(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		const hard, worst, cost = 100_000, 3_000, 1_000
		q := dayQuota("ClusterAgentRunQuota/shared", hard)
		replicas := []*sqlstore.Store{open(t, dsn), open(t, dsn), open(t, dsn)}
		for _, r := range replicas {
			must(t, r.Check(ctx)) // as a manager does at start: migrated once
		}
		var wg sync.WaitGroup
		var admitted, refused atomic.Int64
		var failed atomic.Value
		for i := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, run := replicas[i%3], newRun()
				for seq := int64(0); ; seq += 2 {
					err := s.Append(charged(ctx, seq, worst, q), run, intent(seq, 0))
					if errors.Is(err, store.ErrQuotaExceeded) {
						refused.Add(1)
						return
					}
					if err != nil {
						failed.Store(err)
						return
					}
					admitted.Add(1)
					if u, err := s.QuotaUse(ctx, q.Key, q.Period); err == nil && u.Cost+u.ReservedCost > hard {
						failed.Store(fmt.Errorf("used %d + reserved %d over %d", u.Cost, u.ReservedCost, hard))
					}
					if err := s.Append(ctx, run, costAnswer(seq+1, seq, cost)); err != nil {
						failed.Store(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			t.Fatal(err)
		}
		u := use(t, replicas[0], q.Key, q.Period)
		if u.ReservedCost != 0 || u.InFlight != 0 || u.Cost != admitted.Load()*cost {
			t.Fatalf("after every run stopped: %+v; %d calls admitted", u, admitted.Load())
		}
		if u.Cost > hard || u.Cost <= hard-worst {
			t.Fatalf("spent %d of %d: want within one worst case (%d) of the limit", u.Cost, hard, worst)
		}
		t.Logf("%d calls admitted, %d runs refused, %d of %d spent", admitted.Load(), refused.Load(), u.Cost, hard)
	})
}

// TestQuotaRunStartsAndActiveSlots: a run's start takes a runs and an
// activeRuns hold, once however often it is asked; a full activeRuns is
// refused without a reset (finishing runs lift it), a period's runs with
// its reset; ending a run gives its slot and its reservations back; a
// quota whose cost is used up refuses a start.
func TestQuotaRunStartsAndActiveSlots(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		q := dayQuota("AgentRunQuota/ns/slots", 1000)
		q.ActiveRuns, q.Runs = ptr.To[int64](2), ptr.To[int64](3)
		a, b, c, d := newRun(), newRun(), newRun(), newRun()
		for _, r := range []*arv1.AgentRun{a, b, a, b} {
			must(t, s.StartRun(ctx, store.RefOf(r), []store.QuotaLimit{q}))
		}
		if u := use(t, s, q.Key, q.Period); u.Runs != 2 || u.ActiveRuns != 2 {
			t.Fatalf("two runs started (each asked twice): %+v", u)
		}
		var qe *store.QuotaExceededError
		if err := s.StartRun(ctx, store.RefOf(c), []store.QuotaLimit{q}); !errors.As(err, &qe) || qe.Resource != arv1.QuotaActiveRuns || !qe.ResetAt.IsZero() || qe.Used != 2 {
			t.Fatalf("a third active run: %v", err)
		}
		must(t, s.Append(charged(ctx, 0, 600, q), a, intent(0, 0)))
		if freed, err := s.EndRun(ctx, a.UID); err != nil || len(freed) != 1 || freed[0] != q.Key {
			t.Fatalf("EndRun(a) = %v, %v", freed, err)
		}
		if u := use(t, s, q.Key, q.Period); u.ActiveRuns != 1 || u.ReservedCost != 0 || u.InFlight != 0 {
			t.Fatalf("after a ended: %+v", u)
		}
		must(t, s.StartRun(ctx, store.RefOf(c), []store.QuotaLimit{q}))
		if _, err := s.EndRun(ctx, b.UID); err != nil {
			t.Fatal(err)
		}
		if err := s.StartRun(ctx, store.RefOf(d), []store.QuotaLimit{q}); !errors.As(err, &qe) || qe.Resource != arv1.QuotaRuns || !qe.ResetAt.Equal(resetAt) || qe.Used != 3 {
			t.Fatalf("a fourth run in the period: %v", err)
		}
		// Spend the cost: c's answer settles 1000 of 1000.
		must(t, s.Append(charged(ctx, 0, 1000, q), c, intent(0, 0), costAnswer(1, 0, 1000)))
		q.Runs = nil
		if err := s.StartRun(ctx, store.RefOf(d), []store.QuotaLimit{q}); !errors.As(err, &qe) || qe.Resource != arv1.QuotaCost || qe.Used != 1000 {
			t.Fatalf("a start with the cost used up: %v", err)
		}
	})
}

// TestQuotaNoNewRunWhileACallIsRefused: once a call found no room, a new
// run is not started against the quota until a call that large would fit
// again (its first call would only park it), and the quota's use says
// what was refused.
func TestQuotaNoNewRunWhileACallIsRefused(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		q := dayQuota("AgentRunQuota/ns/tight", 1000)
		a, b, c := newRun(), newRun(), newRun()
		must(t, s.StartRun(ctx, store.RefOf(a), []store.QuotaLimit{q}))
		must(t, s.StartRun(ctx, store.RefOf(b), []store.QuotaLimit{q}))
		must(t, s.Append(charged(ctx, 0, 600, q), a, intent(0, 0)))
		if err := s.Append(charged(ctx, 0, 600, q), b, intent(0, 0)); !errors.Is(err, store.ErrQuotaExceeded) {
			t.Fatalf("b's call: %v", err)
		}
		if u := use(t, s, q.Key, q.Period); u.RefusedCost != 600 {
			t.Fatalf("after b's refusal: %+v", u)
		}
		var qe *store.QuotaExceededError
		if err := s.StartRun(ctx, store.RefOf(c), []store.QuotaLimit{q}); !errors.As(err, &qe) || qe.Resource != arv1.QuotaCost || qe.Need != 600 || qe.Used != 600 {
			t.Fatalf("c's start while b's call is refused: %v", err)
		}
		must(t, s.Append(ctx, a, costAnswer(1, 0, 100)))
		must(t, s.StartRun(ctx, store.RefOf(c), []store.QuotaLimit{q}))
		must(t, s.Append(charged(ctx, 0, 600, q), b, intent(0, 0)))
		if u := use(t, s, q.Key, q.Period); u.RefusedCost != 0 || u.ReservedCost != 600 || u.Cost != 100 {
			t.Fatalf("after b's call fitted: %+v", u)
		}
	})
}

// TestQuotaEndRunTwiceAtOnceGivesBackOnce: a run's old and new owner (or
// the quota's sweep) ending it at the same moment give its activeRuns
// slot and its reservation back once, never leaving the counts below
// zero.
func TestQuotaEndRunTwiceAtOnceGivesBackOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		a, b := open(t, dsn), open(t, dsn)
		q := dayQuota("AgentRunQuota/ns/race", 1_000_000)
		q.ActiveRuns = ptr.To[int64](100)
		for range 20 {
			run := newRun()
			must(t, a.StartRun(ctx, store.RefOf(run), []store.QuotaLimit{q}))
			must(t, a.Append(charged(ctx, 0, 600, q), run, intent(0, 0)))
			var wg sync.WaitGroup
			for _, s := range []*sqlstore.Store{a, b} {
				wg.Go(func() {
					if _, err := s.EndRun(ctx, run.UID); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
		}
		if u := use(t, a, q.Key, q.Period); u.ActiveRuns != 0 || u.ReservedCost != 0 || u.InFlight != 0 {
			t.Fatalf("after each run ended twice at once: %+v", u)
		}
	})
}

// journaledLost is the lost dispatches a run's stored journal counts, as
// its status does (journal.Fold: each intent's Lost).
func journaledLost(t *testing.T, dsn string, run *arv1.AgentRun) int64 {
	t.Helper()
	es, err := open(t, dsn).Load(context.Background(), run, false)
	must(t, err)
	n := int64(0)
	for _, e := range es {
		if e.Kind == journal.ModelCallRequested {
			n += int64(e.Lost)
		}
	}
	return n
}

// TestQuotaLedgerCountsTheLostCallsTheJournalsCount: a replica dies with a
// call of each of three runs, and another takes them over.
//   - a's intent was journaled, so the call may have been sent: the taker
//     issues it again counting it lost, and its reservation is settled at
//     its worst case, once.
//   - b's intent only its status held (with a database store a call is made
//     only once its intent is journaled, so it was never sent): the taker
//     journals it afresh, not lost, and nothing is charged for it.
//   - c's intent was journaled and its manager knew the call was never made
//     (refused, or stopped before the call): issued again keeping its Lost,
//     its reservation is given back, uncharged.
//
// The ledger's lost calls equal the journals', its cost is the answered
// calls plus the lost one's worst case exactly, and nothing is left
// reserved. A never-sent dispatch whose reissue finds no room is given
// back too, not counted lost.
func TestQuotaLedgerCountsTheLostCallsTheJournalsCount(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		dead, taker := open(t, dsn), open(t, dsn)
		q := dayQuota("ClusterAgentRunQuota/team", 1_000_000)
		a, b, c := newRun(), newRun(), newRun()
		must(t, dead.Append(charged(ctx, 0, 600, q), a, intent(0, 0)))
		must(t, dead.Append(charged(ctx, 0, 600, q), c, intent(0, 0)))
		// The dead replica's status write named b's intent; its journal
		// write never happened.
		if u := use(t, taker, q.Key, q.Period); u.ReservedCost != 1200 || u.InFlight != 2 {
			t.Fatalf("as the replica died: %+v", u)
		}
		again := func(lost int) journal.Entry {
			e := intent(0, lost)
			e.At = at.Add(time.Minute)
			return e
		}
		must(t, taker.Append(charged(ctx, 0, 600, q), a, again(1)))
		must(t, taker.Append(charged(ctx, 0, 600, q), b, again(0)))
		must(t, taker.Append(charged(ctx, 0, 600, q), c, again(0)))
		for _, r := range []*arv1.AgentRun{a, b, c} {
			must(t, taker.Append(ctx, r, costAnswer(1, 0, 100)))
		}
		u := use(t, taker, q.Key, q.Period)
		lost := journaledLost(t, dsn, a) + journaledLost(t, dsn, b) + journaledLost(t, dsn, c)
		if lost != 1 || u.UnpricedCalls != lost {
			t.Errorf("the ledger counted %d lost calls, the journals %d; want 1 (a's)", u.UnpricedCalls, lost)
		}
		if u.Cost != 3*100+600 || u.Tokens != 3*15+1000 || u.ReservedCost != 0 || u.ReservedTokens != 0 || u.InFlight != 0 {
			t.Errorf("the ledger: %+v; want $300 answered plus a's worst case of 600 (tokens 45 + 1000), nothing reserved", u)
		}
		if h, err := taker.QuotaHolders(ctx, q.Key); err != nil || len(h) != 0 {
			t.Errorf("holders left: %v %v", h, err)
		}

		// A dispatch known never sent whose reissue finds no room: its
		// reservation goes back, uncounted, while the run waits.
		tight := dayQuota("AgentRunQuota/ns/tight", 1000)
		d, e := newRun(), newRun()
		must(t, dead.Append(charged(ctx, 0, 600, tight), d, intent(0, 0)))
		must(t, taker.Append(charged(ctx, 0, 300, tight), e, intent(0, 0), costAnswer(1, 0, 300)))
		if err := taker.Append(charged(ctx, 0, 800, tight), d, again(0)); !errors.Is(err, store.ErrQuotaExceeded) {
			t.Fatalf("d's reissue with no room: %v", err)
		}
		if u := use(t, taker, tight.Key, tight.Period); u.Cost != 300 || u.ReservedCost != 0 || u.InFlight != 0 || u.UnpricedCalls != 0 {
			t.Errorf("after d's reissue was refused: %+v; want e's 300 only, nothing reserved or lost", u)
		}
		must(t, taker.Append(charged(ctx, 0, 600, tight), d, again(0)))
		if u := use(t, taker, tight.Key, tight.Period); u.Cost != 300 || u.ReservedCost != 600 || u.InFlight != 1 || u.UnpricedCalls != 0 {
			t.Errorf("after d's reissue fitted: %+v", u)
		}
	})
}

// TestQuotaReissueOfAnAnsweredIntentIsRefused: a replica that read a run's
// journal while its call was in flight elsewhere (its old owner, whose
// answer committed before the new owner's fence did; or an append of its
// own whose commit answered with an error) sees the intent as pending when
// it is answered. Its reissue must be refused (ErrSeqTaken: the journal is
// read afresh) rather than written over the answered intent: that would
// count a lost dispatch in the journal whose reservation the answer had
// already settled (the ledger counts none), and make a second call whose
// answer the journal then refuses, its reservation held until the run
// ends.
func TestQuotaReissueOfAnAnsweredIntentIsRefused(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		old, taker, run := open(t, dsn), open(t, dsn), newRun()
		q := dayQuota("ClusterAgentRunQuota/team", 1_000_000)
		must(t, old.Append(charged(ctx, 0, 600, q), run, intent(0, 0)))
		if es, err := taker.Load(ctx, run, false); err != nil || len(es) != 1 {
			t.Fatalf("the taker's read: %v %v", es, err)
		}
		must(t, old.Append(charged(ctx, 0, 600, q), run, costAnswer(1, 0, 100)))
		again := intent(0, 1)
		again.At = at.Add(time.Minute)
		if err := taker.Append(charged(ctx, 0, 600, q), run, again); !errors.Is(err, store.ErrSeqTaken) {
			t.Errorf("the reissue of an answered intent: %v; want ErrSeqTaken", err)
		}
		u := use(t, taker, q.Key, q.Period)
		if lost := journaledLost(t, dsn, run); lost != u.UnpricedCalls || lost != 0 {
			t.Errorf("the journal counts %d lost calls, the ledger %d; want 0", lost, u.UnpricedCalls)
		}
		if u.Cost != 100 || u.ReservedCost != 0 || u.InFlight != 0 {
			t.Errorf("the ledger: %+v; want the answer's 100, nothing reserved", u)
		}
		// Read afresh, the taker finds the call answered.
		es, err := taker.Load(ctx, run, false)
		must(t, err)
		if len(es) != 2 || es[0].Lost != 0 || es[1].Kind != journal.ModelCallCompleted {
			t.Errorf("the journal as the taker reads it afresh: %+v", es)
		}
	})
}

// TestQuotaLostAfterRefusalSettlesOnlyTheDispatchItReplaces: a lost call
// is settled after its reissue was refused (the refused append rolled
// back) in a transaction of its own; by then a newer owner of the run's
// shard may have issued the intent again itself (counting that lost
// dispatch) and reserved for its own call, in flight. The late settlement
// finds the journal no longer holds the dispatch it replaced, and leaves
// the newer call's reservation alone: counting it lost too would count one
// lost dispatch twice, and the newer call's answer would find nothing to
// settle.
func TestQuotaLostAfterRefusalSettlesOnlyTheDispatchItReplaces(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		dead, late, newer, run := open(t, dsn), open(t, dsn), open(t, dsn), newRun()
		q := dayQuota("ClusterAgentRunQuota/team", 1_000_000)
		first := intent(0, 0)
		must(t, dead.Append(charged(ctx, 0, 600, q), run, first))
		// The late replica's reissue (Lost 1) as it planned it, over the
		// dead replica's intent.
		again := intent(0, 1)
		again.At = at.Add(time.Minute)
		plan := planOver(t, first, again)
		// The newer owner issues it again first, counting the dead
		// replica's dispatch lost, and reserves for its own call.
		newerAgain := intent(0, 1)
		newerAgain.At = at.Add(2 * time.Minute)
		must(t, newer.Append(charged(ctx, 0, 600, q), run, newerAgain))
		sqlstore.LostAfterRefusal(ctx, late, run, plan)
		if u := use(t, newer, q.Key, q.Period); u.UnpricedCalls != 1 || u.Cost != 600 || u.ReservedCost != 600 || u.InFlight != 1 {
			t.Fatalf("after the late settlement: %+v; want the dead replica's dispatch counted once, the newer call still reserved", u)
		}
		must(t, newer.Append(charged(ctx, 0, 600, q), run, costAnswer(1, 0, 100)))
		u := use(t, newer, q.Key, q.Period)
		if lost := journaledLost(t, dsn, run); lost != u.UnpricedCalls || lost != 1 {
			t.Errorf("the journal counts %d lost calls, the ledger %d; want 1", lost, u.UnpricedCalls)
		}
		if u.Cost != 600+100 || u.ReservedCost != 0 || u.InFlight != 0 {
			t.Errorf("the ledger: %+v; want the lost call's 600 and the answer's 100, nothing reserved", u)
		}
	})
}

// planOver is what an append of again plans over a journal whose last
// entry is was (store.Log.Plan): again, replacing was's stored text.
func planOver(t *testing.T, was, again journal.Entry) []store.Planned {
	t.Helper()
	text, err := json.Marshal(was)
	must(t, err)
	l := store.Log{Loaded: true, Entries: []journal.Entry{was}, Raw: map[int64]string{was.Seq: string(text)}}
	plan, err := l.Plan([]journal.Entry{again})
	must(t, err)
	if len(plan) != 1 || plan[0].Replaces == "" {
		t.Fatalf("the plan: %+v", plan)
	}
	return plan
}

// TestQuotaIntentReissuedTwiceCountsEachLostDispatch: an intent issued
// again twice (its run's shard changed hands twice with the call in
// flight; Lost 1, then 2) counts each lost dispatch once at its worst
// case, as the journal does, also when a quota refused a reissue in
// between (its lost dispatch is counted then, and the reissue that fits
// counts it no second time).
func TestQuotaIntentReissuedTwiceCountsEachLostDispatch(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		run := newRun()
		q := dayQuota("ClusterAgentRunQuota/team", 2000)
		reissue := func(s *sqlstore.Store, lost int, minute time.Duration, limit int64) error {
			e := intent(0, lost)
			e.At = at.Add(minute * time.Minute)
			return s.Append(charged(ctx, 0, 600, dayQuota(q.Key, limit)), run, e)
		}
		must(t, open(t, dsn).Append(charged(ctx, 0, 600, q), run, intent(0, 0)))
		must(t, reissue(open(t, dsn), 1, 1, 2000))
		third := open(t, dsn)
		if err := reissue(third, 2, 2, 1000); !errors.Is(err, store.ErrQuotaExceeded) {
			t.Fatalf("the second reissue with no room: %v", err)
		}
		must(t, reissue(third, 2, 3, 2000))
		must(t, third.Append(charged(ctx, 0, 600, q), run, costAnswer(1, 0, 100)))
		u := use(t, third, q.Key, q.Period)
		if lost := journaledLost(t, dsn, run); lost != u.UnpricedCalls || lost != 2 {
			t.Errorf("the journal counts %d lost calls, the ledger %d; want 2", lost, u.UnpricedCalls)
		}
		if u.Cost != 2*600+100 || u.ReservedCost != 0 || u.InFlight != 0 {
			t.Errorf("the ledger: %+v; want two worst cases of 600 and the answer's 100, nothing reserved", u)
		}
	})
}
