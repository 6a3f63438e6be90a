package egress

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeResolver maps names to addresses without DNS. A name's answer may
// change from one lookup to the next (answers[i] for the i-th lookup, the
// last one repeating), to play DNS rebinding.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][][]netip.Addr
	calls   map[string]int
}

func newResolver() *fakeResolver {
	return &fakeResolver{answers: map[string][][]netip.Addr{}, calls: map[string]int{}}
}

// set makes host answer addrs on every lookup.
func (r *fakeResolver) set(host string, addrs ...string) *fakeResolver {
	return r.sequence(host, addrs)
}

// sequence makes host answer each list in turn, then the last one forever.
func (r *fakeResolver) sequence(host string, lists ...[]string) *fakeResolver {
	r.mu.Lock()
	defer r.mu.Unlock()
	var seq [][]netip.Addr
	for _, l := range lists {
		var addrs []netip.Addr
		for _, a := range l {
			addrs = append(addrs, netip.MustParseAddr(a))
		}
		seq = append(seq, addrs)
	}
	r.answers[host] = seq
	return r
}

func (r *fakeResolver) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seq, ok := r.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	i := min(r.calls[host], len(seq)-1)
	r.calls[host]++
	var out []netip.Addr
	for _, a := range seq[i] {
		if network == "ip4" && !a.Unmap().Is4() || network == "ip6" && !a.Unmap().Is6() {
			continue
		}
		out = append(out, a)
	}
	return out, nil
}

func (r *fakeResolver) lookups(host string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[host]
}

// countingListener accepts TCP connections and counts them, holding them
// open until the test ends.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) port() int { return l.Addr().(*net.TCPAddr).Port }

func serveCounting(t *testing.T, l net.Listener) *countingListener {
	t.Helper()
	cl := &countingListener{Listener: l}
	var conns []net.Conn
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			cl.accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return cl
}

// listenPair listens on 127.0.0.1 and 127.0.0.2 on one port (a URL has one
// port, and the tests need one name to lead to either), retrying when the
// second address has that port taken.
func listenPair(t *testing.T) (l1, l2 net.Listener) {
	t.Helper()
	for range 20 {
		a, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := a.Addr().(*net.TCPAddr).Port
		b, err := net.Listen("tcp", "127.0.0.2:"+strconv.Itoa(port))
		if err == nil {
			return a, b
		}
		a.Close()
	}
	t.Fatal("no port free on both 127.0.0.1 and 127.0.0.2")
	return nil, nil
}

// countingServer is an HTTP test server on l that counts new connections
// and requests.
type countingServer struct {
	*httptest.Server
	conns    atomic.Int64
	requests atomic.Int64
}

func startServer(t *testing.T, l net.Listener, h http.Handler) *countingServer {
	t.Helper()
	s := &countingServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		h.ServeHTTP(w, r)
	}))
	s.Listener.Close()
	s.Listener = l
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func ok(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}
