package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDoStopsOnSuccessFinalErrorOrAttempts(t *testing.T) {
	b := Backoff{Attempts: 4, Base: time.Millisecond, Cap: 4 * time.Millisecond}
	boom := errors.New("boom")
	cases := []struct {
		name      string
		fn        func(n int) (bool, error)
		wantN     int
		wantError bool
	}{
		{"succeeds at once", func(int) (bool, error) { return true, nil }, 1, false},
		{"succeeds on the third", func(n int) (bool, error) {
			if n < 3 {
				return true, boom
			}
			return false, nil
		}, 3, false},
		{"final error is not retried", func(int) (bool, error) { return false, boom }, 1, true},
		{"attempts run out", func(int) (bool, error) { return true, boom }, 4, true},
	}
	for _, c := range cases {
		n, err := Do(context.Background(), b, c.fn)
		if n != c.wantN || (err != nil) != c.wantError {
			t.Errorf("%s: %d attempts, err %v; want %d attempts, error %v", c.name, n, err, c.wantN, c.wantError)
		}
	}
}

func TestDoStopsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n, err := Do(ctx, Backoff{Attempts: 10, Base: time.Hour, Cap: time.Hour}, func(int) (bool, error) {
		cancel()
		return true, errors.New("boom")
	})
	if n != 1 || err == nil {
		t.Errorf("got %d attempts, err %v; want 1 attempt and the error", n, err)
	}
}

func TestDelayDoublesUpToTheCap(t *testing.T) {
	b := Backoff{Base: 500 * time.Millisecond, Cap: 30 * time.Second}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second}
	for i, w := range want {
		if d := b.Delay(i + 1); d != w {
			t.Errorf("Delay(%d) = %s, want %s", i+1, d, w)
		}
	}
	if d := b.Delay(40); d != 30*time.Second {
		t.Errorf("Delay(40) = %s, want the cap", d)
	}
}
