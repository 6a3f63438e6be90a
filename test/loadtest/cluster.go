// Package loadtest measures what the operator costs the control plane. It
// treats the operator as a black box: the manager is built from ./cmd/manager
// and run as its own OS process against a real kube-apiserver and etcd
// (internal/testenv), and everything is measured from outside it: etcd
// revisions read through the API server, watch events, objects left behind,
// the manager's /proc status and its Prometheus endpoint.
//
// The same package measures a bare client doing comparable work (a create and
// four status patches of a throwaway custom resource per "run"), so a
// benchmark can report the operator's throughput as a fraction of what the
// same API server allows on the same machine in the same process run.
//
// The benchmarks live in bench_test.go; docs/benchmarks.md explains them.
package loadtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// Cluster is a running control plane with the clients the harness uses. Its
// clients have no client-side rate limit (QPS -1), so the harness is never
// the bottleneck it measures.
type Cluster struct {
	Env *testenv.Env
	// Config is the harness's own client configuration (unthrottled).
	Config *rest.Config
	// Client is a controller-runtime client with the operator's scheme; it
	// can also watch.
	Client client.WithWatch
	Kube   kubernetes.Interface
	Dyn    dynamic.Interface
	// Kubeconfig is a kubeconfig file for the API server, for the manager
	// process: it authenticates by bearer token, as in a pod
	// (testenv.Env.ManagerKubeconfig).
	Kubeconfig string

	dir       string
	adminOnce sync.Once
	admin     string
	adminErr  error
}

// StartCluster starts etcd and kube-apiserver (with the AgentRun CRDs) and
// writes a kubeconfig for them into a temporary directory. Stop undoes both.
func StartCluster() (*Cluster, error) {
	env, err := testenv.Start()
	if err != nil {
		return nil, err
	}
	c, err := newCluster(env)
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return c, nil
}

func newCluster(env *testenv.Env) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "loadtest-cluster-")
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0
	cfg.Timeout = 60 * time.Second
	c := &Cluster{Env: env, Config: cfg, dir: dir}
	if c.Client, err = client.NewWithWatch(cfg, client.Options{Scheme: manager.Scheme()}); err != nil {
		return nil, err
	}
	if c.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.Dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.Kubeconfig, err = env.ManagerKubeconfig(dir); err != nil {
		return nil, fmt.Errorf("writing a kubeconfig: %w", err)
	}
	return c, nil
}

// Stop stops the API server and etcd and removes the kubeconfig.
func (c *Cluster) Stop() error {
	err := c.Env.Stop()
	_ = os.RemoveAll(c.dir)
	return err
}

// NewNamespace creates a namespace named prefix-<random> and returns its name.
func (c *Cluster) NewNamespace(ctx context.Context, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := c.Client.Create(ctx, ns); err != nil {
		return "", fmt.Errorf("creating a namespace: %w", err)
	}
	return ns.Name, nil
}

// CreateConfigMap creates a ConfigMap with the given data.
func (c *Cluster) CreateConfigMap(ctx context.Context, ns, name string, data map[string]string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
	if err := c.Client.Create(ctx, cm); err != nil {
		return fmt.Errorf("creating ConfigMap %s/%s: %w", ns, name, err)
	}
	return nil
}
