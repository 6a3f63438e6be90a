package sqlstore

import (
	"context"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// SetBeforeCommit makes every transaction of s call fn before it commits.
func SetBeforeCommit(s *Store, fn func()) { s.beforeCommit = fn }

// SetImportRows sets how many journal rows an import inserts a
// statement (0: the default).
func SetImportRows(s *Store, n int) { s.importRows = n }

// MigrateTo brings s's schema up to version and no further (tests of a
// migration's backfill); the next operation migrates the rest.
func MigrateTo(ctx context.Context, s *Store, version int64) error {
	p, err := s.migrations()
	if err != nil {
		return err
	}
	_, err = p.UpTo(ctx, version)
	return err
}

// LostAfterRefusal settles, as an append whose reissue a quota refused
// does, the dispatches plan's reissues replace.
func LostAfterRefusal(ctx context.Context, s *Store, run *arv1.AgentRun, plan []store.Planned) {
	s.lostAfterRefusal(ctx, run.UID, plan)
}

// FirstArchive stores rec's run as Archive's one-statement first archive
// does (PostgreSQL only), reporting whether it stored it.
func FirstArchive(ctx context.Context, s *Store, rec *store.Record) (bool, error) {
	vals, err := archiveValues(rec, s.now())
	if err != nil {
		return false, err
	}
	return s.firstArchive(ctx, rec.Run, vals)
}

// HoldMigration makes s as if another operation's migration were under
// way, until release.
func HoldMigration(s *Store) (release func()) {
	s.migrating <- struct{}{}
	return func() { <-s.migrating }
}
