package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/quota"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// Quotas are enforced with one row per quota, period and resource in
// quota_usage, changed only by guarded updates (used + reserved + asked <=
// hard), so concurrent transactions on any number of replicas serialize
// on the row: PostgreSQL re-checks the guard against the row a concurrent
// update committed, and SQLite has one writer. Every transaction takes the
// rows it changes in one order (quota key, then resource name), so two
// never wait on each other in a cycle.

var _ store.Quotas = (*Store)(nil)

// callResources are the resources a call reserves, in lock order.
var callResources = []arv1.QuotaResource{arv1.QuotaCost, arv1.QuotaTokens}

// settleQuotas does, inside an append's transaction, what its entries mean
// for quotas: a model call's intent reserves its worst case (its charge,
// which the context carries), refused with a QuotaExceededError when a
// quota has no room; an intent issued again first settles its earlier
// dispatch's reservation (replaced); a completion settles its intent's reservation to
// what the call cost, a failure to nothing. An intent journaled together
// with its completion (it was held in status until then) reserves
// nothing, and its completion counts against its charge directly. A run
// that holds no reservations (held false) has none to settle, and none
// is looked up.
func (s *Store) settleQuotas(ctx context.Context, tx *sql.Tx, run *arv1.AgentRun, plan []store.Planned, held bool) error {
	answered := map[int64]bool{}
	for _, p := range plan {
		if k := p.Entry.Kind; k == journal.ModelCallCompleted || k == journal.ModelCallFailed {
			answered[p.Entry.Call] = true
		}
	}
	for _, p := range plan {
		e := &p.Entry
		if e.Inherited {
			continue
		}
		var err error
		switch e.Kind {
		case journal.ModelCallRequested:
			if p.Replaces != "" && held {
				err = s.replaced(ctx, tx, run.UID, &p)
			}
			if c := store.ChargeFor(ctx, e.Seq); err == nil && c != nil && !answered[e.Seq] {
				err = s.reserve(ctx, tx, run, e.Seq, c)
			}
		case journal.ModelCallCompleted:
			found := false
			if held {
				found, err = s.settle(ctx, tx, run.UID, e.Call, e)
			}
			if err == nil && !found {
				err = s.countUnreserved(ctx, tx, e, store.ChargeFor(ctx, e.Call))
			}
		case journal.ModelCallFailed:
			if held {
				_, err = s.settle(ctx, tx, run.UID, e.Call, nil)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// mayReserve says whether an append of plan may reserve: it journals a
// model call's intent with a charge.
func mayReserve(ctx context.Context, plan []store.Planned) bool {
	for _, p := range plan {
		if p.Entry.Kind == journal.ModelCallRequested && !p.Entry.Inherited && store.ChargeFor(ctx, p.Entry.Seq) != nil {
			return true
		}
	}
	return false
}

// countUnreserved counts an answered call that reserved nothing (its
// intent was journaled with it) against its charge's quotas, unguarded:
// it was made, and is counted.
func (s *Store) countUnreserved(ctx context.Context, tx *sql.Tx, e *journal.Entry, c *store.Charge) error {
	if c == nil {
		return nil
	}
	cost, tokens, unpriced := quota.Settled(e)
	for _, l := range sortedLimits(c.Quotas) {
		for _, r := range callResources {
			used, unp := cost, 0
			if r == arv1.QuotaTokens {
				used = tokens
			} else if unpriced {
				unp = 1
			}
			if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO quota_usage (quota, period, resource) VALUES ($1, $2, $3)
				ON CONFLICT (quota, period, resource) DO NOTHING`), l.Key, l.Period, string(r)); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, s.q("UPDATE quota_usage SET used = used + $4, unpriced = unpriced + $5 WHERE quota = $1 AND period = $2 AND resource = $3"),
				l.Key, l.Period, string(r), used, unp); err != nil {
				return err
			}
		}
	}
	return nil
}

// reserve takes c's worst case from every quota it names, in lock order.
func (s *Store) reserve(ctx context.Context, tx *sql.Tx, run *arv1.AgentRun, seq int64, c *store.Charge) error {
	limits := sortedLimits(c.Quotas)
	for i := range limits {
		l := &limits[i]
		for _, r := range callResources {
			amount := c.Cost
			if r == arv1.QuotaTokens {
				amount = c.Tokens
			}
			res, err := tx.ExecContext(ctx, s.q(`INSERT INTO quota_reservations (run_uid, seq, quota, period, resource, amount, namespace, name)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (run_uid, seq, quota, resource) DO NOTHING`),
				string(run.UID), seq, l.Key, l.Period, string(r), amount, run.Namespace, run.Name)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				continue // reserved by an earlier attempt of this append
			}
			calls := 0
			if r == arv1.QuotaCost {
				calls = 1
			}
			if err := s.take(ctx, tx, l, r, "reserved", amount, calls); err != nil {
				return err
			}
		}
	}
	return nil
}

// take adds amount to the column (reserved or used) of the quota's row of
// r in its period, guarded by its limit: a QuotaExceededError when the
// row's used and reserved and amount would be over it.
func (s *Store) take(ctx context.Context, tx *sql.Tx, l *store.QuotaLimit, r arv1.QuotaResource, column string, amount int64, calls int) error {
	period := l.Period
	if r == arv1.QuotaActiveRuns {
		period = 0
	}
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO quota_usage (quota, period, resource) VALUES ($1, $2, $3)
		ON CONFLICT (quota, period, resource) DO NOTHING`), l.Key, period, string(r)); err != nil {
		return err
	}
	set := column + " = " + column + " + $4, calls = calls + $5"
	if column == "reserved" {
		// A call this large fits again: forget the last refusal.
		set += ", refused = CASE WHEN $4 >= refused THEN 0 ELSE refused END"
	}
	hard, limited := quota.Hard(l, r)
	guard := ""
	args := []any{l.Key, period, string(r), amount, calls}
	if limited {
		guard, args = " AND used + reserved + $4 <= $6", append(args, hard)
	}
	res, err := tx.ExecContext(ctx, s.q("UPDATE quota_usage SET "+set+" WHERE quota = $1 AND period = $2 AND resource = $3"+guard), args...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return nil
	}
	var used int64
	if err := tx.QueryRowContext(ctx, s.q("SELECT used + reserved FROM quota_usage WHERE quota = $1 AND period = $2 AND resource = $3"),
		l.Key, period, string(r)).Scan(&used); err != nil {
		return err
	}
	return exceeded(l, r, used, hard, amount)
}

func exceeded(l *store.QuotaLimit, r arv1.QuotaResource, used, hard, need int64) *store.QuotaExceededError {
	e := &store.QuotaExceededError{Quota: l.Key, Resource: r, Used: used, Hard: hard, Need: need}
	if r != arv1.QuotaActiveRuns {
		e.ResetAt, e.Period = l.ResetAt, l.Period
	}
	return e
}

// noteRefused records, after the append it refused rolled back, the worst
// case of a call a quota had no room for: until a call that large fits
// again, no new run is started against it (StartRun).
func (s *Store) noteRefused(ctx context.Context, e *store.QuotaExceededError) {
	if e.Resource != arv1.QuotaCost && e.Resource != arv1.QuotaTokens {
		return
	}
	_, err := s.db.ExecContext(ctx, s.q("UPDATE quota_usage SET refused = $4 WHERE quota = $1 AND period = $2 AND resource = $3"), e.Quota, e.Period, string(e.Resource), e.Need)
	if err != nil {
		s.cfg.Log.V(1).Info("Recording a quota's refusal failed; new runs may start and park at their first call", "quota", e.Quota, "error", err.Error())
	}
}

// settle turns the reservations of a run's call into what it used: the
// reserved amount is given back, and what the completion done says the
// call cost (nothing for a call that failed or is issued again: done nil)
// is counted as used in the reservation's period. found says the call had
// reservations.
func (s *Store) settle(ctx context.Context, tx *sql.Tx, uid types.UID, seq int64, done *journal.Entry) (found bool, err error) {
	rs, err := s.reservationsOf(ctx, tx, "run_uid = $1 AND seq = $2", string(uid), seq)
	if err != nil || len(rs) == 0 {
		return false, err
	}
	var cost, tokens int64
	unpriced := false
	if done != nil {
		cost, tokens, unpriced = quota.Settled(done)
	}
	for _, r := range rs {
		used, calls, unp := cost, -1, 0
		if r.resource == string(arv1.QuotaTokens) {
			used, calls = tokens, 0
		} else if unpriced {
			unp = 1
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE quota_usage SET reserved = reserved - $4, used = used + $5, calls = calls + $6, unpriced = unpriced + $7
			WHERE quota = $1 AND period = $2 AND resource = $3`), r.quota, r.period, r.resource, r.amount, used, calls, unp); err != nil {
			return true, err
		}
	}
	_, err = tx.ExecContext(ctx, s.q("DELETE FROM quota_reservations WHERE run_uid = $1 AND seq = $2"), string(uid), seq)
	return true, err
}

// replaced settles the reservation of the dispatch a reissued intent p
// replaces: lost (p counts it lost, as the run's status does: it may have
// reached the provider and be billed), it is counted as used at its worst
// case; known never sent, it is given back.
func (s *Store) replaced(ctx context.Context, tx *sql.Tx, uid types.UID, p *store.Planned) error {
	if p.CountsLost() {
		return s.settleLost(ctx, tx, uid, p.Entry.Seq)
	}
	_, err := s.settle(ctx, tx, uid, p.Entry.Seq, nil)
	return err
}

// settleLost turns the reservations of a run's call that was lost (its
// intent is issued again) into used at their worst case, the cost counted
// as unpriced: what it cost is unknown, and unknown is never free.
func (s *Store) settleLost(ctx context.Context, tx *sql.Tx, uid types.UID, seq int64) error {
	rs, err := s.reservationsOf(ctx, tx, "run_uid = $1 AND seq = $2", string(uid), seq)
	if err != nil || len(rs) == 0 {
		return err
	}
	for _, r := range rs {
		calls, unp := -1, 1
		if r.resource == string(arv1.QuotaTokens) {
			calls, unp = 0, 0
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE quota_usage SET reserved = reserved - $4, used = used + $4, calls = calls + $5, unpriced = unpriced + $6
			WHERE quota = $1 AND period = $2 AND resource = $3`), r.quota, r.period, r.resource, r.amount, calls, unp); err != nil {
			return err
		}
	}
	_, err = tx.ExecContext(ctx, s.q("DELETE FROM quota_reservations WHERE run_uid = $1 AND seq = $2"), string(uid), seq)
	return err
}

// lostAfterRefusal settles, after a quota refused the reissue of an
// intent (its append rolled back), the dispatch it replaces all the same
// (replaced): a lost one was lost whether or not the next one fits, and
// no reservation may stay held while the run waits for room. It runs in a
// transaction of its own, fenced as the append was, and only while the
// journal still holds that dispatch, unanswered: a newer owner of the
// shard may have issued the intent again meanwhile (settling it and
// reserving for its own call, in flight), or the call been answered.
func (s *Store) lostAfterRefusal(ctx context.Context, uid types.UID, plan []store.Planned) {
	for _, p := range plan {
		if p.Entry.Kind != journal.ModelCallRequested || p.Replaces == "" || p.Entry.Inherited {
			continue
		}
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			if err := s.fenced(ctx, tx); err != nil {
				return err
			}
			var one int
			err := tx.QueryRowContext(ctx, s.q("SELECT 1 FROM journal_entries WHERE run_uid = $2 AND seq = $3 AND entry = $1"+unanswered+s.dialect.lockShared),
				p.Replaces, string(uid), p.Entry.Seq).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return nil // replaced or answered meanwhile: settled by whoever did
			}
			if err != nil {
				return err
			}
			return s.replaced(ctx, tx, uid, &p)
		})
		if err != nil {
			s.cfg.Log.V(1).Info("Settling a reissued call's earlier reservation failed; the reissue that fits settles it", "seq", p.Entry.Seq, "error", err.Error())
		}
	}
}

// deleted runs a DELETE of one row and says whether it deleted it (not
// when a concurrent transaction did first).
func (s *Store) deleted(ctx context.Context, tx *sql.Tx, stmt string, args ...any) (bool, error) {
	res, err := tx.ExecContext(ctx, s.q(stmt), args...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// reservation is one quota_reservations row.
type reservation struct {
	seq            int64
	quota          string
	period         int64
	resource       string
	amount         int64
	namespace, who string
}

// reservationsOf reads the reservations where says, in lock order.
func (s *Store) reservationsOf(ctx context.Context, tx *sql.Tx, where string, args ...any) ([]reservation, error) {
	rows, err := tx.QueryContext(ctx, s.q("SELECT seq, quota, period, resource, amount, namespace, name FROM quota_reservations WHERE "+where+" ORDER BY quota, resource, seq"), args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []reservation
	for rows.Next() {
		var r reservation
		if err := rows.Scan(&r.seq, &r.quota, &r.period, &r.resource, &r.amount, &r.namespace, &r.who); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// sortedLimits is ls in lock order (by key), each key once.
func sortedLimits(ls []store.QuotaLimit) []store.QuotaLimit {
	out := slices.Clone(ls)
	slices.SortFunc(out, func(a, b store.QuotaLimit) int { return strings.Compare(a.Key, b.Key) })
	return slices.CompactFunc(out, func(a, b store.QuotaLimit) bool { return a.Key == b.Key })
}

// StartRun counts a run's start against limits, all or none.
func (s *Store) StartRun(ctx context.Context, run store.RunRef, limits []store.QuotaLimit) error {
	ctx, done, err := s.bound(ctx)
	if err != nil {
		return err
	}
	defer done()
	return s.inTx(ctx, func(tx *sql.Tx) error {
		for _, l := range sortedLimits(limits) {
			if err := s.startIn(ctx, tx, run, &l); err != nil {
				return err
			}
		}
		return nil
	})
}

// startIn takes a run's holds of one quota: refused when its cost or
// tokens are used up (no call could be made), or its runs or activeRuns
// have no room. A run holding them already takes nothing.
func (s *Store) startIn(ctx context.Context, tx *sql.Tx, run store.RunRef, l *store.QuotaLimit) error {
	var held int
	if err := tx.QueryRowContext(ctx, s.q("SELECT COUNT(*) FROM quota_holds WHERE run_uid = $1 AND quota = $2"), string(run.UID), l.Key).Scan(&held); err != nil {
		return err
	}
	if held > 0 {
		return nil
	}
	for _, r := range callResources {
		hard, limited := quota.Hard(l, r)
		if !limited {
			continue
		}
		var used, refused int64
		err := tx.QueryRowContext(ctx, s.q("SELECT used + reserved, refused FROM quota_usage WHERE quota = $1 AND period = $2 AND resource = $3"), l.Key, l.Period, string(r)).Scan(&used, &refused)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if used >= hard || (refused > 0 && used+refused > hard) {
			return exceeded(l, r, used, hard, max(refused, 1))
		}
	}
	for _, r := range []arv1.QuotaResource{arv1.QuotaActiveRuns, arv1.QuotaRuns} {
		if err := s.take(ctx, tx, l, r, "used", 1, 0); err != nil {
			return err
		}
		period := l.Period
		if r == arv1.QuotaActiveRuns {
			period = 0
		}
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO quota_holds (run_uid, quota, resource, period, namespace, name) VALUES ($1, $2, $3, $4, $5, $6)`),
			string(run.UID), l.Key, string(r), period, run.Namespace, run.Name); err != nil {
			return err
		}
	}
	return nil
}

// EndRun gives back a run's activeRuns slots and the reservations of the
// calls it will never answer.
func (s *Store) EndRun(ctx context.Context, uid types.UID) ([]string, error) {
	ctx, done, err := s.bound(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if held, err := s.holdsAny(ctx, uid); err != nil || !held {
		return nil, err
	}
	var freed []string
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		active, err := s.activeHolds(ctx, tx, uid)
		if err != nil {
			return err
		}
		rs, err := s.reservationsOf(ctx, tx, "run_uid = $1", string(uid))
		if err != nil {
			return err
		}
		// In lock order: a quota's activeRuns row comes before its cost and
		// tokens rows.
		byQuota := map[string][]reservation{}
		var keys []string
		for k := range active {
			keys = append(keys, k)
		}
		for _, r := range rs {
			if len(byQuota[r.quota]) == 0 {
				keys = append(keys, r.quota)
			}
			byQuota[r.quota] = append(byQuota[r.quota], r)
		}
		slices.Sort(keys)
		keys = slices.Compact(keys)
		freed = nil
		for _, k := range keys {
			if period, ok := active[k]; ok {
				gave, err := s.giveBackSlot(ctx, tx, uid, k, period)
				if err != nil {
					return err
				}
				if gave {
					freed = append(freed, k)
				}
			}
			if err := s.giveBackReservations(ctx, tx, uid, byQuota[k]); err != nil {
				return err
			}
		}
		// The runs holds go too: a run that ended never starts again.
		_, err = tx.ExecContext(ctx, s.q("DELETE FROM quota_holds WHERE run_uid = $1"), string(uid))
		return err
	})
	if err != nil {
		return nil, err
	}
	return freed, nil
}

// holdsAny says whether the run holds an activeRuns slot or a
// reservation: one read, so that the end of a run charged to no quota
// (most runs) costs no transaction. A run that ended takes nothing more.
func (s *Store) holdsAny(ctx context.Context, uid types.UID) (bool, error) {
	if err := s.ensure(ctx); err != nil {
		return false, err
	}
	var held bool
	err := s.db.QueryRowContext(ctx, s.q(`SELECT EXISTS (SELECT 1 FROM quota_holds WHERE run_uid = $1) OR EXISTS (SELECT 1 FROM quota_reservations WHERE run_uid = $1)`),
		string(uid)).Scan(&held)
	return held, s.classify(err)
}

// activeHolds are the quotas whose activeRuns slot the run holds, with
// the period each was taken in.
func (s *Store) activeHolds(ctx context.Context, tx *sql.Tx, uid types.UID) (map[string]int64, error) {
	rows, err := tx.QueryContext(ctx, s.q("SELECT quota, period FROM quota_holds WHERE run_uid = $1 AND resource = $2"), string(uid), string(arv1.QuotaActiveRuns))
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	out := map[string]int64{}
	for rows.Next() {
		var q string
		var period int64
		if err := rows.Scan(&q, &period); err != nil {
			return nil, err
		}
		out[q] = period
	}
	return out, rows.Err()
}

// giveBackSlot gives back the run's activeRuns slot of quota k, if this
// transaction deletes its hold: two replicas ending the run at once (its
// old and new owner) give it back once.
func (s *Store) giveBackSlot(ctx context.Context, tx *sql.Tx, uid types.UID, k string, period int64) (bool, error) {
	gone, err := s.deleted(ctx, tx, "DELETE FROM quota_holds WHERE run_uid = $1 AND quota = $2 AND resource = $3", string(uid), k, string(arv1.QuotaActiveRuns))
	if err != nil || !gone {
		return false, err
	}
	_, err = tx.ExecContext(ctx, s.q("UPDATE quota_usage SET used = used - 1 WHERE quota = $1 AND period = $2 AND resource = $3"), k, period, string(arv1.QuotaActiveRuns))
	return err == nil, err
}

// giveBackReservations gives back the reservations of calls the run will
// never answer, each by the transaction that deletes it.
func (s *Store) giveBackReservations(ctx context.Context, tx *sql.Tx, uid types.UID, rs []reservation) error {
	for _, r := range rs {
		gone, err := s.deleted(ctx, tx, "DELETE FROM quota_reservations WHERE run_uid = $1 AND seq = $2 AND quota = $3 AND resource = $4", string(uid), r.seq, r.quota, r.resource)
		if err != nil {
			return err
		}
		if !gone {
			continue
		}
		calls := 0
		if r.resource == string(arv1.QuotaCost) {
			calls = -1
		}
		if _, err := tx.ExecContext(ctx, s.q("UPDATE quota_usage SET reserved = reserved - $4, calls = calls + $5 WHERE quota = $1 AND period = $2 AND resource = $3"),
			r.quota, r.period, r.resource, r.amount, calls); err != nil {
			return err
		}
	}
	return nil
}

// QuotaUse reads what a quota has used in the period (activeRuns, which
// has none, whatever the period).
func (s *Store) QuotaUse(ctx context.Context, key string, period int64) (store.QuotaUse, error) {
	ctx, done, err := s.bound(ctx)
	if err != nil {
		return store.QuotaUse{}, err
	}
	defer done()
	var u store.QuotaUse
	if err := s.ensure(ctx); err != nil {
		return u, err
	}
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT resource, used, reserved, calls, unpriced, refused FROM quota_usage
		WHERE quota = $1 AND ((resource = $2 AND period = 0) OR (resource <> $2 AND period = $3))`), key, string(arv1.QuotaActiveRuns), period)
	if err != nil {
		return u, s.classify(err)
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var r string
		var used, reserved, calls, unpriced, refused int64
		if err := rows.Scan(&r, &used, &reserved, &calls, &unpriced, &refused); err != nil {
			return u, s.classify(err)
		}
		switch arv1.QuotaResource(r) {
		case arv1.QuotaCost:
			u.Cost, u.ReservedCost, u.InFlight, u.UnpricedCalls, u.RefusedCost = used, reserved, calls, unpriced, refused
		case arv1.QuotaTokens:
			u.Tokens, u.ReservedTokens, u.RefusedTokens = used, reserved, refused
		case arv1.QuotaRuns:
			u.Runs = used
		case arv1.QuotaActiveRuns:
			u.ActiveRuns = used
		}
	}
	return u, s.classify(rows.Err())
}

// QuotaHolders lists the runs holding an activeRuns slot or a call's
// reservation of the quota.
func (s *Store) QuotaHolders(ctx context.Context, key string) ([]store.Holder, error) {
	ctx, done, err := s.op(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT run_uid, namespace, name FROM quota_holds WHERE quota = $1 AND resource = $2
		UNION SELECT run_uid, namespace, name FROM quota_reservations WHERE quota = $1`), key, string(arv1.QuotaActiveRuns))
	if err != nil {
		return nil, s.classify(err)
	}
	defer func() { _ = rows.Close() }()
	var out []store.Holder
	for rows.Next() {
		var h store.Holder
		var uid string
		if err := rows.Scan(&uid, &h.Namespace, &h.Name); err != nil {
			return nil, s.classify(err)
		}
		h.UID = types.UID(uid)
		out = append(out, h)
	}
	return out, s.classify(rows.Err())
}
