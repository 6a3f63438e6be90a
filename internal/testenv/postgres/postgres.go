// Package postgres starts a real PostgreSQL server for tests and
// benchmarks, the way envtest starts etcd: Debian's `postgresql` package
// (its initdb and postgres binaries), a data directory of its own in a
// temporary directory, a loopback port, nothing else. PostgreSQL refuses
// to run as root, so a root test process runs the server as the
// `postgres` user (runuser), which the package creates.
package postgres

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	// The pgx driver, through database/sql, for the harness's own
	// statements (roles, databases).
	_ "github.com/jackc/pgx/v5/stdlib"
)

// Superuser is the server's superuser role; its password is Server.password.
const Superuser = "postgres"

// Options shape the server.
type Options struct {
	// Durable keeps PostgreSQL's defaults (fsync, synchronous commit), for
	// benchmarks that measure the database's real cost; tests turn both
	// off, which only matters when the machine crashes.
	Durable bool
	// TLS serves TLS with a certificate for 127.0.0.1 and localhost signed
	// by a CA of its own (Server.CAFile), so clients can use
	// sslmode=verify-full.
	TLS bool
}

// Server is a running PostgreSQL server.
type Server struct {
	// Host and Port are where it listens (127.0.0.1).
	Host string
	Port int
	// CAFile is the CA certificate that signed the server's (TLS only).
	CAFile string

	dir, data, bin, password string
	asUser                   *user.User
	opts                     Options
	cmd                      *exec.Cmd
	exited                   chan struct{}
}

// BinDir finds the directory of initdb and postgres: $POSTGRES_BIN, else
// the newest /usr/lib/postgresql/<version>/bin.
func BinDir() (string, error) {
	if d := os.Getenv("POSTGRES_BIN"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return versionOf(b) - versionOf(a) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("PostgreSQL is not installed: no /usr/lib/postgresql/<version>/bin/postgres (install Debian's postgresql package: apt-get install -y postgresql; .ci/run does), or set POSTGRES_BIN")
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// Start initialises a new cluster in a temporary directory and starts
// the server on a free loopback port.
func Start(o Options) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	s := &Server{Host: "127.0.0.1", bin: bin, opts: o, password: randomHex(12)}
	if os.Geteuid() == 0 {
		if s.asUser, err = user.Lookup("postgres"); err != nil {
			return nil, fmt.Errorf("PostgreSQL refuses to run as root and there is no postgres user to run it as (Debian's postgresql package creates one): %w", err)
		}
	}
	if s.dir, err = os.MkdirTemp("", "agentrun-postgres-"); err != nil {
		return nil, err
	}
	s.data = filepath.Join(s.dir, "data")
	if err := s.own(s.dir); err != nil {
		return nil, s.fail(err)
	}
	if err := s.initdb(); err != nil {
		return nil, s.fail(err)
	}
	if o.TLS {
		if err := s.writeCertificates(); err != nil {
			return nil, s.fail(err)
		}
	}
	if err := s.start(); err != nil {
		return nil, s.fail(err)
	}
	return s, nil
}

func (s *Server) fail(err error) error {
	_ = os.RemoveAll(s.dir)
	return err
}

// own gives path to the server's user.
func (s *Server) own(path string) error {
	if s.asUser == nil {
		return nil
	}
	uid, _ := strconv.Atoi(s.asUser.Uid)
	gid, _ := strconv.Atoi(s.asUser.Gid)
	return os.Chown(path, uid, gid)
}

// command runs a PostgreSQL binary as the server's user.
func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	if s.asUser != nil {
		uid, _ := strconv.ParseUint(s.asUser.Uid, 10, 32)
		gid, _ := strconv.ParseUint(s.asUser.Gid, 10, 32)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8", "TZ=UTC")
	return cmd
}

func (s *Server) initdb() error {
	pw := filepath.Join(s.dir, "pwfile")
	if err := os.WriteFile(pw, []byte(s.password+"\n"), 0o600); err != nil {
		return err
	}
	if err := s.own(pw); err != nil {
		return err
	}
	out, err := s.command("initdb", "-D", s.data, "-U", Superuser, "--pwfile", pw, "-E", "UTF8", "--locale=C",
		"--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync").CombinedOutput()
	_ = os.Remove(pw)
	if err != nil {
		return fmt.Errorf("initdb: %w: %s", err, out)
	}
	return nil
}

// start starts the server on a free port and waits until it accepts
// connections.
func (s *Server) start() error {
	if s.Port == 0 {
		port, err := freePort()
		if err != nil {
			return err
		}
		s.Port = port
	}
	args := []string{"-D", s.data, "-p", strconv.Itoa(s.Port), "-k", s.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300", "-c", "log_min_messages=warning"}
	if !s.opts.Durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	if s.opts.TLS {
		args = append(args, "-c", "ssl=on", "-c", "ssl_cert_file="+filepath.Join(s.dir, "server.crt"), "-c", "ssl_key_file="+filepath.Join(s.dir, "server.key"))
	}
	logf, err := os.Create(filepath.Join(s.dir, "postgres.log"))
	if err != nil {
		return err
	}
	s.cmd = s.command("postgres", args...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("starting postgres: %w", err)
	}
	s.exited = make(chan struct{})
	go func() { _ = s.cmd.Wait(); _ = logf.Close(); close(s.exited) }()
	return s.waitReady(30 * time.Second)
}

func (s *Server) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		db, err := sql.Open("pgx", s.DSN(Superuser, s.password, "postgres"))
		if err == nil {
			err = db.Ping()
			_ = db.Close()
		}
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("postgres exited: %s", s.logTail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not accept connections within %s: %v; %s", timeout, err, s.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// Stop stops the server and removes its directory.
func (s *Server) Stop() error {
	s.kill(syscall.SIGINT) // fast shutdown
	return os.RemoveAll(s.dir)
}

func (s *Server) kill(sig syscall.Signal) {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// Pause stops the server's postmaster with SIGSTOP: connections already
// open stay open and hang, new ones are not accepted, as a database host
// that froze. Resume undoes it.
func (s *Server) Pause() error { return s.signalAll(syscall.SIGSTOP) }

// Resume continues a paused server.
func (s *Server) Resume() error { return s.signalAll(syscall.SIGCONT) }

// signalAll signals the postmaster and its backends (the server's user's
// processes started under this data directory).
func (s *Server) signalAll(sig syscall.Signal) error {
	pids := []int{s.cmd.Process.Pid}
	out, _ := exec.Command("pgrep", "-P", strconv.Itoa(s.cmd.Process.Pid)).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil && pid == s.cmd.Process.Pid {
			return err
		}
	}
	return nil
}

// Restart stops the server (a fast shutdown: open connections are cut)
// and starts it again on the same port with the same data.
func (s *Server) Restart() error {
	s.kill(syscall.SIGINT)
	return s.start()
}

// Down stops the server without removing its data; Up starts it again.
func (s *Server) Down() { s.kill(syscall.SIGINT) }

// Up starts a server stopped by Down.
func (s *Server) Up() error { return s.start() }

// DSN is a connection URL for role and password to database.
func (s *Server) DSN(role, password, database string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(role, password), Host: net.JoinHostPort(s.Host, strconv.Itoa(s.Port)), Path: "/" + database}
	q := url.Values{"sslmode": {"disable"}}
	if s.opts.TLS {
		q = url.Values{"sslmode": {"verify-full"}, "sslrootcert": {s.CAFile}}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Database is a database made for one test: its owner role, with a
// password, and a DSN that logs in as it.
type Database struct {
	Name, Role, Password string
	DSN                  string
}

// CreateDatabase makes a new database owned by a new role of its own, so
// tests sharing the server share nothing else.
func (s *Server) CreateDatabase(ctx context.Context) (*Database, error) {
	d := &Database{Name: "t_" + randomHex(6), Password: randomHex(12)}
	d.Role = d.Name + "_owner"
	if err := s.Exec(ctx, "postgres",
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", d.Role, d.Password),
		fmt.Sprintf("CREATE DATABASE %s OWNER %s", d.Name, d.Role)); err != nil {
		return nil, err
	}
	d.DSN = s.DSN(d.Role, d.Password, d.Name)
	return d, nil
}

// Exec runs statements as the superuser in database.
func (s *Server) Exec(ctx context.Context, database string, stmts ...string) error {
	db, err := sql.Open("pgx", s.DSN(Superuser, s.password, database))
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", strings.SplitN(q, " ", 3)[:2], err)
		}
	}
	return nil
}

// SuperuserDSN logs in as the superuser to database.
func (s *Server) SuperuserDSN(database string) string { return s.DSN(Superuser, s.password, database) }

// PID is the postmaster's process id (its CPU is the database's).
func (s *Server) PID() int { return s.cmd.Process.Pid }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
