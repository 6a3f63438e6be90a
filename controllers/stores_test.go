package controllers_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv/postgres"
)

// The suite's managers keep journals where AGENTRUN_TEST_STORE says:
// "postgres" (a database per test on the suite's PostgreSQL server,
// Debian's postgresql started in a temporary directory), "sqlite" (a file
// per test), or ConfigMaps when unset. `make test` runs the restart, kill,
// fencing, dangling-write and write-count tests once more on each database
// (Makefile, test-stores).
var suiteStore = os.Getenv("AGENTRUN_TEST_STORE")

var (
	pgOnce sync.Once
	pgSrv  *postgres.Server
	pgErr  error

	dsnMu  sync.Mutex
	dsns   = map[string]string{}
	reader = map[string]*sqlstore.Store{}
	// sqliteDirs are the suite's SQLite directories, removed when it ends.
	sqliteDirs []string
)

// suitePostgres is the suite's PostgreSQL server, started on first use.
func suitePostgres(t testing.TB) *postgres.Server {
	t.Helper()
	pgOnce.Do(func() { pgSrv, pgErr = postgres.Start(postgres.Options{}) })
	if pgErr != nil {
		t.Fatal(pgErr)
	}
	return pgSrv
}

// stopSuiteStores stops the PostgreSQL server if one was started and
// removes the SQLite files, so a suite leaves nothing in the temp dir.
func stopSuiteStores() {
	if pgSrv != nil {
		_ = pgSrv.Stop()
	}
	dsnMu.Lock()
	defer dsnMu.Unlock()
	for _, dir := range sqliteDirs {
		_ = os.RemoveAll(dir)
	}
}

// storeDSN is the --store of the test's managers: one database (or file)
// per top-level test, shared by the managers a test restarts; "" for
// ConfigMaps.
func storeDSN(t testing.TB) string {
	t.Helper()
	return storeDSNFor(t, suiteStore)
}

// storeDSNFor is storeDSN for a given kind ("postgres", "sqlite", "").
func storeDSNFor(t testing.TB, kind string) string {
	t.Helper()
	if kind == "" {
		return ""
	}
	key := kind + "/" + strings.SplitN(t.Name(), "/", 2)[0]
	dsnMu.Lock()
	defer dsnMu.Unlock()
	if dsn, ok := dsns[key]; ok {
		return dsn
	}
	var dsn string
	switch kind {
	case "postgres":
		d, err := suitePostgres(t).CreateDatabase(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		dsn = d.DSN
	case "sqlite":
		dir, err := os.MkdirTemp("", "agentrun-sqlite-")
		if err != nil {
			t.Fatal(err)
		}
		sqliteDirs = append(sqliteDirs, dir)
		dsn = "sqlite:" + filepath.Join(dir, "agentrun.db")
	default:
		t.Fatalf("AGENTRUN_TEST_STORE=%q: want postgres, sqlite or nothing", kind)
	}
	dsns[key] = dsn
	return dsn
}

// storeReader reads the test's database the way the history server does.
func storeReader(t testing.TB, dsn string) *sqlstore.Store {
	t.Helper()
	dsnMu.Lock()
	defer dsnMu.Unlock()
	if s, ok := reader[dsn]; ok {
		return s
	}
	s, err := sqlstore.Open(sqlstore.Config{DSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	reader[dsn] = s
	return s
}
