// Package callbacks delivers a run's terminal notification: one signed POST
// per terminal transition, with a delivery id that stays the same across
// retries and manager restarts, so a receiver can drop duplicates.
//
// Signing: the header X-AgentRun-Signature is "t=<unix seconds>,v1=<hex>",
// where hex is HMAC-SHA256(key, "<t>." + body) over the exact body bytes.
// Putting the timestamp inside the signed content lets a receiver refuse
// replays older than its tolerance (Verify).
package callbacks

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/egress"
	"github.com/agentrun-dev/agentrun-operator/internal/retry"
)

// Headers.
const (
	HeaderSignature = "X-AgentRun-Signature"
	HeaderDelivery  = "X-AgentRun-Delivery"
	HeaderEvent     = "X-AgentRun-Event"
	// EventCompleted is sent once per terminal transition.
	EventCompleted = "agent_completed"
)

// DeliveryID is stable for a run: the same across retries and restarts.
func DeliveryID(runUID string) string { return EventCompleted + ":" + runUID }

// Sign returns the signature header value for body at t.
func Sign(key []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + mac(key, ts, body)
}

func mac(key []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Verify checks a signature header against body: the HMAC must match (in
// constant time) and the timestamp must be within tolerance of now.
func Verify(key []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return errors.New("malformed signature header")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("signature timestamp is %s away from now, beyond the %s tolerance", d.Round(time.Second), tolerance)
	}
	want, _ := hex.DecodeString(mac(key, ts, body))
	got, err := hex.DecodeString(sig)
	if err != nil || !hmac.Equal(want, got) {
		return errors.New("signature does not match")
	}
	return nil
}

// Policy bounds delivery attempts.
type Policy struct {
	Attempts   int
	PerAttempt time.Duration
	BaseDelay  time.Duration
	MaxDelay   time.Duration
}

// DefaultPolicy is the seeds' backoff: 500ms * 2^(n-1) capped at 30s, 10s per
// attempt, four attempts in all.
var DefaultPolicy = Policy{Attempts: 4, PerAttempt: 10 * time.Second, BaseDelay: 500 * time.Millisecond, MaxDelay: 30 * time.Second}

// Result is how a delivery went.
type Result struct {
	Attempts int
	// Delivered: the receiver answered 2xx.
	Delivered bool
	// Err is the last failure (nil when delivered).
	Err error
}

// Deliver POSTs body to url, retrying only network errors, timeouts, 408,
// 429 and 5xx with capped exponential backoff and jitter. Any other status
// is final, and so is a refusal of the egress policy (c's transport and
// redirect check), which Err then wraps with its remedy. The same delivery id goes with every attempt; each attempt is
// signed afresh with its own timestamp.
func Deliver(ctx context.Context, c *http.Client, p Policy, url, id string, key, body []byte, now func() time.Time) Result {
	b := retry.Backoff{Attempts: p.Attempts, Base: p.BaseDelay, Cap: p.MaxDelay, Jitter: 0.25}
	n, err := retry.Do(ctx, b, func(int) (bool, error) {
		return post(ctx, c, p.PerAttempt, url, id, key, body, now())
	})
	if err == nil {
		return Result{Attempts: n, Delivered: true}
	}
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	return Result{Attempts: n, Err: err}
}

func post(ctx context.Context, c *http.Client, timeout time.Duration, url, id string, key, body []byte, t time.Time) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderDelivery, id)
	req.Header.Set(HeaderEvent, EventCompleted)
	if len(key) > 0 {
		req.Header.Set(HeaderSignature, Sign(key, t, body))
	}
	resp, err := c.Do(req)
	var refusal *egress.Refusal
	switch {
	case errors.As(err, &refusal):
		// The egress policy refused the address (or a redirect's): a policy
		// decision, not an outage, so it is final and never retried.
		return false, fmt.Errorf("posting to the callback: %w (not retried). %s", err, refusal.Remedy())
	case err != nil:
		return true, fmt.Errorf("posting to the callback: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
		return false, nil
	case s == http.StatusRequestTimeout || s == http.StatusTooManyRequests || s >= 500:
		return true, fmt.Errorf("callback answered HTTP %d", s)
	default:
		return false, fmt.Errorf("callback answered HTTP %d (not retried)", s)
	}
}
