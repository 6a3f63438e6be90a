package controllers_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool/mcptest"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// managerProcess is the real manager binary running against the test API
// server, so it can be killed the way a node kills a pod: SIGKILL, no
// clean shutdown, no deferred writes.
type managerProcess struct {
	cmd *exec.Cmd
}

func buildManager(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "manager")
	build := exec.Command("go", "build", "-o", bin, "./cmd/manager")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the manager: %v\n%s", err, out)
	}
	return bin
}

func startManagerProcess(t *testing.T, bin, kubeconfig string, log *os.File) *managerProcess {
	t.Helper()
	// The MCP server is on loopback, which the egress policy refuses
	// unless allowed explicitly, as a developer would (docs/egress.md).
	cmd := exec.Command(bin, "--metrics-bind-address=0", "--health-probe-bind-address=0", "--egress-allow-cidr=127.0.0.1/32")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &managerProcess{cmd: cmd}
	t.Cleanup(p.kill)
	return p
}

// kill sends SIGKILL and reaps the process.
func (p *managerProcess) kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_, _ = p.cmd.Process.Wait()
	p.cmd.ProcessState = &os.ProcessState{}
}

// TestKillingTheManagerNeverRepeatsAWrite kills the manager process with
// SIGKILL at a random point of a run whose one step is a write tool call,
// 20 times, starting a fresh manager after each kill. The MCP server counts
// the calls each run's write made: none ever reaches it twice, and every
// run ends Complete or parked on NeedsReconciliation naming the write.
func TestKillingTheManagerNeverRepeatsAWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the manager binary 20 times")
	}
	const kills = 20
	srv := mcptest.New(t, mcptest.Options{})
	srv.SetDelay("create_ticket", 300*time.Millisecond)
	dir := t.TempDir()
	kubeconfig, err := env.Kubeconfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "manager.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	bin := buildManager(t)

	ns := newNamespace(t)
	createConfigMap(t, ns, "tooling", map[string]string{"agent.toml": toolAgent(srv.URL(), "", "[tools.create_ticket]\npermission = \"allow\"", `create_ticket {"title":"{task}"}`)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 6))
	inFlightKills, complete, parked := 0, 0, 0
	mgr := startManagerProcess(t, bin, kubeconfig, log)
	for i := range kills {
		name := fmt.Sprintf("w%02d", i)
		run := createRun(t, ns, name, "tooling")
		waitFor(t, ns, name, 30*time.Second, "the manager to pick it up", func(r *arv1.AgentRun) bool { return r.Status.Phase != "" })
		time.Sleep(time.Duration(rng.IntN(700)) * time.Millisecond)
		if srv.InFlight("create_ticket") > 0 {
			inFlightKills++
		}
		mgr.kill()
		mgr = startManagerProcess(t, bin, kubeconfig, log)
		end := waitFor(t, ns, name, 60*time.Second, "Complete or NeedsReconciliation", func(r *arv1.AgentRun) bool {
			return r.Status.Phase == arv1.PhaseComplete || (r.Status.WaitingOn != nil && r.Status.WaitingOn.Reason == arv1.WaitNeedsReconciliation)
		})
		if n := callsOf(srv, string(run.UID)); n > 1 {
			t.Errorf("%s: the write reached the MCP server %d times without a person's decision", name, n)
		}
		switch w := end.Status.WaitingOn; {
		case end.Status.Phase == arv1.PhaseComplete:
			complete++
		case w.Tool != "create_ticket" || w.Seq == nil || end.Status.PendingCall == nil || end.Status.PendingCall.Seq != *w.Seq:
			t.Errorf("%s: NeedsReconciliation %+v does not name the write (pendingCall %+v)", name, w, end.Status.PendingCall)
		default:
			parked++
		}
	}
	// A last look after everything settled: no late re-execution either.
	if err := holdsFor(time.Second, func() error {
		for i := range kills {
			run := getRun(t, ns, fmt.Sprintf("w%02d", i))
			if n := callsOf(srv, string(run.UID)); n > 1 {
				return fmt.Errorf("%s: %d calls in the end", run.Name, n)
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	t.Logf("%d kills: %d while the write was at the server, %d runs complete, %d parked on NeedsReconciliation", kills, inFlightKills, complete, parked)
	if inFlightKills == 0 {
		t.Error("no kill landed while the write was at the server; the test proved nothing about dangling writes")
	}
}

// callsOf counts the create_ticket calls that carried one of the run's
// idempotency keys (they start with its UID).
func callsOf(srv *mcptest.Server, uid string) int {
	n := 0
	for _, k := range srv.Keys("create_ticket") {
		if strings.HasPrefix(k, uid+"-") {
			n++
		}
	}
	return n
}
