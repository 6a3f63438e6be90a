package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// fenced checks, inside an append's transaction, that the context's fence
// is not older than the newest recorded for its Lease, holding a shared
// lock on the fence's row until the transaction ends: a replica that takes
// the shard over records its newer fence with an update of that row, which
// waits for every append of the older hold in flight, and once it commits
// no such append can. The first append of a new hold records it (raise,
// before its transaction: SQLite's one connection is the transaction's). Without a fence (one replica drives every run)
// there is nothing to check: seqs alone order the writes.
func (s *Store) fenced(ctx context.Context, tx *sql.Tx) error {
	f, ok := store.FenceFrom(ctx)
	if !ok {
		return nil
	}
	var created, transitions int64
	err := tx.QueryRowContext(ctx, s.q("SELECT created, transitions FROM shard_fences WHERE lease = $1"+s.dialect.lockShared), f.Lease).Scan(&created, &transitions)
	if errors.Is(err, sql.ErrNoRows) {
		return nil // raised by another transaction that rolled back? raise again next time
	}
	if err != nil {
		return err
	}
	if newest := (store.Fence{Lease: f.Lease, Created: created, Transitions: transitions}); f.Older(newest) {
		return fmt.Errorf("%w (the store has recorded a newer hold of Lease %s)", store.ErrFenced, f.Lease)
	}
	return nil
}

// RaiseFence records f as its Lease's newest fence (store.Fencer),
// waiting for the appends of older holds in flight.
func (s *Store) RaiseFence(ctx context.Context, f store.Fence) error {
	ctx, done, err := s.op(ctx)
	if err != nil {
		return err
	}
	defer done()
	return s.classify(s.raise(ctx, f))
}

var _ store.Fencer = (*Store)(nil)

// raise records f as its Lease's newest fence, once per hold per process:
// an update only when the stored one is older.
func (s *Store) raise(ctx context.Context, f store.Fence) error {
	s.fencesMu.Lock()
	have, ok := s.fences[f.Lease]
	s.fencesMu.Unlock()
	if ok && !have.Older(f) {
		return nil
	}
	_, err := s.db.ExecContext(ctx, s.q(`INSERT INTO shard_fences (lease, created, transitions) VALUES ($1, $2, $3)
		ON CONFLICT (lease) DO UPDATE SET created = excluded.created, transitions = excluded.transitions
		WHERE shard_fences.created < excluded.created OR (shard_fences.created = excluded.created AND shard_fences.transitions < excluded.transitions)`),
		f.Lease, f.Created, f.Transitions)
	if err != nil {
		return err
	}
	s.fencesMu.Lock()
	if s.fences == nil {
		s.fences = map[string]store.Fence{}
	}
	if cur, ok := s.fences[f.Lease]; !ok || cur.Older(f) {
		s.fences[f.Lease] = f
	}
	s.fencesMu.Unlock()
	return nil
}
