package sqlstore_test

import (
	"context"
	"errors"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv/postgres"
)

// TestBadDSNs: a DSN that names no database is refused at Open with a
// message naming what is wrong, never the password it holds.
func TestBadDSNs(t *testing.T) {
	for _, dsn := range []string{"mysql://u:hunter2@h/db", "sqlite:", "postgres://u:hunter2@h:notaport/db", "hunter2"} {
		_, err := sqlstore.Open(sqlstore.Config{DSN: dsn})
		if !errors.Is(err, sqlstore.ErrBadDSN) {
			t.Errorf("Open(%s): %v, want ErrBadDSN", strings.ReplaceAll(dsn, "hunter2", "***"), err)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the error shows the password: %v", err)
		}
	}
}

// TestUnusableDatabases: each way a configured database cannot be used is
// its own ErrUnavailable, with a remedy a person can act on, and without
// the password; the store still opens, so the manager starts and says why.
func TestUnusableDatabases(t *testing.T) {
	ctx := context.Background()
	d, err := pg.CreateDatabase(ctx)
	must(t, err)
	// A role that may log in but owns nothing and may create nothing.
	must(t, pg.Exec(ctx, d.Name, "CREATE ROLE powerless LOGIN PASSWORD 'powerless-pw'", "REVOKE ALL ON SCHEMA public FROM PUBLIC", "REVOKE CREATE ON SCHEMA public FROM PUBLIC"))
	wrong := withPassword(d.DSN, "not-the-password")
	cases := []struct {
		name, dsn, remedy string
	}{
		{"wrong password", wrong, "refused the login"},
		{"unknown host", "postgres://u:secretpw@no-such-host.invalid:5432/db?sslmode=disable&connect_timeout=5", "does not resolve"},
		{"missing database", strings.Replace(d.DSN, "/"+d.Name+"?", "/no_such_db?", 1), "does not exist"},
		{"missing permission", pg.DSN("powerless", "powerless-pw", d.Name), "lacks a permission"},
		{"not running", "postgres://u:secretpw@127.0.0.1:1/db?sslmode=disable", ""},
		{"no TLS served", strings.Replace(d.DSN, "sslmode=disable", "sslmode=verify-full", 1), "does not serve TLS"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := sqlstore.Open(sqlstore.Config{DSN: tc.dsn})
			must(t, err)
			defer func() { _ = s.Close() }()
			err = s.Check(ctx)
			var ue *store.UnavailableError
			if !errors.As(err, &ue) || !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("Check: %v, want an UnavailableError", err)
			}
			if !strings.Contains(ue.Remedy, tc.remedy) || (tc.remedy == "") != (ue.Remedy == "") {
				t.Fatalf("remedy %q, want one saying %q", ue.Remedy, tc.remedy)
			}
			for _, pw := range []string{"not-the-password", "secretpw", "powerless-pw", d.Password} {
				if strings.Contains(err.Error(), pw) {
					t.Fatalf("the error shows a password: %v", err)
				}
			}
			if err := s.Append(ctx, newRun(), intent(0, 0)); !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("Append: %v, want ErrUnavailable", err)
			}
		})
	}
}

func withPassword(dsn, pw string) string {
	u, _ := url.Parse(dsn)
	u.User = url.UserPassword(u.User.Username(), pw)
	return u.String()
}

// TestSchemaNewerThanBinary: a database a newer operator migrated is
// refused with a message naming both versions, and nothing is written.
func TestSchemaNewerThanBinary(t *testing.T) {
	eachBackend(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		must(t, s.Check(ctx))
		q := "INSERT INTO agentrun_schema_version (version_id, is_applied) VALUES (9999, true)"
		if _, err := s.DB().ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
		err := open(t, dsn).Check(ctx)
		if !errors.Is(err, sqlstore.ErrSchemaNewer) || !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "9999") {
			t.Fatalf("Check: %v, want ErrSchemaNewer naming version 9999", err)
		}
		if err := open(t, dsn).Append(ctx, newRun(), intent(0, 0)); !errors.Is(err, sqlstore.ErrSchemaNewer) {
			t.Fatalf("Append: %v, want ErrSchemaNewer", err)
		}
	})
}

// TestTLSVerifyFull: with sslmode=verify-full and the CA as sslrootcert the
// store connects; with another CA it is unavailable, saying the
// certificate does not verify.
func TestTLSVerifyFull(t *testing.T) {
	srv, err := postgres.Start(postgres.Options{TLS: true})
	must(t, err)
	defer func() { _ = srv.Stop() }()
	ctx := context.Background()
	d, err := srv.CreateDatabase(ctx)
	must(t, err)
	must(t, open(t, d.DSN).Check(ctx))
	other, err := postgres.Start(postgres.Options{TLS: true})
	must(t, err)
	defer func() { _ = other.Stop() }()
	wrongCA := strings.Replace(d.DSN, url.QueryEscape(srv.CAFile), url.QueryEscape(other.CAFile), 1)
	err = open(t, wrongCA).Check(ctx)
	var ue *store.UnavailableError
	if !errors.As(err, &ue) || !strings.Contains(ue.Remedy, "certificate does not verify") {
		t.Fatalf("Check with another CA: %v", err)
	}
}

// TestDatabaseAwayAndBack: while the database is stopped, appends are
// ErrUnavailable and write nothing; once it is back the same store goes on,
// with no restart.
func TestDatabaseAwayAndBack(t *testing.T) {
	srv, err := postgres.Start(postgres.Options{})
	must(t, err)
	defer func() { _ = srv.Stop() }()
	ctx := context.Background()
	d, err := srv.CreateDatabase(ctx)
	must(t, err)
	s, run := open(t, d.DSN), newRun()
	must(t, s.Append(ctx, run, intent(0, 0)))
	srv.Down()
	if err := s.Append(ctx, run, answer(1, 0, "x", nil)); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Append while down: %v, want ErrUnavailable", err)
	}
	must(t, srv.Up())
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := s.Append(ctx, run, answer(1, 0, "x", nil))
		if err == nil {
			break
		}
		if !errors.Is(err, store.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("Append after the database came back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	es, err := open(t, d.DSN).Load(ctx, run, false)
	if err != nil || len(es) != 2 {
		t.Fatalf("after the outage: %d entries, %v", len(es), err)
	}
}

// TestSQLiteUnwritable: a SQLite file where nobody may create one (/proc,
// even for root) is unavailable with a remedy naming the path.
func TestSQLiteUnwritable(t *testing.T) {
	s, err := sqlstore.Open(sqlstore.Config{DSN: "sqlite:/proc/agentrun-test.db"})
	must(t, err)
	defer func() { _ = s.Close() }()
	var ue *store.UnavailableError
	if err := s.Check(context.Background()); !errors.As(err, &ue) || !strings.Contains(ue.Remedy, "/proc/agentrun-test.db") {
		t.Fatalf("Check: %v", err)
	}
}

// TestAnOperationWaitsForAMigrationOnlyTillItsDeadline: an operation that
// finds another's migration under way (which a database that does not
// answer holds until its own timeout) gives up at its deadline, the store
// unavailable, and goes on once the migration is done.
func TestAnOperationWaitsForAMigrationOnlyTillItsDeadline(t *testing.T) {
	s := open(t, "sqlite:"+filepath.Join(t.TempDir(), "agentrun.db"))
	release := sqlstore.HoldMigration(s)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := s.Load(ctx, newRun(), false)
		errc <- err
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "waiting for the schema migration") {
			t.Errorf("Load while a migration is under way: %v; want the store unavailable, saying why", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Load waited for the migration past its deadline")
	}
	release()
	if _, err := s.Load(context.Background(), newRun(), false); err != nil {
		t.Errorf("Load once the migration is done: %v", err)
	}
}
