// Package historytest serves the history API (package history) on
// loopback behind a local control plane's aggregation layer as a cluster
// serves it, and archives finished runs into the store that API reads, as
// the manager's archive does. The history package's own suite, the web
// console's browser tests and `make run` (hack/run-local) all need the API
// up through the API server; this is the one place that knows how.
//
// It starts no database and no control plane: the caller starts the
// control plane with testenv.Options{Aggregation: true} and opens the
// store it wants (PostgreSQL from testenv/postgres, or SQLite).
package historytest

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/agentrun-dev/agentrun-operator/internal/history"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// Namespace is where config/history puts the server's ServiceAccount,
// Service and certificate Secret.
const Namespace = testenv.SystemNamespace

// ServiceName is the Service (and ServiceAccount) of config/history.
const ServiceName = "agentrun-history"

// APIServices is the APIService resource, read and patched with a
// dynamic client (the aggregator's types are not in the client's scheme).
var APIServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// Options shape the history server Serve runs.
type Options struct {
	// DSN is the store the server reads (the manager's --store).
	DSN string
	// Dir receives the server's kubeconfig.
	Dir string
	// Clock is the server's (the real clock when nil); tests step a fake
	// one to age continue tokens.
	Clock clock.PassiveClock
	// WatchInterval is how often a watch looks for new records (100 ms
	// when 0, so tests see them at once).
	WatchInterval time.Duration
}

// Server is a history server running in the test's process.
type Server struct {
	// Port is its loopback port (127.0.0.1), the APIService's.
	Port int
	// Kubeconfig authenticates as its ServiceAccount, agentrun-history.
	Kubeconfig string
}

// Start installs config/history, serves the history API on loopback
// until ctx ends, and waits for the API server to find it available.
func Start(ctx context.Context, env *testenv.Env, o Options) (*Server, error) {
	if err := Install(ctx, env); err != nil {
		return nil, err
	}
	s, err := Serve(ctx, env, o)
	if err != nil {
		return nil, err
	}
	return s, WaitAvailable(ctx, env)
}

// Install applies config/history (the roles, the server's RBAC, Service,
// Deployment, APIService) and points the Service at the test's process:
// an ExternalName to localhost, which the aggregator resolves to its
// host (endpoints may not hold loopback addresses).
func Install(ctx context.Context, env *testenv.Env) error {
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return err
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := env.ApplyDir(filepath.Join(testenv.RepoRoot(), "config", "history")); err != nil {
		return err
	}
	if err := kube.CoreV1().Services(Namespace).Delete(ctx, ServiceName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	_, err = kube.CoreV1().Services(Namespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: ServiceName, Namespace: Namespace},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost"},
	}, metav1.CreateOptions{})
	return err
}

// Serve runs the history server in this process on a loopback port until
// ctx ends, as ServiceAccount agentrun-history (so with config/history's
// RBAC), and points the APIService at that port.
func Serve(ctx context.Context, env *testenv.Env, o Options) (*Server, error) {
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return nil, err
	}
	tok, err := kube.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, ServiceName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	kc, err := WriteKubeconfig(env, o.Dir, "history-server", &clientcmdapi.AuthInfo{Token: tok.Status.Token})
	if err != nil {
		return nil, err
	}
	if o.WatchInterval == 0 {
		o.WatchInterval = 100 * time.Millisecond
	}
	return ServeAs(ctx, env, o, kc)
}

// ServeAs runs the history server in this process on a loopback port
// until ctx ends, authenticating to the API server with kubeconfig, and
// points the APIService at that port. o.Dir is not used; a zero
// o.WatchInterval is the server's default.
func ServeAs(ctx context.Context, env *testenv.Env, o Options, kc string) (*Server, error) {
	ln, port, err := history.Listen("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	patch := fmt.Appendf(nil, `{"spec":{"service":{"port":%d}}}`, port)
	if _, err := dyn.Resource(APIServices).Patch(ctx, history.APIServiceName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		_ = ln.Close()
		return nil, err
	}
	so := history.NewOptions()
	so.SecureServing.Listener, so.SecureServing.BindPort = ln, port
	so.Authentication.RemoteKubeConfigFile = kc
	so.Authorization.RemoteKubeConfigFile = kc
	so.Store = o.DSN
	so.Certs = history.CertOptions{Namespace: Namespace, SecretName: "agentrun-history-cert", Service: ServiceName, Kubeconfig: kc}
	so.Clock = o.Clock
	if o.WatchInterval != 0 {
		so.Watch.Interval = o.WatchInterval
	}
	s, err := so.New(ctx)
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("starting the history server: %w", err)
	}
	go func() { _ = s.Run(ctx) }()
	return &Server{Port: port, Kubeconfig: kc}, nil
}

// WaitAvailable waits (90 s at most) for the API server to find the
// history server available: its discovery answered through the
// APIService, with the caBundle the server wrote.
func WaitAvailable(ctx context.Context, env *testenv.Env) error {
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(90 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		u, err := dyn.Resource(APIServices).Get(ctx, history.APIServiceName, metav1.GetOptions{})
		if err == nil {
			status, _ := u.Object["status"].(map[string]any)
			conds, _ := status["conditions"].([]any)
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Available" {
					if m["status"] == "True" {
						return nil
					}
					last = fmt.Sprint(m["reason"], ": ", m["message"])
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("the APIService did not become available: %s", last)
}

// WriteKubeconfig writes dir/kubeconfig-NAME for the test API server,
// authenticating with auth, and returns its path.
func WriteKubeconfig(env *testenv.Env, dir, name string, auth *clientcmdapi.AuthInfo) (string, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["envtest"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	cfg.AuthInfos[name] = auth
	cfg.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: name}
	cfg.CurrentContext = "envtest"
	path := filepath.Join(dir, "kubeconfig-"+name)
	return path, clientcmd.WriteToFile(*cfg, path)
}
