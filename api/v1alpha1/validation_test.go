package v1alpha1_test

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// Messages the CRD gives, copied from the markers in agentrun_types.go.
const (
	msgTaskImmutable     = "task is immutable: create a new AgentRun for a new task"
	msgAgentImmutable    = "agent is immutable: create a new AgentRun to use another blueprint"
	msgDepthImmutable    = "depth is immutable"
	msgYoloProfileNeeds  = "yoloProfile requires yolo: true"
	msgCancelWithdrawn   = "cancel cannot be withdrawn once requested"
	msgYoloFixed         = "yolo is fixed at creation"
	msgYoloProfileFixed  = "yoloProfile is fixed at creation"
	msgModelFixed        = "model is fixed at creation"
	msgBudgetsRemoved    = "budgets cannot be removed once set; raise them instead"
	msgStepsRaised       = "budgets.steps may only be raised"
	msgTokensRaised      = "budgets.tokens may only be raised"
	msgToolCallsRaised   = "budgets.toolCalls may only be raised"
	msgCostRaised        = "budgets.costUSD may only be raised"
	msgWallTimeRaised    = "budgets.wallTime may only be raised"
	msgCallbackURL       = "url must be an http:// or https:// URL"
	msgCallbackAddress   = "url must not point at a loopback, link-local (cloud metadata) or unspecified address: the manager refuses to call them"
	msgCallbackLocalhost = "url must not point at localhost: the manager refuses to call loopback addresses"
	agentPattern         = `should match '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$'`
	budgetCostPattern    = `should match '^[0-9]{1,9}(\.[0-9]{1,9})?$'`
	budgetWallPattern    = `should match '^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$'`
	msgRequired          = "Required value"
	msgAtLeastOneChar    = "should be at least 1 chars long"
	msgAtMost16          = "should be less than or equal to 16"
	msgAtLeast0          = "should be greater than or equal to 0"
	msgAtLeast1          = "should be greater than or equal to 1"
	msgMetadataTooMany   = "must have at most 32 items"
	msgTaskTooLong       = "may not be more than 65536 bytes"
	msgAgentTooLong      = "may not be more than 253 bytes"
	msgUnsupportedFormat = `Unsupported value: "yaml": supported values: "text", "markdown", "json"`
)

// unstructuredRun builds an AgentRun with a raw spec, so a case can leave a
// required field out entirely (the typed struct would send "").
func unstructuredRun(ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(arv1.GroupVersion.WithKind("AgentRun"))
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func budgeted() arv1.AgentRunSpec {
	s := validSpec()
	s.Budgets = &arv1.Budgets{
		Steps:     ptr(int64(50)),
		Tokens:    ptr(int64(100000)),
		ToolCalls: ptr(int64(20)),
		CostUSD:   "2.50",
		WallTime:  "1h",
	}
	return s
}

func metadataEntries(n int) map[string]any {
	m := make(map[string]any, n)
	for i := range n {
		m[fmt.Sprintf("key-%02d", i)] = "v"
	}
	return m
}

func TestInvalidSpecsAreRejected(t *testing.T) {
	ns := newNamespace(t)

	type tc struct {
		name string
		// Create-time cases: spec is sent as is and must be refused.
		spec map[string]any
		// Update cases: base is created (must be accepted), then mutate is
		// applied and the update must be refused.
		base   *arv1.AgentRunSpec
		mutate func(*arv1.AgentRunSpec)

		field, msg string
	}
	ok := map[string]any{"agent": "code-reviewer", "task": "Review the open pull request."}
	with := func(kv ...any) map[string]any {
		m := map[string]any{}
		for k, v := range ok {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(m, kv[i].(string))
				continue
			}
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	spec := func(f func(*arv1.AgentRunSpec)) *arv1.AgentRunSpec {
		s := validSpec()
		if f != nil {
			f(&s)
		}
		return &s
	}
	b := budgeted()

	cases := []tc{
		// --- create-time schema rules ---
		{name: "missing task", spec: with("task", nil), field: "spec.task", msg: msgRequired},
		{name: "empty task", spec: with("task", ""), field: "spec.task", msg: msgAtLeastOneChar},
		{name: "task too long", spec: with("task", strings.Repeat("x", 65537)), field: "spec.task", msg: msgTaskTooLong},
		{name: "missing agent", spec: with("agent", nil), field: "spec.agent", msg: msgRequired},
		{name: "empty agent", spec: with("agent", ""), field: "spec.agent", msg: msgAtLeastOneChar},
		{name: "agent with uppercase", spec: with("agent", "Code-Reviewer"), field: "spec.agent", msg: agentPattern},
		{name: "agent with underscore", spec: with("agent", "code_reviewer"), field: "spec.agent", msg: agentPattern},
		{name: "agent ending in a dash", spec: with("agent", "reviewer-"), field: "spec.agent", msg: agentPattern},
		{name: "agent with a slash", spec: with("agent", "team/reviewer"), field: "spec.agent", msg: agentPattern},
		{name: "agent too long", spec: with("agent", strings.Repeat("a", 254)), field: "spec.agent", msg: msgAgentTooLong},
		{name: "empty model", spec: with("model", ""), field: "spec.model", msg: msgAtLeastOneChar},
		{name: "costUSD with a currency sign", spec: with("budgets", map[string]any{"costUSD": "$2.50"}), field: "spec.budgets.costUSD", msg: budgetCostPattern},
		{name: "costUSD negative", spec: with("budgets", map[string]any{"costUSD": "-1"}), field: "spec.budgets.costUSD", msg: budgetCostPattern},
		{name: "costUSD with two points", spec: with("budgets", map[string]any{"costUSD": "2.5.0"}), field: "spec.budgets.costUSD", msg: budgetCostPattern},
		{name: "costUSD in exponent form", spec: with("budgets", map[string]any{"costUSD": "1e3"}), field: "spec.budgets.costUSD", msg: budgetCostPattern},
		{name: "wallTime in words", spec: with("budgets", map[string]any{"wallTime": "1 hour"}), field: "spec.budgets.wallTime", msg: budgetWallPattern},
		{name: "wallTime in days", spec: with("budgets", map[string]any{"wallTime": "2d"}), field: "spec.budgets.wallTime", msg: budgetWallPattern},
		{name: "wallTime beyond Go's duration range", spec: with("budgets", map[string]any{"wallTime": "9999999h"}),
			field: "spec.budgets.wallTime", msg: "wallTime must be a duration of at most 2562047h"},
		{name: "zero token budget", spec: with("budgets", map[string]any{"tokens": 0}), field: "spec.budgets.tokens", msg: msgAtLeast1},
		{name: "zero step budget", spec: with("budgets", map[string]any{"steps": 0}), field: "spec.budgets.steps", msg: msgAtLeast1},
		{name: "yoloProfile without yolo", spec: with("yoloProfile", "read-only"), field: "spec", msg: msgYoloProfileNeeds},
		{name: "yoloProfile with yolo false", spec: with("yoloProfile", "read-only", "yolo", false), field: "spec", msg: msgYoloProfileNeeds},
		{name: "callback ftp url", spec: with("callback", map[string]any{"url": "ftp://hooks.example.com/done"}), field: "spec.callback.url", msg: msgCallbackURL},
		{name: "callback url without scheme", spec: with("callback", map[string]any{"url": "hooks.example.com/done"}), field: "spec.callback.url", msg: msgCallbackURL},
		{name: "callback upper-case scheme", spec: with("callback", map[string]any{"url": "HTTPS://hooks.example.com/done"}), field: "spec.callback.url", msg: msgCallbackURL},
		{name: "callback without url", spec: with("callback", map[string]any{}), field: "spec.callback.url", msg: msgRequired},
		{name: "callback at cloud metadata", spec: with("callback", map[string]any{"url": "http://169.254.169.254/latest/meta-data/"}), field: "spec.callback.url", msg: msgCallbackAddress},
		{name: "callback at link-local", spec: with("callback", map[string]any{"url": "https://169.254.10.1:8443/hook"}), field: "spec.callback.url", msg: msgCallbackAddress},
		{name: "callback at loopback", spec: with("callback", map[string]any{"url": "http://127.0.0.1:8080/hook"}), field: "spec.callback.url", msg: msgCallbackAddress},
		{name: "callback at another loopback address", spec: with("callback", map[string]any{"url": "http://127.3.2.1/hook"}), field: "spec.callback.url", msg: msgCallbackAddress},
		{name: "callback at IPv6 loopback", spec: with("callback", map[string]any{"url": "http://[::1]:9000/hook"}), field: "spec.callback.url", msg: msgCallbackAddress},
		{name: "callback at IPv6 link-local", spec: with("callback", map[string]any{"url": "http://[fe80::1]/hook"}), field: "spec.callback.url", msg: msgCallbackAddress},
		{name: "callback at the unspecified address", spec: with("callback", map[string]any{"url": "http://0.0.0.0:8080/hook"}), field: "spec.callback.url", msg: msgCallbackAddress},
		{name: "callback at localhost", spec: with("callback", map[string]any{"url": "http://localhost:8080/hook"}), field: "spec.callback.url", msg: msgCallbackLocalhost},
		{name: "callback at upper-case localhost", spec: with("callback", map[string]any{"url": "http://LocalHost./hook"}), field: "spec.callback.url", msg: msgCallbackLocalhost},
		{name: "callback at a localhost subdomain", spec: with("callback", map[string]any{"url": "http://app.localhost/hook"}), field: "spec.callback.url", msg: msgCallbackLocalhost},
		{name: "depth over 16", spec: with("depth", 17), field: "spec.depth", msg: msgAtMost16},
		{name: "negative depth", spec: with("depth", -1), field: "spec.depth", msg: msgAtLeast0},
		{name: "maxChildDepth over 16", spec: with("maxChildDepth", 17), field: "spec.maxChildDepth", msg: msgAtMost16},
		{name: "metadata with 33 entries", spec: with("metadata", metadataEntries(33)), field: "spec.metadata", msg: msgMetadataTooMany},
		{name: "output format yaml", spec: with("output", map[string]any{"format": "yaml"}), field: "spec.output.format", msg: msgUnsupportedFormat},

		// --- transition rules: created valid, then updated ---
		{name: "changing task", base: spec(nil), mutate: func(s *arv1.AgentRunSpec) { s.Task = "Do something else." },
			field: "spec.task", msg: msgTaskImmutable},
		{name: "changing agent", base: spec(nil), mutate: func(s *arv1.AgentRunSpec) { s.Agent = "other-agent" },
			field: "spec.agent", msg: msgAgentImmutable},
		{name: "lowering budgets.tokens", base: &b, mutate: func(s *arv1.AgentRunSpec) { s.Budgets.Tokens = ptr(int64(99999)) },
			field: "spec.budgets.tokens", msg: msgTokensRaised},
		{name: "removing budgets.tokens", base: &b, mutate: func(s *arv1.AgentRunSpec) { s.Budgets.Tokens = nil },
			field: "spec.budgets.tokens", msg: msgTokensRaised},
		{name: "lowering budgets.steps", base: &b, mutate: func(s *arv1.AgentRunSpec) { s.Budgets.Steps = ptr(int64(49)) },
			field: "spec.budgets.steps", msg: msgStepsRaised},
		{name: "lowering budgets.toolCalls", base: &b, mutate: func(s *arv1.AgentRunSpec) { s.Budgets.ToolCalls = ptr(int64(1)) },
			field: "spec.budgets.toolCalls", msg: msgToolCallsRaised},
		{name: "lowering budgets.costUSD", base: &b, mutate: func(s *arv1.AgentRunSpec) { s.Budgets.CostUSD = "1.00" },
			field: "spec.budgets.costUSD", msg: msgCostRaised},
		{name: "lowering budgets.costUSD by a cent", base: &b, mutate: func(s *arv1.AgentRunSpec) { s.Budgets.CostUSD = "2.49" },
			field: "spec.budgets.costUSD", msg: msgCostRaised},
		{name: "removing budgets.costUSD", base: &b, mutate: func(s *arv1.AgentRunSpec) { s.Budgets.CostUSD = "" },
			field: "spec.budgets.costUSD", msg: msgCostRaised},
		{name: "lowering budgets.wallTime", base: &b, mutate: func(s *arv1.AgentRunSpec) { s.Budgets.WallTime = "30m" },
			field: "spec.budgets.wallTime", msg: msgWallTimeRaised},
		{name: "lowering budgets.wallTime by a second", base: &b, mutate: func(s *arv1.AgentRunSpec) { s.Budgets.WallTime = "59m59s" },
			field: "spec.budgets.wallTime", msg: msgWallTimeRaised},
		{name: "removing budgets", base: &b, mutate: func(s *arv1.AgentRunSpec) { s.Budgets = nil },
			field: "spec", msg: msgBudgetsRemoved},
		{name: "changing yolo true to false", base: spec(func(s *arv1.AgentRunSpec) { s.Yolo = true }),
			mutate: func(s *arv1.AgentRunSpec) { s.Yolo = false }, field: "spec", msg: msgYoloFixed},
		{name: "changing yolo false to true", base: spec(nil),
			mutate: func(s *arv1.AgentRunSpec) { s.Yolo = true }, field: "spec", msg: msgYoloFixed},
		{name: "changing yoloProfile", base: spec(func(s *arv1.AgentRunSpec) { s.Yolo, s.YoloProfile = true, "read-only" }),
			mutate: func(s *arv1.AgentRunSpec) { s.YoloProfile = "everything" }, field: "spec", msg: msgYoloProfileFixed},
		{name: "dropping yoloProfile", base: spec(func(s *arv1.AgentRunSpec) { s.Yolo, s.YoloProfile = true, "read-only" }),
			mutate: func(s *arv1.AgentRunSpec) { s.YoloProfile = "" }, field: "spec", msg: msgYoloProfileFixed},
		{name: "changing model", base: spec(func(s *arv1.AgentRunSpec) { s.Model = "anthropic/claude-sonnet" }),
			mutate: func(s *arv1.AgentRunSpec) { s.Model = "openai/gpt-5" }, field: "spec", msg: msgModelFixed},
		{name: "setting model after creation", base: spec(nil),
			mutate: func(s *arv1.AgentRunSpec) { s.Model = "openai/gpt-5" }, field: "spec", msg: msgModelFixed},
		{name: "withdrawing cancel", base: spec(func(s *arv1.AgentRunSpec) { s.Cancel = true }),
			mutate: func(s *arv1.AgentRunSpec) { s.Cancel = false }, field: "spec", msg: msgCancelWithdrawn},
		{name: "changing depth", base: spec(func(s *arv1.AgentRunSpec) { s.Depth = 1 }),
			mutate: func(s *arv1.AgentRunSpec) { s.Depth = 2 }, field: "spec", msg: msgDepthImmutable},
		{name: "setting depth after creation at 0", base: spec(nil),
			mutate: func(s *arv1.AgentRunSpec) { s.Depth = 2 }, field: "spec", msg: msgDepthImmutable},
		{name: "resetting depth to 0", base: spec(func(s *arv1.AgentRunSpec) { s.Depth = 2 }),
			mutate: func(s *arv1.AgentRunSpec) { s.Depth = 0 }, field: "spec", msg: msgDepthImmutable},
		// The transition rules are one rule: two broken at once name the first.
		{name: "withdrawing cancel and changing model", base: spec(func(s *arv1.AgentRunSpec) { s.Cancel, s.Model = true, "anthropic/claude-sonnet" }),
			mutate: func(s *arv1.AgentRunSpec) { s.Cancel, s.Model = false, "openai/gpt-5" }, field: "spec", msg: msgCancelWithdrawn},
	}
	if len(cases) < 14 {
		t.Fatalf("only %d cases", len(cases))
	}

	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := testCtx(t)
			name := fmt.Sprintf("invalid-%02d", i)
			var err error
			if c.spec != nil {
				err = k8sClient.Create(ctx, unstructuredRun(ns, name, c.spec))
			} else {
				run := createRun(t, ns, name, *c.base)
				c.mutate(&run.Spec)
				err = k8sClient.Update(ctx, run)
			}
			requireInvalid(t, err, c.field, c.msg)
			if c.spec != nil {
				// Nothing may have been stored.
				got := &arv1.AgentRun{}
				if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, got); err == nil {
					t.Fatalf("a refused AgentRun was stored anyway: %+v", got.Spec)
				}
			}
		})
	}
}

// TestValidUpdatesAreAccepted walks one run through the changes the API
// promises to allow, checking each is stored.
func TestValidUpdatesAreAccepted(t *testing.T) {
	ns := newNamespace(t)

	steps := []struct {
		name   string
		mutate func(*arv1.AgentRunSpec)
		check  func(*arv1.AgentRunSpec) bool
	}{
		{"adding budgets", func(s *arv1.AgentRunSpec) {
			s.Budgets = &arv1.Budgets{Tokens: ptr(int64(1000)), CostUSD: "2.50", WallTime: "1h"}
		}, func(s *arv1.AgentRunSpec) bool {
			return s.Budgets != nil && *s.Budgets.Tokens == 1000 && s.Budgets.CostUSD == "2.50" && s.Budgets.WallTime == "1h"
		}},
		{"raising budgets.tokens", func(s *arv1.AgentRunSpec) { s.Budgets.Tokens = ptr(int64(5000)) },
			func(s *arv1.AgentRunSpec) bool { return *s.Budgets.Tokens == 5000 }},
		{"raising budgets.costUSD", func(s *arv1.AgentRunSpec) { s.Budgets.CostUSD = "10.00" },
			func(s *arv1.AgentRunSpec) bool { return s.Budgets.CostUSD == "10.00" }},
		{"rewriting budgets.costUSD to an equal value", func(s *arv1.AgentRunSpec) { s.Budgets.CostUSD = "10" },
			func(s *arv1.AgentRunSpec) bool { return s.Budgets.CostUSD == "10" }},
		{"raising budgets.wallTime", func(s *arv1.AgentRunSpec) { s.Budgets.WallTime = "1h30m" },
			func(s *arv1.AgentRunSpec) bool { return s.Budgets.WallTime == "1h30m" }},
		{"rewriting budgets.wallTime to an equal value", func(s *arv1.AgentRunSpec) { s.Budgets.WallTime = "90m" },
			func(s *arv1.AgentRunSpec) bool { return s.Budgets.WallTime == "90m" }},
		{"adding budgets.steps and toolCalls", func(s *arv1.AgentRunSpec) {
			s.Budgets.Steps, s.Budgets.ToolCalls = ptr(int64(10)), ptr(int64(3))
		}, func(s *arv1.AgentRunSpec) bool {
			return s.Budgets.Steps != nil && *s.Budgets.Steps == 10 && *s.Budgets.ToolCalls == 3
		}},
		{"pausing", func(s *arv1.AgentRunSpec) { s.Paused = true },
			func(s *arv1.AgentRunSpec) bool { return s.Paused }},
		{"resuming", func(s *arv1.AgentRunSpec) { s.Paused = false },
			func(s *arv1.AgentRunSpec) bool { return !s.Paused }},
		{"changing metadata and callback", func(s *arv1.AgentRunSpec) {
			s.Metadata = map[string]string{"ticket": "OPS-1"}
			s.Callback = &arv1.CallbackSpec{URL: "https://hooks.example.com/done"}
		}, func(s *arv1.AgentRunSpec) bool {
			return s.Metadata["ticket"] == "OPS-1" && s.Callback != nil && s.Callback.URL == "https://hooks.example.com/done"
		}},
		{"changing providerConfig", func(s *arv1.AgentRunSpec) { s.ProviderConfig = "team-providers" },
			func(s *arv1.AgentRunSpec) bool { return s.ProviderConfig == "team-providers" }},
		{"cancelling", func(s *arv1.AgentRunSpec) { s.Cancel = true },
			func(s *arv1.AgentRunSpec) bool { return s.Cancel }},
		{"raising a budget after cancel", func(s *arv1.AgentRunSpec) { s.Budgets.Tokens = ptr(int64(6000)) },
			func(s *arv1.AgentRunSpec) bool { return s.Cancel && *s.Budgets.Tokens == 6000 }},
	}

	ctx := testCtx(t)
	run := createRun(t, ns, "valid-updates", validSpec())
	if run.Spec.ProviderConfig != "agentrun-providers" {
		t.Fatalf("providerConfig defaulted to %q, want agentrun-providers", run.Spec.ProviderConfig)
	}
	for _, s := range steps {
		current := &arv1.AgentRun{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(run), current); err != nil {
			t.Fatalf("%s: get: %v", s.name, err)
		}
		s.mutate(&current.Spec)
		if err := k8sClient.Update(ctx, current); err != nil {
			t.Fatalf("%s: refused: %v", s.name, err)
		}
		stored := &arv1.AgentRun{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(run), stored); err != nil {
			t.Fatalf("%s: get after update: %v", s.name, err)
		}
		if !s.check(&stored.Spec) {
			t.Fatalf("%s: stored spec does not show the change: %s", s.name, mustJSON(stored.Spec))
		}
	}
}

// TestTypedUpdateKeepsExplicitZeroValues: a manifest may spell out a zero
// value (yolo: false, depth: 0) that the typed client then omits. A typed
// Update from the controller (here adding its finalizer) must still pass.
func TestTypedUpdateKeepsExplicitZeroValues(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		field string
		value any
	}{
		{"yolo", false},
		{"depth", int64(0)},
		{"paused", false},
		{"cancel", false},
	}
	for _, c := range cases {
		t.Run(c.field, func(t *testing.T) {
			ctx := testCtx(t)
			spec := map[string]any{"agent": "code-reviewer", "task": "Review the open pull request.", c.field: c.value}
			u := unstructuredRun(ns, "explicit-"+c.field, spec)
			if err := k8sClient.Create(ctx, u); err != nil {
				t.Fatalf("create with explicit %s: %v", c.field, err)
			}
			run := &arv1.AgentRun{}
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(u), run); err != nil {
				t.Fatal(err)
			}
			run.Finalizers = append(run.Finalizers, arv1.Finalizer)
			err := k8sClient.Update(ctx, run)
			if err != nil {
				t.Fatalf("typed update after explicit %s: %v", c.field, err)
			}
			got := &arv1.AgentRun{}
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(u), got); err != nil {
				t.Fatal(err)
			}
			if len(got.Finalizers) != 1 || got.Finalizers[0] != arv1.Finalizer {
				t.Fatalf("finalizers = %v", got.Finalizers)
			}
			// Remove it again so the namespace holds nothing stuck.
			got.Finalizers = nil
			if err := k8sClient.Update(ctx, got); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCallbackURLsTheEgressPolicyMayAllowAreAccepted: the admission rules on
// spec.callback.url refuse only IP literals and localhost names the
// manager would refuse anyway; in-cluster names, private and public
// addresses and an IPv4-mapped literal (left to the connect-time check,
// which judges it as the IPv4 address it reaches) are stored.
func TestCallbackURLsTheEgressPolicyMayAllowAreAccepted(t *testing.T) {
	ns := newNamespace(t)
	for i, u := range []string{
		"https://hooks.example.com/done",
		"http://receiver.team-a.svc:8080/hook",
		"http://receiver.team-a.svc.cluster.local/hook",
		"http://10.0.0.7:8080/hook",
		"http://192.168.1.20/hook",
		"https://[2001:db8::7]/hook",
		"http://localhost.example.com/hook",
		"http://[::ffff:169.254.169.254]/hook",
	} {
		s := validSpec()
		s.Callback = &arv1.CallbackSpec{URL: u}
		run := createRun(t, ns, fmt.Sprintf("callback-ok-%d", i), s)
		if run.Spec.Callback.URL != u {
			t.Errorf("stored callback url %q, want %q", run.Spec.Callback.URL, u)
		}
	}
}
