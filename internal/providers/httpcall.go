package providers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/builtin"
	"github.com/agentrun-dev/agentrun-operator/internal/egress"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/money"
)

// The operator's own moves, offered by every HTTP provider (see package
// builtin): transition moves the run to another stage, complete finishes
// it with its output, and spawn_agent, fan_out and sleep map onto the
// answer's other moves.
const (
	ToolTransition = builtin.Transition
	ToolComplete   = builtin.Complete
	ToolSpawnAgent = builtin.SpawnAgent
	ToolFanOut     = builtin.FanOut
	ToolSleep      = builtin.Sleep
)

// offeredTools is every tool a call offers: the operator's, then the
// request's, skipping unnamed tools and repeated names (providers refuse
// duplicates). external is the set of the request's tools that made it.
func offeredTools(req Request) (tools []ToolSpec, external map[string]bool) {
	seen := map[string]bool{}
	for _, t := range builtin.Moves {
		seen[t.Name] = true
	}
	tools = append(tools, builtin.Moves...)
	external = map[string]bool{}
	for _, t := range req.Tools {
		if t.Name == "" || seen[t.Name] {
			continue
		}
		seen[t.Name], external[t.Name] = true, true
		tools = append(tools, t)
	}
	return tools, external
}

// toolSchema decodes a tool's input schema. Both APIs want an object schema,
// so anything else (empty, malformed, not an object) falls back to the
// schema of a tool without arguments.
func toolSchema(t ToolSpec) map[string]any {
	var m map[string]any
	if json.Unmarshal(t.InputSchema, &m) != nil || m == nil {
		m = map[string]any{}
	}
	if _, ok := m["type"]; !ok {
		m["type"] = "object"
	}
	return m
}

// applyToolCall maps one of the model's tool calls onto the response. Of
// transition and complete, the first well-formed call decides. Calls to the
// request's external tools become Calls, for the run to execute; every
// other call is kept in Moves as made, with why nothing acted on it when
// nothing did (an unknown tool, malformed arguments, a second transition),
// so later calls can show the model what it did. Every call counts in
// ToolCalls, used or not.
func applyToolCall(resp *journal.Response, external map[string]bool, id, name string, args []byte) {
	resp.ToolCalls++
	if strings.TrimSpace(string(args)) == "" {
		args = []byte("{}")
	}
	if name != ToolTransition && name != ToolComplete && name != ToolSpawnAgent && name != ToolFanOut && name != ToolSleep && external[name] {
		// Kept even when the arguments are not an object: the run
		// refuses the call and tells the model why.
		resp.Calls = append(resp.Calls, journal.ToolCall{ID: id, Name: name, Arguments: string(args)})
		return
	}
	resp.Moves = append(resp.Moves, journal.Move{
		ToolCall: journal.ToolCall{ID: id, Name: name, Arguments: string(args)},
		Ignored:  applyMove(resp, name, args),
	})
}

// decided is why a second transition or complete call is not acted on.
const decided = "an earlier transition or complete call in the same answer decides"

// applyMove applies a call to one of the operator's moves, and says why
// it did not when it did not.
func applyMove(resp *journal.Response, name string, args []byte) (ignored string) {
	switch name {
	case ToolTransition:
		var a struct {
			Target string `json:"target"`
		}
		switch {
		case resp.Complete || resp.Next != "":
			return decided
		case json.Unmarshal(args, &a) != nil || a.Target == "":
			return `the arguments must be an object with a non-empty "target"`
		}
		resp.Next = a.Target
	case ToolComplete:
		var a struct {
			Output string `json:"output"`
		}
		switch {
		case resp.Complete || resp.Next != "":
			return decided
		case json.Unmarshal(args, &a) != nil:
			return `the arguments must be an object with an "output" string`
		}
		resp.Complete, resp.Output = true, a.Output
	case ToolSpawnAgent:
		var a struct {
			Blueprint string `json:"blueprint"`
			Task      string `json:"task"`
		}
		if json.Unmarshal(args, &a) != nil || a.Blueprint == "" {
			return `the arguments must be an object with a non-empty "blueprint"`
		}
		resp.Spawns = append(resp.Spawns, journal.Spawn{Agent: a.Blueprint, Task: a.Task})
	case ToolFanOut:
		var a struct {
			Items []string `json:"items"`
		}
		if json.Unmarshal(args, &a) != nil {
			return `the arguments must be an object with an "items" list of strings`
		}
		resp.Items = append(resp.Items, a.Items...)
	case ToolSleep:
		// A float decodes models that write 30.0; the bound keeps the
		// conversion to int defined.
		var a struct {
			Seconds float64 `json:"seconds"`
		}
		switch {
		case resp.SleepSeconds != 0:
			return "an earlier sleep call in the same answer decides"
		case json.Unmarshal(args, &a) != nil || a.Seconds < 1 || a.Seconds > math.MaxInt32:
			return `the arguments must be an object with "seconds" of at least 1`
		}
		resp.SleepSeconds = int(a.Seconds)
	default:
		return fmt.Sprintf("no tool named %q is offered", name)
	}
	return ""
}

// userContent is the user message of a call: the task, what its parent
// sent it, a person's instructions to a stage sent back, what people
// answered at the checkpoints before this stage, the document the
// stage works on, why the run is in this stage, how to leave it, then the
// fan-out workers' outputs when the stage merges them.
func userContent(req Request) string {
	task := req.Task
	if req.OutputInstructions != "" {
		task += "\n\nOutput: " + req.OutputInstructions
	}
	task += parentMessages(req.Messages)
	if req.Directive != "" {
		task += "\n\nA person sent this stage back with these instructions:\n" + req.Directive
	}
	for _, c := range req.Choices {
		task += fmt.Sprintf("\n\nAt checkpoint %q a person answered:\n%s", c.Point, c.Text)
	}
	if d := req.Document; d != nil {
		content := d.Content
		if strings.TrimSpace(content) == "" {
			content = "(empty)"
		}
		task += fmt.Sprintf("\n\nRegion %q, the document this stage works on (replace it with the write_region tool):\n%s", d.Name, content)
	}
	if req.StageNote != "" {
		task += "\n\nWhy this stage was entered: " + req.StageNote
	}
	if req.TransitionPrompt != "" {
		task += "\n\n" + req.TransitionPrompt
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

// parentMessages renders messages from the run's parent for a user
// message ("" when there are none).
func parentMessages(msgs []string) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("\n\nMessage from the parent run: ")
		b.WriteString(m)
	}
	return b.String()
}

// AllMessages are every message from the parent a request shows, oldest
// first.
func AllMessages(req Request) []string {
	out := append([]string(nil), req.Messages...)
	for _, t := range req.History {
		out = append(out, t.Messages...)
	}
	return out
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
	// header is the response's headers (nil when unknown), for the wait
	// the provider asks for.
	header http.Header
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
	class, retryable := ClassifyStatus(f.status)
	e := &Error{Class: class, Status: f.status, Message: msg, RateLimited: f.rateLimited()}
	e.Overloaded = e.RateLimited && (f.status == 529 || f.status == http.StatusServiceUnavailable || f.kind == "overloaded_error")
	if retryable {
		now := time.Now()
		if e.RateLimited {
			e.RetryAfter, _ = RateLimitHint(f.header, now)
		} else {
			// Reset headers describe a rate-limit window, not a wait
			// asked for: only retry-after counts when not rate limited.
			e.RetryAfter, _ = retryAfterHint(f.header, now)
		}
	}
	return e
}

// rateLimited reports whether the failure is a refusal to be tried again
// later (see Error.RateLimited); credits() failures are not.
func (f apiFailure) rateLimited() bool {
	switch f.status {
	case http.StatusTooManyRequests:
		return !f.credits()
	case 529: // Anthropic's overloaded_error
		return true
	case http.StatusServiceUnavailable:
		return f.header.Get("Retry-After") != "" || f.header.Get("Retry-After-Ms") != ""
	}
	return false
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
	f := apiFailure{status: res.StatusCode, header: res.Header}
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

// responseHeader is the headers of the first response given, nil when
// there is none (an SDK error carries its response; the one captured with
// WithResponseInto is the same).
func responseHeader(res ...*http.Response) http.Header {
	for _, r := range res {
		if r != nil {
			return r.Header
		}
	}
	return nil
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

// transportError classifies a failure with no HTTP response: the egress
// policy's refusal, the call's deadline, the HTTP client's timeout, a
// refused connection, a failed DNS lookup or TLS handshake.
func transportError(ctx context.Context, err error, key string) *Error {
	msg := Redact(err.Error(), key)
	var netErr net.Error
	var dnsErr *net.DNSError
	var opErr *net.OpError
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var refusal *egress.Refusal
	switch {
	case errors.As(err, &refusal):
		// Classified before every network class: a refusal arrives as a
		// dial *net.OpError, and it is a policy decision, not an outage.
		return &Error{Class: journal.FailEgressRefused, Message: Redact(refusal.Error()+". "+refusal.Remedy(), key)}
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

// NoMessage is the one text the operator writes where a provider's rules
// demand a message and nobody wrote one: the user message between two
// answers when the run called the model again with nothing to tell it (the
// roles must alternate, and OpenAI-compatible servers' chat templates often
// demand it too), and the text of an answer that had neither text nor tool
// calls (no message may be empty). It is plainly the machine's, never
// words put in a person's or the model's mouth.
const NoMessage = "[agentrun: no message]"

// turn is one History entry as sent: texts never empty where providers
// refuse empty messages, and every tool call with an ID.
type turn struct {
	assistant, feedback string
	tools               []journal.ToolResult
}

// turns prepares History. A turn without tool calls is an assistant text
// and the feedback, NoMessage standing for either when there is none. A
// turn with tool calls keeps its text as is (it may be empty) and its
// feedback only when there is some: the tool results answer it. Every
// call has an ID no other call of the history has (Anthropic refuses
// repeated ones, and some OpenAI-compatible servers number each answer's
// calls from 1): a call without one gets "call_<n>", n counting the
// history's calls, and a repeated one a "_<k>" suffix, so the same call has
// the same ID on every request.
func turns(req Request) []turn {
	var out []turn
	n := 0
	seen := map[string]bool{}
	for _, t := range req.History {
		tt := turn{assistant: t.Assistant, feedback: t.Feedback}
		tt.feedback = strings.TrimSpace(tt.feedback + parentMessages(t.Messages))
		for _, r := range t.Tools {
			r.ID = uniqueID(r.ID, n, seen)
			n++
			tt.tools = append(tt.tools, r)
		}
		if len(tt.tools) == 0 {
			if strings.TrimSpace(tt.assistant) == "" {
				tt.assistant = NoMessage
			}
			if tt.feedback == "" {
				tt.feedback = NoMessage
			}
		}
		out = append(out, tt)
	}
	return out
}

// uniqueID is the ID a history's n-th call is sent with (see turns); seen
// holds the IDs given so far.
func uniqueID(id string, n int, seen map[string]bool) string {
	if id == "" {
		id = fmt.Sprintf("call_%d", n)
	}
	out := id
	for k := 2; seen[out]; k++ {
		out = fmt.Sprintf("%s_%d", id, k)
	}
	seen[out] = true
	return out
}

// argsObject is a call's arguments as a JSON object, for APIs that take
// them as one: arguments that are not an object (a call the run refused)
// are sent as {}.
func argsObject(args string) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(args), &m) != nil || m == nil {
		return json.RawMessage("{}")
	}
	return json.RawMessage(args)
}
