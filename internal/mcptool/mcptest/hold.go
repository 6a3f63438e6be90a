package mcptest

import (
	"context"
	"errors"
	"sync"
	"time"
)

// enteredBuffer bounds how many un-read "entered" signals a hold keeps; more
// calls than this still block, they just stop signalling.
const enteredBuffer = 64

var errClosing = errors.New("mcptest: server closing")

// hold parks calls of one tool until released, so a test can act while a
// call is known to be inside the server (cancel it, retry it, crash...).
type hold struct {
	entered  chan struct{}
	released chan struct{}
	once     sync.Once
}

// Hold makes calls of tool block inside the handler, after they are counted
// in Calls, until release is called. Each such call sends once on entered
// (without blocking). A call whose request ends first returns without
// executing; note the SDK's stateful server ends it only when the client's
// notifications/cancelled arrives, not when the HTTP request drops. release
// is idempotent; it also lifts the hold for later calls.
func (s *Server) Hold(tool string) (entered <-chan struct{}, release func()) {
	h := &hold{entered: make(chan struct{}, enteredBuffer), released: make(chan struct{})}
	s.mu.Lock()
	s.holds[tool] = h
	s.mu.Unlock()
	return h.entered, func() {
		h.once.Do(func() {
			s.mu.Lock()
			if s.holds[tool] == h {
				delete(s.holds, tool)
			}
			s.mu.Unlock()
			close(h.released)
		})
	}
}

// SetDelay makes every later call of tool wait d before running, so a test
// can exercise client timeouts; 0 removes the delay.
func (s *Server) SetDelay(tool string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delays[tool] = d
}

// enter records a call (its index in the log) and waits out any hold and delay. A non-nil error
// means the request (or the server) ended first and the body must not run.
func (s *Server) enter(ctx context.Context, tool, key, replica string) (int, error) {
	s.mu.Lock()
	at := len(s.log)
	s.log = append(s.log, Call{Tool: tool, Key: key, Replica: replica, At: time.Now()})
	s.calls[tool]++
	s.inFlight[tool]++
	s.keys[tool] = append(s.keys[tool], key)
	h, d := s.holds[tool], s.delays[tool]
	s.mu.Unlock()

	if h != nil {
		select {
		case h.entered <- struct{}{}:
		default:
		}
		if err := wait(ctx, s, h.released); err != nil {
			return at, err
		}
	}
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		return at, wait(ctx, s, t.C)
	}
	return at, nil
}

// wait blocks until done fires, ctx ends or the server closes.
func wait[T any](ctx context.Context, s *Server, done <-chan T) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closing:
		return errClosing
	}
}
