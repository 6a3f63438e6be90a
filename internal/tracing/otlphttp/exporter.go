package otlphttp

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

const (
	defaultRetryInitial = time.Second
	defaultRetryMax     = 10 * time.Second
	// excerptLen is how much of a refusal's body an error quotes.
	excerptLen = 200
	// drainLimit is how much of a response is read before the connection
	// is given up instead of reused.
	drainLimit = 4 << 20
	userAgent  = "agentrun-operator OTLP/HTTP exporter"
)

// ErrShutdown is what an export after Shutdown returns.
var ErrShutdown = errors.New("otlphttp: the exporter is shut down")

// Exporter is an sdktrace.SpanExporter sending OTLP/HTTP protobuf.
type Exporter struct {
	url      string // the traces URL
	shownURL string // it with any password redacted, for errors
	headers  http.Header
	secrets  []string // the header values, kept out of error messages
	gzip     bool
	timeout  time.Duration
	initial  time.Duration
	maxWait  time.Duration
	client   *http.Client
	idle     interface{ CloseIdleConnections() }

	// stop is cancelled by Shutdown when its context ends before the
	// exports in flight do; they are cut short then.
	stop       context.Context
	cancelStop context.CancelFunc
	mu         sync.RWMutex
	stopped    bool
	inFlight   sync.WaitGroup
}

var _ sdktrace.SpanExporter = (*Exporter)(nil)

// New checks c and builds its exporter. It connects to nothing: the first
// export does.
func New(c Config) (*Exporter, error) {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		what := "(not a URL)"
		if err == nil {
			what = shown(u)
		}
		return nil, fmt.Errorf("otlphttp: the traces endpoint %s is not an http:// or https:// URL with a host", what)
	}
	e := &Exporter{
		url: u.String(), shownURL: shown(u), headers: http.Header{},
		timeout: c.Timeout, initial: c.RetryInitial, maxWait: c.RetryMax,
	}
	if e.timeout <= 0 {
		e.timeout = DefaultTimeout
	}
	if e.initial <= 0 {
		e.initial = defaultRetryInitial
	}
	if e.maxWait <= 0 {
		e.maxWait = defaultRetryMax
	}
	if e.maxWait < e.initial {
		e.maxWait = e.initial
	}
	switch strings.ToLower(c.Compression) {
	case "gzip":
		e.gzip = true
	case "", "none":
	default:
		return nil, fmt.Errorf("otlphttp: compression %q: want gzip or none", c.Compression)
	}
	for k, v := range c.Headers {
		if !validHeaderName(k) {
			return nil, fmt.Errorf("otlphttp: %q is not a valid header name", k)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return nil, fmt.Errorf("otlphttp: the value of header %q holds a line break or NUL", k)
		}
		e.headers.Set(k, v)
		if v != "" {
			e.secrets = append(e.secrets, v)
		}
	}
	tlsConf, err := tlsConfig(c)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsConf
	e.idle = tr
	e.client = &http.Client{
		Transport: tr,
		// A redirect is answered as the refusal it is, rather than
		// followed with the headers (API keys) to wherever it points.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	e.stop, e.cancelStop = context.WithCancel(context.Background())
	return e, nil
}

// shown is u as errors name it: no password, and no query, which some
// endpoints carry a token in.
func shown(u *url.URL) string {
	v := *u
	if v.RawQuery != "" {
		v.RawQuery = "..."
	}
	v.Fragment, v.RawFragment = "", ""
	return v.Redacted()
}

func tlsConfig(c Config) (*tls.Config, error) {
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("otlphttp: reading the CA certificate: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("otlphttp: %s holds no PEM certificate", c.CAFile)
		}
		conf.RootCAs = pool
	}
	switch {
	case c.ClientCertFile != "" && c.ClientKeyFile != "":
		cert, err := tls.LoadX509KeyPair(c.ClientCertFile, c.ClientKeyFile)
		if err != nil {
			return nil, fmt.Errorf("otlphttp: loading the client certificate: %w", err)
		}
		conf.Certificates = []tls.Certificate{cert}
	case c.ClientCertFile != "" || c.ClientKeyFile != "":
		return nil, errors.New("otlphttp: a client certificate needs both the certificate and the key file")
	}
	return conf, nil
}

// ExportSpans sends spans in one request, retrying while the collector
// says it is only busy, within ctx and the configured timeout.
func (e *Exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.RLock()
	if e.stopped {
		e.mu.RUnlock()
		return ErrShutdown
	}
	e.inFlight.Add(1)
	e.mu.RUnlock()
	defer e.inFlight.Done()

	if err := ctx.Err(); err != nil {
		return err
	}
	if len(spans) == 0 {
		return nil
	}
	body, err := MarshalRequest(ResourceSpans(spans))
	if err != nil {
		return fmt.Errorf("otlphttp: encoding spans: %w", err)
	}
	if e.gzip {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		if _, err := zw.Write(body); err != nil {
			return fmt.Errorf("otlphttp: compressing spans: %w", err)
		}
		if err := zw.Close(); err != nil {
			return fmt.Errorf("otlphttp: compressing spans: %w", err)
		}
		body = b.Bytes()
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	defer context.AfterFunc(e.stop, cancel)()
	return e.send(ctx, body)
}

// send posts body until it is taken, refused for good, or time is up.
func (e *Exporter) send(ctx context.Context, body []byte) error {
	for attempt := 0; ; attempt++ {
		retryAfter, err := e.post(ctx, body)
		if err == nil {
			return nil
		}
		var re *retryable
		if !errors.As(err, &re) {
			return err
		}
		wait := max(e.backoff(attempt), retryAfter)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return fmt.Errorf("%w; no time left to retry within the export's timeout", re.err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w; gave up retrying: %w", re.err, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// backoff is the wait before retry attempt+1: doubling from the initial
// wait up to the maximum, with up to a fifth taken off at random so
// managers refused together do not come back together.
func (e *Exporter) backoff(attempt int) time.Duration {
	d := e.initial
	for i := 0; i < attempt && d < e.maxWait; i++ {
		d *= 2
	}
	d = min(d, e.maxWait)
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}

// retryable wraps a refusal worth trying again.
type retryable struct{ err error }

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

// StatusError is a collector's refusal of an export.
type StatusError struct {
	// Code is the HTTP status code.
	Code int
	// Excerpt is the start of what the collector said (its Status
	// message for a protobuf answer), with header values taken out.
	Excerpt string
	url     string
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("otlphttp: the collector at %s answered %d %s", e.url, e.Code, http.StatusText(e.Code))
	if e.Excerpt != "" {
		msg += ": " + e.Excerpt
	}
	return msg
}

// post sends one request. A refusal to retry comes back as *retryable,
// with how long the collector asked to be left alone.
func (e *Exporter) post(ctx context.Context, body []byte) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("otlphttp: building the request to %s: %w", e.shownURL, err)
	}
	req.Header = e.headers.Clone()
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("User-Agent", userAgent)
	if e.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := e.client.Do(req)
	if err != nil {
		// net/http's error names the URL (with its password stripped, but
		// not its query) and no header.
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = e.shownURL
		}
		return 0, fmt.Errorf("otlphttp: exporting spans: %w", err)
	}
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	_ = resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		// An answer's partial_success (spans the collector rejected) is
		// not read: there is nothing the exporter could do about them.
		return 0, nil
	}
	serr := &StatusError{Code: resp.StatusCode, Excerpt: e.excerpt(resp.Header.Get("Content-Type"), head), url: e.shownURL}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return retryAfter(resp.Header.Get("Retry-After")), &retryable{err: serr}
	}
	return 0, serr
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, int64(time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// excerpt is a short, printable start of a refusal's body: the message
// of the google.rpc.Status an OTLP collector answers with in protobuf,
// or the text itself, with every header value redacted (a proxy may echo
// the request back).
func (e *Exporter) excerpt(contentType string, body []byte) string {
	text := string(body)
	if strings.HasPrefix(contentType, "application/x-protobuf") || strings.HasPrefix(contentType, "application/protobuf") {
		if m, ok := statusMessage(body); ok {
			text = m
		}
	}
	for _, s := range e.secrets {
		text = strings.ReplaceAll(text, s, "[redacted]")
	}
	var b strings.Builder
	space := false
	for _, r := range text {
		if b.Len() >= excerptLen {
			b.WriteString("...")
			break
		}
		switch {
		case r == utf8.RuneError:
			r = '?'
		case unicode.IsSpace(r):
			if !space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = true
			continue
		case !unicode.IsPrint(r):
			r = '?'
		}
		space = false
		b.WriteRune(r)
	}
	return strings.TrimSpace(b.String())
}

// statusMessage reads field 2 (message) of a google.rpc.Status.
func statusMessage(b []byte) (string, bool) {
	msg, found := "", false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", false
		}
		b = b[n:]
		if num == 2 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return "", false
			}
			msg, found = string(v), true
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return "", false
		}
		b = b[n:]
	}
	return msg, found
}

// Shutdown stops the exporter: exports after it fail with ErrShutdown.
// It waits for the exports in flight until ctx ends, and then cuts them
// short.
func (e *Exporter) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	e.stopped = true
	e.mu.Unlock()
	done := make(chan struct{})
	go func() {
		e.inFlight.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		e.cancelStop()
		<-done
	}
	e.cancelStop()
	e.idle.CloseIdleConnections()
	return err
}
