package main_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// TestMakeRunDemoEndToEnd starts what `make run` starts, as a subprocess (a
// local control plane, the CRDs, the demo, the manager), then drives the
// demo only with the real kubectl and the built plugin, as the README says:
// create the missing Secret, approve the checkpoint, answer the question. Every demo run must end
// where the README promises, its journal in the SQLite file beside the
// local kubeconfig (status.journalStore Database, no journal ConfigMap),
// and Ctrl-C must stop everything.
func TestMakeRunDemoEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own control plane")
	}
	if err := testenv.EnsureBinaries(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	buildInto(t, dir, [2]string{"run-local", "./hack/run-local"}, [2]string{"kubectl-agentrun", "./cmd/kubectl-agentrun"})
	kubeconfig := filepath.Join(dir, "local", "kubeconfig")
	runLocal := startRunLocal(t, filepath.Join(dir, "run-local"), nil, "--local", "--local-kubeconfig", kubeconfig,
		"--metrics-bind-address=0", "--health-probe-bind-address=0")

	kubectl := func(args ...string) (string, error) {
		cmd := exec.Command(testenv.KubectlPath(), args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	phase := func(name string) string {
		out, _ := kubectl("get", "ar", name, "-n", "agentrun-demo", "-o", "jsonpath={.status.phase}/{.status.waitingOn.summary}")
		return out
	}
	wait := func(what string, timeout time.Duration, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for !ok() {
			if time.Now().After(deadline) {
				out, _ := kubectl("get", "ar", "-A")
				t.Fatalf("timed out waiting for %s\n%s\nrun-local said:\n%s", what, out, runLocal.Logs())
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	wait("the local control plane and the demo", 120*time.Second, func() bool {
		_, err := os.Stat(kubeconfig)
		return err == nil && strings.HasPrefix(phase("review-pr"), "Complete")
	})
	if !strings.Contains(runLocal.Logs(), "kubectl create secret generic demo-model-key -n agentrun-demo") {
		t.Errorf("the terminal does not say how to unblock the parked run:\n%s", runLocal.Logs())
	}
	wait("the terminal showing review-pr complete", 10*time.Second, func() bool {
		return strings.Contains(runLocal.Logs(), "agentrun-demo/review-pr: Complete")
	})
	// A first run is quiet: the hints and one short line per phase change,
	// not the manager's development log (that is --verbose).
	for _, line := range strings.Split(runLocal.Logs(), "\n") {
		if strings.Contains(line, "DEBUG") || strings.Contains(line, "INFO") {
			t.Errorf("the terminal shows the manager's log without --verbose: %q", line)
			break
		}
	}
	wait("summarise-notes parked on its Secret", 30*time.Second, func() bool { return phase("summarise-notes") == "WaitingInput/NeedsSetup: SecretMissing" })
	wait("deploy-release at its checkpoint", 30*time.Second, func() bool { return phase("deploy-release") == "WaitingInput/InteractionPoint" })
	wait("the terminal showing the parked run", 10*time.Second, func() bool {
		return strings.Contains(runLocal.Logs(), "agentrun-demo/summarise-notes: WaitingInput at ") &&
			strings.Contains(runLocal.Logs(), "waiting on NeedsSetup: SecretMissing")
	})

	if out, err := kubectl("create", "secret", "generic", "demo-model-key", "-n", "agentrun-demo", "--from-literal=api-key=anything"); err != nil {
		t.Fatal(err, out)
	}
	if out, err := kubectl("agentrun", "approve", "deploy-release", "-n", "agentrun-demo"); err != nil {
		t.Fatal(err, out)
	}
	wait("deploy-release asking where to deploy", 30*time.Second, func() bool { return phase("deploy-release") == "WaitingInput/UserPrompt: question" })
	if !strings.Contains(runLocal.Logs(), "kubectl agentrun answer deploy-release production") {
		t.Errorf("the terminal does not say how to answer the question:\n%s", runLocal.Logs())
	}
	if out, err := kubectl("agentrun", "answer", "deploy-release", "production", "-n", "agentrun-demo"); err != nil {
		t.Fatal(err, out)
	}
	for _, name := range []string{"summarise-notes", "deploy-release", "triage-backlog"} {
		wait(name+" Complete", 90*time.Second, func() bool { return strings.HasPrefix(phase(name), "Complete") })
	}
	// The local control plane's runs keep their journals in SQLite beside
	// its kubeconfig, not in ConfigMaps.
	stores, _ := kubectl("get", "ar", "-n", "agentrun-demo", "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.journalStore}{"\n"}{end}`)
	for _, line := range strings.Fields(stores) {
		if !strings.HasSuffix(line, "=Database") {
			t.Errorf("run %s: want status.journalStore Database on the local control plane", line)
		}
	}
	if len(strings.Fields(stores)) < 5 {
		t.Errorf("journal stores of the demo's runs: %q", stores)
	}
	if out, _ := kubectl("get", "configmaps", "-n", "agentrun-demo", "-l", "agentrun.dev/component=journal", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("journal ConfigMaps on the local control plane:\n%s", out)
	}
	db := filepath.Join(filepath.Dir(kubeconfig), "agentrun.db")
	if info, err := os.Stat(db); err != nil || info.Size() == 0 {
		t.Errorf("no SQLite store beside the local kubeconfig: %v", err)
	}
	if !strings.Contains(runLocal.Logs(), "kept in SQLite, "+db) {
		t.Errorf("the terminal does not say where runs are kept:\n%s", runLocal.Logs())
	}
	ps, err := kubectl("agentrun", "ps", "-A")
	if err != nil || !strings.Contains(ps, "no run needs an answer") {
		t.Errorf("kubectl agentrun ps -A: %v\n%s", err, ps)
	}
	st, err := kubectl("agentrun", "status", "review-pr", "-n", "agentrun-demo", "-o", "json")
	var obj map[string]any
	if err != nil || json.Unmarshal([]byte(st), &obj) != nil || obj["status"].(map[string]any)["state"] != "completed" {
		t.Errorf("status -o json: %v\n%s", err, st)
	}

	// Ctrl-C stops the manager and the control plane it started.
	runLocal.interrupt(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, testenv.KubectlPath(), "--kubeconfig", kubeconfig, "--request-timeout=2s", "get", "ns").CombinedOutput(); err == nil {
		t.Errorf("the API server still answers after Ctrl-C:\n%s", out)
	}
}
