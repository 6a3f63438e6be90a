// Command run-local is what `make run` runs. With a reachable cluster in
// KUBECONFIG it installs the CRD there and runs the manager against it. With
// none, it starts a local control plane (etcd, kube-apiserver and
// kube-controller-manager's garbage collector and namespace controller on
// loopback, built by hack/ into bin/k8s), writes a kubeconfig to
// bin/local/kubeconfig, installs the CRD and runs the manager in the
// foreground, keeping runs' journals and finished runs in SQLite beside it
// (bin/local/agentrun.db), so a laptop has the database store with nothing
// installed. Ctrl-C stops everything it started.
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

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/agentrun-dev/agentrun-operator/internal/egress"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/manifests"
	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

func main() {
	var (
		o          manager.Options
		kubeconfig string
		local      bool
		demo       bool
		verbose    bool
	)
	flag.StringVar(&o.MetricsAddr, "metrics-bind-address", "127.0.0.1:8080", "Metrics endpoint address (\"0\" turns it off).")
	flag.StringVar(&o.ProbeAddr, "health-probe-bind-address", "127.0.0.1:8081", "Health probe address.")
	flag.StringVar(&kubeconfig, "local-kubeconfig", filepath.Join(testenv.RepoRoot(), "bin", "local", "kubeconfig"), "Where to write the local control plane's kubeconfig.")
	flag.BoolVar(&local, "local", false, "Always start the local control plane, even when KUBECONFIG points at a cluster.")
	flag.BoolVar(&demo, "demo", false, "Apply the demo (config/demo) to a real cluster too; the local control plane always gets it.")
	flag.StringVar(&o.Store.DSN, "store", os.Getenv("AGENTRUN_STORE"), "Where runs' journals and finished runs are kept, as the manager's --store (postgres://... or sqlite:PATH; default $AGENTRUN_STORE). Unset: on the local control plane, SQLite in agentrun.db beside its kubeconfig; against a cluster, ConfigMaps. --store= keeps them in ConfigMaps on the local control plane too.")
	// Loopback stays refused here as everywhere: a developer whose model or
	// tool server listens on this machine opts in (docs/egress.md).
	egress.BindFlags(flag.CommandLine, &o.Egress)
	flag.BoolVar(&verbose, "verbose", false, "Print the manager's full development log (debug level) instead of only its errors and the runs' progress.")
	zo := zap.Options{Development: true}
	zo.BindFlags(flag.CommandLine)
	flag.Parse()
	storeChosen := os.Getenv("AGENTRUN_STORE") != ""
	flag.Visit(func(f *flag.Flag) { storeChosen = storeChosen || f.Name == "store" })
	if !verbose {
		// A first run shows its hints and the runs' phase changes; the
		// manager's own log would bury them within seconds.
		zo.Development, zo.Level = false, zapcore.ErrorLevel
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zo), zap.ConsoleEncoder()))
	if !verbose {
		// The history server's k8s.io/apiserver logs through klog.
		klog.SetLogger(logr.Discard())
	}

	giveBack := takeTerminal()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o, kubeconfig, local, demo, storeChosen)
	stop()
	giveBack()
	// Stopped by Ctrl-C or SIGTERM, run returns nil: a clean stop exits 0.
	if err != nil {
		fmt.Fprintln(os.Stderr, "run-local:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o manager.Options, kubeconfigOut string, forceLocal, demo, storeChosen bool) error {
	if !forceLocal {
		if cfg, ok := reachableCluster(); ok {
			fmt.Printf(">> Using the cluster at %s (from KUBECONFIG); installing the CRDs, the admission policies and the priority classes ConfigMap there.\n", cfg.Host)
			if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
				Paths: []string{filepath.Join(testenv.RepoRoot(), "config", "crd", "bases")}, ErrorIfPathMissing: true,
			}); err != nil {
				return fmt.Errorf("installing the CRD: %w", err)
			}
			if err := manifests.CreateDir(ctx, cfg, filepath.Join(testenv.RepoRoot(), "config", "admission")); err != nil {
				return fmt.Errorf("installing the admission policies: %w", err)
			}
			if err := manifests.CreatePriorityClasses(ctx, cfg); err != nil {
				return fmt.Errorf("installing the priority classes ConfigMap: %w", err)
			}
			if demo {
				if err := applyDemo(ctx, cfg); err != nil {
					return err
				}
			}
			printStore(o.Store.DSN)
			go printPhases(ctx, cfg, os.Stdout)
			return manager.Run(ctx, cfg, o)
		}
	}

	fmt.Println(">> No reachable cluster in KUBECONFIG: starting a local control plane (etcd, kube-apiserver and kube-controller-manager " + testenv.KubeVersion + ") on loopback.")
	env, err := testenv.StartWith(testenv.Options{Aggregation: true})
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
	if err := defaultNamespace(path, demoNamespace); err != nil {
		return fmt.Errorf("writing the kubeconfig: %w", err)
	}
	if err := applyDemo(ctx, env.Config); err != nil {
		return err
	}
	if !storeChosen {
		o.Store.DSN = localStore(kubeconfigOut)
	}
	printStore(o.Store.DSN)
	if err := serveHistory(ctx, env, o.Store.DSN, path); err != nil {
		return err
	}
	root := testenv.RepoRoot()
	fmt.Printf(`>> Local control plane ready at %s; the AgentRun CRDs and the demo (namespace %s) are applied.
>> In another terminal (the README's tour goes on from here):
     export KUBECONFIG=%s
     export PATH=%s:%s:$PATH   # the kubectl-agentrun plugin make run built, and the matching kubectl
     kubectl get agentruns -A
   One run waits for its provider's Secret. Create it and watch the run continue by itself:
     kubectl create secret generic demo-model-key -n agentrun-demo --from-literal=api-key=anything
   One run waits on a person at a checkpoint, then asks a question:
     kubectl agentrun describe deploy-release -n agentrun-demo
     kubectl agentrun approve deploy-release -n agentrun-demo
     kubectl agentrun answer deploy-release production -n agentrun-demo
>> Ctrl-C stops the manager and the control plane. The runs' progress follows (--verbose: the manager's full log).
`, env.Config.Host, demoNamespace, path, filepath.Join(root, "bin"), filepath.Dir(testenv.KubectlPath()))
	go printPhases(ctx, env.Config, os.Stdout)
	return manager.Run(ctx, env.Config, o)
}

// localStore is the store of the local control plane: a SQLite file beside
// its kubeconfig. The control plane's etcd is new at every start; the file
// stays, and with it the archive of the runs that finished.
func localStore(kubeconfig string) string {
	return "sqlite:" + filepath.Join(filepath.Dir(kubeconfig), "agentrun.db")
}

// printStore says where runs' journals are kept, when not in ConfigMaps,
// without a password.
func printStore(dsn string) {
	if dsn == "" {
		return
	}
	t, err := sqlstore.Parse(dsn)
	if err != nil {
		fmt.Printf(">> %v: runs wait until --store is fixed.\n", err)
		return
	}
	if t.Kind == sqlstore.KindSQLite {
		fmt.Printf(">> Runs' journals and finished runs are kept in SQLite, %s (--store= keeps them in ConfigMaps).\n", t.Where)
		return
	}
	fmt.Printf(">> Runs' journals and finished runs are kept in %s, %s.\n", t.Kind, t.Where)
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

// applyDemo creates the objects in config/demo, leaving any that exist.
func applyDemo(ctx context.Context, cfg *rest.Config) error {
	return manifests.CreateDir(ctx, cfg, filepath.Join(testenv.RepoRoot(), "config", "demo"))
}

// demoNamespace is where config/demo puts its runs.
const demoNamespace = "agentrun-demo"

// defaultNamespace makes ns the namespace of the kubeconfig's current
// context: the local control plane exists for the demo, so a bare `kubectl
// get agentruns` there shows the demo's runs instead of an empty default
// namespace.
func defaultNamespace(path, ns string) error {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return err
	}
	c, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return fmt.Errorf("%s has no current context", path)
	}
	c.Namespace = ns
	return clientcmd.WriteToFile(*cfg, path)
}
