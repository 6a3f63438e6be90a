// Package tracing exports the manager's OpenTelemetry traces: one trace per
// run tree, with spans for the run, its stage visits, its model and tool
// calls and its waits, named and attributed by the GenAI semantic
// conventions. A reconcile is short and a run outlives any process, so no
// span is ever held open: each is made whole, with the start and end times
// the journal and the steps recorded, once the thing it describes has
// ended, and its IDs are derived from the run's UID, so a manager that
// restarts continues the same trace.
//
// Tracing is off unless an OTLP endpoint is configured; off, the Tracer is
// nil and every method is a no-op that costs a nil check.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentrun-dev/agentrun-operator/internal/tracing/otlphttp"
)

// DefaultServiceName names the manager in traces when OTEL_SERVICE_NAME
// does not.
const DefaultServiceName = "agentrun-operator"

// Protocols an exporter speaks (OTEL_EXPORTER_OTLP_PROTOCOL's values).
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// Config says whether and where traces go.
type Config struct {
	// Enabled turns tracing on. FromEnv sets it when an OTLP endpoint is
	// in the environment.
	Enabled bool
	// Endpoint is the OTLP endpoint's URL (http://host:4318 for
	// http/protobuf, where /v1/traces is added when it has no path;
	// host:4317 or http://host:4317 for grpc). Empty: the
	// exporter reads OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
	// OTEL_EXPORTER_OTLP_ENDPOINT itself. The other OTEL_EXPORTER_OTLP_*
	// settings (headers, TLS, timeout, compression) are read either way.
	Endpoint string
	// Protocol is ProtocolHTTP (the default) or ProtocolGRPC, which only
	// a manager built with -tags otlpgrpc speaks.
	Protocol string
	// ServiceName is the resource's service.name (DefaultServiceName when
	// empty).
	ServiceName string
	// Content allows prompts and answers on model-call spans
	// (gen_ai.input.messages, gen_ai.output.messages). Off by default:
	// they may hold anything a tenant wrote. Tool arguments and results,
	// secrets and headers never go into a span.
	Content bool
	// BatchTimeout is how long finished spans wait before they are sent
	// (the SDK's default, or OTEL_BSP_SCHEDULE_DELAY, when zero).
	BatchTimeout time.Duration
}

// FromEnv reads the standard OpenTelemetry environment: tracing is on when
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT is set
// (and OTEL_TRACES_EXPORTER is not "none"), over the protocol
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL names,
// as OTEL_SERVICE_NAME.
func FromEnv() Config {
	c := Config{
		Enabled:     os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "",
		Protocol:    firstEnv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"),
		ServiceName: os.Getenv("OTEL_SERVICE_NAME"),
	}
	if strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")) == "none" {
		c.Enabled = false
	}
	return c
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(os.Getenv(n)); v != "" {
			return v
		}
	}
	return ""
}

// Tracer emits finished spans. A nil Tracer is tracing turned off.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	content  bool
}

// New builds the Tracer c asks for: nil, and no error, when tracing is
// off. The exporter connects lazily; an unreachable collector drops spans,
// it never stops the manager.
func New(ctx context.Context, c Config) (*Tracer, error) {
	if !c.Enabled {
		return nil, nil
	}
	exp, err := exporter(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("tracing: building the OTLP exporter: %w", err)
	}
	name := c.ServiceName
	if name == "" {
		name = DefaultServiceName
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", name)))
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: describing the service: %w", err)
	}
	var batch []sdktrace.BatchSpanProcessorOption
	if c.BatchTimeout > 0 {
		batch = append(batch, sdktrace.WithBatchTimeout(c.BatchTimeout))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, batch...),
		sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(givenIDs{}),
	)
	return &Tracer{provider: tp, tracer: tp.Tracer("github.com/agentrun-dev/agentrun-operator"), content: c.Content}, nil
}

// grpcExporter builds the OTLP/gRPC exporter. It is nil unless the
// manager is built with -tags otlpgrpc (grpc.go): gRPC adds 25 MB to the
// released binary (36 MB unstripped) and some 10 MiB to the manager's
// resident memory, for a protocol every collector also serves over HTTP.
var grpcExporter func(ctx context.Context, c Config) (sdktrace.SpanExporter, error)

func exporter(ctx context.Context, c Config) (sdktrace.SpanExporter, error) {
	switch c.Protocol {
	case "", ProtocolHTTP:
		hc, err := otlphttp.FromEnv()
		if err != nil {
			return nil, err
		}
		if c.Endpoint != "" {
			hc.URL = tracesURL(c.Endpoint)
		}
		return otlphttp.New(hc)
	case ProtocolGRPC:
		if grpcExporter == nil {
			return nil, fmt.Errorf("OTLP protocol %q is not built into this manager; use %s (the collector's port 4318), or build with -tags otlpgrpc", ProtocolGRPC, ProtocolHTTP)
		}
		return grpcExporter(ctx, c)
	}
	return nil, fmt.Errorf("unsupported OTLP protocol %q (want %s or %s)", c.Protocol, ProtocolHTTP, ProtocolGRPC)
}

// tracesURL is the traces path under a base endpoint, as the exporter
// makes it of OTEL_EXPORTER_OTLP_ENDPOINT; a URL with a path is taken as is.
func tracesURL(ep string) string {
	u, err := url.Parse(ep)
	if err != nil || (u.Path != "" && u.Path != "/") {
		return ep
	}
	u.Path = "/v1/traces"
	return u.String()
}

// On says whether spans are emitted: callers check it before building a
// span's attributes, so tracing off costs nothing more.
func (t *Tracer) On() bool { return t != nil }

// Content says whether prompts and answers may go into spans.
func (t *Tracer) Content() bool { return t != nil && t.content }

// Flush sends the spans emitted so far.
func (t *Tracer) Flush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.ForceFlush(ctx)
}

// Shutdown flushes and stops the exporter; spans emitted after it are
// dropped.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// Span is one finished span, with IDs the caller derived (see Run).
type Span struct {
	Trace trace.TraceID
	ID    trace.SpanID
	// Parent is the parent span's ID; zero for a trace's root.
	Parent     trace.SpanID
	Name       string
	Kind       trace.SpanKind
	Start, End time.Time
	Attrs      []attribute.KeyValue
	// Error, when set, is the failure's class: the span's status is Error
	// with it as the description, and error.type says it. Never a message
	// from a provider or a tool, which may echo what was sent.
	Error string
}

// Emit records a finished span.
func (t *Tracer) Emit(s Span) {
	if t == nil {
		return
	}
	ctx := withIDs(context.Background(), s.Trace, s.ID)
	if s.Parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: s.Trace, SpanID: s.Parent, TraceFlags: trace.FlagsSampled, Remote: true,
		}))
	}
	end := s.End
	if end.Before(s.Start) {
		end = s.Start
	}
	_, span := t.tracer.Start(ctx, s.Name, trace.WithTimestamp(s.Start), trace.WithSpanKind(s.Kind), trace.WithAttributes(s.Attrs...))
	if s.Error != "" {
		span.SetAttributes(attribute.String("error.type", s.Error))
		span.SetStatus(codes.Error, s.Error)
	}
	span.End(trace.WithTimestamp(end))
}
