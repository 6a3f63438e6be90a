package sqlstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// errConflict is an append that met a row already there (its seq taken,
// or an earlier attempt of its own): the caller reads what is stored to
// tell which.
var errConflict = errors.New("journal row already stored")

// classify says what a database error means for the caller: errConflict
// (a unique key met), store.ErrUnavailable (the database cannot be used
// now: down, unreachable, refusing the login or a permission, out of
// space), store.ErrRefused (it refuses this write for what it is), or err
// itself (anything else, retried). Passwords never reach the message.
func (s *Store) classify(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, errConflict) {
		return err
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return s.classifyPostgres(err, pg)
	}
	var lite *sqlite.Error
	if errors.As(err, &lite) {
		return s.classifySQLite(err, lite.Code())
	}
	if remedy, ok := s.unreachable(err); ok {
		return s.unavailable(err, remedy)
	}
	return err
}

func (s *Store) classifyPostgres(err error, pg *pgconn.PgError) error {
	code := pg.Code
	switch {
	case code == "23505": // unique_violation
		return errConflict
	case code == "28P01" || code == "28000": // invalid_password, invalid_authorization_specification
		return s.unavailable(err, "the database refused the login: fix the user and password the operator connects with (the Secret behind PGPASSWORD or the --store DSN), then restart the manager, which reads them at start")
	case code == "3D000": // invalid_catalog_name
		return s.unavailable(err, "the database named in --store does not exist: create it, or fix the DSN")
	case code == "42501", code == "3F000": // insufficient_privilege; no schema it may create in
		return s.unavailable(err, "the database role lacks a permission the operator needs: grant it CREATE on the database's schema (for migrations) and SELECT, INSERT, UPDATE, DELETE on the operator's tables")
	case code == "53100": // disk_full
		return s.unavailable(err, "the database is out of disk space")
	case strings.HasPrefix(code, "08"), strings.HasPrefix(code, "57P"), code == "53300", code == "53200", code == "40001", code == "40P01", code == "55P03":
		// connection exceptions, shutdown, too many connections, out of
		// memory, serialization or deadlock (retried), lock not available
		return s.unavailable(err, "")
	case strings.HasPrefix(code, "22"), strings.HasPrefix(code, "54"): // data exception, program limit
		return fmt.Errorf("%w: %s", store.ErrRefused, s.redact(err))
	}
	return err
}

func (s *Store) classifySQLite(err error, code int) error {
	switch code & 0xff {
	case sqlite3.SQLITE_CONSTRAINT:
		if code == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || code == sqlite3.SQLITE_CONSTRAINT_UNIQUE {
			return errConflict
		}
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return s.unavailable(err, "")
	case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_AUTH:
		return s.unavailable(err, fmt.Sprintf("the operator cannot write the SQLite file %s: fix its directory's permissions, or point --store at a writable path", s.target.Where))
	case sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR:
		return s.unavailable(err, fmt.Sprintf("writing the SQLite file %s failed (disk full or failing)", s.target.Where))
	case sqlite3.SQLITE_TOOBIG:
		return fmt.Errorf("%w: %s", store.ErrRefused, err)
	}
	return err
}

// unreachable says whether err is a failure to reach or talk to the
// database, and the remedy when a person must act (an unknown host, a
// certificate that does not verify); "" when it may clear by itself.
func (s *Store) unreachable(err error) (string, bool) {
	var dns *net.DNSError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var certInvalid x509.CertificateInvalidError
	var tlsRecord tls.RecordHeaderError
	switch {
	case errors.As(err, &dns) && dns.IsNotFound:
		return fmt.Sprintf("the database host %q does not resolve: fix the host in --store", dns.Name), true
	case errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &certInvalid), errors.As(err, &tlsRecord):
		return "the database's TLS certificate does not verify: check the CA Secret mounted as sslrootcert (PGSSLROOTCERT) and that the host in --store is the certificate's name, then restart the manager, which reads them at start", true
	case strings.Contains(err.Error(), "server refused TLS connection"):
		return "the database does not serve TLS: enable it on the server, or set sslmode to match", true
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, context.DeadlineExceeded):
		return "", true
	}
	var netErr net.Error
	var connect *pgconn.ConnectError
	if errors.As(err, &netErr) || errors.As(err, &connect) || pgconn.Timeout(err) {
		return "", true
	}
	return "", false
}

func (s *Store) unavailable(err error, remedy string) error {
	return &store.UnavailableError{Backend: s.dialect.name, Cause: s.redact(err), Remedy: remedy}
}

func (s *Store) redact(err error) string { return Redact(err.Error(), s.cfg.DSN) }
