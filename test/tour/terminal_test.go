//go:build linux

package tour_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// terminal is a process started on a pseudo-terminal of its own, as in a
// terminal window: it leads a session whose controlling terminal is the
// pty, so a Ctrl-C typed there reaches the terminal's foreground process
// group, and only that one.
type terminal struct {
	cmd    *exec.Cmd
	master *os.File
	out    lockedBuffer
	exited chan struct{}
	err    error
}

// openPTY returns a new pseudo-terminal's master and slave (Linux's
// /dev/ptmx).
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal("unlockpt:", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal("ptsname:", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

// startTerminal runs `bash -c line` in dir with env on a new pty.
func startTerminal(t *testing.T, dir string, env []string, line string) *terminal {
	t.Helper()
	master, slave := openPTY(t)
	term := &terminal{cmd: exec.Command("bash", "-c", line), master: master, exited: make(chan struct{})}
	term.cmd.Dir, term.cmd.Env = dir, env
	term.cmd.Stdin, term.cmd.Stdout, term.cmd.Stderr = slave, slave, slave
	term.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := term.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = slave.Close()
	go func() { _, _ = io.Copy(&term.out, master) }()
	go func() { term.err = term.cmd.Wait(); close(term.exited) }()
	t.Cleanup(func() {
		select {
		case <-term.exited:
		default:
			// Whatever is left: the session's first group and the one in
			// the foreground (run-local's, with the control plane).
			if fg, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPGRP); err == nil && fg > 0 {
				_ = syscall.Kill(-fg, syscall.SIGKILL)
			}
			_ = syscall.Kill(-term.cmd.Process.Pid, syscall.SIGKILL)
			<-term.exited
		}
		_ = master.Close()
	})
	return term
}

// Output is what the terminal showed so far, with the pty's \r\n as \n.
func (term *terminal) Output() string {
	return strings.ReplaceAll(term.out.String(), "\r\n", "\n")
}

// waitFor waits until the output contains s.
func (term *terminal) waitFor(t *testing.T, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(term.Output(), s) {
		select {
		case <-term.exited:
			t.Fatalf("the terminal's command ended (%v) before printing %q:\n%s", term.err, s, term.Output())
		case <-deadline:
			t.Fatalf("no %q after %s:\n%s", s, timeout, term.Output())
		case <-tick.C:
		}
	}
}

// ctrlC types Ctrl-C: the pty's line discipline sends SIGINT to its
// foreground process group.
func (term *terminal) ctrlC(t *testing.T) {
	t.Helper()
	if _, err := term.master.Write([]byte{3}); err != nil {
		t.Fatal(err)
	}
}

// shell is a bash session reading commands one at a time, as the second
// terminal of the tour: what one command exports, the next sees.
type shell struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	dir   string
	n     int
}

// rcMark ends each command's output, followed by its exit status.
const rcMark = "__TOUR_EXIT_STATUS="

func startShell(t *testing.T, dir string, env []string) *shell {
	t.Helper()
	sh := &shell{cmd: exec.Command("bash", "--noprofile", "--norc"), lines: make(chan string, 1024), dir: t.TempDir()}
	sh.cmd.Dir, sh.cmd.Env = dir, env
	var err error
	if sh.stdin, err = sh.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	r, w := io.Pipe()
	sh.cmd.Stdout, sh.cmd.Stderr = w, w
	if err := sh.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			sh.lines <- sc.Text()
		}
		close(sh.lines)
	}()
	t.Cleanup(func() {
		_ = sh.stdin.Close()
		done := make(chan struct{})
		go func() { _ = sh.cmd.Wait(); _ = w.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = sh.cmd.Process.Kill()
		}
	})
	return sh
}

// run runs one command line exactly as written (from a file the session
// sources, with stdin from /dev/null so a command cannot read the session's
// own input) and returns its output and exit status.
func (sh *shell) run(t *testing.T, line string, timeout time.Duration) (string, int) {
	t.Helper()
	sh.n++
	file := filepath.Join(sh.dir, fmt.Sprintf("cmd-%03d.sh", sh.n))
	if err := os.WriteFile(file, []byte(line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(sh.stdin, ". %q </dev/null\nprintf '\\n%s%%s\\n' \"$?\"\n", file, rcMark); err != nil {
		t.Fatal(err)
	}
	var out []string
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-sh.lines:
			if !ok {
				t.Fatalf("the shell ended during %q:\n%s", line, strings.Join(out, "\n"))
			}
			if rc, found := strings.CutPrefix(l, rcMark); found {
				var status int
				_, _ = fmt.Sscan(rc, &status)
				// The mark's own leading newline.
				if n := len(out); n > 0 && out[n-1] == "" {
					out = out[:n-1]
				}
				return strings.Join(out, "\n"), status
			}
			out = append(out, l)
		case <-deadline:
			t.Fatalf("%q did not finish in %s:\n%s", line, timeout, strings.Join(out, "\n"))
		}
	}
}

// lockedBuffer is a bytes.Buffer one goroutine writes while another reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
