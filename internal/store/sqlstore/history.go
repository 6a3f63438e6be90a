package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// The history API's reads of the archive (internal/history serves them as
// history.agentrun.dev): records filtered by namespace, name, phase, agent,
// finish time and labels, newest first, a page at a time; a cost report
// from the call ledger; and the purge of one record.

// ArchivedRecord is one archived_runs row as the history API reads it.
type ArchivedRecord struct {
	UID, Namespace, Name, Agent, Phase string
	// FinishedAt and ArchivedAt are Unix microseconds.
	FinishedAt, ArchivedAt int64
	// Record is the run as it finished (JSON of the AgentRun), Children
	// its children (JSON of []store.ChildRecord). A query for summaries
	// reads neither when the record has a summary.
	Record, Children string
	// Summary is the record's RecordSummary (JSON), when the query asked
	// for summaries and the record has one (records archived before
	// schema version 8 have none: Record is read instead).
	Summary string
	// HasOutput says a final output is stored.
	HasOutput bool
}

// LabelOp is how a label term matches.
type LabelOp int

// Label operators: the label's value is among Values (In), is not
// (NotIn: also true when the label is absent), the label is present
// (Exists) or absent (NotExists).
const (
	LabelIn LabelOp = iota
	LabelNotIn
	LabelExists
	LabelNotExists
)

// LabelTerm is one requirement of a label selector.
type LabelTerm struct {
	Key    string
	Op     LabelOp
	Values []string
}

// FieldTerm is a field equal (or, with Not, unequal) to a value.
type FieldTerm struct {
	Value string
	Not   bool
}

// RecordCursor is where a page ended: the last record's finish time and
// UID (records are listed newest first, ties by UID descending).
type RecordCursor struct {
	FinishedAt int64
	UID        string
}

// RecordQuery selects archived records. Zero fields select everything.
type RecordQuery struct {
	// Namespace is empty for every namespace.
	Namespace string
	Name      []FieldTerm
	Phase     []FieldTerm
	Agent     []FieldTerm
	// FinishedAfter and FinishedBefore bound the finish time (Unix
	// microseconds, exclusive); 0 is unbounded.
	FinishedAfter, FinishedBefore int64
	Labels                        []LabelTerm
	// After continues a list after this record.
	After *RecordCursor
	// ArchivedAfter selects records archived after this time (Unix
	// microseconds), oldest archived first: what a watch polls for.
	ArchivedAfter int64
	// UID selects one record.
	UID string
	// Limit bounds the rows (0: no bound).
	Limit int
	// Summaries reads records' summaries instead of the whole records
	// (what a Table prints).
	Summaries bool
}

// where builds the query's conditions and their arguments. correlate
// is appended to a label term's subquery within a namespace (see
// dialect.correlate).
func (q *RecordQuery) where(correlate string) (string, []any) {
	var conds []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if q.Namespace != "" {
		conds = append(conds, "r.namespace = "+arg(q.Namespace))
	}
	for _, f := range []struct {
		col   string
		terms []FieldTerm
	}{{"r.name", q.Name}, {"r.phase", q.Phase}, {"r.agent", q.Agent}} {
		for _, t := range f.terms {
			op := " = "
			if t.Not {
				op = " <> "
			}
			conds = append(conds, f.col+op+arg(t.Value))
		}
	}
	if q.UID != "" {
		conds = append(conds, "r.run_uid = "+arg(q.UID))
	}
	if q.FinishedAfter != 0 {
		conds = append(conds, "r.finished_at > "+arg(q.FinishedAfter))
	}
	if q.FinishedBefore != 0 {
		conds = append(conds, "r.finished_at < "+arg(q.FinishedBefore))
	}
	if q.ArchivedAfter != 0 {
		conds = append(conds, "r.archived_at > "+arg(q.ArchivedAfter))
	}
	if q.After != nil {
		conds = append(conds, fmt.Sprintf("(r.finished_at < %s OR (r.finished_at = %s AND r.run_uid < %s))",
			arg(q.After.FinishedAt), arg(q.After.FinishedAt), arg(q.After.UID)))
	}
	for _, l := range q.Labels {
		sub := "SELECT 1 FROM archived_run_labels l WHERE l.run_uid = r.run_uid AND l.label_key = " + arg(l.Key)
		if q.Namespace != "" {
			// The namespace lets the planner read the selector's index
			// (namespace, key, value) instead of every label row. Within
			// a namespace the term is checked run by run, walking the
			// namespace's records newest first and stopping at the
			// page's end, rather than joined with every matching label
			// row and sorted: a page of 500 then reads about 500 runs.
			sub += " AND l.namespace = " + arg(q.Namespace)
		}
		if len(l.Values) > 0 {
			ph := make([]string, len(l.Values))
			for i, v := range l.Values {
				ph[i] = arg(v)
			}
			sub += " AND l.label_value IN (" + strings.Join(ph, ", ") + ")"
		}
		if q.Namespace != "" {
			sub += correlate
		}
		if l.Op == LabelIn || l.Op == LabelExists {
			conds = append(conds, "EXISTS ("+sub+")")
		} else {
			conds = append(conds, "NOT EXISTS ("+sub+")")
		}
	}
	if len(conds) == 0 {
		return "", args
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// ListRecords returns the records q selects, newest first (oldest
// archived first when q.ArchivedAfter is set).
func (s *Store) ListRecords(ctx context.Context, q RecordQuery) ([]ArchivedRecord, error) {
	ctx, done, err := s.op(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	where, args := q.where(s.dialect.correlate)
	cols := "r.record, r.children, NULL"
	if q.Summaries {
		cols = "CASE WHEN r.summary IS NULL THEN r.record ELSE '' END, CASE WHEN r.summary IS NULL THEN r.children ELSE '' END, r.summary"
	}
	stmt := "SELECT r.run_uid, r.namespace, r.name, r.agent, r.phase, r.finished_at, r.archived_at, " + cols + ", r.output IS NOT NULL FROM archived_runs r" + where
	if q.ArchivedAfter != 0 {
		stmt += " ORDER BY r.archived_at, r.run_uid"
	} else {
		stmt += " ORDER BY r.finished_at DESC, r.run_uid DESC"
	}
	if q.Limit > 0 {
		stmt += fmt.Sprintf(" LIMIT %d", q.Limit)
	}
	rows, err := s.db.QueryContext(ctx, s.q(stmt), args...)
	if err != nil {
		return nil, s.classify(err)
	}
	defer func() { _ = rows.Close() }()
	var out []ArchivedRecord
	for rows.Next() {
		var r ArchivedRecord
		var summary sql.NullString
		if err := rows.Scan(&r.UID, &r.Namespace, &r.Name, &r.Agent, &r.Phase, &r.FinishedAt, &r.ArchivedAt, &r.Record, &r.Children, &summary, &r.HasOutput); err != nil {
			return nil, s.classify(err)
		}
		r.Summary = summary.String
		out = append(out, r)
	}
	return out, s.classify(rows.Err())
}

// NewestArchived is the newest archived_at in the archive (Unix
// microseconds; 0 when it is empty): a list's resourceVersion, from which
// a watch goes on.
func (s *Store) NewestArchived(ctx context.Context) (int64, error) {
	ctx, done, err := s.op(ctx)
	if err != nil {
		return 0, err
	}
	defer done()
	var newest sql.NullInt64
	err = s.db.QueryRowContext(ctx, "SELECT MAX(archived_at) FROM archived_runs").Scan(&newest)
	return newest.Int64, s.classify(err)
}

// RecordJournal reads an archived run's journal.
func (s *Store) RecordJournal(ctx context.Context, namespace, name, uid string) ([]journal.Entry, error) {
	ctx, done, err := s.op(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	entries, _, _, _, _, err := s.read(ctx, namespace, name, types.UID(uid))
	return entries, err
}

// RecordOutput reads an archived run's final output; ok is false when
// none is stored.
func (s *Store) RecordOutput(ctx context.Context, uid string) (text string, ok bool, err error) {
	ctx, done, err := s.op(ctx)
	if err != nil {
		return "", false, err
	}
	defer done()
	var output sql.NullString
	err = s.db.QueryRowContext(ctx, s.q("SELECT output FROM archived_runs WHERE run_uid = $1"), uid).Scan(&output)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && !output.Valid) {
		return "", false, nil
	}
	if err != nil {
		return "", false, s.classify(err)
	}
	text, err = decodeOutput(output.String)
	return text, err == nil, err
}

// DeleteRecord purges one archived run: its record, labels, journal and
// ledger rows (so it leaves the cost reports too), in one transaction. It
// reports whether the record existed.
func (s *Store) DeleteRecord(ctx context.Context, uid string) (bool, error) {
	ctx, done, err := s.bound(ctx)
	if err != nil {
		return false, err
	}
	defer done()
	found := false
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.deleteCalls(ctx, tx, "run_uid = $1", uid); err != nil {
			return err
		}
		for _, table := range purgedTables {
			res, err := tx.ExecContext(ctx, s.q("DELETE FROM "+table+" WHERE run_uid = $1"), uid)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); table == "archived_runs" && n > 0 {
				found = true
			}
		}
		return nil
	})
	return found, err
}

// CostDimension is a column a cost report groups by.
type CostDimension string

// The cost report's dimensions.
const (
	ByNamespace CostDimension = "namespace"
	ByAgent     CostDimension = "agent"
	ByModel     CostDimension = "model"
	ByDay       CostDimension = "day"
)

// CostQuery selects the ledger's calls for a cost report.
type CostQuery struct {
	// Namespace is empty for every namespace.
	Namespace string
	// From and To bound the calls' times (Unix microseconds, From
	// inclusive, To exclusive).
	From, To int64
	// By are the dimensions grouped by; the others read "".
	By []CostDimension
	// Agent and Model, when set, keep only those calls.
	Agent, Model string
}

// CostRow is one group of a cost report.
type CostRow struct {
	Namespace, Agent, Model string
	// Day is the UTC day's start (Unix microseconds); 0 when not grouped
	// by day.
	Day                                   int64
	Calls, PromptTokens, CompletionTokens int64
	TotalTokens                           int64
	// PricedNanoUSD sums the priced calls; UnpricedCalls counts the calls
	// whose cost is unknown (never summed as 0).
	PricedNanoUSD, UnpricedCalls int64
}

const microsPerDay = int64(24 * time.Hour / time.Microsecond)

// CostReport sums the call ledger by q.By. Whole UTC days in the range
// are read from the daily rollup of archived runs' calls
// (call_ledger_daily) and the calls of runs not archived yet, so the
// report costs the groups it returns, not the calls of the archive; the
// partial days at the range's ends are summed from the ledger itself, so
// any range is exact. A call's agent is its run's spec.agent, written
// into the ledger when the run is archived; calls of runs not archived
// yet read agent "".
func (s *Store) CostReport(ctx context.Context, q CostQuery) ([]CostRow, error) {
	stmt, args, err := costStatement(q)
	if err != nil {
		return nil, err
	}
	ctx, done, err := s.op(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	rows, err := s.db.QueryContext(ctx, s.q(stmt), args...)
	if err != nil {
		return nil, s.classify(err)
	}
	defer func() { _ = rows.Close() }()
	var out []CostRow
	for rows.Next() {
		var r CostRow
		if err := rows.Scan(&r.Namespace, &r.Agent, &r.Model, &r.Day, &r.Calls, &r.PromptTokens, &r.CompletionTokens, &r.TotalTokens, &r.PricedNanoUSD, &r.UnpricedCalls); err != nil {
			return nil, s.classify(err)
		}
		if r.Calls > 0 {
			out = append(out, r)
		}
	}
	return out, s.classify(rows.Err())
}

// costStatement is the cost report's statement and its arguments.
func costStatement(q CostQuery) (string, []any, error) {
	cols := map[CostDimension]string{ByNamespace: "c.namespace", ByAgent: "c.agent", ByModel: "c.model", ByDay: "c.day"}
	sel := map[CostDimension]string{ByNamespace: "''", ByAgent: "''", ByModel: "''", ByDay: "0"}
	var group []string
	for _, d := range q.By {
		c, ok := cols[d]
		if !ok {
			return "", nil, fmt.Errorf("no cost dimension %q", d)
		}
		sel[d] = c
		group = append(group, c)
	}
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	filters := func() string {
		var f string
		if q.Namespace != "" {
			f += " AND namespace = " + arg(q.Namespace)
		}
		if q.Model != "" {
			f += " AND model = " + arg(q.Model)
		}
		if q.Agent != "" {
			f += " AND agent = " + arg(q.Agent)
		}
		return f
	}
	// calls are the ledger's rows in [from, to), each a group of one;
	// cond narrows them.
	calls := func(from, to int64, cond string) string {
		return fmt.Sprintf(`SELECT %s AS day, namespace, agent, model, 1 AS calls, prompt_tokens, completion_tokens, total_tokens,
			COALESCE(cost_nano_usd, 0) AS priced_nano_usd, CASE WHEN cost_nano_usd IS NULL THEN 1 ELSE 0 END AS unpriced_calls
			FROM call_ledger WHERE %sat >= %s AND at < %s%s`, ledgerDay, cond, arg(from), arg(to), filters())
	}
	firstDay := (q.From + microsPerDay - 1) / microsPerDay * microsPerDay
	lastDay := q.To / microsPerDay * microsPerDay
	var parts []string
	if firstDay < lastDay {
		// The whole days: archived runs' calls from the rollup, the
		// calls of runs not archived yet one by one (a partial index
		// holds those).
		parts = append(parts,
			fmt.Sprintf(`SELECT day, namespace, agent, model, calls, prompt_tokens, completion_tokens, total_tokens, priced_nano_usd, unpriced_calls
			FROM call_ledger_daily WHERE day >= %s AND day < %s%s`, arg(firstDay), arg(lastDay), filters()),
			calls(firstDay, lastDay, "in_rollup = 0 AND "))
		if q.From < firstDay {
			parts = append(parts, calls(q.From, firstDay, ""))
		}
		if lastDay < q.To {
			parts = append(parts, calls(lastDay, q.To, ""))
		}
	} else {
		parts = append(parts, calls(q.From, q.To, ""))
	}
	stmt := fmt.Sprintf(`SELECT %s, %s, %s, %s, CAST(COALESCE(SUM(c.calls), 0) AS bigint), CAST(COALESCE(SUM(c.prompt_tokens), 0) AS bigint),
		CAST(COALESCE(SUM(c.completion_tokens), 0) AS bigint), CAST(COALESCE(SUM(c.total_tokens), 0) AS bigint),
		CAST(COALESCE(SUM(c.priced_nano_usd), 0) AS bigint), CAST(COALESCE(SUM(c.unpriced_calls), 0) AS bigint)
		FROM (%s) c`,
		sel[ByNamespace], sel[ByAgent], sel[ByModel], sel[ByDay], strings.Join(parts, " UNION ALL "))
	if len(group) > 0 {
		stmt += " GROUP BY " + strings.Join(group, ", ") + " ORDER BY " + strings.Join(group, ", ")
	}
	return stmt, args, nil
}

// HistoryKey is the secret that signs the history API's continue tokens:
// made once per database and shared by every replica, so a page listed on
// one continues on another.
func (s *Store) HistoryKey(ctx context.Context) ([]byte, error) {
	ctx, done, err := s.op(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, err
	}
	if _, err := s.db.ExecContext(ctx, s.q("INSERT INTO history_keys (name, secret, created_at) VALUES ('continue', $1, $2) ON CONFLICT (name) DO NOTHING"),
		hex.EncodeToString(fresh), s.now()); err != nil {
		return nil, s.classify(err)
	}
	var secret string
	if err := s.db.QueryRowContext(ctx, "SELECT secret FROM history_keys WHERE name = 'continue'").Scan(&secret); err != nil {
		return nil, s.classify(err)
	}
	return hex.DecodeString(secret)
}

// LiveJournal finds the journal of a run that is not archived (still
// running, or finished and not yet archived) by its namespace and name:
// the newest such journal, not marked deleted. ok is false when there is
// none. The history API serves its transcript and output, so journals in
// the database are read through the API server like ConfigMaps are.
func (s *Store) LiveJournal(ctx context.Context, namespace, name string) (uid string, ok bool, err error) {
	ctx, done, err := s.op(ctx)
	if err != nil {
		return "", false, err
	}
	defer done()
	err = s.db.QueryRowContext(ctx, s.q(`SELECT run_uid FROM run_journals j WHERE namespace = $1 AND name = $2 AND deleted_at IS NULL
		AND NOT EXISTS (SELECT 1 FROM archived_runs a WHERE a.run_uid = j.run_uid)
		ORDER BY created_at DESC LIMIT 1`), namespace, name).Scan(&uid)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, s.classify(err)
	}
	return uid, true, nil
}
