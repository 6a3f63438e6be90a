package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/money"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// archiveColumns are archived_runs' columns, in the order values are bound.
var archiveColumns = []string{
	"run_uid", "namespace", "name", "agent", "phase", "parent", "labels", "created_at", "finished_at", "archived_at",
	"prompt_tokens", "completion_tokens", "total_tokens", "model_calls", "lost_calls",
	"cost_nano_usd", "priced_nano_usd", "unpriced_calls", "model", "record", "children", "output", "summary",
}

// RecordSummary is the part of an archived run a listing prints, stored
// beside the whole record (archived_runs.summary) so a page of a
// Table is read without decoding whole records.
type RecordSummary struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Status   SummaryStatus     `json:"status"`
}

// SummaryStatus is the summary's part of the run's status.
type SummaryStatus struct {
	Phase     arv1.Phase   `json:"phase,omitempty"`
	Model     string       `json:"model,omitempty"`
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	Usage     arv1.Usage   `json:"usage"`
}

// Archive stores a finished run's record atomically, replacing an earlier
// attempt's: one row per run. A journal the database does not hold yet
// (rec.Entries: a run begun on ConfigMaps) is stored with it, and its
// calls go into the ledger. On PostgreSQL a first archive is one
// statement (firstArchive); anything else is one transaction.
func (s *Store) Archive(ctx context.Context, rec *store.Record) error {
	ctx, done, err := s.bound(ctx)
	if err != nil {
		return err
	}
	defer done()
	vals, err := archiveValues(rec, s.now())
	if err != nil {
		return err
	}
	run := rec.Run
	if rec.Entries == nil && s.dialect.name == KindPostgres && s.beforeCommit == nil {
		if first, err := s.firstArchive(ctx, run, vals); err != nil || first {
			return err
		}
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if rec.Entries != nil {
			if err := s.importJournal(ctx, tx, rec); err != nil {
				return err
			}
		}
		ph := make([]string, len(archiveColumns))
		set := make([]string, 0, len(archiveColumns)-1)
		for i, c := range archiveColumns {
			ph[i] = fmt.Sprintf("$%d", i+1)
			if c != "run_uid" {
				set = append(set, c+" = excluded."+c)
			}
		}
		q := fmt.Sprintf("INSERT INTO archived_runs (%s) VALUES (%s) ON CONFLICT (run_uid) DO UPDATE SET %s",
			strings.Join(archiveColumns, ", "), strings.Join(ph, ", "), strings.Join(set, ", "))
		if _, err := tx.ExecContext(ctx, s.q(q), vals...); err != nil {
			return fmt.Errorf("archiving run %s/%s: %w", run.Namespace, run.Name, err)
		}
		return s.indexForHistory(ctx, tx, run)
	})
}

// firstArchive stores a run's first archive on PostgreSQL as one
// statement, atomic on its own: the record, its labels, and its calls
// moved into the daily rollup under its agent, in a data-modifying WITH.
// One round trip where the transaction takes eight (BEGIN, the record,
// the labels' delete and insert, the rollup's read, upsert and move,
// COMMIT), each a wake-up of the database's backend and of this process,
// at the moment a burst of runs ends together; and the rollup's row locks
// are held only until the statement ends. It stores nothing and answers
// false when the run has a record already (an archive again, which
// replaces, and may move calls rolled up under another agent): the
// transaction does that. Without a record no call of the run is in the
// rollup (the rollup takes a run's calls with its record, and they leave
// together).
func (s *Store) firstArchive(ctx context.Context, run *arv1.AgentRun, vals []any) (bool, error) {
	if err := s.ready(ctx); err != nil {
		return false, err
	}
	args := append([]any(nil), vals...)
	ph := make([]string, len(archiveColumns))
	for i := range archiveColumns {
		ph[i] = fmt.Sprintf("$%d", i+1)
	}
	// $1 is the run's UID and $4 its agent (archiveColumns).
	stmt := fmt.Sprintf(`WITH rec AS (INSERT INTO archived_runs (%s) VALUES (%s)
		ON CONFLICT (run_uid) DO NOTHING RETURNING run_uid)`, strings.Join(archiveColumns, ", "), strings.Join(ph, ", "))
	if len(run.Labels) > 0 {
		rows := make([]string, 0, len(run.Labels))
		for _, k := range slices.Sorted(maps.Keys(run.Labels)) {
			rows = append(rows, fmt.Sprintf("($%d, $%d)", len(args)+1, len(args)+2))
			args = append(args, k, run.Labels[k])
		}
		stmt += `, labels AS (INSERT INTO archived_run_labels (run_uid, namespace, label_key, label_value)
			SELECT rec.run_uid, $2, v.k, v.v FROM rec, (VALUES ` + strings.Join(rows, ", ") + `) AS v(k, v))`
	}
	const pending = "run_uid = $1 AND in_rollup = 0 AND EXISTS (SELECT 1 FROM rec)"
	stmt += ", rolled AS (" + rollLedgerStatement(1, "CAST($4 AS text)", pending) + ")" +
		", moved AS (UPDATE call_ledger SET agent = $4, in_rollup = 1 WHERE " + pending + ")" +
		" SELECT COUNT(*) FROM rec"
	var stored int
	if err := s.db.QueryRowContext(ctx, stmt, args...).Scan(&stored); err != nil {
		return false, s.classify(fmt.Errorf("archiving run %s/%s: %w", run.Namespace, run.Name, err))
	}
	return stored == 1, nil
}

// importRowsPerStatement bounds an import's insert: two parameters a row,
// under SQLite's 32,766 and PostgreSQL's 65,535.
const importRowsPerStatement = 1000

// importJournal stores a journal kept elsewhere until now, leaving rows
// already stored as they are.
func (s *Store) importJournal(ctx context.Context, tx *sql.Tx, rec *store.Record) error {
	run := rec.Run
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO run_journals (run_uid, namespace, name, created_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (run_uid) DO NOTHING`), string(run.UID), run.Namespace, run.Name, run.CreationTimestamp.UnixMicro()); err != nil {
		return err
	}
	l := &runLog{Log: store.Log{Raw: map[int64]string{}}}
	plan, err := l.Plan(rec.Entries)
	if err != nil {
		return err
	}
	// A few statements for the whole journal, not one an entry: a replica
	// that starts on a database beside many finished ConfigMap-journal runs
	// imports each of them, hundreds of entries a run.
	per := cmp.Or(s.importRows, importRowsPerStatement)
	for rows := range slices.Chunk(plan, per) {
		stmt, args := entriesInsert(run.UID, rows, nil)
		if _, err := tx.ExecContext(ctx, s.q(stmt+" ON CONFLICT (run_uid, seq) DO NOTHING"), args...); err != nil {
			return err
		}
	}
	l.Entries = rec.Entries
	return s.ledger(ctx, tx, run, l, plan)
}

// archiveValues are the row's values, in archiveColumns' order.
func archiveValues(rec *store.Record, now int64) ([]any, error) {
	run := rec.Run.DeepCopy()
	run.ManagedFields = nil
	st := &run.Status
	labels, err := json.Marshal(run.Labels)
	if err != nil {
		return nil, err
	}
	doc, err := json.Marshal(run)
	if err != nil {
		return nil, err
	}
	summary, err := json.Marshal(RecordSummary{Metadata: run.ObjectMeta,
		Status: SummaryStatus{Phase: st.Phase, Model: st.Model, StartedAt: st.StartedAt, Usage: st.Usage}})
	if err != nil {
		return nil, err
	}
	children, err := json.Marshal(rec.Children)
	if err != nil {
		return nil, err
	}
	if rec.Children == nil {
		children = []byte("[]")
	}
	priced, err := money.ParseUSD(orZero(st.Usage.CostPricedUSD))
	if err != nil {
		return nil, fmt.Errorf("the run's priced cost %q: %w", st.Usage.CostPricedUSD, err)
	}
	var cost sql.NullInt64
	if known, err := money.ParseUSD(orZero(st.Usage.CostUSD)); err == nil {
		cost = sql.NullInt64{Int64: int64(known), Valid: true}
	}
	var output sql.NullString
	if rec.Output != nil {
		enc, _ := json.Marshal(*rec.Output)
		output = sql.NullString{String: string(enc), Valid: true}
	}
	finished := now
	if st.FinishedAt != nil {
		finished = st.FinishedAt.UnixMicro()
	}
	u := st.Usage
	return []any{
		string(run.UID), run.Namespace, run.Name, run.Spec.Agent, string(st.Phase), st.ParentRun, string(labels),
		run.CreationTimestamp.UnixMicro(), finished, now,
		u.PromptTokens, u.CompletionTokens, u.TotalTokens, u.ModelCalls, u.LostCalls,
		cost, int64(priced), u.UnpricedCalls, st.Model, string(doc), string(children), output, string(summary),
	}, nil
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}

// Archived reports whether the run's record is stored.
func (s *Store) Archived(ctx context.Context, uid types.UID) (bool, error) {
	ctx, done, err := s.op(ctx)
	if err != nil {
		return false, err
	}
	defer done()
	var one int
	err = s.db.QueryRowContext(ctx, s.q("SELECT 1 FROM archived_runs WHERE run_uid = $1"), string(uid)).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, s.classify(err)
}

// ArchivedRun reads one archived record back: the run as it finished and
// its output.
func (s *Store) ArchivedRun(ctx context.Context, uid types.UID) (*arv1.AgentRun, *string, error) {
	ctx, done, err := s.op(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	var doc string
	var output sql.NullString
	err = s.db.QueryRowContext(ctx, s.q("SELECT record, output FROM archived_runs WHERE run_uid = $1"), string(uid)).Scan(&doc, &output)
	if err != nil {
		return nil, nil, s.classify(err)
	}
	run := &arv1.AgentRun{}
	if err := json.Unmarshal([]byte(doc), run); err != nil {
		return nil, nil, err
	}
	if !output.Valid {
		return run, nil, nil
	}
	text, err := decodeOutput(output.String)
	return run, &text, err
}

// purgedTables hold a run's rows, all deleted with its record (its
// ledger rows first, by deleteCalls, which takes them out of the daily
// rollup).
var purgedTables = []string{"archived_runs", "archived_run_labels", "journal_entries", "run_journals"}

// Deleted marks the journal of a run deleted before it was archived.
func (s *Store) Deleted(ctx context.Context, uid types.UID) error {
	ctx, done, err := s.op(ctx)
	if err != nil {
		return err
	}
	defer done()
	_, err = s.db.ExecContext(ctx, s.q(`UPDATE run_journals SET deleted_at = $1 WHERE run_uid = $2 AND deleted_at IS NULL
		AND NOT EXISTS (SELECT 1 FROM archived_runs WHERE run_uid = $2)`), s.now(), string(uid))
	return s.classify(err)
}

// Sweep deletes at most limit archived runs that finished before before,
// or journals of runs deleted before then, with their journals and ledger
// rows, oldest first.
func (s *Store) Sweep(ctx context.Context, before time.Time, limit int) (int, error) {
	ctx, done, err := s.op(ctx)
	if err != nil {
		return 0, err
	}
	defer done()
	uids, err := s.uids(ctx, "SELECT run_uid FROM archived_runs WHERE finished_at < $1 ORDER BY finished_at LIMIT $2", before.UnixMicro(), limit)
	if err == nil && len(uids) < limit {
		var gone []any
		gone, err = s.uids(ctx, "SELECT run_uid FROM run_journals WHERE deleted_at < $1 ORDER BY deleted_at LIMIT $2", before.UnixMicro(), limit-len(uids))
		uids = append(uids, gone...)
	}
	if err != nil || len(uids) == 0 {
		return 0, err
	}
	ph := make([]string, len(uids))
	for i := range uids {
		ph[i] = fmt.Sprintf("$%d", i+1)
	}
	in := "(" + strings.Join(ph, ", ") + ")"
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.deleteCalls(ctx, tx, "run_uid IN "+in, uids...); err != nil {
			return err
		}
		for _, table := range purgedTables {
			if _, err := tx.ExecContext(ctx, s.q("DELETE FROM "+table+" WHERE run_uid IN "+in), uids...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return len(uids), nil
}

// uids runs a query selecting run UIDs.
func (s *Store) uids(ctx context.Context, q string, args ...any) ([]any, error) {
	rows, err := s.db.QueryContext(ctx, s.q(q), args...)
	if err != nil {
		return nil, s.classify(err)
	}
	defer func() { _ = rows.Close() }()
	var out []any
	for rows.Next() {
		var uid string
		if err := rows.Scan(&uid); err != nil {
			return nil, s.classify(err)
		}
		out = append(out, uid)
	}
	return out, s.classify(rows.Err())
}
