// Package testenv starts the real kube-apiserver and etcd that hack/ builds
// into bin/k8s/<version>, with the AgentRun CRDs installed, and
// kube-controller-manager's garbage collector and namespace controller, so
// owner references and namespace deletion work as in a cluster. Every suite
// that needs an API server uses it, so none downloads anything or finds
// binaries on its own.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/manifests"
)

// SystemNamespace is the manager's namespace in an install
// (config/default), where the priority classes ConfigMap lives.
const SystemNamespace = arv1.DefaultSystemNamespace

// KubeVersion is the pinned control-plane version built by hack/build-controlplane.sh.
const KubeVersion = "v1.37.2"

// RepoRoot is the repository's top directory, found from this file's path.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// BinDir is where kube-apiserver, etcd, kubectl and kube-controller-manager
// are built.
func BinDir() string {
	return filepath.Join(RepoRoot(), "bin", "k8s", KubeVersion)
}

// KubectlPath is the kubectl built alongside the API server.
func KubectlPath() string { return filepath.Join(BinDir(), "kubectl") }

// EnsureBinaries builds the control plane if it is missing (a no-op when
// cached), so `go test ./...` works even without `make test`. Parallel
// tests of one binary share a single build.
func EnsureBinaries() error { return ensureBinaries() }

var ensureBinaries = sync.OnceValue(func() error {
	for _, b := range []string{"kube-apiserver", "etcd", "kubectl", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(BinDir(), b)); err != nil {
			cmd := exec.Command("bash", filepath.Join(RepoRoot(), "hack", "build-controlplane.sh"))
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("building the control plane with hack/build-controlplane.sh: %w", err)
			}
			return nil
		}
	}
	return nil
})

// Env is a running control plane.
type Env struct {
	*envtest.Environment
	Config *rest.Config

	// managerToken is the bearer token ManagerKubeconfig authenticates
	// with; tokenDir holds the API server's token file.
	managerToken, tokenDir string
	// controllerManager runs the garbage collector and namespace
	// controller; it authenticates with controllerManagerToken.
	controllerManager      *controllerManager
	controllerManagerToken string
}

// Start launches etcd and kube-apiserver with the repository's CRDs
// installed, then kube-controller-manager.
func Start() (*Env, error) { return StartWith(Options{}) }

// Options are what some suites add to the control plane.
type Options struct {
	// WebhookPaths are directories or files of webhook configurations
	// (config/webhook) to install, pointed at a local serving host, port
	// and certificate envtest picks: a suite serves its handlers there
	// (Env.WebhookInstallOptions) for the API server to call.
	WebhookPaths []string
	// Aggregation turns on the API server's aggregation layer (a
	// front-proxy CA and client certificate, the request-header flags), so
	// a suite can register an APIService for an aggregated API server it
	// runs (the history API) and reach it through the API server.
	Aggregation bool
}

// StartWith launches the control plane as Start does, with o.
func StartWith(o Options) (*Env, error) {
	if err := EnsureBinaries(); err != nil {
		return nil, err
	}
	e := &envtest.Environment{
		BinaryAssetsDirectory: BinDir(),
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		WebhookInstallOptions: envtest.WebhookInstallOptions{Paths: o.WebhookPaths},
	}
	tokens, tokenDir, err := writeTokenFile()
	if err != nil {
		return nil, err
	}
	e.ControlPlane.GetAPIServer().Configure().Set("token-auth-file", filepath.Join(tokenDir, tokenFile))
	if o.Aggregation {
		if err := enableAggregation(e, tokenDir); err != nil {
			_ = os.RemoveAll(tokenDir)
			return nil, err
		}
	}
	if os.Getenv("AGENTRUN_TESTENV_PROFILING") != "" {
		// Serve the API server's /debug/pprof, to profile what a benchmark
		// costs it.
		e.ControlPlane.GetAPIServer().Configure().Set("profiling", "true")
	}
	cfg, err := e.Start()
	if err != nil {
		_ = os.RemoveAll(tokenDir)
		return nil, fmt.Errorf("starting the test control plane from %s: %w", BinDir(), err)
	}
	env := &Env{Environment: e, Config: cfg, managerToken: tokens[managerUser], tokenDir: tokenDir, controllerManagerToken: tokens[controllerManagerUser]}
	// Started once the CRDs are installed: the garbage collector discovers
	// the resources it watches at its start (and again every 30 s).
	if env.controllerManager, err = startControllerManager(cfg, env.controllerManagerToken, tokenDir); err != nil {
		_ = env.Stop()
		return nil, err
	}
	if err := env.ApplyDir(filepath.Join(RepoRoot(), "config", "admission")); err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("installing the admission policies: %w", err)
	}
	if err := manifests.CreatePriorityClasses(context.Background(), cfg); err != nil {
		_ = env.Stop()
		return nil, err
	}
	return env, nil
}

// tokenFile is the API server's static token file (--token-auth-file) in
// Env.tokenDir.
const tokenFile = "tokens.csv"

// The users of the token file: the manager, and kube-controller-manager.
const (
	managerUser           = "agentrun-manager"
	controllerManagerUser = "kube-controller-manager"
)

// writeTokenFile writes a token file naming the manager's and
// kube-controller-manager's users (in system:masters, as the admin user
// is), each with a random token, and returns the tokens by user and the
// file's directory.
func writeTokenFile() (tokens map[string]string, dir string, err error) {
	if dir, err = os.MkdirTemp("", "agentrun-testenv-"); err != nil {
		return nil, "", err
	}
	tokens = map[string]string{}
	var lines strings.Builder
	for _, user := range []string{managerUser, controllerManagerUser} {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			_ = os.RemoveAll(dir)
			return nil, "", err
		}
		tokens[user] = hex.EncodeToString(b)
		fmt.Fprintf(&lines, "%s,%s,%s,\"system:masters\"\n", tokens[user], user, user)
	}
	if err := os.WriteFile(filepath.Join(dir, tokenFile), []byte(lines.String()), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, "", err
	}
	return tokens, dir, nil
}

// Stop stops the control plane, kube-controller-manager first, and removes
// its token file.
func (e *Env) Stop() error {
	e.controllerManager.stop()
	err := e.Environment.Stop()
	_ = os.RemoveAll(e.tokenDir)
	return err
}

// PauseControllerManager stops kube-controller-manager until resume starts
// it again, so a test sees what happens while a cluster's garbage collector
// is behind: what the operator does not delete itself stays.
func (e *Env) PauseControllerManager() (resume func() error) {
	e.controllerManager.stop()
	e.controllerManager = nil
	return func() error {
		if e.controllerManager != nil {
			return nil
		}
		c, err := startControllerManager(e.Config, e.controllerManagerToken, e.tokenDir)
		e.controllerManager = c
		return err
	}
}

// ManagerKubeconfig writes a kubeconfig for the running API server into
// dir that authenticates by bearer token, as a manager running in a pod
// does with its ServiceAccount's token, and returns its path. Kubeconfig's
// client certificate is what a person's kubectl may use; a manager
// measured with it would pay what in a cluster it does not: the API server
// verifies a client certificate's chain on every request (about 5% of its
// CPU under the load benchmarks) and a token once per 10 s (its token
// cache).
func (e *Env) ManagerKubeconfig(dir string) (string, error) {
	path := filepath.Join(dir, "kubeconfig-manager")
	return path, writeTokenKubeconfig(path, e.Config, managerUser, e.managerToken)
}

// Kubeconfig writes a kubeconfig for the running API server into dir and
// returns its path, for running the real kubectl against it.
func (e *Env) Kubeconfig(dir string) (string, error) {
	user, err := e.AddUser(envtest.User{Name: "test-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	data, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, os.WriteFile(path, data, 0o600)
}

// Kubectl runs the real kubectl with the given kubeconfig and returns its
// combined output.
func Kubectl(kubeconfig string, args ...string) (string, error) {
	cmd := exec.Command(KubectlPath(), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// ApplyDir creates every object in the YAML files of dir, as the operator's
// install does.
func (e *Env) ApplyDir(dir string) error {
	return manifests.CreateDir(context.Background(), e.Config, dir)
}
