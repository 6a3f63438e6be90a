package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/pressly/goose/v3"
	"k8s.io/apimachinery/pkg/types"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// dialect is what differs between the databases.
type dialect struct {
	name  string
	goose goose.Dialect
	// lockShared locks the rows a SELECT reads against updates until the
	// transaction ends (SQLite's writer holds the whole database anyway).
	lockShared string
	// placeholder rewrites $1, $2, ... for the driver.
	placeholder func(string) string
	// correlate, appended to an EXISTS subquery, keeps it a filter
	// checked row by row: PostgreSQL turns an EXISTS into a join
	// unless the subquery has an OFFSET; SQLite checks it row by row.
	correlate string
}

var numbered = regexp.MustCompile(`\$(\d+)`)

var (
	postgresDialect = dialect{name: KindPostgres, goose: goose.DialectPostgres, lockShared: " FOR SHARE", placeholder: func(q string) string { return q }, correlate: " OFFSET 0"}
	sqliteDialect   = dialect{name: KindSQLite, goose: goose.DialectSQLite3, placeholder: func(q string) string { return numbered.ReplaceAllString(q, "?$1") }}
)

// Store keeps journals, the call ledger and the archive in a database.
type Store struct {
	cfg     Config
	target  Target
	dialect dialect
	db      *sql.DB
	logs    *store.Logs[runLog]
	// line gives each operation its turn at the pool (line.go).
	line *line

	// migrating is held by the one migration under way: a channel, not a
	// mutex, so an operation waiting for another's migration gives up at
	// its own deadline (a database that does not answer holds each
	// migration until its timeout).
	migrating chan struct{}
	migrated  atomic.Bool
	// fences are the newest fence this process has recorded per Lease.
	fencesMu sync.Mutex
	fences   map[string]store.Fence
	// beforeCommit, when set, runs in every transaction before it commits
	// (tests hold an append there).
	beforeCommit func()
	// importRows is how many journal rows an import inserts a statement
	// (importRowsPerStatement when 0; a benchmark sets 1, the old way).
	importRows int
}

// runLog is one run's journal as this process knows it.
type runLog struct {
	store.Log
	// registered: the run's row in run_journals exists.
	registered bool
	output     *string
	// mayHoldReservations: the run may hold quota reservations (it held
	// some when its journal was read, or an append since reserved or may
	// have). Without any, an answer's append skips looking its call's up:
	// most runs are charged to no quota, and the lookup was a fifth of
	// their appends' round trips.
	mayHoldReservations bool
}

var (
	_ store.Backend = (*Store)(nil)
	_ store.Archive = (*Store)(nil)
)

// Kind names the backend.
func (s *Store) Kind() string { return s.dialect.name }

// Target says what the store is connected to, without a password.
func (s *Store) Target() Target { return s.target }

// Check reports whether the database can be used now: reachable, the
// login and permissions accepted, the schema this binary's.
func (s *Store) Check(ctx context.Context) error {
	ctx, done, err := s.op(ctx)
	if err != nil {
		return err
	}
	defer done()
	var one int
	return s.classify(s.db.QueryRowContext(ctx, "SELECT 1 FROM run_journals WHERE run_uid = '' UNION ALL SELECT 1").Scan(&one))
}

// Close releases the connections.
func (s *Store) Close() error { return s.db.Close() }

// DB is the database, for tests and the history server's reads.
func (s *Store) DB() *sql.DB { return s.db }

// bound waits for the operation's turn at the database (line.go) and
// returns ctx bounded by the operation timeout from then; done ends the
// turn. An error is the database answering nothing while it waited.
func (s *Store) bound(ctx context.Context) (context.Context, func(), error) {
	d := s.cfg.OpTimeout
	if d <= 0 {
		d = DefaultOpTimeout
	}
	if err := s.line.wait(ctx, d); err != nil {
		return nil, nil, s.classify(err)
	}
	bctx, cancel := context.WithTimeout(ctx, d)
	return bctx, func() {
		s.line.leave(bctx.Err() == nil)
		cancel()
	}, nil
}

// op begins an operation: its turn at the database, bounded (bound), on
// a migrated schema (ensure). done ends it.
func (s *Store) op(ctx context.Context) (context.Context, func(), error) {
	ctx, done, err := s.bound(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := s.ensure(ctx); err != nil {
		done()
		return nil, nil, err
	}
	return ctx, done, nil
}

// q rewrites a statement for the dialect.
func (s *Store) q(query string) string { return s.dialect.placeholder(query) }

// ensure migrates on first contact with a database that was away at Open.
func (s *Store) ensure(ctx context.Context) error {
	if s.migrated.Load() {
		return nil
	}
	return s.migrate(ctx)
}

// journalName names a run's journal in errors (its rows, not an object).
func journalName(ns, name string) string {
	return fmt.Sprintf("of run %s/%s in the database", ns, name)
}

// Load returns the run's entries in seq order, read once and then kept.
func (s *Store) Load(ctx context.Context, run *arv1.AgentRun, empty bool) ([]journal.Entry, error) {
	ctx, done, err := s.bound(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	return s.logs.Load(run.UID, func(l *runLog) error { return s.ensureLoaded(ctx, run, l, empty) })
}

func (s *Store) ensureLoaded(ctx context.Context, run *arv1.AgentRun, l *runLog, empty bool) error {
	if l.Loaded {
		return nil
	}
	if !empty || l.MustRead {
		if err := s.ensure(ctx); err != nil {
			return err
		}
		entries, raw, out, found, reserved, err := s.read(ctx, run.Namespace, run.Name, run.UID)
		if err == nil {
			err = store.ShorterThanStatus(run, entries, journalName(run.Namespace, run.Name))
		}
		if err != nil {
			return err
		}
		l.Entries, l.Raw, l.output, l.registered, l.mayHoldReservations = entries, raw, out, found, reserved
	}
	l.Loaded, l.MustRead = true, false
	return nil
}

// read reads a run's stored journal and output; found says its row exists,
// reserved that the run holds quota reservations (only an append, which
// registers the run, makes them).
func (s *Store) read(ctx context.Context, ns, name string, uid types.UID) (entries []journal.Entry, raw map[int64]string, out *string, found, reserved bool, err error) {
	var output sql.NullString
	err = s.db.QueryRowContext(ctx, s.q("SELECT output FROM run_journals WHERE run_uid = $1"), string(uid)).Scan(&output)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return nil, nil, nil, false, false, s.classify(err)
	default:
		found = true
		if output.Valid {
			text, err := decodeOutput(output.String)
			if err != nil {
				return nil, nil, nil, false, false, &store.CorruptError{Object: journalName(ns, name), Key: "output", Problem: "the stored output does not decode"}
			}
			out = &text
		}
	}
	rows, err := s.db.QueryContext(ctx, s.q("SELECT seq, entry FROM journal_entries WHERE run_uid = $1 ORDER BY seq"), string(uid))
	if err != nil {
		return nil, nil, nil, false, false, s.classify(err)
	}
	defer func() { _ = rows.Close() }()
	raw = map[int64]string{}
	for rows.Next() {
		var seq int64
		var text string
		if err := rows.Scan(&seq, &text); err != nil {
			return nil, nil, nil, false, false, s.classify(err)
		}
		var e journal.Entry
		if err := json.Unmarshal([]byte(text), &e); err != nil || e.Seq != seq {
			return nil, nil, nil, false, false, &store.CorruptError{Object: journalName(ns, name), Key: fmt.Sprintf("%06d", seq), Problem: "the entry does not decode as the journal entry of its seq"}
		}
		entries = append(entries, e)
		raw[seq] = text
	}
	if err := rows.Err(); err != nil {
		return nil, nil, nil, false, false, s.classify(err)
	}
	if err := store.Dense(entries, journalName(ns, name)); err != nil {
		return nil, nil, nil, false, false, err
	}
	// After the entries: a reservation committed since they were read
	// (an older owner's last append) still counts as held.
	err = s.db.QueryRowContext(ctx, s.q("SELECT EXISTS (SELECT 1 FROM quota_reservations WHERE run_uid = $1)"), string(uid)).Scan(&reserved)
	if err != nil {
		return nil, nil, nil, false, false, s.classify(err)
	}
	return entries, raw, out, found, reserved, nil
}

// Append journals entries in one transaction.
func (s *Store) Append(ctx context.Context, run *arv1.AgentRun, es ...journal.Entry) error {
	return s.append(ctx, run, nil, es)
}

// AppendWithOutput is Append that also stores the final output.
func (s *Store) AppendWithOutput(ctx context.Context, run *arv1.AgentRun, output string, es ...journal.Entry) error {
	return s.append(ctx, run, &output, es)
}

func (s *Store) append(ctx context.Context, run *arv1.AgentRun, output *string, es []journal.Entry) error {
	ctx, done, err := s.bound(ctx)
	if err != nil {
		return err
	}
	defer done()
	load := func(l *runLog) error { return s.ensureLoaded(ctx, run, l, false) }
	return s.logs.Append(run.UID, load, es, func(l *runLog, plan []store.Planned) error {
		if mayReserve(ctx, plan) {
			// Before the write: an append that commits but answers with an
			// error has reserved all the same.
			l.mayHoldReservations = true
		}
		err := s.write(ctx, run, l, plan, output)
		if errors.Is(err, errConflict) {
			err = s.storedAlready(ctx, run, plan)
		}
		if qe := (*store.QuotaExceededError)(nil); errors.As(err, &qe) {
			s.noteRefused(ctx, qe)
			s.lostAfterRefusal(ctx, run.UID, plan)
		}
		if err != nil {
			return err
		}
		l.registered = true
		if output != nil {
			l.output = output
		}
		return nil
	})
}

// storedAlready settles a conflict: if every planned entry is stored with
// exactly its text, an earlier attempt of this append was committed (its
// answer lost); otherwise another writer holds the seq.
func (s *Store) storedAlready(ctx context.Context, run *arv1.AgentRun, plan []store.Planned) error {
	lo, hi := plan[0].Entry.Seq, plan[len(plan)-1].Entry.Seq
	rows, err := s.db.QueryContext(ctx, s.q("SELECT seq, entry FROM journal_entries WHERE run_uid = $1 AND seq >= $2 AND seq <= $3"), string(run.UID), lo, hi)
	if err != nil {
		return s.classify(err)
	}
	defer func() { _ = rows.Close() }()
	stored := map[int64]string{}
	for rows.Next() {
		var seq int64
		var text string
		if err := rows.Scan(&seq, &text); err != nil {
			return s.classify(err)
		}
		stored[seq] = text
	}
	if err := rows.Err(); err != nil {
		return s.classify(err)
	}
	for _, p := range plan {
		if stored[p.Entry.Seq] != p.Text {
			return fmt.Errorf("journaling %s #%d: %w", p.Entry.Kind, p.Entry.Seq, store.ErrSeqTaken)
		}
	}
	return nil
}

// write stores the planned entries (and the output) in one transaction,
// fenced by the context's fence.
func (s *Store) write(ctx context.Context, run *arv1.AgentRun, l *runLog, plan []store.Planned, output *string) error {
	if s.plain(ctx, l, plan, output) {
		return s.writePlain(ctx, run, l, plan)
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.fenced(ctx, tx); err != nil {
			return err
		}
		if !l.registered {
			if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO run_journals (run_uid, namespace, name, created_at) VALUES ($1, $2, $3, $4)
				ON CONFLICT (run_uid) DO NOTHING`), string(run.UID), run.Namespace, run.Name, s.now()); err != nil {
				return err
			}
		}
		var fresh []store.Planned
		for _, p := range plan {
			if p.Replaces == "" {
				fresh = append(fresh, p)
				continue
			}
			res, err := tx.ExecContext(ctx, s.q("UPDATE journal_entries SET entry = $1 WHERE run_uid = $2 AND seq = $3 AND entry = $4"+unanswered), p.Text, string(run.UID), p.Entry.Seq, p.Replaces)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n != 1 {
				return fmt.Errorf("issuing %s #%d again: %w", p.Entry.Kind, p.Entry.Seq, store.ErrSeqTaken)
			}
		}
		if err := s.insertEntries(ctx, tx, run.UID, fresh); err != nil {
			return err
		}
		if err := s.ledger(ctx, tx, run, l, fresh); err != nil {
			return err
		}
		if err := s.settleQuotas(ctx, tx, run, plan, l.mayHoldReservations); err != nil {
			return err
		}
		if output != nil {
			enc, _ := json.Marshal(*output)
			if _, err := tx.ExecContext(ctx, s.q("UPDATE run_journals SET output = $1 WHERE run_uid = $2"), string(enc), string(run.UID)); err != nil {
				return err
			}
		}
		return nil
	})
}

// unanswered, appended to a statement's WHERE on journal_entries with
// the run's uid as $2 and an entry's seq as $3, keeps it to that entry
// while it is still the journal's last: an intent issued again only
// replaces one nothing has answered. A replica whose view of the journal
// is behind (it read it while the call was in flight elsewhere, and that
// answer committed before its fence did; or its own append committed but
// answered with an error) would otherwise count a lost dispatch whose
// reservation the answer settled, and make the call a second time.
const unanswered = " AND NOT EXISTS (SELECT 1 FROM journal_entries later WHERE later.run_uid = $2 AND later.seq > $3)"

// plain says whether an append is only new rows: PostgreSQL, a run
// already registered, no fence to check, no entry issued again, no quota
// to reserve or settle, no output. That is a run's step between two model
// calls when it is charged to no quota, the append every call makes.
func (s *Store) plain(ctx context.Context, l *runLog, plan []store.Planned, output *string) bool {
	if s.dialect.name != KindPostgres || !l.registered || output != nil || l.mayHoldReservations || s.beforeCommit != nil {
		return false
	}
	if _, fenced := store.FenceFrom(ctx); fenced {
		return false
	}
	for _, p := range plan {
		if p.Replaces != "" || store.ChargeFor(ctx, p.Entry.Seq) != nil || store.ChargeFor(ctx, p.Entry.Call) != nil {
			return false
		}
	}
	return true
}

// writePlain stores a plain append (plain) as one statement, atomic on
// its own: the entries, and the ledger rows of the calls they complete in
// a data-modifying WITH. One round trip, where a transaction takes four
// (BEGIN, entries, ledger, COMMIT), each a wake-up of the database's
// backend and of this process.
func (s *Store) writePlain(ctx context.Context, run *arv1.AgentRun, l *runLog, plan []store.Planned) error {
	if err := s.ensure(ctx); err != nil {
		return err
	}
	stmt, args := entriesInsert(run.UID, plan, nil)
	if rows := ledgerRows(run, l, plan); len(rows) > 0 {
		var ledger string
		ledger, args = ledgerInsert(rows, args)
		stmt = "WITH entries AS (" + stmt + ") " + ledger
	}
	_, err := s.db.ExecContext(ctx, stmt, args...)
	return s.classify(err)
}

// insertEntries inserts rows in one statement.
func (s *Store) insertEntries(ctx context.Context, tx *sql.Tx, uid types.UID, fresh []store.Planned) error {
	if len(fresh) == 0 {
		return nil
	}
	stmt, args := entriesInsert(uid, fresh, nil)
	_, err := tx.ExecContext(ctx, s.q(stmt), args...)
	return err
}

// entriesInsert is the statement inserting fresh's rows, its arguments
// numbered after args'.
func entriesInsert(uid types.UID, fresh []store.Planned, args []any) (string, []any) {
	var b strings.Builder
	b.WriteString("INSERT INTO journal_entries (run_uid, seq, entry) VALUES ")
	args = append(args, string(uid))
	id := len(args)
	for i, p := range fresh {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "($%d, $%d, $%d)", id, len(args)+1, len(args)+2)
		args = append(args, p.Entry.Seq, p.Text)
	}
	return b.String(), args
}

// ledger records the model calls the entries complete: one row per
// answered call, with its tokens and cost (NULL when unpriced), in the
// append's transaction, so the ledger sums exactly to the journals. The
// rows enter the daily rollup when the run is archived (costbyday.go).
func (s *Store) ledger(ctx context.Context, tx *sql.Tx, run *arv1.AgentRun, l *runLog, fresh []store.Planned) error {
	rows := ledgerRows(run, l, fresh)
	if len(rows) == 0 {
		return nil
	}
	stmt, args := ledgerInsert(rows, nil)
	_, err := tx.ExecContext(ctx, s.q(stmt), args...)
	return err
}

// ledgerRows are the call_ledger rows of the calls fresh completes, each
// its ten values in ledgerInsert's column order.
func ledgerRows(run *arv1.AgentRun, l *runLog, fresh []store.Planned) [][]any {
	var rows [][]any
	for _, p := range fresh {
		e := p.Entry
		if e.Kind != journal.ModelCallCompleted || e.Inherited {
			continue
		}
		provider, model := e.Provider, e.Model
		if provider == "" || model == "" {
			if in := intentOf(l.Entries, fresh, e.Call); in != nil {
				provider, model = in.Provider, in.Model
			}
		}
		var u journal.Usage
		if e.Usage != nil {
			u = *e.Usage
		}
		var cost sql.NullInt64
		if e.CostNanoUSD != nil {
			cost = sql.NullInt64{Int64: *e.CostNanoUSD, Valid: true}
		}
		rows = append(rows, []any{string(run.UID), e.Seq, run.Namespace, provider, model, e.At.UnixMicro(), u.Prompt, u.Completion, u.Prompt + u.Completion, cost})
	}
	return rows
}

// ledgerInsert is the statement inserting rows into the ledger (a row
// stored already by an earlier attempt is kept), its arguments numbered
// after args'.
func ledgerInsert(rows [][]any, args []any) (string, []any) {
	var b strings.Builder
	b.WriteString("INSERT INTO call_ledger (run_uid, seq, namespace, provider, model, at, prompt_tokens, completion_tokens, total_tokens, cost_nano_usd, in_rollup) VALUES ")
	for i, row := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(")
		for range row {
			args = append(args, nil)
			fmt.Fprintf(&b, "$%d, ", len(args))
		}
		copy(args[len(args)-len(row):], row)
		b.WriteString("0)")
	}
	b.WriteString(" ON CONFLICT (run_uid, seq) DO NOTHING")
	return b.String(), args
}

// intentOf finds the intent seq in the journal or among the entries being
// written.
func intentOf(entries []journal.Entry, fresh []store.Planned, seq int64) *journal.Entry {
	for i := range fresh {
		if e := &fresh[i].Entry; e.Seq == seq && e.Kind == journal.ModelCallRequested {
			return e
		}
	}
	for i := len(entries) - 1; i >= 0; i-- {
		if e := &entries[i]; e.Seq == seq && e.Kind == journal.ModelCallRequested {
			return e
		}
	}
	return nil
}

// PutOutput stores a finished run's final output; a database holds it, so
// there is no object to name.
func (s *Store) PutOutput(ctx context.Context, run *arv1.AgentRun, text string) (string, error) {
	ctx, done, err := s.bound(ctx)
	if err != nil {
		return "", err
	}
	defer done()
	l := s.logs.Get(run.UID)
	l.Mu.Lock()
	defer l.Mu.Unlock()
	if err := s.ensureLoaded(ctx, run, l, false); err != nil {
		return "", err
	}
	if l.output != nil && *l.output == text {
		return "", nil
	}
	enc, _ := json.Marshal(text)
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.fenced(ctx, tx); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO run_journals (run_uid, namespace, name, created_at, output) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (run_uid) DO UPDATE SET output = excluded.output`), string(run.UID), run.Namespace, run.Name, s.now(), string(enc))
		return err
	})
	if err != nil {
		return "", fmt.Errorf("storing the final output: %w", err)
	}
	l.output, l.registered = &text, true
	return "", nil
}

// Forget drops the in-memory copy of a run.
func (s *Store) Forget(uid types.UID) { s.logs.Forget(uid) }

// Has reports whether the run's journal is held in memory.
func (s *Store) Has(uid types.UID) bool { return s.logs.Has(uid) }

// EachRun calls fn with every run whose journal is held in memory.
func (s *Store) EachRun(fn func(types.UID)) { s.logs.EachRun(fn) }

// Cached reports how many runs' journals are held in memory.
func (s *Store) Cached() int { return s.logs.Cached() }

// Entries reads a run's journal as stored.
func (s *Store) Entries(ctx context.Context, run store.RunRef) ([]journal.Entry, error) {
	ctx, done, err := s.op(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	entries, _, _, _, _, err := s.read(ctx, run.Namespace, run.Name, run.UID)
	return entries, err
}

// Output reads a run's stored final output.
func (s *Store) Output(ctx context.Context, run store.RunRef) (string, bool, error) {
	ctx, done, err := s.op(ctx)
	if err != nil {
		return "", false, err
	}
	defer done()
	var output sql.NullString
	err = s.db.QueryRowContext(ctx, s.q("SELECT output FROM run_journals WHERE run_uid = $1"), string(run.UID)).Scan(&output)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && !output.Valid) {
		return "", false, nil
	}
	if err != nil {
		return "", false, s.classify(err)
	}
	text, err := decodeOutput(output.String)
	if err != nil {
		return "", false, &store.CorruptError{Object: journalName(run.Namespace, run.Name), Key: "output", Problem: "the stored output does not decode"}
	}
	return text, true, nil
}

// decodeOutput reads an output stored as a JSON string (so any text,
// NUL bytes included, fits a text column).
func decodeOutput(s string) (string, error) {
	var text string
	err := json.Unmarshal([]byte(s), &text)
	return text, err
}

// inTx runs fn in a transaction and commits it; any error rolls back and
// is classified.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.classify(err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		if errors.Is(err, store.ErrSeqTaken) || errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrQuotaExceeded) {
			return err
		}
		return s.classify(err)
	}
	if s.beforeCommit != nil {
		s.beforeCommit()
	}
	return s.classify(tx.Commit())
}

// ready readies the database for a write: migrated, and the context's
// shard fence (if any) stored, so a stale holder's later writes fail.
func (s *Store) ready(ctx context.Context) error {
	if err := s.ensure(ctx); err != nil {
		return err
	}
	if f, ok := store.FenceFrom(ctx); ok {
		if err := s.raise(ctx, f); err != nil {
			return s.classify(err)
		}
	}
	return nil
}

func (s *Store) now() int64 { return s.cfg.Clock.Now().UnixMicro() }
