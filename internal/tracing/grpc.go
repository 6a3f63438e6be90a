//go:build otlpgrpc

package tracing

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// With -tags otlpgrpc the manager also speaks OTLP/gRPC, through
// OpenTelemetry's own exporter (which reads the OTEL_EXPORTER_OTLP_*
// environment itself).
func init() {
	grpcExporter = func(ctx context.Context, c Config) (sdktrace.SpanExporter, error) {
		var opts []otlptracegrpc.Option
		if c.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(grpcURL(c.Endpoint)))
		}
		return otlptracegrpc.New(ctx, opts...)
	}
}

// grpcURL gives a bare host:port a scheme (insecure, as the OTLP default
// for an http endpoint is).
func grpcURL(ep string) string {
	if strings.Contains(ep, "://") {
		return ep
	}
	return "http://" + ep
}
