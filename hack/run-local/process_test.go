package main_test

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// buildInto builds each "out=pkg" into dir, from the repository root.
func buildInto(t *testing.T, dir string, targets ...[2]string) {
	t.Helper()
	for _, b := range targets {
		build := exec.Command("go", "build", "-o", filepath.Join(dir, b[0]), b[1])
		build.Dir = testenv.RepoRoot()
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v: %s", b[1], err, out)
		}
	}
}

// runLocalProcess is run-local started the way `make run` starts it, in
// its own process group so Ctrl-C reaches everything it started.
type runLocalProcess struct {
	cmd    *exec.Cmd
	logs   lockedBuffer
	exited chan error
}

// startRunLocal starts bin with args and env (nil: the test's own) and
// kills its process group at cleanup if the test did not stop it.
func startRunLocal(t *testing.T, bin string, env []string, args ...string) *runLocalProcess {
	t.Helper()
	p := &runLocalProcess{cmd: exec.Command(bin, args...), exited: make(chan error, 1)}
	p.cmd.Dir, p.cmd.Env = testenv.RepoRoot(), env
	p.cmd.Stdout, p.cmd.Stderr = &p.logs, &p.logs
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	return p
}

// Logs is what run-local printed so far.
func (p *runLocalProcess) Logs() string { return p.logs.String() }

// interrupt sends Ctrl-C and waits for run-local to exit.
func (p *runLocalProcess) interrupt(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		// How it ended (an exit status, the signal) is not what this checks.
		t.Logf("run-local exited: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("run-local did not stop on Ctrl-C:\n%s", p.Logs())
	}
}

// lockedBuffer is a bytes.Buffer the process writes while the test reads.
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
