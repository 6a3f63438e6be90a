package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
)

// call_ledger_daily (migration 00007) is the call ledger of archived runs
// summed by UTC day, namespace, agent and model, so a cost report costs
// the groups it returns, not the calls it sums. A run's calls enter it in
// the run's archive transaction (in_rollup 1) and leave it in the
// transaction that deletes them, by the statements here and nowhere else.
// Calls of runs in flight (in_rollup 0) are read from the ledger. Each
// group is split in slots (ledgerSlot, migration 00009) so runs archived
// at once do not all wait on one row's lock.

// ledgerDay is a ledger row's UTC day (its start, Unix microseconds).
var ledgerDay = fmt.Sprintf("(at / %d) * %d", microsPerDay, microsPerDay)

// ledgerSlot is a ledger row's slot in its rollup group: the first
// character of its run's UID, so a run's calls always share a slot.
const ledgerSlot = "substr(run_uid, 1, 1)"

// rollLedger adds the ledger rows where selects to their days' groups
// (sign 1) or takes them away (sign -1), with agentExpr as their agent (a
// column or a placeholder). where's placeholders are args'.
func (s *Store) rollLedger(ctx context.Context, tx *sql.Tx, sign int, agentExpr, where string, args ...any) error {
	_, err := tx.ExecContext(ctx, s.q(rollLedgerStatement(sign, agentExpr, where)), args...)
	return err
}

// rollLedgerStatement is rollLedger's statement.
func rollLedgerStatement(sign int, agentExpr, where string) string {
	// ORDER BY: concurrent transactions lock the groups' rows in the
	// same order, so they wait for each other rather than deadlock.
	return fmt.Sprintf(`INSERT INTO call_ledger_daily (day, namespace, agent, model, slot, calls, prompt_tokens, completion_tokens, total_tokens, priced_nano_usd, unpriced_calls)
		SELECT %[1]s, namespace, %[2]s, model, %[5]s, %[3]d * COUNT(*), %[3]d * SUM(prompt_tokens), %[3]d * SUM(completion_tokens), %[3]d * SUM(total_tokens),
			%[3]d * COALESCE(SUM(cost_nano_usd), 0), %[3]d * SUM(CASE WHEN cost_nano_usd IS NULL THEN 1 ELSE 0 END)
		FROM call_ledger WHERE %[4]s
		GROUP BY %[1]s, namespace, %[2]s, model, %[5]s ORDER BY 1, 2, 3, 4, 5
		ON CONFLICT (day, namespace, agent, model, slot) DO UPDATE SET calls = call_ledger_daily.calls + excluded.calls,
			prompt_tokens = call_ledger_daily.prompt_tokens + excluded.prompt_tokens,
			completion_tokens = call_ledger_daily.completion_tokens + excluded.completion_tokens,
			total_tokens = call_ledger_daily.total_tokens + excluded.total_tokens,
			priced_nano_usd = call_ledger_daily.priced_nano_usd + excluded.priced_nano_usd,
			unpriced_calls = call_ledger_daily.unpriced_calls + excluded.unpriced_calls`, ledgerDay, agentExpr, sign, where, ledgerSlot)
}

// unrollLedger takes the ledger rows where selects out of their groups
// and deletes the groups left with no call. It runs before those rows
// are deleted or change their agent.
func (s *Store) unrollLedger(ctx context.Context, tx *sql.Tx, where string, args ...any) error {
	if err := s.rollLedger(ctx, tx, -1, "agent", where, args...); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, s.q(fmt.Sprintf(`DELETE FROM call_ledger_daily WHERE calls = 0 AND (day, namespace, agent, model, slot) IN
		(SELECT %s, namespace, agent, model, %s FROM call_ledger WHERE %s)`, ledgerDay, ledgerSlot, where)), args...)
	return err
}

// rollUpRun puts the run's ledger rows into the rollup with its agent
// (calls journaled before the archive read agent ""), in the archive's
// transaction. Rows already there under another agent (an earlier
// archive of a different spec) move.
func (s *Store) rollUpRun(ctx context.Context, tx *sql.Tx, uid, agent string) error {
	const elsewhere = "run_uid = $1 AND in_rollup = 1 AND agent <> $2"
	// One read instead of three statements for the usual archive, the
	// run's first.
	var toMove bool
	if err := tx.QueryRowContext(ctx, s.q("SELECT EXISTS (SELECT 1 FROM call_ledger WHERE "+elsewhere+")"), uid, agent).Scan(&toMove); err != nil {
		return err
	}
	if toMove {
		if err := s.unrollLedger(ctx, tx, elsewhere, uid, agent); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.q("UPDATE call_ledger SET in_rollup = 0 WHERE "+elsewhere), uid, agent); err != nil {
			return err
		}
	}
	const pending = "run_uid = $1 AND in_rollup = 0"
	if err := s.rollLedger(ctx, tx, 1, "CAST($2 AS text)", pending, uid, agent); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, s.q("UPDATE call_ledger SET agent = $2, in_rollup = 1 WHERE "+pending), uid, agent)
	return err
}

// deleteCalls deletes ledger rows, taking those in the rollup out of it
// first.
func (s *Store) deleteCalls(ctx context.Context, tx *sql.Tx, where string, args ...any) error {
	if err := s.unrollLedger(ctx, tx, "in_rollup = 1 AND "+where, args...); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, s.q("DELETE FROM call_ledger WHERE "+where), args...)
	return err
}
