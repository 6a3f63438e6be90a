//go:build linux

package tour_test

import (
	"encoding/json"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
	"github.com/agentrun-dev/agentrun-operator/test/tour"
)

// expect is what the output of a README tour command must contain, by the
// command line as written. Every entry must name a command of the tour, so
// an edited README cannot leave an expectation silently unchecked.
var expect = map[string][]string{
	// Typed as soon as make run prints its hints, before the manager has
	// moved the runs: the list has them all, in whatever phase.
	"kubectl get agentruns -A": {"agentrun-demo", "review-pr", "summarise-notes", "deploy-release", "triage-backlog", "watch-canary"},
	"kubectl wait --for=condition=Ready agentrun/review-pr -n agentrun-demo --timeout=60s":          {"condition met"},
	"kubectl get agentrun review-pr -n agentrun-demo -o jsonpath='{.status.journalStore}'":          {"Database"},
	"kubectl agentrun status review-pr -n agentrun-demo -o json":                                    {`"state": "completed"`},
	"kubectl describe agentrun summarise-notes -n agentrun-demo":                                    {"SecretMissing", "demo-model-key"},
	"kubectl create secret generic demo-model-key -n agentrun-demo --from-literal=api-key=anything": {"secret/demo-model-key created"},
	"kubectl wait --for=condition=Ready agentrun/summarise-notes -n agentrun-demo --timeout=30s":    {"condition met"},
	"kubectl agentrun describe deploy-release -n agentrun-demo":                                     {"Deploy to production?", "kubectl agentrun approve deploy-release"},
	"kubectl agentrun approve deploy-release -n agentrun-demo":                                      {"created"},
	"kubectl agentrun answer deploy-release production -n agentrun-demo":                            {"created"},
	"kubectl wait --for=condition=Ready agentrun/deploy-release -n agentrun-demo --timeout=30s":     {"condition met"},
	"kubectl wait --for=condition=Ready agentrun/triage-backlog -n agentrun-demo --timeout=60s":     {"condition met"},
	"kubectl get ar -n agentrun-demo -l agentrun.dev/parent=triage-backlog -o wide":                 {"TITLE", "MODEL", "PARENT", "triage-backlog-w0", "triage-backlog-w5"},
	"kubectl agentrun ps -A":                    {"triage-backlog", "watch-canary", "no run needs an answer"},
	"kubectl get agentrun-all -n agentrun-demo": {"agentrun.agentrun.dev/review-pr", "agentrunanswer.agentrun.dev/deploy-release-"},
	"kubectl patch agentrun watch-canary -n agentrun-demo --type=merge -p '{\"spec\":{\"paused\":true}}'":          {"patched"},
	"kubectl patch agentrun watch-canary -n agentrun-demo --type=merge -p '{\"spec\":{\"cancel\":true}}'":          {"patched"},
	"kubectl wait --for=jsonpath='{.status.phase}'=Cancelled agentrun/watch-canary -n agentrun-demo --timeout=30s": {"condition met"},
	"make plugin-archive": {"agentrun.yaml (its sha256 filled in)"},
	"kubectl krew install --manifest=bin/krew/agentrun.yaml --archive=bin/krew/kubectl-agentrun_$(go env GOOS)_$(go env GOARCH).tar.gz": {"Installed plugin: agentrun"},
}

// TestREADMETour runs the README's tour as a new user would, line by line,
// in a copy of the repository (the files a clone has): `make run` in a
// first terminal (a pty of its own), and every other marked block in a
// second terminal, a bash session whose PATH has no kubectl until the
// README's export line puts bin/ and bin/k8s/v1.37.2 on it. Each command
// must succeed and print what the tour promises; `make run` must print no
// make command before its hints, and a Ctrl-C typed in its terminal must
// end it with status 0. Before the tour, `make run RUN_ARGS=-h` runs make
// run's recipe to its end and must build neither controller-gen nor
// crd-ref-docs (checkMakeRunBuildsNoGenerators).
//
// What differs from a fresh clone on a new machine, and why:
//   - bin/ starts with the control plane (bin/k8s), linked from this
//     repository's bin/: building it takes 5 to 15 minutes, which the
//     README states and hack/build-controlplane.sh does unchanged (`make
//     run` still checks its stamp). controller-gen and crd-ref-docs are not
//     there, as on a fresh clone: `make run` does not need them
//     (TestMakeRunBuildsNoGenerators).
//   - `make run` gets RUN_ARGS (in the environment, the command stays as
//     written) turning its metrics and probe ports off: 8080 and 8081 may be
//     taken on a machine running other tests.
//   - The krew block runs with krew installed (built from hack/krew, the
//     version the project pins) and KREW_ROOT in a temporary directory.
//   - Blocks marked `not run` are not run; each marker says why.
func TestREADMETour(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the operator and runs make run in a copy of the repository")
	}
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := tour.Blocks(string(data), "## How a run is described")
	if err != nil {
		t.Fatal(err)
	}
	commands := map[string]bool{}
	for _, b := range blocks {
		for _, c := range b.Commands {
			commands[c] = true
		}
	}
	for c := range expect {
		if !commands[c] {
			t.Errorf("expected output for %q, which is no command of the README's tour", c)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	tmp := t.TempDir()
	clone := copyRepo(t, filepath.Join(tmp, "agentrun-operator"))
	env, krewRoot := userEnv(t, tmp)
	t.Run("MakeRunBuildsNoGenerators", func(t *testing.T) { checkMakeRunBuildsNoGenerators(t, clone, env) })

	var term1 *terminal
	var sh *shell
	for _, b := range blocks {
		switch {
		case b.Skipped():
			t.Logf("README.md:%d: not run: %s", b.Line, b.Kind)
		case b.Kind == "terminal 1":
			if len(b.Commands) != 1 || term1 != nil {
				t.Fatalf("README.md:%d: the first terminal runs one command, once: %q", b.Line, b.Commands)
			}
			term1 = startTerminal(t, clone, append(env, "RUN_ARGS=--metrics-bind-address=0 --health-probe-bind-address=0"), b.Commands[0])
			// The person reads the first terminal before typing in the second.
			term1.waitFor(t, ">> In another terminal", 20*time.Minute)
			checkQuietStart(t, term1.Output())
			sh = startShell(t, clone, env)
		case b.Kind == "" || b.Kind == "krew":
			if sh == nil {
				t.Fatalf("README.md:%d: a second-terminal block before make run", b.Line)
			}
			if b.Kind == "krew" {
				krewEnv(t, sh, krewRoot)
			}
			for _, c := range b.Commands {
				out, status := sh.run(t, c, 10*time.Minute)
				t.Logf("$ %s\n%s", c, out)
				if status != 0 {
					t.Fatalf("README.md:%d: %q exited %d:\n%s\nthe first terminal:\n%s", b.Line, c, status, out, term1.Output())
				}
				for _, want := range expect[c] {
					if !strings.Contains(out, want) {
						t.Errorf("README.md:%d: %q printed no %q", b.Line, c, want)
					}
				}
			}
		default:
			t.Fatalf("README.md:%d: unknown tour marker %q", b.Line, b.Kind)
		}
	}
	if term1 == nil {
		t.Fatal("the README's tour has no make run")
	}

	// The local kubeconfig's namespace is the demo's: a bare get lists it.
	if out, status := sh.run(t, "kubectl get ar", time.Minute); status != 0 || !strings.Contains(out, "review-pr") {
		t.Errorf("kubectl get ar without -n: exit %d:\n%s", status, out)
	}
	// The krew-installed plugin is the one built here.
	if out, status := sh.run(t, `"$KREW_ROOT/bin/kubectl-agentrun" --help`, time.Minute); status != 0 || !strings.Contains(out, "Answer what a run waits on:") {
		t.Errorf("the plugin as krew installed it: exit %d:\n%s", status, out)
	}

	// Ctrl-C in the first terminal: everything stops and make exits 0.
	server := kubeServer(t, filepath.Join(clone, "bin", "local", "kubeconfig"))
	term1.ctrlC(t)
	select {
	case <-term1.exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("make run did not end on Ctrl-C:\n%s", term1.Output())
	}
	out := term1.Output()
	t.Logf("the first terminal:\n%s", out)
	if term1.err != nil {
		t.Errorf("make run ended with %v on Ctrl-C, want exit status 0:\n%s", term1.err, out)
	}
	if strings.Contains(out, "make: ***") || strings.Contains(out, "Error 1") {
		t.Errorf("make run reported an error on Ctrl-C:\n%s", out)
	}
	if !strings.Contains(out, ">> Stopping the local control plane.") {
		t.Errorf("make run did not stop the control plane:\n%s", out)
	}
	if c, err := net.DialTimeout("tcp", server, 2*time.Second); err == nil {
		_ = c.Close()
		t.Errorf("the API server at %s still listens after Ctrl-C", server)
	}
}

// checkQuietStart: before the hints, `make run` prints only its own ">>"
// lines (what it builds once, that it starts a control plane), no make
// command echo, no make[N] directory lines.
func checkQuietStart(t *testing.T, out string) {
	t.Helper()
	before, _, _ := strings.Cut(out, ">> In another terminal")
	for _, line := range strings.Split(before, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, ">>") {
			t.Errorf("make run printed %q before its hints:\n%s", line, before)
		}
	}
}

// copyRepo copies the files a clone of the repository has (tracked files,
// and new files not ignored, as in the working tree) into dst, except bin/,
// and gives dst a bin/ of its own holding only the control plane of this
// repository's bin/ (see TestREADMETour).
func copyRepo(t *testing.T, dst string) string {
	t.Helper()
	root := testenv.RepoRoot()
	ls := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	ls.Dir = root
	list, err := ls.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	n := 0
	for _, rel := range strings.Split(strings.TrimRight(string(list), "\x00"), "\x00") {
		if rel == "bin" || strings.HasPrefix(rel, "bin/") {
			continue
		}
		src := filepath.Join(root, rel)
		info, err := os.Lstat(src)
		if err != nil || !info.Mode().IsRegular() {
			continue // deleted in the working tree, or a link
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		to := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n < 100 {
		t.Fatalf("copied only %d files", n)
	}
	bin := filepath.Join(dst, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := filepath.EvalSymlinks(filepath.Join(root, "bin"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(src, "k8s")); err != nil {
		t.Fatalf("%s lacks the control plane (make test builds it): %v", src, err)
	}
	if err := os.Symlink(filepath.Join(src, "k8s"), filepath.Join(bin, "k8s")); err != nil {
		t.Fatal(err)
	}
	return dst
}

// userEnv is the environment of a new user's terminal: a HOME of its own
// (no kubeconfig), no KUBECONFIG, no make variables of an enclosing make,
// Go's caches and settings as they are, and a PATH with every command this
// machine has except kubectl and kubectl plugins. It returns the KREW_ROOT
// the krew block uses.
func userEnv(t *testing.T, tmp string) ([]string, string) {
	t.Helper()
	goenv, err := exec.Command("go", "env", "-json", "GOCACHE", "GOMODCACHE", "GOPATH", "GOENV", "GOPROXY",
		"GONOSUMDB", "GOPRIVATE", "GOFLAGS", "GOTOOLCHAIN", "GOSUMDB").Output()
	if err != nil {
		t.Fatal(err)
	}
	var gov map[string]string
	if err := json.Unmarshal(goenv, &gov); err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`^(HOME|PATH|KUBECONFIG|KREW_ROOT|MAKEFLAGS|MFLAGS|MAKELEVEL|MAKEOVERRIDES|MAKE_TERMOUT|MAKE_TERMERR|RUN_ARGS|GO[A-Z0-9]*)=`)
	var env []string
	for _, kv := range os.Environ() {
		if !drop.MatchString(kv) {
			env = append(env, kv)
		}
	}
	for k, v := range gov {
		if v != "" {
			env = append(env, k+"="+v)
		}
	}
	home := filepath.Join(tmp, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	env = append(env, "HOME="+home, "PATH="+pathWithoutKubectl(t, filepath.Join(tmp, "sysbin")))
	return env, filepath.Join(tmp, "krew")
}

// pathWithoutKubectl is this process's PATH with each directory that holds
// a kubectl or kubectl plugin replaced by links to its other commands,
// collected in sysbin.
func pathWithoutKubectl(t *testing.T, sysbin string) string {
	t.Helper()
	if err := os.MkdirAll(sysbin, 0o755); err != nil {
		t.Fatal(err)
	}
	var dirs []string
	usedSysbin := false
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		hasKubectl := false
		for _, e := range entries {
			if isKubectl(e) {
				hasKubectl = true
			}
		}
		if !hasKubectl {
			dirs = append(dirs, dir)
			continue
		}
		for _, e := range entries {
			if isKubectl(e) || e.IsDir() {
				continue
			}
			link := filepath.Join(sysbin, e.Name())
			if _, err := os.Lstat(link); err == nil {
				continue // an earlier directory's command comes first
			}
			if err := os.Symlink(filepath.Join(dir, e.Name()), link); err != nil {
				t.Fatal(err)
			}
		}
		if !usedSysbin {
			dirs, usedSysbin = append(dirs, sysbin), true
		}
	}
	path := strings.Join(dirs, string(os.PathListSeparator))
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "kubectl")); err == nil {
			t.Fatalf("kubectl still on the new user's PATH in %s", d)
		}
	}
	return path
}

func isKubectl(e fs.DirEntry) bool {
	return e.Name() == "kubectl" || strings.HasPrefix(e.Name(), "kubectl-") || strings.HasPrefix(e.Name(), "kubectl_")
}

// krewEnv gives the session krew, as a user who installed it has: the
// kubectl-krew that hack/krew pins, on PATH, with its KREW_ROOT.
func krewEnv(t *testing.T, sh *shell, root string) {
	t.Helper()
	bin := filepath.Join(root, "krew-bin")
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "kubectl-krew"), "sigs.k8s.io/krew/cmd/krew")
	build.Dir = filepath.Join(testenv.RepoRoot(), "hack", "krew")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building krew: %v\n%s", err, out)
	}
	if out, status := sh.run(t, "export KREW_ROOT="+root+" PATH="+bin+":$PATH", time.Minute); status != 0 {
		t.Fatalf("setting up krew: %s", out)
	}
}

// kubeServer is the host:port of the API server in kubeconfig.
func kubeServer(t *testing.T, kubeconfig string) string {
	t.Helper()
	b, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`server: https://([^/\s]+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no server in %s", kubeconfig)
	}
	return string(m[1])
}
