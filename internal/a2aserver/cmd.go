package a2aserver

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// inClusterCA is where a pod finds the cluster's CA bundle (the
// kube-root-ca.crt ConfigMap the chart mounts, or the service account's).
const inClusterCA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"

// Main runs the endpoint with command-line args (`manager a2a ...`) until
// SIGTERM or SIGINT, and returns the exit code.
func Main(args []string, scheme *runtime.Scheme, stderr io.Writer) int {
	fs := flag.NewFlagSet("a2a", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ns := fs.String("namespace", os.Getenv("POD_NAMESPACE"), "Namespace whose runs the endpoint serves (default: POD_NAMESPACE).")
	addr := fs.String("bind-address", ":8080", "Address the A2A endpoint listens on.")
	public := fs.String("public-url", "", "Base URL callers reach the endpoint at, written into agent cards (default: http://<bind-address>).")
	ca := fs.String("api-server-ca", inClusterCA, "CA bundle of the API server, in a cluster.")
	kubeconfig := fs.String("kubeconfig", "", "Kubeconfig locating the API server outside a cluster; its credentials are never used.")
	certFile := fs.String("tls-cert-file", "", "Serve HTTPS with this certificate (callers send bearer tokens: use TLS, here or in front).")
	keyFile := fs.String("tls-key-file", "", "Key of --tls-cert-file.")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := apiServer(*kubeconfig, *ca)
	if err == nil && *ns == "" {
		err = errors.New("--namespace (or POD_NAMESPACE) is required")
	}
	if err != nil {
		fmt.Fprintln(stderr, "a2a:", err)
		return 2
	}
	if *public == "" {
		*public = "http://" + *addr
	}
	s, err := New(Config{Namespace: *ns, APIServer: cfg, PublicURL: *public, Scheme: scheme})
	if err != nil {
		fmt.Fprintln(stderr, "a2a:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	srv := &http.Server{Addr: *addr, Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Fprintf(stderr, "a2a: serving namespace %s on %s (agent cards name %s)\n", *ns, *addr, *public)
	if *certFile != "" {
		err = srv.ListenAndServeTLS(*certFile, *keyFile)
	} else {
		err = srv.ListenAndServe()
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(stderr, "a2a:", err)
		return 1
	}
	return 0
}

// apiServer locates the API server: in a pod from the service
// environment and the CA file, else from a kubeconfig. No credential is
// kept.
func apiServer(kubeconfig, ca string) (*rest.Config, error) {
	if host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"); host != "" && port != "" && kubeconfig == "" {
		return &rest.Config{Host: "https://" + net.JoinHostPort(host, port), TLSClientConfig: rest.TLSClientConfig{CAFile: ca}}, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("locating the API server: %w", err)
	}
	return rest.AnonymousClientConfig(c), nil
}
