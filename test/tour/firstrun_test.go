package tour_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// checkMakeRunBuildsNoGenerators: on a fresh clone with the control plane
// already built, `make run` builds what running needs (the manager, the
// plugin, hack/run-local) and not controller-gen or crd-ref-docs, which
// only regenerate committed files and would add minutes to a first run.
// It runs make run's whole recipe, its last step with RUN_ARGS=-h (the run
// command prints its flags and exits instead of starting the operator).
// TestREADMETour runs it on its copy before the tour, whose own make run
// then finds the operator's packages compiled.
func checkMakeRunBuildsNoGenerators(t *testing.T, clone string, env []string) {
	t.Helper()
	cmd := exec.Command("make", "run", "RUN_ARGS=-h")
	cmd.Dir = clone
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "-local-kubeconfig") {
		t.Fatalf("make run RUN_ARGS=-h: %v\n%s", err, out)
	}
	entries, err := os.ReadDir(filepath.Join(clone, "bin"))
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for _, e := range entries {
		have = append(have, e.Name())
		if strings.HasPrefix(e.Name(), "controller-gen") || strings.HasPrefix(e.Name(), "crd-ref-docs") {
			t.Errorf("make run built bin/%s", e.Name())
		}
	}
	for _, want := range []string{"manager", "kubectl-agentrun", "run-local"} {
		if _, err := os.Stat(filepath.Join(clone, "bin", want)); err != nil {
			t.Errorf("make run did not build bin/%s (bin/ holds %v)", want, have)
		}
	}
	if strings.Contains(string(out), "controller-gen") || strings.Contains(string(out), "crd-ref-docs") {
		t.Errorf("make run speaks of a generator:\n%s", out)
	}
}
