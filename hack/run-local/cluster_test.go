package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/priority"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// TestMakeRunAgainstAReachableCluster: with KUBECONFIG pointing at a running
// API server (here a real kube-apiserver standing in for a cluster), `make
// run` installs the CRD, the admission policies and the priority classes
// ConfigMap there and runs the manager against it, leaves the demo out,
// drives a run to completion with its journal in ConfigMaps (no database
// unless --store names one), and on Ctrl-C stops only itself: the cluster
// stays up.
func TestMakeRunAgainstAReachableCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own control plane")
	}
	cluster, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	dir := t.TempDir()
	kubeconfig, err := cluster.Kubeconfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	// A cluster has no priority classes ConfigMap until something installs
	// it; the test control plane ships one, so take it away first.
	if out, err := exec.Command(testenv.KubectlPath(), "--kubeconfig", kubeconfig, "-n", testenv.SystemNamespace,
		"delete", "configmap", priority.DefaultConfigMapName).CombinedOutput(); err != nil {
		t.Fatalf("deleting the shipped priority classes ConfigMap: %v\n%s", err, out)
	}
	buildInto(t, dir, [2]string{"run-local", "./hack/run-local"})
	runLocal := startRunLocal(t, filepath.Join(dir, "run-local"), append(os.Environ(), "KUBECONFIG="+kubeconfig),
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--local-kubeconfig", filepath.Join(dir, "unused", "kubeconfig"),
		"--verbose") // the manager's log says when its workers start
	kubectl := func(stdin string, args ...string) (string, error) {
		cmd := exec.Command(testenv.KubectlPath(), append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(runLocal.Logs(), "Starting workers") {
		if time.Now().After(deadline) {
			t.Fatalf("the manager did not start against the cluster:\n%s", runLocal.Logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(runLocal.Logs(), ">> Using the cluster at ") {
		t.Errorf("run-local did not say it uses the cluster:\n%s", runLocal.Logs())
	}
	if _, err := os.Stat(filepath.Join(dir, "unused", "kubeconfig")); err == nil {
		t.Error("a local control plane's kubeconfig was written though a cluster was reachable")
	}
	if out, err := kubectl("", "get", "ns", "agentrun-demo"); err == nil {
		t.Errorf("the demo was applied to the cluster without --demo:\n%s", out)
	}
	if out, err := kubectl("", "get", "validatingadmissionpolicy", "answer-identity"); err != nil {
		t.Errorf("the answer admission policy is not installed: %v\n%s\nrun-local said:\n%s", err, out, runLocal.Logs())
	}
	if out, err := kubectl("", "-n", testenv.SystemNamespace, "get", "configmap", priority.DefaultConfigMapName); err != nil {
		t.Errorf("the priority classes ConfigMap is not installed: %v\n%s\nrun-local said:\n%s", err, out, runLocal.Logs())
	}
	manifest := `apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: agentrun-providers, namespace: team-a}
data:
  providers.toml: |
    [providers.demo]
    type = "scripted"
    models = ["scripted-1"]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: hello, namespace: team-a}
data:
  agent.toml: |
    [agent]
    name = "hello"
    [stages.only]
    [stages.only.model]
    models = [{provider = "demo", model = "scripted-1"}]
---
apiVersion: agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: hello, namespace: team-a}
spec: {agent: hello, task: Say hello.}
`
	if out, err := kubectl(manifest, "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		out, _ := kubectl("", "get", "ar", "hello", "-n", "team-a", "-o", "jsonpath={.status.phase}")
		if out == "Complete" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run did not complete (phase %q):\n%s", out, runLocal.Logs())
		}
		time.Sleep(250 * time.Millisecond)
	}
	// Against a cluster the journal stays in the default store, ConfigMaps.
	if out, _ := kubectl("", "get", "ar", "hello", "-n", "team-a", "-o", "jsonpath={.status.journalStore}"); out != "ConfigMaps" {
		t.Errorf("status.journalStore %q against a cluster, want ConfigMaps", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "unused", "agentrun.db")); err == nil {
		t.Error("a SQLite store was made beside the unused local kubeconfig though a cluster was reachable")
	}
	runLocal.interrupt(t)
	if out, err := kubectl("", "get", "ar", "hello", "-n", "team-a"); err != nil {
		t.Errorf("the cluster went away with run-local: %v\n%s", err, out)
	}
}
