// Package console is the web console: a small JSON API, Server-Sent Event
// streams fed by Kubernetes watches, and an embedded page (plain HTML, CSS
// and JavaScript) that lists run trees and shows, answers and steers one
// run. It holds no privilege of its own: every request goes to the API
// server with the signed-in person's credentials. `kubectl agentrun
// console` serves it on loopback with the kubeconfig's credentials
// (ServeLocal); in a cluster (cmd/agentrun-console) each person signs in
// with a bearer token that it forwards (the Kubernetes Dashboard model).
package console

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"strconv"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/plugin"
)

//go:embed assets
var assets embed.FS

// scheme holds the types the console reads and writes.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	utilruntime.Must(authenticationv1.AddToScheme(s))
	utilruntime.Must(authorizationv1.AddToScheme(s))
	utilruntime.Must(arv1.AddToScheme(s))
	return s
}()

// Mode is how people reach the console.
type Mode int

const (
	// Local serves one person on this machine, with the kubeconfig's
	// credentials; the URL printed carries a one-time key: the first
	// browser to open it is signed in, any later one is refused.
	Local Mode = iota
	// InCluster has each person sign in with a bearer token, forwarded to
	// the API server on every request.
	InCluster
)

// Options configure a Server.
type Options struct {
	Mode Mode
	// Config reaches the API server. Local: the person's own credentials.
	// InCluster: only the host and CA are used; any credentials in it
	// are dropped, so the console never acts as its ServiceAccount.
	Config *rest.Config
	// Namespace is the one the page opens on.
	Namespace string
	// SessionTTL bounds a signed-in session (InCluster); 0 is 8 hours.
	SessionTTL time.Duration
}

// Server serves the console.
type Server struct {
	o        Options
	sessions *sessions
	// localKey is the key in the local URL (Local only), spent by the
	// first sign-in.
	localKey *signInKey
	mux      *http.ServeMux
}

// New makes a Server. In Local mode it signs in the kubeconfig's user now.
func New(o Options) (*Server, error) {
	if o.Config == nil {
		return nil, errors.New("console: no API server configuration")
	}
	if o.SessionTTL == 0 {
		o.SessionTTL = 8 * time.Hour
	}
	s := &Server{o: o, sessions: newSessions(o.SessionTTL)}
	if o.Mode == Local {
		s.localKey = newSignInKey()
	}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	s.routes(http.FileServerFS(static))
	return s, nil
}

// ServeHTTP serves the page and the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	w.Header().Set("Referrer-Policy", "no-referrer")
	s.mux.ServeHTTP(w, r)
}

// LocalURL is the URL that signs a browser in to a Local console at addr.
func (s *Server) LocalURL(addr string) string {
	return "http://" + addr + "/?key=" + s.localKey.value
}

func randomKey() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on a supported platform
	}
	return hex.EncodeToString(b)
}

// ServeCommand is `kubectl agentrun console`: a Local console with cfg on
// address:port, printing its URL; with --in-cluster, a console where each
// person signs in with a token (cfg then only says where the API server
// is). It serves until ctx ends.
func ServeCommand(ctx context.Context, cfg *rest.Config, o plugin.ConsoleOptions) error {
	mode := Local
	if o.InCluster {
		mode = InCluster
	}
	s, err := New(Options{Mode: mode, Config: cfg, Namespace: o.Namespace})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", net.JoinHostPort(o.Address, strconv.Itoa(o.Port)))
	if err != nil {
		return fmt.Errorf("listening on %s port %d: %w", o.Address, o.Port, err)
	}
	if mode == InCluster {
		fmt.Fprintf(o.Out, "The web console listens on %s; people sign in with their own bearer tokens\n", l.Addr())
	} else {
		fmt.Fprintf(o.Out, "The web console is at %s\n(open it in your browser; Ctrl-C stops it)\n", s.LocalURL(l.Addr().String()))
	}
	return Serve(ctx, l, s)
}

// Serve serves h on l until ctx ends, then closes open streams.
func Serve(ctx context.Context, l net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shut)
	return nil
}

// clientFor builds a client that acts as the person whose credentials
// cfg holds.
func clientFor(cfg *rest.Config) (client.WithWatch, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "agentrun-console"
	return client.NewWithWatch(cfg, client.Options{Scheme: scheme})
}
