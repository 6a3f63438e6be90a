package sqlstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// A burst of runs (a thousand created at once) asks the database for more
// operations than the pool has connections, and on a busy machine each takes
// tens of milliseconds: an operation can wait longer for a connection than
// its whole bound (DefaultOpTimeout) while the database answers every other
// one. Counted against the bound, that wait read as "the database is away"
// and parked every run on StoreUnavailable. So an operation first waits for
// its turn (one per connection), as long as the database keeps answering
// the operations ahead of it, and its bound starts once it has its turn. A
// database that answers nothing for a whole bound (frozen, partitioned) is
// still unavailable to the operations in line as well as to the one it
// holds.

// line hands out turns at the database, one per connection.
type line struct {
	turns chan struct{}
	// answered counts the operations that ended before their bound: the
	// database answered them (with rows, or with an error of its own).
	answered atomic.Uint64
}

func newLine(n int) *line {
	return &line{turns: make(chan struct{}, max(n, 1))}
}

// wait takes a turn. It waits while the operations ahead finish within
// their bound; after patience with none answered it gives up.
func (l *line) wait(ctx context.Context, patience time.Duration) error {
	for {
		before := l.answered.Load()
		t := time.NewTimer(patience)
		select {
		case l.turns <- struct{}{}:
			t.Stop()
			return nil
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if l.answered.Load() == before {
			return fmt.Errorf("no database operation ended within %v while this one waited for one of the %d connections: %w", patience, cap(l.turns), context.DeadlineExceeded)
		}
	}
}

// leave gives the turn back; answered says the operation ended within its
// bound.
func (l *line) leave(answered bool) {
	if answered {
		l.answered.Add(1)
	}
	<-l.turns
}
