package tracing_test

import (
	"context"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/tracing"
	"github.com/agentrun-dev/agentrun-operator/internal/tracing/otlptest"
)

func clearEnv(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_TRACES_EXPORTER", "OTEL_RESOURCE_ATTRIBUTES"} {
		t.Setenv(k, "")
	}
	for _, k := range []string{"HEADERS", "TIMEOUT", "COMPRESSION", "CERTIFICATE", "CLIENT_CERTIFICATE", "CLIENT_KEY"} {
		t.Setenv("OTEL_EXPORTER_OTLP_"+k, "")
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_"+k, "")
	}
}

func newTracer(t *testing.T, c tracing.Config) *tracing.Tracer {
	t.Helper()
	tr, err := tracing.New(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if !tr.On() {
		t.Fatalf("config %+v gave no tracer", c)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr
}

// TestOffWithoutEndpoint: no OTLP endpoint in the environment, no tracer;
// the nil tracer's methods allocate nothing.
func TestOffWithoutEndpoint(t *testing.T) {
	clearEnv(t)
	c := tracing.FromEnv()
	if c.Enabled {
		t.Fatalf("tracing on with no endpoint: %+v", c)
	}
	tr, err := tracing.New(context.Background(), c)
	if err != nil || tr != nil || tr.On() || tr.Content() {
		t.Fatalf("New(off) = %v, %v; want nil, nil", tr, err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	if tracing.FromEnv().Enabled {
		t.Fatal("OTEL_TRACES_EXPORTER=none left tracing on")
	}
	run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{UID: "u", Annotations: map[string]string{}}}
	w := tracing.Written{Run: run, Before: &run.Status, Visits: []journal.Visit{{Stage: "a", Ended: true}}}
	mc := tracing.ModelCall{Intent: journal.Entry{Model: "m"}}
	if n := testing.AllocsPerRun(100, func() {
		tr.StatusWritten(w)
		tr.ModelCall(mc)
		tr.ToolCall(tracing.ToolCall{})
	}); n != 0 {
		t.Errorf("the off tracer allocates %v times per call", n)
	}
}

// TestEnvExportsOverHTTP: the standard environment variables turn
// tracing on and name the service; a span reaches a real OTLP/HTTP
// receiver with the IDs, times and status it was given, on Shutdown.
func TestEnvExportsOverHTTP(t *testing.T) {
	for _, tc := range []struct{ name, env, value string }{
		{"endpoint", "OTEL_EXPORTER_OTLP_ENDPOINT", ""},
		{"traces endpoint", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "/v1/traces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			rcv := otlptest.Start(t)
			t.Setenv(tc.env, rcv.URL()+tc.value)
			t.Setenv("OTEL_SERVICE_NAME", "svc-from-env")
			c := tracing.FromEnv()
			if !c.Enabled {
				t.Fatalf("%s set, tracing off", tc.env)
			}
			tr, err := tracing.New(context.Background(), c)
			if err != nil || !tr.On() {
				t.Fatalf("New = %v, %v", tr, err)
			}
			r := tracing.RunOf("root-uid", "")
			start := time.Unix(1700000000, 5)
			tr.Emit(tracing.Span{Trace: r.Trace, ID: r.Visit(0), Parent: r.Span(), Name: "stage plan", Start: start, End: start.Add(time.Second), Error: "Fatal"})
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			spans := rcv.Spans()
			if len(spans) != 1 {
				t.Fatalf("received %d spans, want 1:\n%s", len(spans), otlptest.Describe(spans))
			}
			s := spans[0]
			if s.Service != "svc-from-env" || s.Name != "stage plan" || s.TraceID != r.Trace.String() || s.SpanID != r.Visit(0).String() || s.ParentID != r.Span().String() {
				t.Errorf("span %+v: want service svc-from-env, trace %s, id %s, parent %s", s, r.Trace, r.Visit(0), r.Span())
			}
			if !s.Start.Equal(start) || !s.End.Equal(start.Add(time.Second)) {
				t.Errorf("span times %v..%v, want %v..%v", s.Start, s.End, start, start.Add(time.Second))
			}
			if s.StatusCode != tracepb.Status_STATUS_CODE_ERROR || s.StatusMessage != "Fatal" || s.Attrs["error.type"] != "Fatal" {
				t.Errorf("status %v %q error.type %v, want Error Fatal", s.StatusCode, s.StatusMessage, s.Attrs["error.type"])
			}
		})
	}
}

// TestRunIDs: a run's IDs follow from its UID alone, and a child placed by
// its parent's traceparent shares the parent's trace.
func TestRunIDs(t *testing.T) {
	a, b := tracing.RunOf("uid-1", ""), tracing.RunOf("uid-1", "")
	if a != b || !a.Trace.IsValid() || a.Parent.IsValid() {
		t.Fatalf("RunOf is not a function of the UID: %+v %+v", a, b)
	}
	if other := tracing.RunOf("uid-2", ""); other.Trace == a.Trace || other.Span() == a.Span() {
		t.Fatal("two runs share IDs")
	}
	if a.Visit(0) == a.Visit(1) || a.Call(3) == a.Call(4) || a.Visit(0) == a.Span() {
		t.Fatal("span IDs collide within a run")
	}
	tp := a.Traceparent(a.Visit(2))
	child := tracing.RunOf("uid-child", tp)
	if child.Trace != a.Trace || child.Parent != a.Visit(2) || child.Span() == a.Span() {
		t.Fatalf("child of %s: %+v", tp, child)
	}
	if !strings.HasPrefix(tp, "00-"+a.Trace.String()+"-") || !strings.HasSuffix(tp, "-01") || len(tp) != 55 {
		t.Errorf("traceparent %q is not W3C version 00", tp)
	}
	if bad := tracing.RunOf("uid-1", "garbage"); bad != a {
		t.Errorf("an unreadable traceparent gives %+v, want the run's own trace", bad)
	}
}

// TestStatusWrittenEmitsWhatEnded walks a run through three status
// writes: each emits the visits, wait and run that write ended, with the
// journal's times, and nothing that was still open.
func TestStatusWrittenEmitsWhatEnded(t *testing.T) {
	clearEnv(t)
	rcv := otlptest.Start(t)
	tr := newTracer(t, tracing.Config{Enabled: true, Endpoint: rcv.URL()})
	parent := tracing.RunOf("parent-uid", "")
	t0 := time.Unix(1700000000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns", UID: types.UID("run-uid"), CreationTimestamp: metav1.NewTime(t0),
		Annotations: map[string]string{tracing.AnnotationTraceparent: parent.Traceparent(parent.Visit(0))}}}
	run.Spec.Agent = "a"
	self := tracing.RunOfObject(run)
	stages := func(visits ...int32) []arv1.StageStatus {
		var out []arv1.StageStatus
		for _, v := range visits {
			out = append(out, arv1.StageStatus{Visits: v})
		}
		return out
	}
	since := metav1.NewTime(at(2))
	writes := []struct {
		before, after arv1.AgentRunStatus
		visits        []journal.Visit
		want          []string
	}{
		{ // entered plan
			before: arv1.AgentRunStatus{}, after: arv1.AgentRunStatus{Phase: arv1.PhaseRunning, Stages: stages(1)},
			visits: []journal.Visit{{Stage: "plan", Entered: at(0)}},
		},
		{ // plan to build, which waits at a checkpoint
			before: arv1.AgentRunStatus{Phase: arv1.PhaseRunning, Stages: stages(1)},
			after: arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput, Stages: stages(1, 1),
				WaitingOn: &arv1.WaitingOn{Reason: arv1.WaitInteractionPoint, NeedsAPerson: true, Point: "review-it", Since: &since}},
			visits: []journal.Visit{{Stage: "plan", Entered: at(0), Left: at(1), Ended: true}, {Stage: "build", Entered: at(1)}},
			want:   []string{"stage plan"},
		},
		{ // answered: build ends, the run completes
			before: arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput, Stages: stages(1, 1),
				WaitingOn: &arv1.WaitingOn{Reason: arv1.WaitInteractionPoint, NeedsAPerson: true, Point: "review-it", Since: &since}},
			after:  arv1.AgentRunStatus{Phase: arv1.PhaseComplete, Stages: stages(1, 1), AgentName: "agent-a", Usage: arv1.Usage{PromptTokens: 7, CompletionTokens: 3}},
			visits: []journal.Visit{{Stage: "plan", Entered: at(0), Left: at(1), Ended: true}, {Stage: "build", Entered: at(1), Left: at(5), Ended: true}},
			want:   []string{"stage plan", "stage build", "wait InteractionPoint", "invoke_agent agent-a"},
		},
	}
	for i, w := range writes {
		run.Status = w.after
		tr.StatusWritten(tracing.Written{Run: run, Before: &w.before, Visits: w.visits, Now: at(5)})
		if err := tr.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range rcv.Spans() {
			got = append(got, s.Name)
		}
		if strings.Join(got, ",") != strings.Join(w.want, ",") {
			t.Fatalf("after write %d: spans %v, want %v", i, got, w.want)
		}
	}
	by := map[string]otlptest.Span{}
	for _, s := range rcv.Spans() {
		by[s.Name] = s
		if s.TraceID != parent.Trace.String() {
			t.Errorf("%s is in trace %s, want the parent's %s", s.Name, s.TraceID, parent.Trace)
		}
	}
	runSpan := by["invoke_agent agent-a"]
	if runSpan.SpanID != self.Span().String() || runSpan.ParentID != parent.Visit(0).String() || !runSpan.Start.Equal(t0) || !runSpan.End.Equal(at(5)) {
		t.Errorf("run span %+v: want id %s under the parent's visit %s, %v..%v", runSpan, self.Span(), parent.Visit(0), t0, at(5))
	}
	if runSpan.Attrs["gen_ai.operation.name"] != "invoke_agent" || runSpan.Attrs["gen_ai.usage.input_tokens"] != int64(7) || runSpan.Attrs["agentrun.phase"] != "Complete" {
		t.Errorf("run span attributes %v", runSpan.Attrs)
	}
	build := by["stage build"]
	if build.SpanID != self.Visit(1).String() || build.ParentID != self.Span().String() || !build.Start.Equal(at(1)) || !build.End.Equal(at(5)) {
		t.Errorf("build visit %+v: want id %s under the run, %v..%v", build, self.Visit(1), at(1), at(5))
	}
	wait := by["wait InteractionPoint"]
	if wait.ParentID != self.Visit(1).String() || !wait.Start.Equal(at(2)) || !wait.End.Equal(at(5)) ||
		wait.Attrs["agentrun.wait.needs_person"] != true || wait.Attrs["agentrun.wait.point"] != "review-it" {
		t.Errorf("wait span %+v: want under build, %v..%v, on a person at review-it", wait, at(2), at(5))
	}
}

// TestModelCallAttributes: the GenAI attributes of a model call, and its
// prompt and answer only with content capture on.
func TestModelCallAttributes(t *testing.T) {
	clearEnv(t)
	const prompt, task, answer = "SYSTEM-PROMPT-TEXT", "TASK-TEXT", "ANSWER-TEXT"
	for _, content := range []bool{false, true} {
		rcv := otlptest.Start(t)
		tr := newTracer(t, tracing.Config{Enabled: true, Endpoint: rcv.URL(), Content: content})
		r := tracing.RunOf("u", "")
		start := time.Unix(1700000000, 0)
		tr.ModelCall(tracing.ModelCall{
			Parent: tracing.Parent{Run: r, Span: r.Visit(0)}, ProviderType: "openai",
			Intent: journal.Entry{Seq: 4, Stage: "plan", Provider: "main", Model: "gpt-x"},
			Start:  start, End: start.Add(time.Second), ResponseModel: "gpt-x-2026", FinishReason: "stop",
			Usage:   &journal.Usage{Prompt: 11, Cached: 4, Completion: 6},
			Answer:  &journal.Response{Text: answer},
			Request: &providers.Request{SystemPrompt: prompt, Task: task, APIKey: "sk-SECRET"},
		})
		tr.ModelCall(tracing.ModelCall{
			Parent: tracing.Parent{Run: r, Span: r.Visit(0)}, ProviderType: "openai", Intent: journal.Entry{Seq: 6, Model: "gpt-x"},
			Start: start, End: start, Failure: &journal.Failure{Class: journal.FailAuth, Status: 401, Message: "invalid key sk-SECRET body"},
			Request: &providers.Request{SystemPrompt: prompt, APIKey: "sk-SECRET"},
		})
		if err := tr.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		spans := rcv.Spans()
		if len(spans) != 2 {
			t.Fatalf("got %d spans", len(spans))
		}
		ok, failed := spans[0], spans[1]
		want := map[string]any{
			"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.system": "openai",
			"gen_ai.request.model": "gpt-x", "gen_ai.response.model": "gpt-x-2026",
			"gen_ai.usage.input_tokens": int64(15), "gen_ai.usage.output_tokens": int64(6),
			"gen_ai.usage.cache_read.input_tokens": int64(4),
		}
		for k, v := range want {
			if ok.Attrs[k] != v {
				t.Errorf("%s = %v, want %v", k, ok.Attrs[k], v)
			}
		}
		if fr, _ := ok.Attrs["gen_ai.response.finish_reasons"].([]any); len(fr) != 1 || fr[0] != "stop" {
			t.Errorf("finish reasons %v", ok.Attrs["gen_ai.response.finish_reasons"])
		}
		if ok.Name != "chat gpt-x" || ok.Kind != tracepb.Span_SPAN_KIND_CLIENT || ok.SpanID != r.Call(4).String() || ok.ParentID != r.Visit(0).String() {
			t.Errorf("span %+v", ok)
		}
		if failed.StatusCode != tracepb.Status_STATUS_CODE_ERROR || failed.StatusMessage != string(journal.FailAuth) || failed.Attrs["http.response.status_code"] != int64(401) {
			t.Errorf("failed call: status %v %q, attrs %v", failed.StatusCode, failed.StatusMessage, failed.Attrs)
		}
		all := otlptest.Describe(spans)
		if strings.Contains(all, "SECRET") || strings.Contains(all, "body") {
			t.Errorf("a secret or a provider's message is in a span:\n%s", all)
		}
		for _, text := range []string{prompt, task, answer} {
			if got := strings.Contains(all, text); got != content {
				t.Errorf("content capture %v: %q in the spans is %v", content, text, got)
			}
		}
	}
}
