package postgres

import (
	"context"
	"testing"
)

// ForTest starts a server of the test's own with o, stopped when the test
// ends, and a database on it: what a test or benchmark that stops,
// freezes or restarts its PostgreSQL needs.
func ForTest(tb testing.TB, o Options) (*Server, *Database) {
	tb.Helper()
	srv, err := Start(o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = srv.Stop() })
	db, err := srv.CreateDatabase(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return srv, db
}
