// Command run-local is what `make run` runs. With a reachable cluster in
// KUBECONFIG it installs the CRD there and runs the manager against it. With
// none, it starts a local control plane (etcd + kube-apiserver on loopback,
// built by hack/ into bin/k8s), writes a kubeconfig to bin/local/kubeconfig,
// installs the CRD and runs the manager in the foreground. Ctrl-C stops
// everything it started.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

func main() {
	var (
		o          manager.Options
		kubeconfig string
		local      bool
	)
	flag.StringVar(&o.MetricsAddr, "metrics-bind-address", "127.0.0.1:8080", "Metrics endpoint address (\"0\" turns it off).")
	flag.StringVar(&o.ProbeAddr, "health-probe-bind-address", "127.0.0.1:8081", "Health probe address.")
	flag.StringVar(&kubeconfig, "local-kubeconfig", filepath.Join(testenv.RepoRoot(), "bin", "local", "kubeconfig"), "Where to write the local control plane's kubeconfig.")
	flag.BoolVar(&local, "local", false, "Always start the local control plane, even when KUBECONFIG points at a cluster.")
	zo := zap.Options{Development: true}
	zo.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zo)))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, kubeconfig, local); err != nil {
		fmt.Fprintln(os.Stderr, "run-local:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o manager.Options, kubeconfigOut string, forceLocal bool) error {
	if !forceLocal {
		if cfg, ok := reachableCluster(); ok {
			fmt.Printf(">> Using the cluster at %s (from KUBECONFIG); installing the AgentRun CRD there.\n", cfg.Host)
			if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
				Paths: []string{filepath.Join(testenv.RepoRoot(), "config", "crd", "bases")}, ErrorIfPathMissing: true,
			}); err != nil {
				return fmt.Errorf("installing the CRD: %w", err)
			}
			return manager.Run(ctx, cfg, o)
		}
	}

	fmt.Println(">> No reachable cluster in KUBECONFIG: starting a local control plane (etcd + kube-apiserver " + testenv.KubeVersion + ") on loopback.")
	env, err := testenv.Start()
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println(">> Stopping the local control plane.")
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}()
	if err := os.MkdirAll(filepath.Dir(kubeconfigOut), 0o755); err != nil {
		return err
	}
	path, err := env.Kubeconfig(filepath.Dir(kubeconfigOut))
	if err != nil {
		return fmt.Errorf("writing the kubeconfig: %w", err)
	}
	fmt.Printf(`>> Local control plane ready at %s. The AgentRun CRD is installed.
>> In another terminal:
     export KUBECONFIG=%s
     kubectl apply -f config/samples/
     kubectl get agentruns -A
>> (kubectl is at %s if none is installed.) Ctrl-C stops everything.
`, env.Config.Host, path, testenv.KubectlPath())
	return manager.Run(ctx, env.Config, o)
}

// reachableCluster loads KUBECONFIG (or ~/.kube/config) and reports whether
// its API server answers within a few seconds.
func reachableCluster() (*rest.Config, bool) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, false
	}
	probe := rest.CopyConfig(cfg)
	probe.Timeout = 3 * time.Second
	dc, err := discovery.NewDiscoveryClientForConfig(probe)
	if err != nil {
		return nil, false
	}
	if _, err := dc.ServerVersion(); err != nil {
		return nil, false
	}
	return cfg, true
}
