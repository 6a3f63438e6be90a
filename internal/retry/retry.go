// Package retry is the one backoff loop every step uses (model calls, tool
// calls, webhook deliveries, journal writes): capped exponential backoff
// with jitter, stopped by the context or by the attempt saying it is final.
package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff bounds a retry loop.
type Backoff struct {
	// Attempts is how many times fn runs at most (1 = no retry).
	Attempts int
	// Base is the first delay; each later one doubles, up to Cap.
	Base, Cap time.Duration
	// Jitter adds up to this fraction of each delay at random (0.5 = 50%),
	// so retries of many runs do not arrive together.
	Jitter float64
}

// Delay is the wait before attempt n+1 (n counts from 1), without jitter.
func (b Backoff) Delay(n int) time.Duration {
	d := b.Base << (n - 1)
	if d <= 0 || d > b.Cap {
		d = b.Cap
	}
	return d
}

// Do runs fn until it returns retry=false, the attempts run out, or ctx
// ends, and returns how many attempts ran and the last error. fn gets the
// attempt number, from 1.
func Do(ctx context.Context, b Backoff, fn func(attempt int) (retry bool, err error)) (int, error) {
	attempts := max(b.Attempts, 1)
	var err error
	for n := 1; ; n++ {
		var again bool
		again, err = fn(n)
		if err == nil || !again || n >= attempts || ctx.Err() != nil {
			return n, err
		}
		d := b.Delay(n)
		if b.Jitter > 0 {
			d += time.Duration(rand.Int64N(int64(float64(d)*b.Jitter) + 1))
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return n, err
		case <-t.C:
		}
	}
}
