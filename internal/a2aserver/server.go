package a2aserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
)

// ProtocolVersion is the A2A protocol version the SDK speaks.
const ProtocolVersion = "0.3.0"

// bearerScheme names the card's one security scheme.
const bearerScheme a2a.SecuritySchemeName = "kubernetes"

// Config is what the endpoint needs to run.
type Config struct {
	// Namespace is where the endpoint creates and reads runs.
	Namespace string
	// APIServer locates the API server (host and CA). Its credentials, if
	// any, are never used: each request carries the caller's token.
	APIServer *rest.Config
	// PublicURL is the base URL callers reach the endpoint at; agent cards
	// name <PublicURL>/agents/<agent>.
	PublicURL string
	// Scheme knows the AgentRun types and the core ones.
	Scheme *runtime.Scheme
}

// Server is the A2A endpoint.
type Server struct {
	cfg    Config
	mapper meta.RESTMapper
}

// New checks cfg and prepares the endpoint.
func New(cfg Config) (*Server, error) {
	if cfg.Namespace == "" || cfg.APIServer == nil || cfg.Scheme == nil {
		return nil, errors.New("a2aserver: namespace, API server and scheme are required")
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	for _, gvk := range []struct {
		obj   runtime.Object
		scope meta.RESTScope
	}{{&arv1.AgentRun{}, meta.RESTScopeNamespace}, {&arv1.AgentRunAnswer{}, meta.RESTScopeNamespace}, {&corev1.ConfigMap{}, meta.RESTScopeNamespace},
		{&authenticationv1.SelfSubjectReview{}, meta.RESTScopeRoot}} {
		k, err := apiutil.GVKForObject(gvk.obj, cfg.Scheme)
		if err != nil {
			return nil, err
		}
		mapper.Add(k, gvk.scope)
	}
	return &Server{cfg: cfg, mapper: mapper}, nil
}

// anonymous copies the API server's location without any credential.
func anonymous(c *rest.Config) *rest.Config {
	out := rest.AnonymousClientConfig(c)
	out.QPS, out.Burst = -1, 0 // each request's client makes a handful of calls
	return out
}

// Handler routes GET /agents/<agent>/.well-known/agent-card.json to the
// agent card and POST /agents/<agent> to the JSON-RPC methods.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /agents/{agent}"+a2asrv.WellKnownAgentCardPath, s.serveCard)
	mux.HandleFunc("POST /agents/{agent}", s.serveRPC)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	return mux
}

// bearer is the request's bearer token, or "".
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="kubernetes"`)
	http.Error(w, "a Kubernetes bearer token is required (Authorization: Bearer TOKEN); the API server decides what it may do", http.StatusUnauthorized)
}

// clientFor is a client acting as the caller whose token this is.
func (s *Server) clientFor(token string) (client.WithWatch, error) {
	c := anonymous(s.cfg.APIServer)
	c.BearerToken = token
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		return nil, err
	}
	return client.NewWithWatch(c, client.Options{Scheme: s.cfg.Scheme, Mapper: s.mapper, HTTPClient: hc})
}

// blueprintOf reads and parses the agent's blueprint as the caller, and
// refuses one that does not expose its agent over A2A.
func (s *Server) blueprintOf(ctx context.Context, c client.Client, agent string) (*blueprint.Blueprint, error) {
	var cm corev1.ConfigMap
	if err := c.Get(ctx, types.NamespacedName{Namespace: s.cfg.Namespace, Name: agent}, &cm); err != nil {
		return nil, err
	}
	bp, err := blueprint.Parse(cm.Data)
	if err != nil {
		return nil, fmt.Errorf("blueprint %s/%s: %w", s.cfg.Namespace, agent, err)
	}
	if bp.Agent.A2A == nil || !bp.Agent.A2A.Expose {
		return nil, errNotExposed
	}
	return bp, nil
}

var errNotExposed = errors.New("the blueprint does not expose its agent over A2A ([agent.a2a] expose = true)")

// Card is the agent card of an exposed blueprint.
func (s *Server) Card(agent string, bp *blueprint.Blueprint) *a2a.AgentCard {
	url := strings.TrimSuffix(s.cfg.PublicURL, "/") + "/agents/" + agent
	card := &a2a.AgentCard{
		Name: bp.Agent.Name, Description: bp.Agent.Description, Version: bp.Agent.Version,
		URL: url, PreferredTransport: a2a.TransportProtocolJSONRPC, ProtocolVersion: ProtocolVersion,
		Capabilities:       a2a.AgentCapabilities{Streaming: true},
		DefaultInputModes:  []string{"text/plain"},
		DefaultOutputModes: []string{"text/plain"},
		SecuritySchemes: a2a.NamedSecuritySchemes{bearerScheme: a2a.HTTPAuthSecurityScheme{Scheme: "Bearer",
			Description: "A Kubernetes bearer token; the run is created and read as its user."}},
		Security: []a2a.SecurityRequirements{{bearerScheme: a2a.SecuritySchemeScopes{}}},
	}
	if card.Description == "" {
		card.Description = "AgentRun agent " + bp.Agent.Name
	}
	if card.Version == "" {
		card.Version = "0"
	}
	for _, sk := range bp.Agent.A2A.Skills {
		card.Skills = append(card.Skills, a2a.AgentSkill{ID: sk.ID, Name: sk.Name, Description: sk.Description,
			Tags: append([]string{}, sk.Tags...), Examples: sk.Examples})
	}
	return card
}

// caller is who a request comes from: a client that acts with their
// token, and the username the API server knows them by.
type caller struct {
	c    client.WithWatch
	user string
}

// authenticate is every request's preamble: without a bearer token, or
// with one the API server does not accept, it answers 401 itself (HTTP,
// with WWW-Authenticate, also for JSON-RPC: the caller is not let in).
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (*caller, bool) {
	token := bearer(r)
	if token == "" {
		unauthorized(w)
		return nil, false
	}
	c, err := s.clientFor(token)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return nil, false
	}
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(r.Context(), review); err != nil {
		if !refused(w, err) {
			http.Error(w, "asking the API server who the caller is: "+err.Error(), http.StatusBadGateway)
		}
		return nil, false
	}
	return &caller{c: c, user: review.Status.UserInfo.Username}, true
}

// refused answers the API server's refusal of the caller's token as the
// API server gave it, 401 (with WWW-Authenticate) or 403, and says whether
// err was one.
func refused(w http.ResponseWriter, err error) bool {
	switch {
	case apierrors.IsUnauthorized(err):
		unauthorized(w)
	case apierrors.IsForbidden(err):
		http.Error(w, err.Error(), http.StatusForbidden)
	default:
		return false
	}
	return true
}

func (s *Server) serveCard(w http.ResponseWriter, r *http.Request) {
	who, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	agent := r.PathValue("agent")
	bp, err := s.blueprintOf(r.Context(), who.c, agent)
	switch {
	case refused(w, err):
		return
	case apierrors.IsNotFound(err), errors.Is(err, errNotExposed):
		http.Error(w, fmt.Sprintf("no A2A agent %q in namespace %s: %v", agent, s.cfg.Namespace, err), http.StatusNotFound)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	a2asrv.NewStaticAgentCardHandler(s.Card(agent, bp)).ServeHTTP(w, r)
}

// serveRPC answers the JSON-RPC methods. Before the SDK's transport takes
// the request, params of the wrong shape are refused as invalid params,
// and every method (tasks/get, tasks/cancel, answers included, not only a
// new run) needs the agent's blueprint to expose it: a task of an agent
// not exposed is not served.
func (s *Server) serveRPC(w http.ResponseWriter, r *http.Request) {
	who, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	req, err := readRequest(w, r)
	if err != nil {
		http.Error(w, "reading the request: "+err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	h := &handler{s: s, c: who.c, user: who.user, agent: r.PathValue("agent"), ns: s.cfg.Namespace}
	if req != nil {
		if err := h.served(r.Context()); err != nil {
			writeRPCError(w, req, err)
			return
		}
		if err := checkParams(req); err != nil {
			writeRPCError(w, req, err)
			return
		}
	}
	a2asrv.NewJSONRPCHandler(h).ServeHTTP(w, r)
}

// rpcError turns an API server error into an A2A error whose data carries
// the API server's own words (what was refused and why).
func rpcError(err error) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s: %w", err.Error(), a2a.ErrTaskNotFound)
	case errors.Is(err, a2a.ErrTaskNotFound), errors.Is(err, a2a.ErrInvalidParams), errors.Is(err, a2a.ErrTaskNotCancelable),
		errors.Is(err, a2a.ErrUnsupportedOperation), errors.Is(err, a2a.ErrPushNotificationNotSupported):
		return err
	}
	return fmt.Errorf("%s: %w", err.Error(), a2a.ErrServerError)
}
