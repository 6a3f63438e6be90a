// Package history serves the archive of finished runs as the Kubernetes
// API group history.agentrun.dev/v1alpha1, an aggregated API: the
// cluster's API server proxies /apis/history.agentrun.dev to this server
// (an APIService), which authenticates the API server's front-proxy
// client certificate, takes the user from its headers, and asks the API
// server whether that user may do the request (SubjectAccessReview),
// with k8s.io/apiserver's delegating authenticator and authorizer. Served:
// agentrunrecords (get, list, watch, delete; subresources transcript,
// output and journal) and agentruncostreports (list), read from the
// database store's archive and call ledger. docs/history.md describes it.
package history

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authentication/user"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/component-base/compatibility"
	"k8s.io/utils/clock"

	hv1 "github.com/agentrun-dev/agentrun-operator/api/history/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
)

// Scheme and Codecs hold the history API's types.
var (
	Scheme = runtime.NewScheme()
	Codecs = serializer.NewCodecFactory(Scheme)
)

func init() {
	if err := hv1.AddToScheme(Scheme); err != nil {
		panic(err)
	}
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	// Field selectors pass to the storage as given: it knows its fields
	// (RecordFields, CostFields) and names them when refusing one.
	for _, kind := range []string{"AgentRunRecord", "AgentRunCostReport"} {
		if err := Scheme.AddFieldLabelConversionFunc(hv1.GroupVersion.WithKind(kind), func(label, value string) (string, string, error) {
			return label, value, nil
		}); err != nil {
			panic(err)
		}
	}
	Scheme.AddUnversionedTypes(schema.GroupVersion{Group: "", Version: "v1"},
		&metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})
}

// Options configure the history server: where it listens, how it
// authenticates and authorizes (delegated to the API server), its
// certificate, and the store it reads.
type Options struct {
	SecureServing  *genericoptions.SecureServingOptionsWithLoopback
	Authentication *genericoptions.DelegatingAuthenticationOptions
	Authorization  *genericoptions.DelegatingAuthorizationOptions
	// Store is the database store's DSN (the manager's --store).
	Store    string
	MaxConns int
	// Certificate, when CertDir is empty, kept in a Secret (see Certs).
	Certs CertOptions
	// ContinueTTL bounds a continue token's age (DefaultContinueTTL).
	ContinueTTL time.Duration
	Watch       WatchOptions
	// Clock is the real clock when nil (tests step a fake one).
	Clock clock.PassiveClock
	Log   logr.Logger
}

// NewOptions are the defaults: port 8443, delegated authentication and
// authorization through the in-cluster API server.
func NewOptions() *Options {
	o := &Options{
		SecureServing:  genericoptions.NewSecureServingOptions().WithLoopback(),
		Authentication: genericoptions.NewDelegatingAuthenticationOptions(),
		Authorization:  genericoptions.NewDelegatingAuthorizationOptions(),
		MaxConns:       4,
		ContinueTTL:    DefaultContinueTTL,
		Log:            logr.Discard(),
	}
	o.SecureServing.BindPort = 8443
	// --cert-dir names a directory holding tls.crt and tls.key (a
	// mounted kubernetes.io/tls Secret); nothing is written there.
	o.SecureServing.ServerCert.PairName = "tls"
	o.SecureServing.ServerCert.CertDirectory = ""
	// Only the API server's front proxy reaches the history API: a
	// direct caller is refused whatever it presents (see frontProxyOnly).
	o.Authentication.TolerateInClusterLookupFailure = false
	return o
}

// AddFlags registers the options as flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.SecureServing.AddFlags(fs)
	o.Authentication.AddFlags(fs)
	o.Authorization.AddFlags(fs)
	fs.StringVar(&o.Store, "store", cmp.Or(o.Store, os.Getenv("AGENTRUN_STORE")), "The database store the manager archives into (its --store): postgres://... (the password from PGPASSWORD) or sqlite:PATH; AGENTRUN_STORE when unset. Required.")
	fs.IntVar(&o.MaxConns, "store-max-conns", o.MaxConns, "Connections the history server opens to a PostgreSQL store at most.")
	fs.DurationVar(&o.ContinueTTL, "continue-ttl", o.ContinueTTL, "How long a list's continue token is honoured; an older one answers 410 Expired.")
	fs.DurationVar(&o.Watch.Interval, "watch-interval", DefaultWatchInterval, "How often a watch of agentrunrecords asks the database for new records.")
	o.Certs.AddFlags(fs)
}

// Server is a history server ready to run.
type Server struct {
	generic *genericapiserver.GenericAPIServer
	store   *sqlstore.Store
	certs   *certKeeper
}

// New builds the server: the store, the serving certificate, the
// delegated authentication and authorization, the API group.
func (o *Options) New(ctx context.Context) (*Server, error) {
	if o.Store == "" {
		return nil, errors.New("the history server needs --store: the database the manager archives runs into")
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	st, err := sqlstore.Open(sqlstore.Config{DSN: o.Store, MaxConns: o.MaxConns, Log: o.Log})
	if err != nil {
		return nil, err
	}
	s := &Server{store: st}
	if s.certs, err = o.serving(ctx); err != nil {
		_ = st.Close()
		return nil, err
	}
	cfg, err := o.config()
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	if s.generic, err = cfg.Complete().New("agentrun-history", genericapiserver.NewEmptyDelegate()); err != nil {
		_ = st.Close()
		return nil, err
	}
	if err := s.generic.InstallAPIGroup(o.apiGroup(st)); err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("installing %s: %w", hv1.GroupVersion, err)
	}
	return s, nil
}

// config is the generic server's configuration.
func (o *Options) config() (*genericapiserver.RecommendedConfig, error) {
	cfg := genericapiserver.NewRecommendedConfig(Codecs)
	cfg.EffectiveVersion = compatibility.NewEffectiveVersionFromString("1.37", "", "")
	cfg.EnableProfiling = false
	cfg.BuildHandlerChainFunc = func(h http.Handler, c *genericapiserver.Config) http.Handler {
		return genericapiserver.DefaultBuildHandlerChain(withTableRequests(h), c)
	}
	if err := o.SecureServing.ApplyTo(&cfg.SecureServing, &cfg.LoopbackClientConfig); err != nil {
		return nil, err
	}
	namer := openapinamer.NewDefinitionNamer(Scheme)
	cfg.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(openAPIDefinitions, namer)
	cfg.OpenAPIConfig.Info.Title, cfg.OpenAPIConfig.Info.Version = "agentrun history", hv1.GroupVersion.Version
	cfg.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(openAPIDefinitions, namer)
	cfg.OpenAPIV3Config.Info.Title, cfg.OpenAPIV3Config.Info.Version = "agentrun history", hv1.GroupVersion.Version
	if err := o.Authentication.ApplyTo(&cfg.Authentication, cfg.SecureServing, cfg.OpenAPIConfig); err != nil {
		return nil, err
	}
	rh := cfg.Authentication.RequestHeaderConfig
	if rh == nil {
		return nil, errors.New("no front-proxy CA: the API server's extension-apiserver-authentication ConfigMap (kube-system) has no requestheader-client-ca-file, so the aggregation layer is off (kube-apiserver --requestheader-client-ca-file, --proxy-client-cert-file)")
	}
	cfg.Authentication.Authenticator = frontProxyOnly(headerrequest.NewDynamicVerifyOptionsSecure(
		rh.CAContentProvider.VerifyOptions, rh.AllowedClientNames, rh.UsernameHeaders, rh.UIDHeaders, rh.GroupHeaders, rh.ExtraHeaderPrefixes))
	// The client CA the delegating options found is for x509 users, who
	// are refused here; the TLS server still asks for client
	// certificates (the front proxy's).
	if err := o.Authorization.ApplyTo(&cfg.Authorization); err != nil {
		return nil, err
	}
	return cfg, nil
}

// frontProxyOnly authenticates only requests the API server's front
// proxy made (its client certificate, signed by the requestheader CA and
// of an allowed name, carrying the user in headers). A bearer token or a
// user's client certificate sent straight to this server is refused: the
// history API is reached through the API server, where audit and
// priority-and-fairness apply. The health paths answer anyone (probes).
func frontProxyOnly(proxy authenticator.Request) authenticator.Request {
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		resp, ok, err := proxy.AuthenticateRequest(req)
		if ok || err != nil {
			return resp, ok, err
		}
		switch req.URL.Path {
		case "/healthz", "/readyz", "/livez":
			return &authenticator.Response{User: &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}}, true, nil
		}
		return nil, false, fmt.Errorf("%s %s: the history API is served only through the Kubernetes API server (no front-proxy client certificate with a user)", req.Method, req.URL.Path)
	})
}

// apiGroup is history.agentrun.dev/v1alpha1's resources.
func (o *Options) apiGroup(st *sqlstore.Store) *genericapiserver.APIGroupInfo {
	records := &recordsREST{store: st, clock: o.Clock, key: onceOK(st.HistoryKey), ttl: o.ContinueTTL, watch: o.Watch}
	info := genericapiserver.NewDefaultAPIGroupInfo(hv1.GroupName, Scheme, metav1.ParameterCodec, Codecs)
	info.VersionedResourcesStorageMap[hv1.GroupVersion.Version] = map[string]rest.Storage{
		hv1.ResourceRecords: records,
		hv1.ResourceRecords + "/" + hv1.SubresourceTranscript: &transcriptREST{records: records},
		hv1.ResourceRecords + "/" + hv1.SubresourceOutput:     &outputREST{records: records},
		hv1.ResourceRecords + "/" + hv1.SubresourceJournal:    &journalREST{records: records},
		hv1.ResourceCostReports:                               &costsREST{store: st, clock: o.Clock},
	}
	return &info
}

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	defer func() { _ = s.store.Close() }()
	if s.certs != nil {
		go s.certs.keep(ctx)
	}
	return s.generic.PrepareRun().RunWithContext(ctx)
}

// Listen makes the listener of addr (host:port), for Options.SecureServing.Listener.
func Listen(addr string) (net.Listener, int, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, 0, err
	}
	return ln, ln.Addr().(*net.TCPAddr).Port, nil
}
