package loadtest

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
)

// HungServer is a loopback TCP listener that accepts connections, reads
// whatever is sent and never answers: an MCP server that hangs. It holds
// every connection open until Close.
type HungServer struct {
	l        net.Listener
	accepted atomic.Int64
	bytes    atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
	wg     sync.WaitGroup
}

// NewHungServer listens on 127.0.0.1 on a free port.
func NewHungServer() (*HungServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &HungServer{l: l, conns: map[net.Conn]bool{}}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// URL is an MCP endpoint URL on the server.
func (s *HungServer) URL() string { return fmt.Sprintf("http://%s/mcp", s.l.Addr()) }

// Accepted is how many connections were accepted so far.
func (s *HungServer) Accepted() int64 { return s.accepted.Load() }

// Bytes is how many request bytes were read (and never answered).
func (s *HungServer) Bytes() int64 { return s.bytes.Load() }

func (s *HungServer) serve() {
	defer s.wg.Done()
	for {
		c, err := s.l.Accept()
		if err != nil {
			return // closed
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = true
		s.mu.Unlock()
		s.accepted.Add(1)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			buf := make([]byte, 4096)
			for {
				n, err := c.Read(buf)
				s.bytes.Add(int64(n))
				if err != nil { // the peer gave up, or Close closed it
					break
				}
			}
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.Close()
		}()
	}
}

// Open is how many connections are held open now.
func (s *HungServer) Open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Close stops accepting and drops every held connection.
func (s *HungServer) Close() error {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	err := s.l.Close()
	s.wg.Wait()
	return err
}
