//go:build otlpgrpc

package tracing_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/agentrun-dev/agentrun-operator/internal/tracing"
)

// traceService is an OTLP/gRPC receiver.
type traceService struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names []string
}

func (s *traceService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s.names = append(s.names, sp.GetName())
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// TestExportsOverGRPC: protocol grpc sends to an OTLP/gRPC receiver.
func TestExportsOverGRPC(t *testing.T) {
	clearEnv(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	svc := &traceService{}
	coltracepb.RegisterTraceServiceServer(srv, svc)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	tr, err := tracing.New(context.Background(), tracing.Config{Enabled: true, Protocol: tracing.ProtocolGRPC, Endpoint: lis.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	r := tracing.RunOf("u", "")
	tr.Emit(tracing.Span{Trace: r.Trace, ID: r.Span(), Name: "invoke_agent a", Start: time.Now(), End: time.Now()})
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if len(svc.names) != 1 || svc.names[0] != "invoke_agent a" {
		t.Fatalf("gRPC receiver got %v", svc.names)
	}
}
