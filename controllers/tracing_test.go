package controllers_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool/mcptest"
	"github.com/agentrun-dev/agentrun-operator/internal/tracing"
	"github.com/agentrun-dev/agentrun-operator/internal/tracing/otlptest"
)

// tracedTo is a manager's tracing config, sending to rcv quickly.
func tracedTo(rcv *otlptest.Receiver, service string, content bool) tracing.Config {
	return tracing.Config{Enabled: true, Endpoint: rcv.URL(), ServiceName: service, Content: content, BatchTimeout: 50 * time.Millisecond}
}

// spansWhere are the spans with attribute key equal to value.
func spansWhere(spans []otlptest.Span, key string, value any) []otlptest.Span {
	var out []otlptest.Span
	for _, s := range spans {
		if s.Attrs[key] == value {
			out = append(out, s)
		}
	}
	return out
}

// runSpan is the span of the run ns/name, if received. (The suite's
// managers drive every namespace's runs, so a receiver also gets the
// spans of other tests' runs.)
func runSpan(spans []otlptest.Span, ns, name string) (otlptest.Span, bool) {
	for _, s := range spansWhere(spans, "gen_ai.operation.name", "invoke_agent") {
		if s.Attrs["agentrun.run"] == name && s.Attrs["k8s.namespace.name"] == ns {
			return s, true
		}
	}
	return otlptest.Span{}, false
}

// treeOf is the run ns/name's span and every span whose parent chain
// reaches it: the run's tree as the parent links draw it.
func treeOf(t *testing.T, spans []otlptest.Span, ns, name string) (otlptest.Span, []otlptest.Span) {
	t.Helper()
	root, ok := runSpan(spans, ns, name)
	if !ok {
		t.Fatalf("no span of run %s/%s:\n%s", ns, name, otlptest.Describe(spans))
	}
	return root, append([]otlptest.Span{root}, inRun(spans, root)...)
}

// inRun are the spans whose parent chain reaches the run's span.
func inRun(spans []otlptest.Span, run otlptest.Span) []otlptest.Span {
	byID := map[string]otlptest.Span{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	var out []otlptest.Span
	for _, s := range spans {
		for p, ok := s, true; ok; p, ok = byID[p.ParentID] {
			if p.SpanID == run.SpanID && s.SpanID != run.SpanID {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// noContent fails if any span attribute holds one of texts.
func noContent(t *testing.T, spans []otlptest.Span, texts ...string) {
	t.Helper()
	for _, s := range spans {
		for k, v := range s.Attrs {
			str, _ := v.(string)
			for _, text := range texts {
				if strings.Contains(str, text) {
					t.Errorf("span %s attribute %s holds %q: %s", s.Name, k, text, str)
				}
			}
		}
	}
}

// TestTraceFanOut: a fan-out run to Complete is one trace: the workers'
// run spans are children of the parent's fan-out stage visit, each model
// call is a chat span under its stage visit carrying the scripted token
// counts, the parent's wait on its workers is a span, and no attribute
// holds a task or an answer.
func TestTraceFanOut(t *testing.T) {
	rcv := otlptest.Start(t)
	startManager(t, managerOpts{steps: 8, tracing: tracedTo(rcv, "fanout-test", false)})
	ns := newNamespace(t)
	createConfigMap(t, ns, "fan", map[string]string{"agent.toml": fanOutBlueprint(3, 3, "continue", 1, 0)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	parent := createRun(t, ns, "p", "fan")
	waitFor(t, ns, "p", 60*time.Second, "Complete", phaseIs(arv1.PhaseComplete))

	names := []string{"p", "p-w0", "p-w1", "p-w2"}
	spans := rcv.WaitFor(t, 20*time.Second, "the run spans of the parent and its workers", func(s []otlptest.Span) bool {
		for _, n := range names {
			if _, ok := runSpan(s, ns, n); !ok {
				return false
			}
		}
		return true
	})
	root, spans := treeOf(t, spans, ns, "p")
	tree := tracing.RunOf(string(parent.UID), "")
	for _, s := range spans {
		if s.TraceID != tree.Trace.String() {
			t.Errorf("span %s is in trace %s, want the tree's %s (from the root's UID)", s.Name, s.TraceID, tree.Trace)
		}
		if s.Service != "fanout-test" {
			t.Errorf("span %s from service %q", s.Name, s.Service)
		}
	}
	if root.SpanID != tree.Span().String() || root.ParentID != "" || root.Name != "invoke_agent fan" || root.Attrs["agentrun.phase"] != "Complete" {
		t.Errorf("the parent's run span %+v: want root %s invoke_agent fan, Complete", root, tree.Span())
	}
	var split otlptest.Span
	for _, s := range inRun(spans, root) {
		if s.Name == "stage split" && s.ParentID == root.SpanID {
			split = s
		}
	}
	if split.SpanID == "" {
		t.Fatalf("no split stage visit under the parent's run span:\n%s", otlptest.Describe(spans))
	}
	if split.SpanID != tree.Visit(0).String() {
		t.Errorf("split visit span %s, want %s (derived from the UID)", split.SpanID, tree.Visit(0))
	}
	for _, n := range names[1:] {
		w, _ := runSpan(spans, ns, n)
		if w.ParentID != split.SpanID || w.Attrs["agentrun.child.kind"] != "worker" {
			t.Errorf("worker %s: parent %s kind %v, want the split visit %s", n, w.ParentID, w.Attrs["agentrun.child.kind"], split.SpanID)
		}
		child := getRun(t, ns, n)
		if tp := child.Annotations[tracing.AnnotationTraceparent]; tp != tree.Traceparent(tree.Visit(0)) {
			t.Errorf("worker %s traceparent %q, want %q", n, tp, tree.Traceparent(tree.Visit(0)))
		}
		chats := spansWhere(inRun(spans, w), "gen_ai.operation.name", "chat")
		if len(chats) != 1 {
			t.Fatalf("worker %s: %d chat spans, want 1:\n%s", n, len(chats), otlptest.Describe(inRun(spans, w)))
		}
		checkChat(t, chats[0], 10, 1)
	}
	own := map[string]otlptest.Span{}
	for _, s := range inRun(spans, root) {
		if s.Attrs["agentrun.call.purpose"] == nil && (s.ParentID == root.SpanID || s.ParentID == split.SpanID || strings.HasPrefix(s.Name, "chat")) {
			stage, _ := s.Attrs["agentrun.stage"].(string)
			own[stage+"|"+s.Name] = s
		}
	}
	checkChat(t, own["split|chat scripted-1"], 5, 5)
	checkChat(t, own["merge|chat scripted-1"], 100, 10)
	if c := own["split|chat scripted-1"]; c.ParentID != split.SpanID {
		t.Errorf("the split call's parent %s, want the split visit %s", c.ParentID, split.SpanID)
	}
	waits := spansWhere(spans, "agentrun.wait.reason", string(arv1.WaitFanOutWorkers))
	if len(waits) != 1 || waits[0].ParentID != split.SpanID || waits[0].Attrs["agentrun.wait.needs_person"] != false {
		t.Errorf("the parent's wait on its workers: %+v, want one span under the split visit, needing nobody", waits)
	}
	for i, s := range spans {
		for _, o := range spans[i+1:] {
			if s.SpanID == o.SpanID {
				t.Errorf("span %s emitted twice (%s, %s)", s.SpanID, s.Name, o.Name)
			}
		}
	}
	noContent(t, spans, "test task for p", "item-0", "done item", "worked", "merged")
}

// checkChat checks a model call's GenAI attributes against the scripted
// step's usage.
func checkChat(t *testing.T, s otlptest.Span, in, out int64) {
	t.Helper()
	want := map[string]any{
		"gen_ai.operation.name": "chat", "gen_ai.provider.name": "scripted", "gen_ai.system": "scripted",
		"gen_ai.request.model": "scripted-1", "gen_ai.response.model": "scripted-1",
		"gen_ai.usage.input_tokens": in, "gen_ai.usage.output_tokens": out,
	}
	for k, v := range want {
		if s.Attrs[k] != v {
			t.Errorf("chat span %q (%s): %s = %v, want %v", s.Name, s.SpanID, k, s.Attrs[k], v)
		}
	}
	if fr, _ := s.Attrs["gen_ai.response.finish_reasons"].([]any); len(fr) != 1 || fr[0] == "" {
		t.Errorf("chat span %s: finish reasons %v", s.SpanID, s.Attrs["gen_ai.response.finish_reasons"])
	}
	if s.Name != "chat scripted-1" || s.Kind != 3 { // SPAN_KIND_CLIENT
		t.Errorf("chat span named %q kind %v, want chat scripted-1, CLIENT", s.Name, s.Kind)
	}
}

// TestTraceToolCallsAndApproval: MCP tool calls are execute_tool spans
// with their effect, under the stage visit, never with their arguments
// or results; the wait for a person's approval is a span saying so.
func TestTraceToolCallsAndApproval(t *testing.T) {
	rcv := otlptest.Start(t)
	srv := mcptest.New(t, mcptest.Options{})
	startManager(t, managerOpts{tracing: tracedTo(rcv, "tools-test", false)})
	ns, run := toolRun(t, toolAgent(srv.URL(), "", "", `read_doc {"id":"doc-ARG-1"}`, `create_ticket {"title":"TICKET-ARG"}`))
	w := waitFor(t, ns, "r", 20*time.Second, "ToolApproval", waitingOn(arv1.WaitToolApproval)).Status.WaitingOn
	alice := grantAnswering(t, ns, "alice")
	answer(t, alice, ns, "ok", "alice", w, func(s *arv1.AgentRunAnswerSpec) { s.Decision = arv1.DecisionApprove })
	waitFor(t, ns, "r", 20*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	spans := rcv.WaitFor(t, 20*time.Second, "the run's span", func(s []otlptest.Span) bool { _, ok := runSpan(s, ns, "r"); return ok })
	_, spans = treeOf(t, spans, ns, "r")
	tr := tracing.RunOf(string(run.UID), "")
	visit := tr.Visit(0).String()
	for _, tc := range []struct{ tool, effect string }{{"read_doc", "read"}, {"create_ticket", "write"}} {
		calls := spansWhere(spans, "gen_ai.tool.name", tc.tool)
		if len(calls) != 1 {
			t.Fatalf("%d spans for %s, want 1:\n%s", len(calls), tc.tool, otlptest.Describe(spans))
		}
		c := calls[0]
		if c.Name != "execute_tool "+tc.tool || c.Attrs["gen_ai.operation.name"] != "execute_tool" || c.Attrs["agentrun.tool.effect"] != tc.effect ||
			c.ParentID != visit || c.TraceID != tr.Trace.String() || c.StatusCode != 0 {
			t.Errorf("%s span %+v: want execute_tool with effect %s under visit %s, status unset", tc.tool, c, tc.effect, visit)
		}
	}
	approvals := spansWhere(spans, "agentrun.wait.reason", string(arv1.WaitToolApproval))
	if len(approvals) != 1 || approvals[0].Attrs["agentrun.wait.needs_person"] != true || approvals[0].ParentID != visit || !approvals[0].End.After(approvals[0].Start) {
		t.Errorf("approval wait spans %+v: want one, on a person, under the visit, with a duration", approvals)
	}
	var results []string
	for _, e := range entriesOf(t, ns, run, journal.ToolCallCompleted) {
		if e.Result != "" {
			results = append(results, e.Result)
		}
	}
	if len(results) == 0 {
		t.Fatal("the journal holds no tool result to look for")
	}
	noContent(t, spans, append(results, "doc-ARG-1", "TICKET-ARG", "test task for r")...)
}

// TestTraceContentCapture: with content capture on, a model call's span
// carries the task it was sent and the answer it got.
func TestTraceContentCapture(t *testing.T) {
	rcv := otlptest.Start(t)
	startManager(t, managerOpts{tracing: tracedTo(rcv, "content-test", true)})
	ns := newNamespace(t)
	createConfigMap(t, ns, "one", map[string]string{"agent.toml": `
[agent]
name = "one"
[agent.title]
enabled = false
[stages.only]
allow_complete = true
[stages.only.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.only.script]]
text = "ANSWER-TEXT-42"
complete = true
output = "out"
`})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createRun(t, ns, "c", "one", func(r *arv1.AgentRun) { r.Spec.Task = "TASK-TEXT-42" })
	waitFor(t, ns, "c", 20*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	spans := rcv.WaitFor(t, 20*time.Second, "the run's span", func(s []otlptest.Span) bool { _, ok := runSpan(s, ns, "c"); return ok })
	_, spans = treeOf(t, spans, ns, "c")
	chats := spansWhere(spans, "gen_ai.operation.name", "chat")
	if len(chats) != 1 {
		t.Fatalf("%d chat spans in the run, want 1:\n%s", len(chats), otlptest.Describe(spans))
	}
	chat := chats[0]
	in, _ := chat.Attrs["gen_ai.input.messages"].(string)
	out, _ := chat.Attrs["gen_ai.output.messages"].(string)
	if !strings.Contains(in, "TASK-TEXT-42") || !strings.Contains(out, "ANSWER-TEXT-42") {
		t.Errorf("content capture on: input %q output %q, want the task and the answer", in, out)
	}
}

// TestTraceSurvivesRestart: a manager stopped mid-run and another started
// in its place emit into one trace, derived from the run's UID: the spans
// the first sent and those the second sent share it, and the call the
// first was making when it stopped is traced once, by the second.
func TestTraceSurvivesRestart(t *testing.T) {
	rcv := otlptest.Start(t)
	h1 := startManager(t, managerOpts{tracing: tracedTo(rcv, "first", false)})
	ns := newNamespace(t)
	createConfigMap(t, ns, "slow", map[string]string{"agent.toml": `
[agent]
name = "slow"
[agent.title]
enabled = false
[stages.plan]
[stages.plan.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.plan.script]]
text = "planned"
next = "build"
usage = {prompt = 3, completion = 2}
[stages.plan.transitions.build]
condition = "llm_choice"
[stages.build]
allow_complete = true
[stages.build.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.build.script]]
text = "built"
complete = true
output = "ok"
delay_ms = 4000
usage = {prompt = 7, completion = 4}
`})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	run := createRun(t, ns, "s", "slow")
	tr := tracing.RunOf(string(run.UID), "")
	rcv.WaitFor(t, 30*time.Second, "the first manager's plan visit", func(s []otlptest.Span) bool {
		for _, v := range spansWhere(s, "agentrun.stage", "plan") {
			if v.TraceID == tr.Trace.String() && v.Name == "stage plan" {
				return true
			}
		}
		return false
	})
	waitFor(t, ns, "s", 10*time.Second, "the build call in flight", func(r *arv1.AgentRun) bool {
		return r.Status.PendingCall != nil && r.Status.PendingCall.Stage == "build"
	})
	h1.stop()
	startManager(t, managerOpts{tracing: tracedTo(rcv, "second", false)})
	waitFor(t, ns, "s", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	spans := rcv.WaitFor(t, 20*time.Second, "the run's span", func(s []otlptest.Span) bool { _, ok := runSpan(s, ns, "s"); return ok })
	_, spans = treeOf(t, spans, ns, "s")
	by := map[string][]string{}
	for _, s := range spans {
		if s.TraceID != tr.Trace.String() {
			t.Errorf("span %s (%s) is in trace %s, want %s", s.Name, s.Service, s.TraceID, tr.Trace)
		}
		by[s.Service] = append(by[s.Service], s.Name)
	}
	if len(by["first"]) == 0 || len(by["second"]) == 0 {
		t.Fatalf("spans by manager %v: want some from each", by)
	}
	if r, _ := runSpan(spans, ns, "s"); r.Service != "second" || r.SpanID != tr.Span().String() {
		t.Errorf("run span from %q id %s, want the second manager's, %s", r.Service, r.SpanID, tr.Span())
	}
	builds := spansWhere(spansWhere(spans, "agentrun.stage", "build"), "gen_ai.operation.name", "chat")
	if len(builds) != 1 || builds[0].Service != "second" || builds[0].Attrs["gen_ai.usage.input_tokens"] != int64(7) {
		t.Errorf("build calls traced: %+v, want one, by the second manager", builds)
	}
	if n := len(spansWhere(spans, "agentrun.stage", "plan")); n != 2 {
		t.Errorf("%d plan spans, want its call and its visit once each:\n%s", n, otlptest.Describe(spans))
	}
}

// TestManagerBinaryTracesFromEnv: the manager binary turns tracing on
// from the standard OTEL_* variables, names itself by OTEL_SERVICE_NAME,
// honours --trace-content, and flushes on SIGTERM: with the batch delay
// far longer than the test, every span arrives at shutdown.
func TestManagerBinaryTracesFromEnv(t *testing.T) {
	rcv := otlptest.Start(t)
	dir := t.TempDir()
	kubeconfig, err := env.Kubeconfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "manager.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(buildManager(t), "--metrics-bind-address=0", "--health-probe-bind-address=0", "--trace-content")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "OTEL_EXPORTER_OTLP_ENDPOINT="+rcv.URL(),
		"OTEL_SERVICE_NAME=from-env", "OTEL_BSP_SCHEDULE_DELAY=600000")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &managerProcess{cmd: cmd}
	t.Cleanup(p.kill)

	ns := newNamespace(t)
	createConfigMap(t, ns, "one", map[string]string{"agent.toml": "[agent]\nname = \"one\"\n[agent.title]\nenabled = false\n[stages.only]\nallow_complete = true\n[stages.only.model]\nmodels = [{provider = \"demo\", model = \"scripted-1\"}]\n"})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	run := createRun(t, ns, "b", "one", func(r *arv1.AgentRun) { r.Spec.Task = "BINARY-TASK-7" })
	waitFor(t, ns, "b", 60*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	if err := holdsFor(500*time.Millisecond, func() error {
		if n := len(rcv.Spans()); n != 0 {
			return fmt.Errorf("%d spans sent before shutdown with a 10-minute batch delay: the environment was not read", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the manager stopped with %v", err)
	}
	p.cmd.ProcessState = &os.ProcessState{}
	spans := rcv.Spans()
	r, ok := runSpan(spans, ns, "b")
	if !ok || r.Service != "from-env" || r.TraceID != tracing.RunOf(string(run.UID), "").Trace.String() {
		t.Fatalf("after SIGTERM: run span %+v (found %v), want one from service from-env in the run's trace:\n%s", r, ok, otlptest.Describe(spans))
	}
	_, spans = treeOf(t, spans, ns, "b")
	chats, in := spansWhere(spans, "gen_ai.operation.name", "chat"), ""
	if len(chats) == 1 {
		in, _ = chats[0].Attrs["gen_ai.input.messages"].(string)
	}
	if !strings.Contains(in, "BINARY-TASK-7") {
		t.Errorf("chat spans %+v: want one carrying the task (--trace-content)", chats)
	}
}
