package v1alpha1_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// crdSchema reads the installed CRD's v1alpha1 schema from config/crd/bases.
func crdSchema(t *testing.T) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "crd", "bases", "agentrun.dev_agentruns.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		t.Fatalf("parsing the CRD: %v", err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name == "v1alpha1" {
			return *v.Schema.OpenAPIV3Schema
		}
	}
	t.Fatal("the CRD has no v1alpha1 version")
	return apiextensionsv1.JSONSchemaProps{}
}

// enumOf returns the enum values at a dotted path of the schema.
func enumOf(t *testing.T, s apiextensionsv1.JSONSchemaProps, path string) []string {
	t.Helper()
	for _, p := range strings.Split(path, ".") {
		next, ok := s.Properties[p]
		if !ok {
			t.Fatalf("the CRD schema has no %s", path)
		}
		s = next
	}
	var out []string
	for _, v := range s.Enum {
		var str string
		if err := yaml.Unmarshal(v.Raw, &str); err != nil {
			t.Fatalf("%s enum value %s: %v", path, v.Raw, err)
		}
		out = append(out, str)
	}
	slices.Sort(out)
	return out
}

// writeStatus creates a run in ns, writes status through the status
// subresource and returns the error of that write.
func writeStatus(t *testing.T, ns, name string, status arv1.AgentRunStatus) error {
	t.Helper()
	run := createRun(t, ns, name, validSpec())
	run.Status = status
	return k8sClient.Status().Update(testCtx(t), run)
}

// requireRoundTrip writes status and reads it back unchanged.
func requireRoundTrip(t *testing.T, ns, name string, want arv1.AgentRunStatus) {
	t.Helper()
	if err := writeStatus(t, ns, name, want); err != nil {
		t.Fatalf("status update refused: %v", err)
	}
	got := &arv1.AgentRun{}
	if err := k8sClient.Get(testCtx(t), client.ObjectKey{Namespace: ns, Name: name}, got); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got.Status, want) {
		t.Fatalf("status did not round-trip.\nwrote: %s\nread:  %s", mustJSON(want), mustJSON(got.Status))
	}
	// The JSON the server hands back must be the JSON written, too.
	if a, b := mustJSON(got.Status), mustJSON(want); a != b {
		t.Fatalf("status JSON differs.\nwrote: %s\nread:  %s", b, a)
	}
}

// at is a second-precision UTC time, the precision metav1.Time keeps.
func at(base time.Time, offset time.Duration) *metav1.Time {
	t := metav1.NewTime(base.Add(offset).UTC().Truncate(time.Second))
	return &t
}

// waitingVariants is one well-formed waitingOn per reason.
func waitingVariants(now time.Time) map[arv1.WaitReason]*arv1.WaitingOn {
	since := at(now, -time.Minute)
	return map[arv1.WaitReason]*arv1.WaitingOn{
		arv1.WaitToolApproval: {Reason: arv1.WaitToolApproval, NeedsAPerson: true, Summary: "ToolApproval", Since: since},
		arv1.WaitUserPrompt: {Reason: arv1.WaitUserPrompt, NeedsAPerson: true, Summary: "UserPrompt: question", Since: since,
			Point: "call-5-0", Question: "Which environment?", InputSchema: `{"type":"string","enum":["staging","production"]}`},
		arv1.WaitTaintGate:        {Reason: arv1.WaitTaintGate, NeedsAPerson: true, Summary: "TaintGate", Since: since},
		arv1.WaitInteractionPoint: {Reason: arv1.WaitInteractionPoint, NeedsAPerson: true, Summary: "InteractionPoint", Since: since, Point: "approve-plan", Question: "Approve the plan?"},
		arv1.WaitFanOutWorkers:    {Reason: arv1.WaitFanOutWorkers, Summary: "FanOutWorkers(3)", Since: since, Outstanding: ptr(int32(3))},
		arv1.WaitChildren:         {Reason: arv1.WaitChildren, Summary: "Children(0)", Since: since, Outstanding: ptr(int32(0))},
		arv1.WaitNeedsSetup: {Reason: arv1.WaitNeedsSetup, NeedsAPerson: true, Summary: "NeedsSetup: SecretMissing", Since: since,
			Blocker: arv1.BlockerSecretMissing, Remedy: `Create Secret "openai" with key "api-key" in namespace "team-a".`},
		arv1.WaitSleeping: {Reason: arv1.WaitSleeping, Summary: "Sleeping", Since: since, WakeAt: at(now, time.Hour)},
		arv1.WaitBudgetExceeded: {Reason: arv1.WaitBudgetExceeded, NeedsAPerson: true, Summary: "BudgetExceeded: CostUSD", Since: since,
			Budget: &arv1.BudgetLimit{Kind: arv1.BudgetCostUSD, Limit: "2.50"}, Observed: "2.5013"},
		arv1.WaitNeedsReconciliation: {Reason: arv1.WaitNeedsReconciliation, NeedsAPerson: true, Summary: "NeedsReconciliation", Since: since,
			Seq: ptr(int64(0)), Tool: "github.create_issue"},
		arv1.WaitSignal: {Reason: arv1.WaitSignal, Summary: "Signal", Since: since, Signal: "waiting for the CI pipeline to finish", InputSchema: `{"type":"object"}`},
		arv1.WaitRateLimited: {Reason: arv1.WaitRateLimited, Summary: "RateLimited: openai/gpt-4o-mini", Since: since,
			Provider: "openai", Model: "gpt-4o-mini", RetryAt: at(now, 3*time.Second)},
		arv1.WaitQuotaExceeded: {Reason: arv1.WaitQuotaExceeded, NeedsAPerson: true, Summary: "QuotaExceeded: AgentRunQuota/team-a/total cost", Since: since,
			Quota: "AgentRunQuota/team-a/total", Resource: "cost", Used: "200.00", Hard: "200"},
		arv1.WaitStoreUnavailable: {Reason: arv1.WaitStoreUnavailable, Summary: "StoreUnavailable", Since: since,
			StoreError: "postgres: connection refused", Remedy: "Start the database, or fix --store; the run goes on by itself."},
	}
}

// fullStatus sets every status field. Fields whose meaning depends on
// others (error only with phase Error) are set anyway: this checks the
// schema keeps them, not the controller's semantics.
func fullStatus(now time.Time) arv1.AgentRunStatus {
	return arv1.AgentRunStatus{
		ObservedGeneration: 4,
		Phase:              arv1.PhaseWaitingInput,
		WaitingOn:          waitingVariants(now)[arv1.WaitNeedsReconciliation],
		AgentName:          "reviewer",
		BlueprintSnapshot:  "full-blueprint-7f3a",
		Model:              "anthropic/claude-sonnet",
		CurrentStage:       "review",
		StageIndex:         2,
		NumStages:          3,
		Stage:              "review 3/3",
		Iteration:          7,
		Stages: []arv1.StageStatus{
			{Name: "plan", State: arv1.StageComplete, Entered: at(now, -time.Minute), Visits: 1, Iterations: 2, TimeInStage: &metav1.Duration{Duration: 3 * time.Second}},
			{Name: "review", State: arv1.StageActive, Entered: at(now, -30*time.Second), Visits: 2, Iterations: 7},
			{Name: "ship", State: arv1.StagePending},
		},
		LastTransition: &arv1.StageTransition{From: "plan", To: "review", Condition: "error", Reason: "model call failed: bad request"},
		Usage: arv1.Usage{
			PromptTokens: 12000, CompletionTokens: 3400, CachedTokens: 8000, CacheWriteTokens: 1200,
			TotalTokens: 15400, ModelCalls: 9, ToolCalls: 14,
			CostUSD: "0.0123", CostPricedUSD: "0.0123", UnpricedCalls: 1, LostCalls: 1, CostIsExact: true,
		},
		TreeUsage: &arv1.Usage{
			PromptTokens: 24000, CompletionTokens: 6800, CachedTokens: 16000, CacheWriteTokens: 2400,
			TotalTokens: 30800, ModelCalls: 18, ToolCalls: 28,
			CostUSD: "unknown", CostPricedUSD: "0.0246", UnpricedCalls: 2, LostCalls: 1, CostIsExact: true,
		},
		InheritedUsage: &arv1.Usage{
			PromptTokens: 6000, CompletionTokens: 1700, CachedTokens: 4000, CacheWriteTokens: 600,
			TotalTokens: 7700, ModelCalls: 4, ToolCalls: 7,
			CostUSD: "0.0061", CostPricedUSD: "0.0061", UnpricedCalls: 1, LostCalls: 1, CostIsExact: true,
		},
		Origin:         &arv1.Origin{Kind: arv1.OriginFork, Run: "review-1", UID: "8c1e", Stage: "review", Entries: 12},
		StartedAt:      at(now, -2*time.Hour),
		UpdatedAt:      at(now, -time.Second),
		ObservedAt:     at(now, -2*time.Second),
		LastProgressAt: at(now, -time.Minute),
		JournalStore:   arv1.JournalDatabase,
		Driver:         "agentrun-controller-manager-7d9f-abc12_4f2a",
		FinishedAt:     at(now, -time.Second),
		Active:         &arv1.ActiveClock{BankedSeconds: 1234, Since: at(now, -30*time.Second)},
		Error:          "provider returned 500 three times",
		Title:          "Review the payment retry change",
		TitleError:     "title model timed out",
		ParentRun:      "release-train",
		Children:       &arv1.ChildrenSummary{Total: 5, Running: 1, Queued: 1, Succeeded: 2, Failed: 1, Retried: 1},
		Callback:       &arv1.CallbackStatus{DeliveryID: "agent_completed:uid", State: arv1.CallbackDelivered, Attempts: 2, LastAttemptAt: at(now, -time.Second), DeliveredAt: at(now, -time.Second), LastError: "callback answered HTTP 503"},
		Flags: arv1.RunFlags{
			ModifiedFiles:     []string{"pkg/pay/retry.go", "pkg/pay/retry_test.go"},
			ModifiedFileCount: 3, EmptyOutput: true, NoOutputTools: true, SearchesRun: 4, SearchesEmpty: 1,
			MaxIterationsHit: true, GatesForced: true, OutputForced: true, WorkspaceLost: true,
			ProducedOutput: true, BrokenScripts: true, RequiredRegionsAbandoned: true, SplitsDegraded: true,
		},
		ReadPaths: &arv1.ReadPathGrantCounts{Declared: 3, Granted: 1},
		FinalOutput: &arv1.FinalOutputDescriptor{
			Format: arv1.OutputFormatMarkdown, Stage: "review", SubmittedAt: at(now, -10*time.Second),
			Bytes: 300000, Truncated: true, ObjectName: "full-output", Artifacts: []string{"s3://bucket/report.pdf", "pr#42"},
		},
		PendingCall: &arv1.PendingCall{
			Kind: arv1.CallKindTool, Seq: 42, RequestHash: "sha256:abc", Tool: "github.create_issue",
			Input: `{"title":"retry bug"}`, Effect: arv1.EffectWrite, IdempotencyKey: "run-42-call-42",
			Stage: "review", Iteration: 2, Provider: "openai", Model: "gpt-x", Purpose: "title", Index: 1, Server: "github", Lost: 1,
		},
		SetupRefs: []string{"Secret/openai", "ConfigMap/agentrun-providers"},
		Conditions: []metav1.Condition{
			{Type: arv1.ConditionReady, Status: metav1.ConditionFalse, Reason: arv1.ReasonIncomplete, Message: "not done", ObservedGeneration: 4, LastTransitionTime: *at(now, -time.Hour)},
			{Type: arv1.ConditionReconciling, Status: metav1.ConditionTrue, Reason: arv1.ReasonProgressing, Message: "working", ObservedGeneration: 4, LastTransitionTime: *at(now, -time.Hour)},
			{Type: arv1.ConditionStalled, Status: metav1.ConditionFalse, Reason: arv1.ReasonProgressing, ObservedGeneration: 4, LastTransitionTime: *at(now, -time.Hour)},
			{Type: arv1.ConditionWaiting, Status: metav1.ConditionTrue, Reason: string(arv1.WaitNeedsReconciliation), Message: "seq 0", ObservedGeneration: 4, LastTransitionTime: *at(now, -time.Minute)},
			{Type: arv1.ConditionNeedsAttention, Status: metav1.ConditionTrue, Reason: string(arv1.WaitNeedsReconciliation), Message: "resolve the write", ObservedGeneration: 4, LastTransitionTime: *at(now, -time.Minute)},
		},
	}
}

// requireAllSet fails for any zero-valued field under v (structs are
// walked), so a field added to the status later cannot slip past the
// round-trip test unset. skip lists paths exempt (tagged unions).
func requireAllSet(t *testing.T, v reflect.Value, path string, skip map[string]bool) {
	t.Helper()
	if skip[path] {
		return
	}
	if v.IsZero() {
		t.Errorf("%s is not set in the full status", path)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		requireAllSet(t, v.Elem(), path, skip)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(metav1.Time{}) {
			return
		}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			name := strings.Split(f.Tag.Get("json"), ",")[0]
			requireAllSet(t, v.Field(i), path+"."+name, skip)
		}
	}
}

func TestStatusRoundTrip(t *testing.T) {
	ns := newNamespace(t)
	schema := crdSchema(t)
	now := time.Now()

	t.Run("fresh run defaults observedGeneration to -1 and phase to Queued", func(t *testing.T) {
		run := createRun(t, ns, "fresh", validSpec())
		got := &arv1.AgentRun{}
		if err := k8sClient.Get(testCtx(t), client.ObjectKeyFromObject(run), got); err != nil {
			t.Fatal(err)
		}
		want := arv1.AgentRunStatus{ObservedGeneration: -1, Phase: arv1.PhaseQueued}
		if !equality.Semantic.DeepEqual(got.Status, want) {
			t.Fatalf("fresh status = %s, want %s", mustJSON(got.Status), mustJSON(want))
		}
	})

	t.Run("phases", func(t *testing.T) {
		phases := []arv1.Phase{
			arv1.PhaseQueued, arv1.PhaseStarting, arv1.PhaseRunning, arv1.PhaseWaitingInput, arv1.PhasePaused,
			arv1.PhaseComplete, arv1.PhaseCompleteInteractive, arv1.PhaseError, arv1.PhaseCancelled,
		}
		var names []string
		for _, p := range phases {
			names = append(names, string(p))
		}
		slices.Sort(names)
		if crd := enumOf(t, schema, "status.phase"); !slices.Equal(names, crd) {
			t.Fatalf("phases tested %v, CRD enum %v", names, crd)
		}
		for _, p := range phases {
			t.Run(string(p), func(t *testing.T) {
				st := arv1.AgentRunStatus{ObservedGeneration: 1, Phase: p, LastProgressAt: at(now, 0)}
				if p == arv1.PhaseError {
					st.Error = "the provider rejected the request"
				}
				requireRoundTrip(t, ns, "phase-"+strings.ToLower(string(p)), st)
			})
		}
	})

	t.Run("waitingOn", func(t *testing.T) {
		variants := waitingVariants(now)
		var names []string
		for r := range variants {
			names = append(names, string(r))
		}
		slices.Sort(names)
		if crd := enumOf(t, schema, "status.waitingOn.reason"); !slices.Equal(names, crd) {
			t.Fatalf("reasons tested %v, CRD enum %v", names, crd)
		}
		for _, r := range names {
			w := variants[arv1.WaitReason(r)]
			t.Run(r, func(t *testing.T) {
				if got, want := w.NeedsAPerson, arv1.WaitReason(r).NeedsAPerson(); got != want {
					t.Fatalf("fixture needsAPerson=%v disagrees with WaitReason.NeedsAPerson()=%v", got, want)
				}
				requireRoundTrip(t, ns, "wait-"+strings.ToLower(r), arv1.AgentRunStatus{
					ObservedGeneration: 2, Phase: arv1.PhaseWaitingInput, WaitingOn: w,
				})
			})
		}
	})

	t.Run("every setup blocker", func(t *testing.T) {
		blockers := enumOf(t, schema, "status.waitingOn.blocker")
		if len(blockers) != 19 {
			t.Fatalf("CRD lists %d setup blockers, want 19: %v", len(blockers), blockers)
		}
		for _, b := range blockers {
			t.Run(b, func(t *testing.T) {
				requireRoundTrip(t, ns, "blocker-"+strings.ToLower(b), arv1.AgentRunStatus{
					Phase: arv1.PhaseWaitingInput,
					WaitingOn: &arv1.WaitingOn{Reason: arv1.WaitNeedsSetup, NeedsAPerson: true,
						Summary: "NeedsSetup: " + b, Blocker: arv1.SetupBlocker(b), Remedy: "Fix " + b + "."},
				})
			})
		}
	})

	t.Run("cost unknown", func(t *testing.T) {
		requireRoundTrip(t, ns, "cost-unknown", arv1.AgentRunStatus{
			Phase: arv1.PhaseRunning,
			Usage: arv1.Usage{TotalTokens: 900, PromptTokens: 800, CompletionTokens: 100, ModelCalls: 2,
				CostUSD: "unknown", CostPricedUSD: "0.0040", UnpricedCalls: 1},
		})
	})
	t.Run("cost known", func(t *testing.T) {
		requireRoundTrip(t, ns, "cost-known", arv1.AgentRunStatus{
			Phase: arv1.PhaseComplete,
			Usage: arv1.Usage{TotalTokens: 900, PromptTokens: 800, CompletionTokens: 100, ModelCalls: 2,
				CostUSD: "0.0123", CostPricedUSD: "0.0123", CostIsExact: true},
		})
	})
	t.Run("active clock present but empty", func(t *testing.T) {
		requireRoundTrip(t, ns, "clock-empty", arv1.AgentRunStatus{Phase: arv1.PhaseStarting, Active: &arv1.ActiveClock{}})
	})

	t.Run("every field set", func(t *testing.T) {
		full := fullStatus(now)
		requireAllSet(t, reflect.ValueOf(full), "status", map[string]bool{
			// A tagged union: each variant is covered by the waitingOn cases.
			"status.waitingOn": true,
		})
		if t.Failed() {
			t.FailNow()
		}
		requireRoundTrip(t, ns, "full", full)
	})
}

func TestInvalidWaitingOnIsRejected(t *testing.T) {
	ns := newNamespace(t)
	now := time.Now()
	v := waitingVariants(now)
	// variant returns a copy of the well-formed variant for r, changed by f.
	variant := func(r arv1.WaitReason, f func(*arv1.WaitingOn)) *arv1.WaitingOn {
		w := *v[r]
		f(&w)
		return &w
	}
	const (
		msgOutstanding = "outstanding is set exactly for FanOutWorkers and Children"
		msgSetup       = "blocker and remedy are set exactly for NeedsSetup"
		msgWake        = "wakeAt is set exactly for Sleeping"
		msgBudget      = "budget and observed are set exactly for BudgetExceeded"
		msgSeq         = "seq and tool are set exactly for NeedsReconciliation"
		msgSignal      = "signal is set exactly for Signal"
		msgRate        = "provider and model are set exactly for RateLimited, retryAt only for it"
		field          = "status.waitingOn"
	)

	cases := []struct {
		name  string
		w     *arv1.WaitingOn
		field string
		msg   string
	}{
		{name: "FanOutWorkers without outstanding", w: variant(arv1.WaitFanOutWorkers, func(w *arv1.WaitingOn) { w.Outstanding = nil }), msg: msgOutstanding},
		{name: "Children without outstanding", w: variant(arv1.WaitChildren, func(w *arv1.WaitingOn) { w.Outstanding = nil }), msg: msgOutstanding},
		{name: "outstanding on UserPrompt", w: variant(arv1.WaitUserPrompt, func(w *arv1.WaitingOn) { w.Outstanding = ptr(int32(2)) }), msg: msgOutstanding},
		{name: "NeedsSetup without remedy", w: variant(arv1.WaitNeedsSetup, func(w *arv1.WaitingOn) { w.Remedy = "" }), msg: msgSetup},
		{name: "NeedsSetup without blocker", w: variant(arv1.WaitNeedsSetup, func(w *arv1.WaitingOn) { w.Blocker = "" }), msg: msgSetup},
		{name: "blocker and remedy on ToolApproval", w: variant(arv1.WaitToolApproval, func(w *arv1.WaitingOn) {
			w.Blocker, w.Remedy = arv1.BlockerAuthFailed, "Rotate the key."
		}), msg: msgSetup},
		{name: "Sleeping without wakeAt", w: variant(arv1.WaitSleeping, func(w *arv1.WaitingOn) { w.WakeAt = nil }), msg: msgWake},
		{name: "wakeAt on Signal", w: variant(arv1.WaitSignal, func(w *arv1.WaitingOn) { w.WakeAt = at(now, time.Hour) }), msg: msgWake},
		{name: "BudgetExceeded without observed", w: variant(arv1.WaitBudgetExceeded, func(w *arv1.WaitingOn) { w.Observed = "" }), msg: msgBudget},
		{name: "BudgetExceeded without budget", w: variant(arv1.WaitBudgetExceeded, func(w *arv1.WaitingOn) { w.Budget = nil }), msg: msgBudget},
		{name: "NeedsReconciliation without tool", w: variant(arv1.WaitNeedsReconciliation, func(w *arv1.WaitingOn) { w.Tool = "" }), msg: msgSeq},
		{name: "NeedsReconciliation without seq", w: variant(arv1.WaitNeedsReconciliation, func(w *arv1.WaitingOn) { w.Seq = nil }), msg: msgSeq},
		{name: "Signal without signal", w: variant(arv1.WaitSignal, func(w *arv1.WaitingOn) { w.Signal = "" }), msg: msgSignal},
		{name: "signal on Children", w: variant(arv1.WaitChildren, func(w *arv1.WaitingOn) { w.Signal = "ci" }), msg: msgSignal},
		{name: "RateLimited without provider", w: variant(arv1.WaitRateLimited, func(w *arv1.WaitingOn) { w.Provider = "" }), msg: msgRate},
		{name: "RateLimited without model", w: variant(arv1.WaitRateLimited, func(w *arv1.WaitingOn) { w.Model = "" }), msg: msgRate},
		{name: "retryAt on Sleeping", w: variant(arv1.WaitSleeping, func(w *arv1.WaitingOn) { w.RetryAt = at(now, time.Second) }), msg: msgRate},
		{name: "provider on NeedsSetup", w: variant(arv1.WaitNeedsSetup, func(w *arv1.WaitingOn) { w.Provider = "openai" }), msg: msgRate},
		{name: "inputSchema on ToolApproval", w: variant(arv1.WaitToolApproval, func(w *arv1.WaitingOn) { w.InputSchema = "{}" }), msg: "inputSchema is set only for UserPrompt and Signal"},
		{name: "unknown reason", w: &arv1.WaitingOn{Reason: "Bored"}, field: "status.waitingOn.reason",
			msg: `Unsupported value: "Bored"`},
		{name: "unknown blocker", w: variant(arv1.WaitNeedsSetup, func(w *arv1.WaitingOn) { w.Blocker = "Gremlins" }),
			field: "status.waitingOn.blocker", msg: `Unsupported value: "Gremlins"`},
		{name: "negative outstanding", w: variant(arv1.WaitFanOutWorkers, func(w *arv1.WaitingOn) { w.Outstanding = ptr(int32(-1)) }),
			field: "status.waitingOn.outstanding", msg: "should be greater than or equal to 0"},

		// One half of a two-field variant on a foreign reason.
		{name: "blocker alone on UserPrompt", w: variant(arv1.WaitUserPrompt, func(w *arv1.WaitingOn) { w.Blocker = arv1.BlockerSecretMissing }),
			msg: msgSetup},
		{name: "remedy alone on UserPrompt", w: variant(arv1.WaitUserPrompt, func(w *arv1.WaitingOn) { w.Remedy = "Create the Secret." }),
			msg: msgSetup},
		{name: "observed alone on ToolApproval", w: variant(arv1.WaitToolApproval, func(w *arv1.WaitingOn) { w.Observed = "12" }),
			msg: msgBudget},
		{name: "tool alone on TaintGate", w: variant(arv1.WaitTaintGate, func(w *arv1.WaitingOn) { w.Tool = "shell.exec" }),
			msg: msgSeq},
	}

	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := fmt.Sprintf("badwait-%02d", i)
			err := writeStatus(t, ns, name, arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput, WaitingOn: c.w})
			f := c.field
			if f == "" {
				f = field
			}
			requireInvalid(t, err, f, c.msg)
			// The refused status must not have been stored.
			got := &arv1.AgentRun{}
			if err := k8sClient.Get(testCtx(t), client.ObjectKey{Namespace: ns, Name: name}, got); err != nil {
				t.Fatal(err)
			}
			if got.Status.WaitingOn != nil {
				t.Fatalf("refused waitingOn was stored: %s", mustJSON(got.Status.WaitingOn))
			}
		})
	}

	t.Run("usage costUSD must be a decimal or unknown", func(t *testing.T) {
		for i, bad := range []string{"free", "$1.00", "-0.5", "1,5", "Unknown"} {
			err := writeStatus(t, ns, fmt.Sprintf("badcost-%d", i), arv1.AgentRunStatus{Usage: arv1.Usage{CostUSD: bad}})
			requireInvalid(t, err, "status.usage.costUSD", `should match '^(unknown|[0-9]+(\.[0-9]+)?)$'`)
		}
	})
	t.Run("unknown phase", func(t *testing.T) {
		err := writeStatus(t, ns, "badphase", arv1.AgentRunStatus{Phase: "Done"})
		requireInvalid(t, err, "status.phase", `Unsupported value: "Done"`)
	})
}
