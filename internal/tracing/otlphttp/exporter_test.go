package otlphttp_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/agentrun-dev/agentrun-operator/internal/tracing/otlphttp"
	"github.com/agentrun-dev/agentrun-operator/internal/tracing/otlptest"
)

func clearEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{"ENDPOINT", "HEADERS", "TIMEOUT", "COMPRESSION", "CERTIFICATE", "CLIENT_CERTIFICATE", "CLIENT_KEY"} {
		t.Setenv("OTEL_EXPORTER_OTLP_"+k, "")
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_"+k, "")
	}
}

// collector is a loopback OTLP/HTTP server whose answer to the n-th
// request (from 0) a test decides; it keeps what each request carried.
type collector struct {
	srv    *httptest.Server
	answer func(n int, w http.ResponseWriter, r *http.Request)
	mu     sync.Mutex
	reqs   []received
}

type received struct {
	header http.Header
	at     time.Time
	msg    *coltracepb.ExportTraceServiceRequest
	err    error
}

func newCollector(t *testing.T, tlsServer bool, answer func(n int, w http.ResponseWriter, r *http.Request)) *collector {
	t.Helper()
	c := &collector{answer: answer}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		msg, err := otlptest.Decode(r)
		c.mu.Lock()
		n := len(c.reqs)
		c.reqs = append(c.reqs, received{header: r.Header.Clone(), at: time.Now(), msg: msg, err: err})
		c.mu.Unlock()
		if r.URL.Path != "/v1/traces" {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		if c.answer != nil {
			c.answer(n, w, r)
			return
		}
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})
	c.srv = httptest.NewUnstartedServer(h)
	// The handshakes the TLS test fails on purpose are not news.
	c.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	if tlsServer {
		c.srv.StartTLS()
	} else {
		c.srv.Start()
	}
	t.Cleanup(c.srv.Close)
	return c
}

func (c *collector) received() []received {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]received(nil), c.reqs...)
}

// exporter builds an exporter from the environment, sending to url.
func exporter(t *testing.T, url string, edit func(*otlphttp.Config)) *otlphttp.Exporter {
	t.Helper()
	c, err := otlphttp.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if url != "" {
		c.URL = url
	}
	if edit != nil {
		edit(&c)
	}
	e, err := otlphttp.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	return e
}

var (
	traceA = trace.TraceID{0x0a, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	traceB = trace.TraceID{0x0b, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	spanA  = trace.SpanID{0xa1, 2, 3, 4, 5, 6, 7, 8}
	spanB  = trace.SpanID{0xb1, 2, 3, 4, 5, 6, 7, 8}
	spanP  = trace.SpanID{0xcc, 2, 3, 4, 5, 6, 7, 8}
)

func one() []sdktrace.ReadOnlySpan {
	return tracetest.SpanStubs{{
		Name:        "one",
		SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceA, SpanID: spanA, TraceFlags: trace.FlagsSampled}),
		StartTime:   time.Unix(1700000000, 0), EndTime: time.Unix(1700000001, 0),
	}}.Snapshots()
}

// TestEverySpanFieldRoundTrips: every kind of attribute value, events,
// links, dropped counts, status, trace state, flags and the grouping by
// resource and scope arrive as a collector decodes them.
func TestEverySpanFieldRoundTrips(t *testing.T) {
	clearEnv(t)
	col := newCollector(t, false, nil)
	e := exporter(t, col.srv.URL+"/v1/traces", nil)

	attrs := []attribute.KeyValue{
		attribute.Bool("bool", true),
		attribute.Int64("int", -42),
		attribute.Float64("float", 2.5),
		attribute.String("string", "s"),
		attribute.BoolSlice("bools", []bool{true, false}),
		attribute.Int64Slice("ints", []int64{1, -2}),
		attribute.Float64Slice("floats", []float64{0.5, -1}),
		attribute.StringSlice("strings", []string{"a", "b"}),
		attribute.ByteSlice("bytes", []byte{0, 1, 0xff}),
		attribute.Slice("slice", attribute.StringValue("x"), attribute.Int64Value(7), attribute.SliceValue(attribute.BoolValue(false))),
		attribute.Map("map", attribute.String("k", "v"), attribute.Map("inner", attribute.Float64("f", 1.5))),
		{Key: "empty"},
	}
	sv := func(s string) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
	}
	iv := func(i int64) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: i}}
	}
	bv := func(b bool) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: b}}
	}
	dv := func(f float64) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: f}}
	}
	av := func(vs ...*commonpb.AnyValue) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vs}}}
	}
	kv := func(k string, v *commonpb.AnyValue) *commonpb.KeyValue { return &commonpb.KeyValue{Key: k, Value: v} }
	kvl := func(kvs ...*commonpb.KeyValue) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: kvs}}}
	}
	want := map[string]*commonpb.AnyValue{
		"bool": bv(true), "int": iv(-42), "float": dv(2.5), "string": sv("s"),
		"bools": av(bv(true), bv(false)), "ints": av(iv(1), iv(-2)), "floats": av(dv(0.5), dv(-1)), "strings": av(sv("a"), sv("b")),
		"bytes": {Value: &commonpb.AnyValue_BytesValue{BytesValue: []byte{0, 1, 0xff}}},
		"slice": av(sv("x"), iv(7), av(bv(false))),
		"map":   kvl(kv("inner", kvl(kv("f", dv(1.5)))), kv("k", sv("v"))), // a map's keys sorted
		"empty": {},
	}

	resA := resource.NewWithAttributes("https://schema/a", attribute.String("service.name", "svc-a"))
	resB := resource.NewSchemaless(attribute.String("service.name", "svc-b"))
	scope1 := instrumentation.Scope{Name: "scope1", Version: "v1", SchemaURL: "https://schema/s1", Attributes: attribute.NewSet(attribute.String("sa", "1"))}
	scope2 := instrumentation.Scope{Name: "scope2"}
	ts, err := trace.ParseTraceState("vendor=value,other=x")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1700000000, 123)
	stubs := tracetest.SpanStubs{
		{
			Name:        "full",
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceA, SpanID: spanA, TraceFlags: trace.FlagsSampled, TraceState: ts}),
			Parent:      trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceA, SpanID: spanP, Remote: true}),
			SpanKind:    trace.SpanKindClient,
			StartTime:   t0, EndTime: t0.Add(time.Second),
			Attributes: attrs,
			Events:     []sdktrace.Event{{Name: "ev", Time: t0.Add(time.Millisecond), Attributes: []attribute.KeyValue{attribute.Int("n", 1)}, DroppedAttributeCount: 2}},
			Links: []sdktrace.Link{{
				SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceB, SpanID: spanB, TraceState: ts}),
				Attributes:  []attribute.KeyValue{attribute.String("l", "1")}, DroppedAttributeCount: 3,
			}},
			Status:            sdktrace.Status{Code: codes.Error, Description: "broke"},
			DroppedAttributes: 4, DroppedEvents: 5, DroppedLinks: 6,
			InstrumentationScope: scope1, Resource: resA,
		},
		{Name: "ok", SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceA, SpanID: spanB}),
			Parent:   trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceA, SpanID: spanA}),
			SpanKind: trace.SpanKindServer, Status: sdktrace.Status{Code: codes.Ok}, StartTime: t0, EndTime: t0,
			InstrumentationScope: scope2, Resource: resA},
		{Name: "same scope", SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceA, SpanID: spanP}),
			SpanKind: trace.SpanKindInternal, StartTime: t0, EndTime: t0, InstrumentationScope: scope1, Resource: resA},
		{Name: "other resource", SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceB, SpanID: spanA}),
			SpanKind: trace.SpanKindProducer, StartTime: t0, EndTime: t0, InstrumentationScope: scope1, Resource: resB},
	}
	if err := e.ExportSpans(context.Background(), stubs.Snapshots()); err != nil {
		t.Fatal(err)
	}
	reqs := col.received()
	if len(reqs) != 1 || reqs[0].err != nil {
		t.Fatalf("requests %+v", reqs)
	}
	if ct := reqs[0].header.Get("Content-Type"); ct != "application/x-protobuf" {
		t.Errorf("Content-Type %q", ct)
	}
	rss := reqs[0].msg.GetResourceSpans()
	if len(rss) != 2 {
		t.Fatalf("%d ResourceSpans, want one per resource", len(rss))
	}
	a, b := rss[0], rss[1]
	if a.GetSchemaUrl() != "https://schema/a" || len(a.GetScopeSpans()) != 2 || len(b.GetScopeSpans()) != 1 {
		t.Fatalf("grouping: resource a schema %q with %d scopes, b with %d", a.GetSchemaUrl(), len(a.GetScopeSpans()), len(b.GetScopeSpans()))
	}
	if !proto.Equal(a.GetResource().GetAttributes()[0], kv("service.name", sv("svc-a"))) || !proto.Equal(b.GetResource().GetAttributes()[0], kv("service.name", sv("svc-b"))) {
		t.Errorf("resources %v / %v", a.GetResource(), b.GetResource())
	}
	s1 := a.GetScopeSpans()[0]
	if sc := s1.GetScope(); sc.GetName() != "scope1" || sc.GetVersion() != "v1" || s1.GetSchemaUrl() != "https://schema/s1" ||
		len(sc.GetAttributes()) != 1 || !proto.Equal(sc.GetAttributes()[0], kv("sa", sv("1"))) {
		t.Errorf("scope %v, schema %q", sc, s1.GetSchemaUrl())
	}
	if len(s1.GetSpans()) != 2 || s1.GetSpans()[1].GetName() != "same scope" || a.GetScopeSpans()[1].GetSpans()[0].GetName() != "ok" {
		t.Errorf("scope1 has %d spans, want full and same scope", len(s1.GetSpans()))
	}

	full := s1.GetSpans()[0]
	got := map[string]*commonpb.AnyValue{}
	for _, kv := range full.GetAttributes() {
		got[kv.GetKey()] = kv.GetValue()
	}
	if len(got) != len(want) {
		t.Errorf("%d attributes, want %d", len(got), len(want))
	}
	for k, w := range want {
		if !proto.Equal(got[k], w) {
			t.Errorf("attribute %s = %v, want %v", k, got[k], w)
		}
	}
	if string(full.GetTraceId()) != string(traceA[:]) || string(full.GetSpanId()) != string(spanA[:]) || string(full.GetParentSpanId()) != string(spanP[:]) {
		t.Errorf("ids %x %x %x", full.GetTraceId(), full.GetSpanId(), full.GetParentSpanId())
	}
	if full.GetTraceState() != "vendor=value,other=x" || full.GetName() != "full" || full.GetKind() != tracepb.Span_SPAN_KIND_CLIENT {
		t.Errorf("trace state %q name %q kind %v", full.GetTraceState(), full.GetName(), full.GetKind())
	}
	// Sampled, and the parent's remoteness known and true.
	if full.GetFlags() != 0x01|0x100|0x200 {
		t.Errorf("flags %#x", full.GetFlags())
	}
	if full.GetStartTimeUnixNano() != uint64(t0.UnixNano()) || full.GetEndTimeUnixNano() != uint64(t0.Add(time.Second).UnixNano()) {
		t.Errorf("times %d..%d", full.GetStartTimeUnixNano(), full.GetEndTimeUnixNano())
	}
	if full.GetDroppedAttributesCount() != 4 || full.GetDroppedEventsCount() != 5 || full.GetDroppedLinksCount() != 6 {
		t.Errorf("dropped %d %d %d", full.GetDroppedAttributesCount(), full.GetDroppedEventsCount(), full.GetDroppedLinksCount())
	}
	if st := full.GetStatus(); st.GetCode() != tracepb.Status_STATUS_CODE_ERROR || st.GetMessage() != "broke" {
		t.Errorf("status %v", st)
	}
	wantEvent := &tracepb.Span_Event{TimeUnixNano: uint64(t0.Add(time.Millisecond).UnixNano()), Name: "ev", Attributes: []*commonpb.KeyValue{kv("n", iv(1))}, DroppedAttributesCount: 2}
	if len(full.GetEvents()) != 1 || !proto.Equal(full.GetEvents()[0], wantEvent) {
		t.Errorf("events %v", full.GetEvents())
	}
	wantLink := &tracepb.Span_Link{TraceId: traceB[:], SpanId: spanB[:], TraceState: "vendor=value,other=x",
		Attributes: []*commonpb.KeyValue{kv("l", sv("1"))}, DroppedAttributesCount: 3, Flags: 0x100}
	if len(full.GetLinks()) != 1 || !proto.Equal(full.GetLinks()[0], wantLink) {
		t.Errorf("links %v, want %v", full.GetLinks(), wantLink)
	}

	ok := a.GetScopeSpans()[1].GetSpans()[0]
	if ok.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_OK || ok.GetKind() != tracepb.Span_SPAN_KIND_SERVER || ok.GetFlags() != 0x100 || string(ok.GetParentSpanId()) != string(spanA[:]) {
		t.Errorf("ok span %v", ok)
	}
	if root := s1.GetSpans()[1]; root.GetParentSpanId() != nil || root.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_UNSET || root.GetKind() != tracepb.Span_SPAN_KIND_INTERNAL {
		t.Errorf("root span %v", root)
	}
	if other := b.GetScopeSpans()[0].GetSpans()[0]; other.GetKind() != tracepb.Span_SPAN_KIND_PRODUCER {
		t.Errorf("other span %v", other)
	}
}

// TestEndpointFromEnv: the traces variable is the URL as is, the generic
// one a base under which /v1/traces goes, and a URL in code wins over both.
func TestEndpointFromEnv(t *testing.T) {
	for _, tc := range []struct{ traces, generic, want string }{
		{"", "", "http://localhost:4318/v1/traces"},
		{"", "http://c:4318", "http://c:4318/v1/traces"},
		{"", "https://c:4318/base/", "https://c:4318/base/v1/traces"},
		{"http://t:1/custom", "http://c:4318", "http://t:1/custom"},
	} {
		clearEnv(t)
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", tc.traces)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", tc.generic)
		c, err := otlphttp.FromEnv()
		if err != nil || c.URL != tc.want || c.Timeout != 10*time.Second {
			t.Errorf("traces=%q generic=%q: URL %q timeout %v err %v, want %q and 10s", tc.traces, tc.generic, c.URL, c.Timeout, err, tc.want)
		}
	}

	clearEnv(t)
	col := newCollector(t, false, nil)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.srv.URL)
	if err := exporter(t, "", nil).ExportSpans(context.Background(), one()); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "not a url")
	if err := exporter(t, col.srv.URL+"/v1/traces", nil).ExportSpans(context.Background(), one()); err != nil {
		t.Fatalf("a URL given in code should override a bad one in the environment: %v", err)
	}
	if n := len(col.received()); n != 2 {
		t.Errorf("collector got %d requests, want 2", n)
	}
	c, _ := otlphttp.FromEnv()
	if _, err := otlphttp.New(c); err == nil {
		t.Error("New accepted an endpoint that is not a URL")
	}
}

// TestHeadersFromEnv: the headers variables' pairs, URL-decoded, go with
// every request, the traces-specific variable winning.
func TestHeadersFromEnv(t *testing.T) {
	clearEnv(t)
	col := newCollector(t, false, nil)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "api-key=s%3Dcr%2Cet%20x , X-Team=blue,")
	if err := exporter(t, col.srv.URL+"/v1/traces", nil).ExportSpans(context.Background(), one()); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "authorization=Bearer%20tok")
	if err := exporter(t, col.srv.URL+"/v1/traces", nil).ExportSpans(context.Background(), one()); err != nil {
		t.Fatal(err)
	}
	reqs := col.received()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	if h := reqs[0].header; h.Get("Api-Key") != "s=cr,et x" || h.Get("X-Team") != "blue" {
		t.Errorf("generic headers: api-key %q x-team %q", h.Get("Api-Key"), h.Get("X-Team"))
	}
	if h := reqs[1].header; h.Get("Authorization") != "Bearer tok" || h.Get("Api-Key") != "" {
		t.Errorf("traces headers: authorization %q api-key %q", h.Get("Authorization"), h.Get("Api-Key"))
	}

	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "good=1,SECRETVALUE")
	_, err := otlphttp.FromEnv()
	if err == nil || strings.Contains(err.Error(), "SECRETVALUE") || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_TRACES_HEADERS") {
		t.Errorf("a malformed header gives %v: want an error naming the variable and not the value", err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "k=SECRET%zz")
	if _, err := otlphttp.FromEnv(); err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("a badly encoded header value gives %v", err)
	}
}

// TestGzip: with compression gzip the body is gzipped and says so.
func TestGzip(t *testing.T) {
	clearEnv(t)
	col := newCollector(t, false, nil)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip")
	if err := exporter(t, col.srv.URL+"/v1/traces", nil).ExportSpans(context.Background(), one()); err != nil {
		t.Fatal(err)
	}
	reqs := col.received()
	if len(reqs) != 1 || reqs[0].err != nil || reqs[0].header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("requests %+v", reqs)
	}
	if spans := reqs[0].msg.GetResourceSpans()[0].GetScopeSpans()[0].GetSpans(); len(spans) != 1 || spans[0].GetName() != "one" {
		t.Errorf("decoded %v", spans)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "zstd")
	if _, err := otlphttp.FromEnv(); err == nil {
		t.Error("compression zstd accepted")
	}
}

// TestRetriesWhileBusy: 503 and 429 are tried again, after at least the
// Retry-After the collector asked for, until it takes the spans.
func TestRetriesWhileBusy(t *testing.T) {
	clearEnv(t)
	col := newCollector(t, false, func(n int, w http.ResponseWriter, _ *http.Request) {
		switch n {
		case 0:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			w.WriteHeader(http.StatusOK)
		}
	})
	e := exporter(t, col.srv.URL+"/v1/traces", func(c *otlphttp.Config) { c.RetryInitial = 10 * time.Millisecond })
	if err := e.ExportSpans(context.Background(), one()); err != nil {
		t.Fatal(err)
	}
	reqs := col.received()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	if gap := reqs[2].at.Sub(reqs[1].at); gap < time.Second {
		t.Errorf("retried %v after Retry-After: 1", gap)
	}
	for i, r := range reqs {
		if r.err != nil || len(r.msg.GetResourceSpans()) != 1 {
			t.Errorf("request %d: %v %v", i, r.err, r.msg)
		}
	}
}

// TestRefusalNamesStatusNotHeaders: a 400 fails at once, with the status
// and the start of the body, and never a header's value, even one the
// collector echoes back.
func TestRefusalNamesStatusNotHeaders(t *testing.T) {
	clearEnv(t)
	const secret = "sk-VERYSECRET"
	col := newCollector(t, false, func(_ int, w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad request: api-key "+r.Header.Get("Api-Key")+" is\nnot allowed", http.StatusBadRequest)
	})
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "api-key="+secret)
	err := exporter(t, col.srv.URL+"/v1/traces", nil).ExportSpans(context.Background(), one())
	if err == nil {
		t.Fatal("a 400 succeeded")
	}
	msg := err.Error()
	if strings.Contains(msg, secret) || !strings.Contains(msg, "400") || !strings.Contains(msg, "bad request: api-key [redacted] is not allowed") {
		t.Errorf("error %q: want the status and the body's start, without the header value", msg)
	}
	var se *otlphttp.StatusError
	if !errors.As(err, &se) || se.Code != http.StatusBadRequest {
		t.Errorf("error %T is not a StatusError with code 400", err)
	}
	if n := len(col.received()); n != 1 {
		t.Errorf("a 400 was sent %d times", n)
	}

	// An OTLP collector's protobuf google.rpc.Status: its message.
	col = newCollector(t, false, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusBadRequest)
		// code = 3 (varint, field 1), message = "invalid span" (field 2).
		_, _ = w.Write(append([]byte{0x08, 0x03, 0x12, byte(len("invalid span"))}, "invalid span"...))
	})
	err = exporter(t, col.srv.URL+"/v1/traces", nil).ExportSpans(context.Background(), one())
	if err == nil || !strings.HasSuffix(err.Error(), "400 Bad Request: invalid span") {
		t.Errorf("protobuf refusal gives %v", err)
	}
}

// TestTimeoutBoundsHungCollector: a collector that never answers costs an
// export the configured timeout, not more.
func TestTimeoutBoundsHungCollector(t *testing.T) {
	clearEnv(t)
	release := make(chan struct{})
	col := newCollector(t, false, func(_ int, _ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "300")
	e := exporter(t, col.srv.URL+"/v1/traces", nil)
	start := time.Now()
	err := e.ExportSpans(context.Background(), one())
	if took := time.Since(start); err == nil || took > 3*time.Second || took < 250*time.Millisecond {
		t.Fatalf("export against a hung collector: %v after %v, want a timeout after 300ms", err, took)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v is not the deadline", err)
	}

	// A collector busy for good: retried until the timeout, then the
	// refusal is reported.
	busy := newCollector(t, false, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	e = exporter(t, busy.srv.URL+"/v1/traces", func(c *otlphttp.Config) { c.RetryInitial = 20 * time.Millisecond })
	start = time.Now()
	err = e.ExportSpans(context.Background(), one())
	if took := time.Since(start); err == nil || !strings.Contains(err.Error(), "502") || took > 3*time.Second {
		t.Fatalf("export against a collector answering 502: %v after %v", err, took)
	}
	if n := len(busy.received()); n < 2 {
		t.Errorf("502 tried %d times, want retries", n)
	}
}

// TestTLS: an https collector is trusted through the CA file in
// OTEL_EXPORTER_OTLP_CERTIFICATE, and not without it; a client
// certificate from _CLIENT_CERTIFICATE and _CLIENT_KEY is presented to a
// collector that requires one.
func TestTLS(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	col := newCollector(t, true, nil)
	ca := filepath.Join(dir, "ca.pem")
	writePEM(t, ca, "CERTIFICATE", col.srv.Certificate().Raw)

	if err := exporter(t, col.srv.URL+"/v1/traces", nil).ExportSpans(context.Background(), one()); err == nil {
		t.Error("an https collector with an unknown CA was trusted")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", ca)
	if err := exporter(t, col.srv.URL+"/v1/traces", nil).ExportSpans(context.Background(), one()); err != nil {
		t.Fatalf("https with the collector's CA: %v", err)
	}

	// Mutual TLS.
	certPEM, keyPEM := clientCert(t, dir)
	var mu sync.Mutex
	var peer string
	mtls := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if len(r.TLS.PeerCertificates) > 0 {
			peer = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(certPEM)
	pool.AppendCertsFromPEM(pem)
	mtls.Config.ErrorLog = log.New(io.Discard, "", 0)
	mtls.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	mtls.StartTLS()
	t.Cleanup(mtls.Close)
	writePEM(t, ca, "CERTIFICATE", mtls.Certificate().Raw)
	if err := exporter(t, mtls.URL+"/v1/traces", nil).ExportSpans(context.Background(), one()); err == nil {
		t.Error("a collector requiring a client certificate took spans without one")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", certPEM)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", keyPEM)
	if err := exporter(t, mtls.URL+"/v1/traces", nil).ExportSpans(context.Background(), one()); err != nil {
		t.Fatalf("mutual TLS: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if peer != "otlp-client" {
		t.Errorf("the collector saw client %q", peer)
	}
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// clientCert makes a self-signed client certificate and its key.
func clientCert(t *testing.T, dir string) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "otlp-client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, k := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	writePEM(t, cert, "CERTIFICATE", der)
	writePEM(t, k, "PRIVATE KEY", kder)
	return cert, k
}

// TestNoRedirects: a redirect is a refusal; the headers never go where it
// points.
func TestNoRedirects(t *testing.T) {
	clearEnv(t)
	elsewhere := newCollector(t, false, nil)
	col := newCollector(t, false, func(_ int, w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.srv.URL+"/v1/traces", http.StatusTemporaryRedirect)
	})
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "api-key=k")
	err := exporter(t, col.srv.URL+"/v1/traces", nil).ExportSpans(context.Background(), one())
	if err == nil || !strings.Contains(err.Error(), "307") {
		t.Errorf("a redirect gives %v", err)
	}
	if n := len(elsewhere.received()); n != 0 {
		t.Errorf("the redirect was followed %d times", n)
	}
}

// TestShutdown: exports after Shutdown fail; Shutdown waits for an
// export in flight until its context ends, and then cuts it short; both
// honour their contexts.
func TestShutdown(t *testing.T) {
	clearEnv(t)
	col := newCollector(t, false, nil)
	e := exporter(t, col.srv.URL+"/v1/traces", nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.ExportSpans(ctx, one()); !errors.Is(err, context.Canceled) {
		t.Errorf("export with a cancelled context: %v", err)
	}
	if err := e.ExportSpans(context.Background(), nil); err != nil {
		t.Errorf("exporting nothing: %v", err)
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.ExportSpans(context.Background(), one()); !errors.Is(err, otlphttp.ErrShutdown) {
		t.Errorf("export after Shutdown: %v", err)
	}
	if n := len(col.received()); n != 0 {
		t.Errorf("%d requests sent", n)
	}

	release := make(chan struct{})
	defer close(release)
	hung := newCollector(t, false, func(_ int, _ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	e = exporter(t, hung.srv.URL+"/v1/traces", func(c *otlphttp.Config) { c.Timeout = time.Minute })
	done := make(chan error, 1)
	go func() { done <- e.ExportSpans(context.Background(), one()) }()
	for len(hung.received()) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer scancel()
	if err := e.Shutdown(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown with an export hung: %v, want its deadline", err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Error("the export Shutdown cut short succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the export in flight outlived Shutdown")
	}
}

// TestUnreachableNamesNoSecret: a collector that cannot be reached gives
// an error naming its address, without the URL's password or query, nor
// any header.
func TestUnreachableNamesNoSecret(t *testing.T) {
	clearEnv(t)
	gone := httptest.NewServer(http.NotFoundHandler())
	addr := gone.Listener.Addr().String()
	gone.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "api-key=HEADERSECRET")
	err := exporter(t, "http://user:PASSSECRET@"+addr+"/v1/traces?token=QUERYSECRET", nil).ExportSpans(context.Background(), one())
	if err == nil {
		t.Fatal("export to a closed port succeeded")
	}
	msg := err.Error()
	for _, secret := range []string{"HEADERSECRET", "PASSSECRET", "QUERYSECRET"} {
		if strings.Contains(msg, secret) {
			t.Errorf("error %q holds %s", msg, secret)
		}
	}
	if !strings.Contains(msg, addr) {
		t.Errorf("error %q does not name %s", msg, addr)
	}
}
