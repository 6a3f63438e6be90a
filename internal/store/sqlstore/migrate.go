package sqlstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// migrations are the schema's versions, forward-only: each file is applied
// once, in order, and never undone.
//
//go:embed migrations/*.sql
var migrations embed.FS

// migrateTimeout bounds bringing the schema up to date (beyond the
// operation's own bound: the first use migrates).
const migrateTimeout = time.Minute

// ErrSchemaNewer is a database whose schema a newer operator migrated:
// this binary does not know what its tables mean, so it refuses to write.
var ErrSchemaNewer = errors.New("the database's schema is newer than this operator")

// SchemaVersion is the newest schema version this binary knows.
func SchemaVersion() int64 {
	var newest int64
	entries, _ := fs.ReadDir(migrations, "migrations")
	for _, e := range entries {
		v, err := goose.NumericComponent(e.Name())
		if err == nil && v > newest {
			newest = v
		}
	}
	return newest
}

// migrate brings the schema up to SchemaVersion, under an advisory lock on
// PostgreSQL so replicas starting together migrate once; a schema newer
// than SchemaVersion is ErrSchemaNewer, and the database is not touched.
func (s *Store) migrate(ctx context.Context) error {
	select {
	case s.migrating <- struct{}{}:
	case <-ctx.Done():
		return s.migrationFailed(fmt.Errorf("waiting for the schema migration under way: %w", ctx.Err()))
	}
	defer func() { <-s.migrating }()
	if s.migrated.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, migrateTimeout)
	defer cancel()
	p, err := s.migrations()
	if err != nil {
		return err
	}
	current, err := p.GetDBVersion(ctx)
	if err != nil {
		return s.migrationFailed(fmt.Errorf("reading the schema version: %w", err))
	}
	if newest := SchemaVersion(); current > newest {
		return fmt.Errorf("%w: %w", ErrSchemaNewer, &store.UnavailableError{Backend: s.dialect.name,
			Cause:  fmt.Sprintf("%s is at schema version %d, and this operator knows versions up to %d", s.target.Where, current, newest),
			Remedy: "a newer operator migrated the database: run that version or a newer one (schemas are never migrated down)"})
	}
	res, err := p.Up(ctx)
	if err != nil {
		return s.migrationFailed(fmt.Errorf("migrating the schema: %w", err))
	}
	for _, r := range res {
		s.cfg.Log.Info("Migrated the store's schema", "version", r.Source.Version, "took", r.Duration.String())
	}
	s.migrated.Store(true)
	return nil
}

// migrations is goose's provider of the embedded migrations.
func (s *Store) migrations() (*goose.Provider, error) {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return nil, err
	}
	opts := []goose.ProviderOption{goose.WithDisableGlobalRegistry(true), goose.WithTableName("agentrun_schema_version")}
	if s.dialect.name == KindPostgres {
		locker, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return nil, err
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	return goose.NewProvider(s.dialect.goose, s.db, sub, opts...)
}

// migrationFailed is a failed migration as the store reports it: always
// ErrUnavailable (nothing can be written until it succeeds), with the
// classification's remedy, or the failure itself as the remedy.
func (s *Store) migrationFailed(err error) error {
	c := s.classify(err)
	if errors.Is(c, store.ErrUnavailable) {
		return c
	}
	return s.unavailable(err, "the operator could not migrate the database's schema; fix what the cause says, the store retries by itself")
}
