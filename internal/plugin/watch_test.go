package plugin

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// streamPlugin starts `kubectl agentrun args...` and sends each line it
// prints as it prints it; stop interrupts it (Ctrl-C) and returns its exit
// code and stderr.
func streamPlugin(t *testing.T, args ...string) (lines <-chan string, stop func() (int, string)) {
	t.Helper()
	cmd := exec.Command(testenv.KubectlPath(), append([]string{"agentrun"}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+pluginDir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+kubeconfig)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	stopped := false
	stop = func() (int, string) {
		if !stopped {
			stopped = true
			_ = cmd.Process.Signal(syscall.SIGINT)
			<-done
			_ = cmd.Wait()
		}
		return cmd.ProcessState.ExitCode(), errOut.String()
	}
	t.Cleanup(func() { stop() })
	return ch, stop
}

// awaitLine reads lines until one satisfies ok, and returns it.
func awaitLine(t *testing.T, lines <-chan string, within time.Duration, what string, ok func(string) bool) string {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case l, open := <-lines:
			if !open {
				t.Fatalf("the plugin ended before printing %s", what)
			}
			if ok(l) {
				return l
			}
		case <-deadline:
			t.Fatalf("no %s within %s", what, within)
		}
	}
}

// openWatches is how many watches of agentruns the API server is serving
// (its apiserver_longrunning_requests gauge), read with the real kubectl.
func openWatches(t *testing.T) int {
	t.Helper()
	out, err := testenv.Kubectl(kubeconfig, "get", "--raw", "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "apiserver_longrunning_requests{") && strings.Contains(l, `resource="agentruns"`) && strings.Contains(l, `verb="WATCH"`) {
			f := strings.Fields(l)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", l, err)
			}
			n += int(v)
		}
	}
	return n
}

// TestKubectlAgentrunPsWatch: ps --watch prints the listing, holds a watch
// open on the API server, and prints a change made after it started at
// once (well under a second, no poll period), a new run too, and the
// footer again when the count of runs needing an answer changes. Ctrl-C
// ends it with exit 0.
func TestKubectlAgentrunPsWatch(t *testing.T) {
	controlPlane(t)
	ns := newNamespace(t)
	createRun(t, ns, "steady", nil, arv1.AgentRunStatus{Phase: arv1.PhaseRunning, Stage: "plan 1/3"})
	before := openWatches(t)

	lines, stop := streamPlugin(t, "ps", "-n", ns, "--watch")
	awaitLine(t, lines, 30*time.Second, "listing footer", func(l string) bool { return l == "no run needs an answer" })
	var open int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if open = openWatches(t); open > before {
			break
		}
	}
	if open != before+1 {
		t.Errorf("the API server serves %d watches of agentruns while ps --watch runs, %d before; want one more", open, before)
	}

	var run arv1.AgentRun
	if err := k8sClient.Get(ctxFor(t), client.ObjectKey{Namespace: ns, Name: "steady"}, &run); err != nil {
		t.Fatal(err)
	}
	run.Status.Phase = arv1.PhaseWaitingInput
	run.Status.WaitingOn = &arv1.WaitingOn{Reason: arv1.WaitToolApproval, NeedsAPerson: true, Summary: "ToolApproval", Point: "call-1"}
	changed := time.Now()
	if err := k8sClient.Status().Update(ctxFor(t), &run); err != nil {
		t.Fatal(err)
	}
	l := awaitLine(t, lines, 10*time.Second, "line for the change", func(l string) bool { return strings.HasPrefix(l, "steady ") })
	took := time.Since(changed)
	if took > time.Second {
		t.Errorf("the change was printed %s after it was made", took)
	}
	t.Logf("the change was printed %s after the status update was sent", took)
	if f := strings.Fields(l); len(f) < 3 || f[1] != "WaitingInput" || f[2] != "ToolApproval" {
		t.Errorf("change line %q", l)
	}
	awaitLine(t, lines, 5*time.Second, "new footer", func(l string) bool { return l == "1 run needs an answer" })

	createRun(t, ns, "newcomer", nil, arv1.AgentRunStatus{Phase: arv1.PhaseRunning})
	awaitLine(t, lines, 10*time.Second, "line for a new run", func(l string) bool { return strings.HasPrefix(l, "newcomer ") })

	if code, stderr := stop(); code != 0 {
		t.Errorf("Ctrl-C: exit %d, %q", code, stderr)
	}
}

// TestKubectlAgentrunPsWatchJSON: with -o json, ps --watch prints each run
// and then each changed run as one JSON object, the way kubectl get -w -o
// json does.
func TestKubectlAgentrunPsWatchJSON(t *testing.T) {
	controlPlane(t)
	ns := newNamespace(t)
	run := createRun(t, ns, "r", nil, arv1.AgentRunStatus{Phase: arv1.PhaseRunning})
	lines, stop := streamPlugin(t, "ps", "-n", ns, "-w", "-o", "json")
	awaitLine(t, lines, 30*time.Second, "the first object's end", func(l string) bool { return l == "}" })
	run.Status.Stage = "write 2/2"
	if err := k8sClient.Status().Update(ctxFor(t), run); err != nil {
		t.Fatal(err)
	}
	var obj []string
	awaitLine(t, lines, 10*time.Second, "the changed object", func(l string) bool { obj = append(obj, l); return l == "}" })
	var got arv1.AgentRun
	if err := json.Unmarshal([]byte(strings.Join(obj, "\n")), &got); err != nil {
		t.Fatalf("%v\n%s", err, strings.Join(obj, "\n"))
	}
	if got.Kind != "AgentRun" || got.Name != "r" || got.Status.Stage != "write 2/2" {
		t.Errorf("printed %s/%s with stage %q", got.Kind, got.Name, got.Status.Stage)
	}
	if code, stderr := stop(); code != 0 {
		t.Errorf("Ctrl-C: exit %d, %q", code, stderr)
	}
}
