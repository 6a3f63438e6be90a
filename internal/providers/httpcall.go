package providers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"syscall"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/money"
)

// The tools every HTTP provider offers the model: transition moves the run
// to another stage, complete finishes it with its output.
const (
	ToolTransition = "transition"
	ToolComplete   = "complete"
)

const (
	transitionDescription = "Move the run to the next stage. Call this when the current stage's work is done and another stage should continue."
	completeDescription   = "Finish the whole run with its final output. Call this when the task is done."
)

// transitionSchema and completeSchema are the JSON-schema properties of the
// two tools.
func transitionSchema() map[string]any {
	return map[string]any{"target": map[string]any{"type": "string", "description": "Name of the stage to move to."}}
}

func completeSchema() map[string]any {
	return map[string]any{"output": map[string]any{"type": "string", "description": "The run's final output."}}
}

// applyToolCall maps one of the model's tool calls onto the response. The
// first recognised, well-formed call decides; later ones, calls to unknown
// tools and calls with malformed arguments are ignored, leaving a response
// with neither Next nor Complete (the model did not choose).
func applyToolCall(resp *journal.Response, name string, args []byte) {
	resp.ToolCalls++ // every call the model made counts, used or not
	if resp.Next != "" || resp.Complete {
		return
	}
	switch name {
	case ToolTransition:
		var a struct {
			Target string `json:"target"`
		}
		if json.Unmarshal(args, &a) == nil && a.Target != "" {
			resp.Next = a.Target
		}
	case ToolComplete:
		var a struct {
			Output string `json:"output"`
		}
		if len(args) == 0 || strings.TrimSpace(string(args)) == "" {
			args = []byte("{}")
		}
		if json.Unmarshal(args, &a) == nil {
			resp.Complete, resp.Output = true, a.Output
		}
	}
}

// userContent is the user message of a call: the task, followed by the
// fan-out workers' outputs when the stage merges them.
func userContent(req Request) string {
	task := req.Task
	if req.OutputInstructions != "" {
		task += "\n\nOutput: " + req.OutputInstructions
	}
	if len(req.ChildOutputs) == 0 {
		return task
	}
	var b strings.Builder
	b.WriteString(task)
	fmt.Fprintf(&b, "\n\nOutputs of the %d workers, in item order:", len(req.ChildOutputs))
	for i, out := range req.ChildOutputs {
		fmt.Fprintf(&b, "\n\n--- worker %d ---\n%s", i+1, out)
	}
	return b.String()
}

// Redact removes a secret value from text that may echo it (provider error
// bodies sometimes quote the key they rejected). Every surface that records
// such text calls this one.
func Redact(s, key string) string {
	if key == "" {
		return s
	}
	return strings.ReplaceAll(s, key, "[redacted]")
}

// apiFailure is what an HTTP error response says, in provider-neutral form.
type apiFailure struct {
	status int
	// kind is the provider's machine-readable error type or code.
	kind    string
	message string
}

// credits reports whether the failure says the account is out of credit or
// quota: a 402, or a 400/429 whose type, code or message says so (OpenAI's
// insufficient_quota, Anthropic's billing_error and "credit balance is too
// low"). Auth, permission and server errors keep their own class whatever
// their message says.
func (f apiFailure) credits() bool {
	switch f.status {
	case http.StatusPaymentRequired:
		return true
	case http.StatusBadRequest, http.StatusTooManyRequests:
		return saysCredits(f.kind) || saysCredits(f.message)
	}
	return false
}

// classify turns an API failure into a classified Error. Credit and quota
// exhaustion is never retryable: when the status alone would say retry
// (a 429), Status is left 0 and the status goes into the message, so
// ClassifyStatus-based retry loops stop.
func (f apiFailure) classify(key string) *Error {
	msg := f.message
	if msg == "" {
		msg = http.StatusText(f.status)
	}
	if f.kind != "" && !strings.Contains(msg, f.kind) {
		msg = f.kind + ": " + msg
	}
	msg = Redact(msg, key)
	if f.credits() {
		if _, retryable := ClassifyStatus(f.status); retryable {
			return &Error{Class: journal.FailCredits, Message: fmt.Sprintf("HTTP %d: %s", f.status, msg)}
		}
		return &Error{Class: journal.FailCredits, Status: f.status, Message: msg}
	}
	class, _ := ClassifyStatus(f.status)
	return &Error{Class: class, Status: f.status, Message: msg}
}

// saysCredits reports whether an error type, code or message says the
// account is out of credit or quota. A bare "quota" is not enough: some
// providers report short-lived per-minute quotas with it, and those are
// rate limits worth retrying.
func saysCredits(s string) bool {
	s = strings.ToLower(s)
	for _, w := range []string{"insufficient_quota", "billing_error", "current quota", "out of quota", "credit", "billing", "balance is too low", "payment required"} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// failureFromBody reads an error response the SDK could not parse into its
// own error type (proxies, OpenAI-compatible servers with other shapes:
// {"error":"..."}, {"message":"..."}, {"detail":"..."}).
func failureFromBody(res *http.Response) apiFailure {
	f := apiFailure{status: res.StatusCode}
	if res.Body == nil {
		return f
	}
	b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	var shapes struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  any             `json:"detail"`
		Type    string          `json:"type"`
		Code    any             `json:"code"`
	}
	if json.Unmarshal(b, &shapes) == nil {
		var nested struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    any    `json:"code"`
		}
		var str string
		switch {
		case json.Unmarshal(shapes.Error, &nested) == nil && (nested.Message != "" || nested.Type != ""):
			f.message, f.kind = nested.Message, firstNonEmpty(codeString(nested.Code), nested.Type)
		case json.Unmarshal(shapes.Error, &str) == nil && str != "":
			f.message = str
		case shapes.Message != "":
			f.message, f.kind = shapes.Message, firstNonEmpty(codeString(shapes.Code), shapes.Type)
		case shapes.Detail != nil:
			f.message = fmt.Sprint(shapes.Detail)
		}
	}
	if f.message == "" {
		f.message = strings.TrimSpace(string(b))
		if len(f.message) > 512 {
			f.message = f.message[:512] + "…"
		}
	}
	return f
}

func codeString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// transportError classifies a failure with no HTTP response: the call's
// deadline, the HTTP client's timeout, a refused connection, a failed DNS
// lookup or TLS handshake.
func transportError(ctx context.Context, err error, key string) *Error {
	msg := Redact(err.Error(), key)
	var netErr net.Error
	var dnsErr *net.DNSError
	var opErr *net.OpError
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &Error{Class: journal.FailTimedOut, Message: "no answer before the call's deadline: " + msg}
	case errors.Is(err, context.Canceled) || ctx.Err() != nil:
		return &Error{Class: journal.FailFailed, Message: "call cancelled: " + msg}
	case errors.As(err, &dnsErr) && !dnsErr.IsTimeout:
		return &Error{Class: journal.FailUnreachable, Message: msg}
	case errors.As(err, &netErr) && netErr.Timeout():
		return &Error{Class: journal.FailTimedOut, Message: msg}
	case errors.As(err, &dnsErr),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.As(err, &opErr) && opErr.Op == "dial",
		errors.As(err, &certErr), errors.As(err, &unknownAuth), errors.As(err, &hostErr):
		return &Error{Class: journal.FailUnreachable, Message: msg}
	default:
		return &Error{Class: journal.FailFailed, Message: msg}
	}
}

// parseCostUSD converts a provider-reported USD cost (a JSON number, or a
// string holding one) to nano-dollars exactly, from its decimal text rather
// than through a float. Amounts finer than a nano-dollar round half up. It
// returns false for anything that is not a non-negative number.
func parseCostUSD(raw string) (int64, bool) {
	raw = strings.TrimSpace(raw)
	if s, ok := strings.CutPrefix(raw, `"`); ok {
		raw = strings.TrimSuffix(s, `"`)
	}
	if raw == "" || raw == "null" {
		return 0, false
	}
	if n, err := money.ParseUSD(raw); err == nil {
		return int64(n), true
	}
	// Exponent notation, or more than nine decimals: the text is still an
	// exact decimal, so do the arithmetic on rationals.
	r, ok := new(big.Rat).SetString(raw)
	if !ok || r.Sign() < 0 {
		return 0, false
	}
	r.Mul(r, big.NewRat(1_000_000_000, 1))
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if m.Lsh(m, 1).Cmp(r.Denom()) >= 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() {
		return 0, false
	}
	return q.Int64(), true
}

// defaultHTTPClient is used when a constructor is given none. It sets no
// overall timeout: the caller's context bounds each call.
func defaultHTTPClient() *http.Client {
	if t, ok := http.DefaultTransport.(*http.Transport); ok {
		return &http.Client{Transport: t.Clone()}
	}
	return &http.Client{Transport: http.DefaultTransport}
}

func nonNegative(n int64) int64 { return max(n, 0) }

// turns renders History as alternating assistant and user texts, never
// empty (providers refuse empty messages).
func turns(req Request) (assistant, user []string) {
	for _, t := range req.History {
		a := t.Assistant
		if strings.TrimSpace(a) == "" {
			a = "(no text)"
		}
		f := t.Feedback
		if f == "" {
			f = "Continue."
		}
		assistant, user = append(assistant, a), append(user, f)
	}
	return assistant, user
}
