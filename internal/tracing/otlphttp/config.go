// Package otlphttp is a span exporter that speaks OTLP/HTTP with protobuf
// bodies: it converts the SDK's finished spans into OTLP's trace messages
// and POSTs them to a collector's traces URL, reading the standard
// OTEL_EXPORTER_OTLP_* environment.
//
// It exists so the manager does not link OpenTelemetry's own OTLP
// exporters, which bring gRPC with them (even the HTTP one, through its
// shared configuration and the collector's generated service package).
// Nothing here imports go.opentelemetry.io/proto/otlp/collector/...: the
// one collector message the exporter sends is encoded by hand.
package otlphttp

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// DefaultURL is where spans go when the environment names no endpoint.
const DefaultURL = "http://localhost:4318/v1/traces"

// DefaultTimeout bounds one export, its retries included, when
// OTEL_EXPORTER_OTLP_TIMEOUT does not say otherwise.
const DefaultTimeout = 10 * time.Second

// Config is how the exporter sends.
type Config struct {
	// URL is the full traces URL spans are POSTed to (http or https).
	URL string
	// Headers go with every request. Their values are often API keys:
	// they never appear in an error or a log line.
	Headers map[string]string
	// Timeout bounds one export, retries included (DefaultTimeout when
	// zero).
	Timeout time.Duration
	// Compression is "gzip", or "" (or "none") for none.
	Compression string
	// CAFile is a PEM file of the CAs an https collector's certificate
	// is checked against (the system's roots when empty).
	CAFile string
	// ClientCertFile and ClientKeyFile are a PEM certificate and key the
	// exporter presents to a collector that asks for one (both or
	// neither).
	ClientCertFile, ClientKeyFile string
	// RetryInitial and RetryMax bound the backoff between retries of a
	// request the collector refused for now (429, 502, 503, 504): the
	// first wait, doubled each time up to the second. 1s and 10s when
	// zero.
	RetryInitial, RetryMax time.Duration
}

// FromEnv reads the standard environment, the traces-specific variable of
// each pair first:
//
//   - OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, taken as the traces URL as is, or
//     OTEL_EXPORTER_OTLP_ENDPOINT, a base URL under which /v1/traces is
//     added (DefaultURL when neither is set);
//   - OTEL_EXPORTER_OTLP_[TRACES_]HEADERS: key=value pairs separated by
//     commas, the values URL-encoded;
//   - OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT: milliseconds;
//   - OTEL_EXPORTER_OTLP_[TRACES_]COMPRESSION: gzip or none;
//   - OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE, _CLIENT_CERTIFICATE and
//     _CLIENT_KEY: PEM files, for an https endpoint.
//
// The endpoint is checked by New, so a caller that sets its own URL is
// not held to a bad one in the environment. An error names the variable,
// never a header's value.
func FromEnv() (Config, error) {
	c := Config{URL: DefaultURL, Timeout: DefaultTimeout}
	if v := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); strings.TrimSpace(v) != "" {
		c.URL = strings.TrimSpace(v)
	} else if v := os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); strings.TrimSpace(v) != "" {
		c.URL = JoinTracesPath(strings.TrimSpace(v))
	}
	if name, v := lookup("HEADERS"); name != "" {
		h, err := ParseHeaders(v)
		if err != nil {
			return Config{}, fmt.Errorf("%s: %w", name, err)
		}
		c.Headers = h
	}
	if name, v := lookup("TIMEOUT"); name != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 {
			return Config{}, fmt.Errorf("%s=%q: want a positive number of milliseconds", name, v)
		}
		c.Timeout = time.Duration(ms) * time.Millisecond
	}
	if name, v := lookup("COMPRESSION"); name != "" {
		switch strings.ToLower(v) {
		case "gzip":
			c.Compression = "gzip"
		case "none":
		default:
			return Config{}, fmt.Errorf("%s=%q: want gzip or none", name, v)
		}
	}
	_, c.CAFile = lookup("CERTIFICATE")
	_, c.ClientCertFile = lookup("CLIENT_CERTIFICATE")
	_, c.ClientKeyFile = lookup("CLIENT_KEY")
	return c, nil
}

// lookup is OTEL_EXPORTER_OTLP_TRACES_<suffix>, or failing that
// OTEL_EXPORTER_OTLP_<suffix>: the name of the one set, and its trimmed
// value; "" and "" when neither is.
func lookup(suffix string) (string, string) {
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_" + suffix, "OTEL_EXPORTER_OTLP_" + suffix} {
		if v := strings.TrimSpace(os.Getenv(name)); v != "" {
			return name, v
		}
	}
	return "", ""
}

// JoinTracesPath is the traces URL under a base endpoint, as
// OTEL_EXPORTER_OTLP_ENDPOINT is read: /v1/traces added to its path.
func JoinTracesPath(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return strings.TrimSuffix(base, "/") + "/v1/traces"
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	u.RawPath = ""
	return u.String()
}

// ParseHeaders reads OTEL_EXPORTER_OTLP_HEADERS's format: comma-separated
// key=value pairs, each value URL-encoded. An error says which pair is
// wrong by its position, never by its value.
func ParseHeaders(s string) (map[string]string, error) {
	out := map[string]string{}
	for i, pair := range strings.Split(s, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || !validHeaderName(k) {
			return nil, fmt.Errorf("entry %d is not key=value with a valid header name", i+1)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("the value of header %q (entry %d) is not URL-encoded correctly", k, i+1)
		}
		if strings.ContainsAny(dv, "\r\n\x00") {
			return nil, fmt.Errorf("the value of header %q (entry %d) holds a line break or NUL", k, i+1)
		}
		out[k] = dv
	}
	return out, nil
}

// validHeaderName: an HTTP token (RFC 9110).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("!#$%&'*+-.^_`|~", r):
		default:
			return false
		}
	}
	return true
}
