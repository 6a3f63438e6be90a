// Package mcptest runs a real MCP server, built with the official go-sdk, on
// loopback, so the operator's MCP client is tested against the protocol as a
// real server speaks it rather than against a hand-written fake. It counts
// what reached each tool so tests can assert exactly-once behaviour.
package mcptest

import (
	"crypto/subtle"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Options configures the test server.
type Options struct {
	// Token, when set, is the bearer token every HTTP request must carry;
	// anything else is answered 401 before the MCP layer sees it.
	Token string
	// PageSize caps tools/list pages (0: the SDK default), so a test can make
	// the client follow pagination.
	PageSize int
	// RequestDelay holds every HTTP request (initialize, list, call) this
	// long before serving it: a slow server, so a test can catch runs
	// waiting on a listing another run started.
	RequestDelay time.Duration
	// Addr is the address to listen on (default 127.0.0.1 on a free port),
	// e.g. "127.0.0.2:0" for a server apart from the API server's address.
	Addr string
}

// Server is a running MCP test server. Its counters are safe for concurrent
// use.
type Server struct {
	http    *httptest.Server
	closing chan struct{} // closed at cleanup: frees held and delayed handlers

	mu       sync.Mutex
	calls    map[string]int
	keys     map[string][]string
	executed map[string]int
	inFlight map[string]int
	delays   map[string]time.Duration
	holds    map[string]*hold
	tickets  int
	log      []Call
}

// Call is one call that reached a tool's handler.
type Call struct {
	Tool string
	// Key is the call's idempotency key ("" if it carried none).
	Key string
	// Replica is the calling manager replica, from its Agentrun-Replica
	// header ("" when unsharded).
	Replica string
	// At is when the call reached the handler.
	At time.Time
	// Executed: its body ran to completion (a side effect happened).
	Executed bool
	// Args are the call's arguments as they came over the wire.
	Args string
}

// endpoint is the path the MCP handler is mounted on, so URL() names an
// endpoint rather than a bare host.
const endpoint = "/mcp"

// New starts a server on loopback and stops it when the test ends.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	s := &Server{
		closing:  make(chan struct{}),
		calls:    map[string]int{},
		keys:     map[string][]string{},
		executed: map[string]int{},
		inFlight: map[string]int{},
		delays:   map[string]time.Duration{},
		holds:    map[string]*hold{},
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "mcptest", Version: "v0.0.0"},
		&mcp.ServerOptions{PageSize: opts.PageSize})
	s.register(srv)

	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	if opts.Token != "" {
		h = requireBearer(opts.Token, h)
	}
	if d := opts.RequestDelay; d > 0 {
		next := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			case <-s.closing:
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	mux := http.NewServeMux()
	mux.Handle(endpoint, h)
	s.http = httptest.NewUnstartedServer(mux)
	if opts.Addr != "" {
		l, err := net.Listen("tcp", opts.Addr)
		if err != nil {
			t.Fatalf("mcptest: listening on %s: %v", opts.Addr, err)
		}
		_ = s.http.Listener.Close()
		s.http.Listener = l
	}
	s.http.Start()

	t.Cleanup(func() {
		// Free held handlers and drop open streams first: httptest's Close
		// waits for every in-flight request.
		close(s.closing)
		s.http.CloseClientConnections()
		s.http.Close()
	})
	return s
}

// URL is the MCP endpoint.
func (s *Server) URL() string { return s.http.URL + endpoint }

// requireBearer rejects requests without the exact bearer token, the way an
// authenticating gateway in front of an MCP server would.
func requireBearer(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Calls is how many calls of tool reached its handler (held, delayed or
// cancelled ones included).
func (s *Server) Calls(tool string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[tool]
}

// Keys is the idempotency key of each call of tool, in arrival order, with ""
// for a call that carried none.
func (s *Server) Keys(tool string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys[tool]...)
}

// Executed is how many calls of tool ran their body to completion: the number
// of side effects a retrying client actually caused.
func (s *Server) Executed(tool string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.executed[tool]
}

// Log is every call that reached a handler, in arrival order.
func (s *Server) Log() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.log...)
}

// InFlight is how many calls of tool are inside its handler now, so a test
// can wait until a cancelled call has let go before releasing a hold.
func (s *Server) InFlight(tool string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight[tool]
}
