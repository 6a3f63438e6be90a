package otlphttp

import (
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// ResourceSpans groups spans as OTLP does: one ResourceSpans per resource,
// and in it one ScopeSpans per instrumentation scope, each in the order
// its first span came.
func ResourceSpans(spans []sdktrace.ReadOnlySpan) []*tracepb.ResourceSpans {
	type scopeKey struct {
		name, version, schema string
		attrs                 attribute.Distinct
	}
	type group struct {
		rs     *tracepb.ResourceSpans
		scopes map[scopeKey]*tracepb.ScopeSpans
	}
	var out []*tracepb.ResourceSpans
	groups := map[attribute.Distinct]*group{}
	for _, s := range spans {
		if s == nil {
			continue
		}
		res := s.Resource()
		rkey := res.Equivalent()
		g, ok := groups[rkey]
		if !ok {
			g = &group{
				rs: &tracepb.ResourceSpans{
					Resource:  &resourcepb.Resource{Attributes: keyValues(res.Attributes())},
					SchemaUrl: res.SchemaURL(),
				},
				scopes: map[scopeKey]*tracepb.ScopeSpans{},
			}
			groups[rkey] = g
			out = append(out, g.rs)
		}
		sc := s.InstrumentationScope()
		skey := scopeKey{sc.Name, sc.Version, sc.SchemaURL, sc.Attributes.Equivalent()}
		ss, ok := g.scopes[skey]
		if !ok {
			ss = &tracepb.ScopeSpans{Scope: scope(sc), SchemaUrl: sc.SchemaURL}
			g.scopes[skey] = ss
			g.rs.ScopeSpans = append(g.rs.ScopeSpans, ss)
		}
		ss.Spans = append(ss.Spans, span(s))
	}
	return out
}

// MarshalRequest encodes an ExportTraceServiceRequest holding rss: the
// message's one field is `repeated ResourceSpans resource_spans = 1`.
// It is written here, field by field, because the generated collector
// package would link gRPC into the manager.
func MarshalRequest(rss []*tracepb.ResourceSpans) ([]byte, error) {
	var b []byte
	opts := proto.MarshalOptions{}
	for _, rs := range rss {
		m, err := opts.Marshal(rs)
		if err != nil {
			return nil, err
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, m)
	}
	return b, nil
}

func scope(sc instrumentation.Scope) *commonpb.InstrumentationScope {
	return &commonpb.InstrumentationScope{
		Name:       sc.Name,
		Version:    sc.Version,
		Attributes: keyValues(sc.Attributes.ToSlice()),
	}
}

func span(s sdktrace.ReadOnlySpan) *tracepb.Span {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	out := &tracepb.Span{
		TraceId:                tid[:],
		SpanId:                 sid[:],
		TraceState:             sc.TraceState().String(),
		Flags:                  flags(sc.TraceFlags(), s.Parent().IsRemote()),
		Name:                   s.Name(),
		Kind:                   kind(s.SpanKind()),
		StartTimeUnixNano:      unixNano(s.StartTime()),
		EndTimeUnixNano:        unixNano(s.EndTime()),
		Attributes:             keyValues(s.Attributes()),
		DroppedAttributesCount: count(s.DroppedAttributes()),
		DroppedEventsCount:     count(s.DroppedEvents()),
		DroppedLinksCount:      count(s.DroppedLinks()),
		Status:                 status(s.Status()),
	}
	if p := s.Parent(); p.SpanID().IsValid() {
		psid := p.SpanID()
		out.ParentSpanId = psid[:]
	}
	for _, e := range s.Events() {
		out.Events = append(out.Events, &tracepb.Span_Event{
			TimeUnixNano:           unixNano(e.Time),
			Name:                   e.Name,
			Attributes:             keyValues(e.Attributes),
			DroppedAttributesCount: count(e.DroppedAttributeCount),
		})
	}
	for _, l := range s.Links() {
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		out.Links = append(out.Links, &tracepb.Span_Link{
			TraceId:                ltid[:],
			SpanId:                 lsid[:],
			TraceState:             l.SpanContext.TraceState().String(),
			Attributes:             keyValues(l.Attributes),
			DroppedAttributesCount: count(l.DroppedAttributeCount),
			Flags:                  flags(l.SpanContext.TraceFlags(), l.SpanContext.IsRemote()),
		})
	}
	return out
}

// flags are OTLP's span (or link) flags: the W3C trace flags in the low
// byte, and whether the parent (or the linked span) is remote, with the
// bit that says that is known.
func flags(tf trace.TraceFlags, remote bool) uint32 {
	f := uint32(tf) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)
	if remote {
		f |= uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
	}
	return f
}

func kind(k trace.SpanKind) tracepb.Span_SpanKind {
	switch k {
	case trace.SpanKindInternal:
		return tracepb.Span_SPAN_KIND_INTERNAL
	case trace.SpanKindServer:
		return tracepb.Span_SPAN_KIND_SERVER
	case trace.SpanKindClient:
		return tracepb.Span_SPAN_KIND_CLIENT
	case trace.SpanKindProducer:
		return tracepb.Span_SPAN_KIND_PRODUCER
	case trace.SpanKindConsumer:
		return tracepb.Span_SPAN_KIND_CONSUMER
	}
	return tracepb.Span_SPAN_KIND_UNSPECIFIED
}

// status maps the SDK's codes (Unset 0, Error 1, Ok 2) onto OTLP's
// (Unset 0, Ok 1, Error 2).
func status(s sdktrace.Status) *tracepb.Status {
	out := &tracepb.Status{Message: s.Description}
	switch s.Code {
	case codes.Ok:
		out.Code = tracepb.Status_STATUS_CODE_OK
	case codes.Error:
		out.Code = tracepb.Status_STATUS_CODE_ERROR
	default:
		out.Code = tracepb.Status_STATUS_CODE_UNSET
	}
	return out
}

func unixNano(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	n := t.UnixNano()
	if n < 0 {
		return 0
	}
	return uint64(n)
}

func count(n int) uint32 {
	if n <= 0 {
		return 0
	}
	if n > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(n)
}

func keyValues(kvs []attribute.KeyValue) []*commonpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]*commonpb.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, &commonpb.KeyValue{Key: string(kv.Key), Value: anyValue(kv.Value)})
	}
	return out
}

// anyValue is an attribute value as OTLP's AnyValue: scalars as
// themselves, typed slices and SLICE as arrays, MAP as a key-value list,
// BYTESLICE as bytes, EMPTY as an AnyValue with nothing set.
func anyValue(v attribute.Value) *commonpb.AnyValue {
	out := &commonpb.AnyValue{}
	switch v.Type() {
	case attribute.BOOL:
		out.Value = &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}
	case attribute.INT64:
		out.Value = &commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}
	case attribute.FLOAT64:
		out.Value = &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}
	case attribute.STRING:
		out.Value = &commonpb.AnyValue_StringValue{StringValue: v.AsString()}
	case attribute.BOOLSLICE:
		out.Value = array(v.AsBoolSlice(), func(b bool) *commonpb.AnyValue {
			return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: b}}
		})
	case attribute.INT64SLICE:
		out.Value = array(v.AsInt64Slice(), func(i int64) *commonpb.AnyValue {
			return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: i}}
		})
	case attribute.FLOAT64SLICE:
		out.Value = array(v.AsFloat64Slice(), func(f float64) *commonpb.AnyValue {
			return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: f}}
		})
	case attribute.STRINGSLICE:
		out.Value = array(v.AsStringSlice(), func(s string) *commonpb.AnyValue {
			return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
		})
	case attribute.BYTESLICE:
		out.Value = &commonpb.AnyValue_BytesValue{BytesValue: v.AsByteSlice()}
	case attribute.SLICE:
		out.Value = array(v.AsSlice(), anyValue)
	case attribute.MAP:
		out.Value = &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: keyValues(v.AsMap())}}
	}
	return out
}

func array[T any](vs []T, conv func(T) *commonpb.AnyValue) *commonpb.AnyValue_ArrayValue {
	a := &commonpb.ArrayValue{Values: make([]*commonpb.AnyValue, 0, len(vs))}
	for _, v := range vs {
		a.Values = append(a.Values, conv(v))
	}
	return &commonpb.AnyValue_ArrayValue{ArrayValue: a}
}
