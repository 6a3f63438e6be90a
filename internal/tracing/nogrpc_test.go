//go:build !otlpgrpc

package tracing_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/tracing"
)

// TestGRPCNotBuiltIn: the default build has no gRPC exporter, and says
// so, and what to do instead, rather than sending nowhere.
func TestGRPCNotBuiltIn(t *testing.T) {
	clearEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	c := tracing.FromEnv()
	if !c.Enabled || c.Protocol != tracing.ProtocolGRPC {
		t.Fatalf("FromEnv = %+v, want tracing on over grpc", c)
	}
	tr, err := tracing.New(context.Background(), c)
	if err == nil {
		_ = tr.Shutdown(context.Background())
		t.Fatal("New with protocol grpc succeeded in a build without gRPC")
	}
	for _, want := range []string{`OTLP protocol "grpc" is not built into this manager`, "http/protobuf", "4318", "-tags otlpgrpc"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
