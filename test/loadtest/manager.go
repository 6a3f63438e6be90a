package loadtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

var build struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// BuildManager builds ./cmd/manager as the image and release archives
// ship it (the Makefile's GO_BUILD: static, no cgo, no symbol table) into
// a temporary directory, once per process, and returns the binary's path:
// the manager's memory is measured on the binary people run (a plain
// `go build` links cgo and keeps its symbol tables: 177 MB against 123 MB
// on 6 December 2026). Cleanup removes it.
func BuildManager() (string, error) {
	build.once.Do(func() {
		build.dir, build.err = os.MkdirTemp("", "loadtest-manager-")
		if build.err != nil {
			return
		}
		out := filepath.Join(build.dir, "manager")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./cmd/manager")
		cmd.Dir = testenv.RepoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build ./cmd/manager: %w\n%s", err, b)
			return
		}
		build.path = out
	})
	return build.path, build.err
}

// Cleanup removes the manager binary BuildManager made (call it from
// TestMain after the tests).
func Cleanup() {
	if build.dir != "" {
		_ = os.RemoveAll(build.dir)
	}
}

// Manager is the operator running as its own OS process.
type Manager struct {
	// MetricsURL is the manager's Prometheus endpoint.
	MetricsURL string
	// LogPath is the file its stderr (the manager's log) goes to.
	LogPath string
	// Args are the flags it was started with.
	Args []string

	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	err  error // the process's exit, once done is closed
	stop sync.Once
}

// StartManager runs the manager binary against the cluster with
// --kubeconfig, --metrics-bind-address on a free loopback port served as
// plain HTTP (--metrics-secure=false), --health-probe-bind-address=0 and
// --egress-allow-cidr=127.0.0.1/32 (the harness's servers are on
// loopback) and --priority-class-policy=priority-class (config/admission's
// name, as testenv installs it), followed by extra (flags the caller passes
// through, such as --max-concurrent-reconciles=32). Its stderr and stdout go
// to a file in logDir. It returns once the AgentRun controller has started
// its workers (its caches are synced), read from the manager's log ("Starting
// workers" for controller "agentrun"), and the metrics endpoint answers.
func (c *Cluster) StartManager(ctx context.Context, logDir string, extra ...string) (*Manager, error) {
	bin, err := BuildManager()
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	log, err := os.CreateTemp(logDir, "manager-*.log")
	if err != nil {
		return nil, err
	}
	m := &Manager{
		MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", port),
		LogPath:    log.Name(),
		Args: append([]string{"--kubeconfig=" + c.Kubeconfig,
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", port),
			// Plain HTTP: the harness scrapes without a token.
			"--metrics-secure=false",
			"--health-probe-bind-address=0",
			// The harness's servers (the hung MCP server) listen on loopback,
			// which the egress policy refuses by default: opted in here, as a
			// developer would (docs/egress.md).
			"--egress-allow-cidr=127.0.0.1/32",
			// testenv installs config/admission unprefixed.
			"--priority-class-policy=priority-class"}, extra...),
		log:  log,
		done: make(chan struct{}),
	}
	m.cmd = exec.Command(bin, m.Args...)
	m.cmd.Stdout, m.cmd.Stderr = log, log
	// If the test binary dies without stopping it (a -timeout panic), the
	// kernel kills the manager rather than leaving it running.
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// KUBECONFIG from the environment must not win over the flag.
	m.cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
	if err := m.cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting the manager: %w", err)
	}
	go func() {
		m.err = m.cmd.Wait()
		log.Close()
		close(m.done)
	}()
	if err := m.waitReady(ctx, 2*time.Minute); err != nil {
		_ = m.Kill()
		return nil, err
	}
	return m, nil
}

// Pid is the manager process's id.
func (m *Manager) Pid() int { return m.cmd.Process.Pid }

func (m *Manager) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-m.done:
			return fmt.Errorf("the manager exited before it was ready (%v); its log:\n%s", m.err, m.LogTail(4096))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if m.logHas("Starting workers", `"agentrun"`) {
			if _, err := m.Scrape(ctx); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the manager was not ready within %v; its log:\n%s", timeout, m.LogTail(4096))
		}
	}
}

// logHas reports whether one line of the log contains all of parts.
func (m *Manager) logHas(parts ...string) bool {
	f, err := os.Open(m.LogPath)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
lines:
	for sc.Scan() {
		for _, p := range parts {
			if !strings.Contains(sc.Text(), p) {
				continue lines
			}
		}
		return true
	}
	return false
}

// LogLines is the last n lines of the manager's log that contain part.
func (m *Manager) LogLines(part string, n int) []string {
	f, err := os.Open(m.LogPath)
	if err != nil {
		return []string{err.Error()}
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), part) {
			lines = append(lines, sc.Text())
			if len(lines) > n {
				lines = lines[1:]
			}
		}
	}
	return lines
}

// LogTail is the last n bytes of the manager's log.
func (m *Manager) LogTail(n int64) string {
	f, err := os.Open(m.LogPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// Stop sends SIGTERM and waits for the process to exit (a graceful
// shutdown), killing it after grace. It is idempotent with Kill: only the
// first of them acts.
func (m *Manager) Stop(grace time.Duration) error {
	var err error
	m.stop.Do(func() {
		if e := m.cmd.Process.Signal(syscall.SIGTERM); e != nil && !errors.Is(e, os.ErrProcessDone) {
			err = e
			return
		}
		select {
		case <-m.done:
		case <-time.After(grace):
			_ = m.cmd.Process.Kill()
			<-m.done
			err = fmt.Errorf("the manager did not stop within %v of SIGTERM and was killed", grace)
		}
	})
	return err
}

// Kill sends SIGKILL (a crash) and waits for the process to be gone.
func (m *Manager) Kill() error {
	var err error
	m.stop.Do(func() {
		if e := m.cmd.Process.Kill(); e != nil && !errors.Is(e, os.ErrProcessDone) {
			err = e
		}
		<-m.done
	})
	return err
}

// Exited reports whether the process has ended, and how.
func (m *Manager) Exited() (bool, error) {
	select {
	case <-m.done:
		return true, m.err
	default:
		return false, nil
	}
}

// Memory is a process's resident memory from /proc/<pid>/status.
type Memory struct {
	// RSS is VmRSS: resident now.
	RSS int64
	// HWM is VmHWM: the peak resident size so far.
	HWM int64
}

// MiB is n bytes in MiB.
func MiB(n int64) float64 { return float64(n) / (1 << 20) }

// Memory reads the manager's VmRSS and VmHWM.
func (m *Manager) Memory() (Memory, error) { return ProcMemory(m.Pid()) }

// ProcMemory reads VmRSS and VmHWM of a process from /proc/<pid>/status.
func ProcMemory(pid int) (Memory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, err
	}
	var mem Memory
	var seen int
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v) // "123456 kB"
		if len(f) != 2 || f[1] != "kB" {
			return Memory{}, fmt.Errorf("/proc/%d/status: unexpected %s line %q", pid, k, line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return Memory{}, err
		}
		if k == "VmRSS" {
			mem.RSS = kb << 10
		} else {
			mem.HWM = kb << 10
		}
		seen++
	}
	if seen != 2 {
		return Memory{}, fmt.Errorf("/proc/%d/status has no VmRSS and VmHWM", pid)
	}
	return mem, nil
}

// Scrape reads the manager's metrics endpoint.
func (m *Manager) Scrape(ctx context.Context) (Scrape, error) {
	return ScrapeURL(ctx, m.MetricsURL)
}

// ScrapeURL reads and parses a Prometheus text endpoint.
func ScrapeURL(ctx context.Context, url string) (Scrape, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return ParseMetrics(body)
}

// ReconcileTime is the manager's controller_runtime_reconcile_time_seconds
// histogram for the AgentRun controller.
func ReconcileTime(sc Scrape) Histogram {
	h, _ := sc.Histogram("controller_runtime_reconcile_time_seconds", map[string]string{"controller": "agentrun"})
	return h
}

// QueueWait is the AgentRun work queue's queue-time histogram: how long
// a run waited in line for a reconcile worker.
func QueueWait(sc Scrape) Histogram {
	h, _ := sc.Histogram("workqueue_queue_duration_seconds", map[string]string{"name": "agentrun"})
	return h
}

// WakeWait is the manager's agentrun_wake_wait_seconds histogram: how
// long a run it woke (its step ended, a timer fired) waited for its
// reconcile to start.
func WakeWait(sc Scrape) Histogram {
	h, _ := sc.Histogram("agentrun_wake_wait_seconds", nil)
	return h
}

// WaitIdle waits until the manager's AgentRun work queue has been empty and
// no worker busy in two scrapes in a row, 200ms apart: a new manager has
// reconciled what it found at start (finished runs of earlier batches) and
// is quiet.
func (m *Manager) WaitIdle(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	quiet := 0
	for quiet < 2 {
		sc, err := m.Scrape(ctx)
		if err != nil {
			return err
		}
		// The depth gauge appears with the queue's first item: none yet is
		// an empty queue.
		depth, _ := sc.Value("workqueue_depth", map[string]string{"controller": "agentrun"})
		active, _ := sc.Value("controller_runtime_active_workers", map[string]string{"controller": "agentrun"})
		if depth == 0 && active == 0 {
			quiet++
		} else {
			quiet = 0
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the manager's work queue did not drain within %v (depth %v, %v workers busy)", timeout, depth, active)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

// FreePort is a TCP port on 127.0.0.1 free at the time of the call.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// PprofURL is the root of the manager's /debug/pprof, from its
// --pprof-bind-address flag ("" when it serves none).
func (m *Manager) PprofURL() string {
	for _, a := range m.Args {
		if addr, ok := strings.CutPrefix(a, "--pprof-bind-address="); ok && addr != "" {
			return "http://" + addr + "/debug/pprof"
		}
	}
	return ""
}

// profile writes a CPU profile of the manager over d (default 10s),
// starting after, to path, and its goroutines at the span's middle to
// path + ".goroutines.txt", and an execution trace of the span to
// path + ".trace". Failures are only logged: profiles are
// diagnostics, not results.
func (m *Manager) profile(ctx context.Context, path string, after, d time.Duration) {
	root := m.PprofURL()
	if root == "" {
		fmt.Fprintln(os.Stderr, "profiling the manager: it serves no pprof (pass --pprof-bind-address in LOADTEST_MANAGER_FLAGS)")
		return
	}
	if d <= 0 {
		d = 10 * time.Second
	}
	time.Sleep(after)
	go func() {
		time.Sleep(d / 2)
		if err := fetchTo(ctx, root+"/goroutine?debug=1", path+".goroutines.txt", time.Minute); err != nil {
			fmt.Fprintf(os.Stderr, "dumping the manager's goroutines: %v\n", err)
		}
	}()
	go func() {
		// Where its goroutines wait (go tool trace -pprof=net|sync|sched).
		if err := fetchTo(ctx, fmt.Sprintf("%s/trace?seconds=%d", root, int(d.Seconds())), path+".trace", d+time.Minute); err != nil {
			fmt.Fprintf(os.Stderr, "tracing the manager: %v\n", err)
		}
	}()
	if err := fetchTo(ctx, fmt.Sprintf("%s/profile?seconds=%d", root, int(d.Seconds())), path, d+time.Minute); err != nil {
		fmt.Fprintf(os.Stderr, "profiling the manager: %v\n", err)
	}
}

// fetchTo GETs url into the file path.
func fetchTo(ctx context.Context, url, path string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return os.WriteFile(path, body, 0o644)
}
