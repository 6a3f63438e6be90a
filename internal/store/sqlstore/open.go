// Package sqlstore keeps runs' journals, the ledger of their model calls
// and the archive of finished runs in a database: PostgreSQL (through
// pgx) in clusters, SQLite (a pure-Go driver, no cgo) embedded. One set of
// statements serves both; where they differ (row locks, placeholders,
// error codes) a dialect says how.
//
// The guarantees are the ConfigMap store's: an append is atomic (one
// transaction, or on PostgreSQL one statement when it only adds rows);
// a retried append whose earlier attempt was stored is recognised; an
// entry whose seq is taken is ErrSeqTaken; an append whose shard fence is
// older than the newest seen is ErrFenced, decided in the append's own
// transaction under a shared lock on the fence row, so no append of an
// older hold can commit after a newer hold has been recorded.
package sqlstore

import (
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"k8s.io/utils/clock"

	// modernc.org/sqlite registers the pure-Go "sqlite" driver.
	_ "modernc.org/sqlite"

	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// Config is how to reach the database.
type Config struct {
	// DSN names the database: postgres://user@host:port/db?sslmode=...
	// (libpq's URL or key=value form; PGPASSWORD and the other PG*
	// variables fill in what it leaves out), or sqlite:PATH
	// (sqlite:///abs/path.db).
	DSN string
	// MaxConns bounds the PostgreSQL connection pool (DefaultMaxConns when 0).
	MaxConns int
	// Log receives migrations and recoveries.
	Log logr.Logger
	// Clock stamps archive and ledger rows (the real clock when nil).
	Clock clock.PassiveClock
	// OpTimeout bounds each operation (DefaultOpTimeout when 0): a database
	// that froze (a host paused, a network partition) holds a connection
	// open and never answers, and must read as unavailable, not hang a run.
	OpTimeout time.Duration
}

// DefaultOpTimeout bounds one operation: an append is a few milliseconds,
// and a database slower than this is as good as away for runs.
const DefaultOpTimeout = 5 * time.Second

// DefaultMaxConns bounds the pool: appends are short transactions, and a
// database shared with other services should not see one replica take
// its connections.
const DefaultMaxConns = 16

// Kinds of database.
const (
	KindPostgres = "postgres"
	KindSQLite   = "sqlite"
)

// ErrBadDSN is a DSN that names no database this store can open.
var ErrBadDSN = errors.New("bad --store DSN")

// Target is what a DSN names, for messages: the kind, and the host and
// database or file, never a password.
type Target struct {
	Kind, Where string
}

// Parse reads a DSN and says what it names, without connecting.
func Parse(dsn string) (Target, error) {
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		path, err := sqlitePath(dsn)
		if err != nil {
			return Target{}, err
		}
		return Target{Kind: KindSQLite, Where: path}, nil
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"), strings.Contains(dsn, "host="), strings.Contains(dsn, "dbname="):
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			return Target{}, fmt.Errorf("%w: %s", ErrBadDSN, Redact(err.Error(), dsn))
		}
		return Target{Kind: KindPostgres, Where: fmt.Sprintf("%s:%d/%s as %s", cfg.Host, cfg.Port, cfg.Database, cfg.User)}, nil
	}
	return Target{}, fmt.Errorf("%w: it is neither postgres://... (or libpq's key=value form) nor sqlite:PATH (the value is not shown: it may hold a password)", ErrBadDSN)
}

func sqlitePath(dsn string) (string, error) {
	rest := strings.TrimPrefix(dsn, "sqlite:")
	rest = strings.TrimPrefix(rest, "//")
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		rest = rest[:i]
	}
	if rest == "" {
		return "", fmt.Errorf("%w: sqlite: needs a file path (sqlite:bin/local/agentrun.db)", ErrBadDSN)
	}
	return filepath.Clean(rest), nil
}

// Redact removes the password a DSN holds from s (an error's text, or the
// DSN itself).
func Redact(s, dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			s = strings.ReplaceAll(s, pw, "REDACTED")
			s = strings.ReplaceAll(s, url.QueryEscape(pw), "REDACTED")
		}
	}
	for _, f := range strings.Fields(dsn) {
		if v, ok := strings.CutPrefix(f, "password="); ok && v != "" {
			s = strings.ReplaceAll(s, v, "REDACTED")
		}
	}
	if pw := os.Getenv("PGPASSWORD"); pw != "" {
		s = strings.ReplaceAll(s, pw, "REDACTED")
	}
	return s
}

// Open prepares the store for the database the DSN names without
// connecting: the first use connects and brings the schema up to date, so
// a manager whose database is away, refuses its login or was migrated by
// a newer operator still starts, and says why (ErrUnavailable from Check
// and every write) until it is fixed. Only a DSN that does not parse is an
// error here.
func Open(cfg Config) (*Store, error) {
	t, err := Parse(cfg.DSN)
	if err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log.GetSink() == nil {
		cfg.Log = logr.Discard()
	}
	s := &Store{cfg: cfg, target: t, line: newLine(1), migrating: make(chan struct{}, 1)}
	switch t.Kind {
	case KindSQLite:
		s.dialect = sqliteDialect
		if err := os.MkdirAll(filepath.Dir(t.Where), 0o755); err != nil {
			return nil, fmt.Errorf("making the SQLite store's directory: %w", err)
		}
		s.db, err = sql.Open("sqlite", "file:"+t.Where+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
		if err != nil {
			return nil, err
		}
		// One connection: SQLite writes one transaction at a time anyway,
		// and a single writer never meets SQLITE_BUSY.
		s.db.SetMaxOpenConns(1)
	default:
		s.dialect = postgresDialect
		pc, err := pgx.ParseConfig(cfg.DSN)
		if err != nil {
			return nil, fmt.Errorf("%w: %s", ErrBadDSN, Redact(err.Error(), cfg.DSN))
		}
		pc.ConnectTimeout = 10 * time.Second
		s.db = stdlib.OpenDB(*pc)
		n := cfg.MaxConns
		if n <= 0 {
			n = DefaultMaxConns
		}
		s.db.SetMaxOpenConns(n)
		s.line = newLine(n)
		s.db.SetMaxIdleConns(n)
		s.db.SetConnMaxIdleTime(5 * time.Minute)
	}
	s.logs = store.NewLogs(func(mustRead bool) *runLog {
		return &runLog{Log: store.Log{MustRead: mustRead, Raw: map[int64]string{}}}
	}, func(l *runLog) *store.Log { return &l.Log })
	return s, nil
}
