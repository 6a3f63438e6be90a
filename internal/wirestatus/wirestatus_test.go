package wirestatus

import (
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

var (
	now    = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	wakeAt = metav1.NewTime(time.Date(2026, 3, 1, 12, 10, 0, 0, time.UTC))
)

func ptr[T any](v T) *T { return &v }

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return string(b)
}

func runWith(st arv1.AgentRunStatus) *arv1.AgentRun {
	return &arv1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r"},
		Spec:       arv1.AgentRunSpec{Agent: "a", Task: "t"},
		Status:     st,
	}
}

func waiting(w arv1.WaitingOn) arv1.AgentRunStatus {
	w.NeedsAPerson = w.Reason.NeedsAPerson()
	return arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput, WaitingOn: &w}
}

const approveSchema = `{"type":"object","properties":{"approved":{"type":"boolean"}},"required":["approved"]}`

func TestStatus(t *testing.T) {
	cases := []struct {
		name string
		st   arv1.AgentRunStatus
		now  time.Time
		want string
	}{
		{"unseen by the controller", arv1.AgentRunStatus{}, now,
			`{"state":"not_started"}`},
		{"queued (the CRD's status default)", arv1.AgentRunStatus{ObservedGeneration: -1, Phase: arv1.PhaseQueued}, now,
			`{"state":"not_started"}`},
		{"starting, no call yet", arv1.AgentRunStatus{Phase: arv1.PhaseStarting}, now,
			`{"state":"not_started"}`},
		{"starting, model call pending", arv1.AgentRunStatus{Phase: arv1.PhaseStarting,
			PendingCall: &arv1.PendingCall{Kind: arv1.CallKindModel, Seq: 0, RequestHash: "h"}}, now,
			`{"state":"awaiting_model"}`},
		{"starting after calls", arv1.AgentRunStatus{Phase: arv1.PhaseStarting, Usage: arv1.Usage{ModelCalls: 1}}, now,
			`{"state":"running"}`},
		{"running", arv1.AgentRunStatus{Phase: arv1.PhaseRunning, Usage: arv1.Usage{ModelCalls: 2}}, now,
			`{"state":"running"}`},
		{"running, model call pending", arv1.AgentRunStatus{Phase: arv1.PhaseRunning,
			PendingCall: &arv1.PendingCall{Kind: arv1.CallKindModel, Seq: 4, RequestHash: "h"}}, now,
			`{"state":"awaiting_model"}`},
		{"running, tool call pending", arv1.AgentRunStatus{Phase: arv1.PhaseRunning,
			PendingCall: &arv1.PendingCall{Kind: arv1.CallKindTool, Seq: 5, Tool: "read_file", Effect: arv1.EffectRead}}, now,
			`{"state":"awaiting_tool"}`},
		{"needs reconciliation", waiting(arv1.WaitingOn{Reason: arv1.WaitNeedsReconciliation, Seq: ptr(int64(7)),
			Tool: "git_push", Summary: "NeedsReconciliation: git_push#7"}), now,
			`{"state":"needs_reconciliation"}`},
		{"sleeping before wakeAt", waiting(arv1.WaitingOn{Reason: arv1.WaitSleeping, WakeAt: &wakeAt}), now,
			`{"state":"sleeping","wake_at":"2026-03-01T12:10:00Z"}`},
		{"sleeping exactly at wakeAt", waiting(arv1.WaitingOn{Reason: arv1.WaitSleeping, WakeAt: &wakeAt}), wakeAt.Time,
			`{"state":"sleeping","wake_at":"2026-03-01T12:10:00Z"}`},
		{"sleeping past wakeAt", waiting(arv1.WaitingOn{Reason: arv1.WaitSleeping, WakeAt: &wakeAt}),
			wakeAt.Add(95*time.Second + 500*time.Millisecond),
			`{"state":"sleeping","wake_at":"2026-03-01T12:10:00Z","overdue":true,"overdue_seconds":95}`},
		{"sleeping just past wakeAt", waiting(arv1.WaitingOn{Reason: arv1.WaitSleeping, WakeAt: &wakeAt}),
			wakeAt.Add(300 * time.Millisecond),
			`{"state":"sleeping","wake_at":"2026-03-01T12:10:00Z","overdue":true,"overdue_seconds":0}`},
		{"budget exceeded, cost", waiting(arv1.WaitingOn{Reason: arv1.WaitBudgetExceeded,
			Budget: &arv1.BudgetLimit{Kind: arv1.BudgetCostUSD, Limit: "2.50"}, Observed: "2.5013"}), now,
			`{"state":"budget_exceeded","budget":{"kind":"cost_usd","limit":2.50},"observed":2.5013}`},
		{"budget exceeded, tokens", waiting(arv1.WaitingOn{Reason: arv1.WaitBudgetExceeded,
			Budget: &arv1.BudgetLimit{Kind: arv1.BudgetTokens, Limit: "1000"}, Observed: "1200"}), now,
			`{"state":"budget_exceeded","budget":{"kind":"tokens","limit":1000},"observed":1200}`},
		{"budget exceeded, steps", waiting(arv1.WaitingOn{Reason: arv1.WaitBudgetExceeded,
			Budget: &arv1.BudgetLimit{Kind: arv1.BudgetSteps, Limit: "10"}, Observed: "10"}), now,
			`{"state":"budget_exceeded","budget":{"kind":"steps","limit":10},"observed":10}`},
		{"budget exceeded, tool calls", waiting(arv1.WaitingOn{Reason: arv1.WaitBudgetExceeded,
			Budget: &arv1.BudgetLimit{Kind: arv1.BudgetToolCalls, Limit: "50"}, Observed: "50"}), now,
			`{"state":"budget_exceeded","budget":{"kind":"tool_calls","limit":50},"observed":50}`},
		{"budget exceeded, wall time as a duration", waiting(arv1.WaitingOn{Reason: arv1.WaitBudgetExceeded,
			Budget: &arv1.BudgetLimit{Kind: arv1.BudgetWallTime, Limit: "30m"}, Observed: "1800.5"}), now,
			`{"state":"budget_exceeded","budget":{"kind":"wall_time","limit":1800},"observed":1800.5}`},
		{"signal", waiting(arv1.WaitingOn{Reason: arv1.WaitSignal, Signal: "waiting for the CI webhook"}), now,
			`{"state":"suspended","reason":"waiting for the CI webhook","input_schema":{},"kind":"signal"}`},
		{"signal with a schema", waiting(arv1.WaitingOn{Reason: arv1.WaitSignal, Signal: "build", InputSchema: `{"type":"object","required":["ok"]}`}), now,
			`{"state":"suspended","reason":"build","input_schema":{"type":"object","required":["ok"]},"kind":"signal"}`},
		{"user prompt with the agent's schema", waiting(arv1.WaitingOn{Reason: arv1.WaitUserPrompt, Question: "Where?", InputSchema: `{"type":"string","enum":["a","b"]}`}), now,
			`{"state":"suspended","reason":"Where?","input_schema":{"type":"string","enum":["a","b"]}}`},
		{"fan-out workers", waiting(arv1.WaitingOn{Reason: arv1.WaitFanOutWorkers, Outstanding: ptr(int32(3)),
			Summary: "FanOutWorkers(3)"}), now,
			`{"state":"running"}`},
		{"children", waiting(arv1.WaitingOn{Reason: arv1.WaitChildren, Outstanding: ptr(int32(2)),
			Summary: "Children(2)"}), now,
			`{"state":"running"}`},
		{"tool approval with a question", waiting(arv1.WaitingOn{Reason: arv1.WaitToolApproval, Summary: "ToolApproval",
			Question: "Run shell: rm -rf build/?"}), now,
			`{"state":"suspended","reason":"Run shell: rm -rf build/?","input_schema":` + approveSchema + `}`},
		{"tool approval without a question", waiting(arv1.WaitingOn{Reason: arv1.WaitToolApproval, Summary: "ToolApproval"}), now,
			`{"state":"suspended","reason":"ToolApproval","input_schema":` + approveSchema + `}`},
		{"user prompt", waiting(arv1.WaitingOn{Reason: arv1.WaitUserPrompt, Summary: "UserPrompt",
			Question: "Which branch?"}), now,
			`{"state":"suspended","reason":"Which branch?","input_schema":{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}}`},
		{"taint gate without summary", waiting(arv1.WaitingOn{Reason: arv1.WaitTaintGate}), now,
			`{"state":"suspended","reason":"TaintGate","input_schema":` + approveSchema + `}`},
		{"interaction point", waiting(arv1.WaitingOn{Reason: arv1.WaitInteractionPoint, Summary: "InteractionPoint",
			Point: "review-plan", Question: "Approve the plan?"}), now,
			`{"state":"suspended","reason":"Approve the plan?","input_schema":` + approveSchema + `}`},
		{"needs setup", waiting(arv1.WaitingOn{Reason: arv1.WaitNeedsSetup, Summary: "NeedsSetup: SecretMissing",
			Blocker: arv1.BlockerSecretMissing, Remedy: `create Secret "anthropic" in namespace "team-a" with key "api-key"`}), now,
			`{"state":"suspended","reason":"create Secret \"anthropic\" in namespace \"team-a\" with key \"api-key\"","input_schema":{}}`},
		{"waiting input without waitingOn", arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput}, now,
			`{"state":"suspended","reason":"WaitingInput","input_schema":{}}`},
		{"paused", arv1.AgentRunStatus{Phase: arv1.PhasePaused, Usage: arv1.Usage{ModelCalls: 1}}, now,
			`{"state":"suspended","reason":"paused","input_schema":{}}`},
		{"complete without output", arv1.AgentRunStatus{Phase: arv1.PhaseComplete}, now,
			`{"state":"completed","output":null}`},
		{"complete with output", arv1.AgentRunStatus{Phase: arv1.PhaseComplete, FinalOutput: &arv1.FinalOutputDescriptor{
			Format: arv1.OutputFormatJSON, Stage: "report", SubmittedAt: ptr(metav1.NewTime(now)), Bytes: 42,
			ObjectName: "r-output", Artifacts: []string{"report.md"}}}, now,
			`{"state":"completed","output":{"format":"json","stage":"report","submitted_at":"2026-03-01T12:00:00Z","bytes":42,"truncated":false,"object_name":"r-output","artifacts":["report.md"]}}`},
		{"complete interactive", arv1.AgentRunStatus{Phase: arv1.PhaseCompleteInteractive, FinalOutput: &arv1.FinalOutputDescriptor{
			Format: arv1.OutputFormatText, Bytes: 300000, Truncated: true, ObjectName: "r-output"}}, now,
			`{"state":"completed","output":{"format":"text","stage":"","submitted_at":null,"bytes":300000,"truncated":true,"object_name":"r-output","artifacts":[]}}`},
		{"error", arv1.AgentRunStatus{Phase: arv1.PhaseError, Error: "model rejected the request: 400"}, now,
			`{"state":"failed","error":"model rejected the request: 400"}`},
		{"cancelled", arv1.AgentRunStatus{Phase: arv1.PhaseCancelled}, now,
			`{"state":"abandoned","reason":"cancelled"}`},
		{"cancelled with a dangling write", arv1.AgentRunStatus{Phase: arv1.PhaseCancelled,
			PendingCall: &arv1.PendingCall{Kind: arv1.CallKindTool, Seq: 9, Tool: "git_push", Effect: arv1.EffectWrite}}, now,
			`{"state":"abandoned","reason":"cancelled","unresolved_write":{"seq":9,"tool":"git_push"}}`},
		{"cancelled with a dangling read", arv1.AgentRunStatus{Phase: arv1.PhaseCancelled,
			PendingCall: &arv1.PendingCall{Kind: arv1.CallKindTool, Seq: 9, Tool: "read_file", Effect: arv1.EffectRead}}, now,
			`{"state":"abandoned","reason":"cancelled"}`},
		{"cancelled while reconciling", arv1.AgentRunStatus{Phase: arv1.PhaseCancelled,
			WaitingOn: &arv1.WaitingOn{Reason: arv1.WaitNeedsReconciliation, Seq: ptr(int64(3)), Tool: "deploy"}}, now,
			`{"state":"abandoned","reason":"cancelled","unresolved_write":{"seq":3,"tool":"deploy"}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustJSON(t, Status(runWith(tc.st), tc.now)); got != tc.want {
				t.Errorf("Status =\n  %s\nwant\n  %s", got, tc.want)
			}
		})
	}
}

// Every person wait is suspended without a "kind"; only Signal carries one.
func TestSuspendedKindOnlyForSignal(t *testing.T) {
	for _, r := range []arv1.WaitReason{arv1.WaitToolApproval, arv1.WaitUserPrompt, arv1.WaitTaintGate,
		arv1.WaitInteractionPoint, arv1.WaitNeedsSetup} {
		st := Status(runWith(waiting(arv1.WaitingOn{Reason: r})), now)
		if st.String("state") != StateSuspended {
			t.Errorf("%s: state %q, want suspended", r, st.String("state"))
		}
		if _, ok := st.Get("kind"); ok {
			t.Errorf("%s: has a kind key: %s", r, mustJSON(t, st))
		}
	}
	st := Status(runWith(waiting(arv1.WaitingOn{Reason: arv1.WaitSignal, Signal: "s"})), now)
	if st.String("kind") != SuspensionKindSignal {
		t.Errorf("signal: %s", mustJSON(t, st))
	}
}

// Paused and terminal phases win over a stale waitingOn.
func TestPhaseWinsOverWaitingOn(t *testing.T) {
	st := waiting(arv1.WaitingOn{Reason: arv1.WaitToolApproval})
	st.Phase = arv1.PhasePaused
	if got, want := mustJSON(t, Status(runWith(st), now)), `{"state":"suspended","reason":"paused","input_schema":{}}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	st.Phase = arv1.PhaseError
	st.Error = "boom"
	if got, want := mustJSON(t, Status(runWith(st), now)), `{"state":"failed","error":"boom"}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestPending(t *testing.T) {
	cases := []struct {
		name string
		pc   *arv1.PendingCall
		want string
	}{
		{"none", nil, `null`},
		{"model", &arv1.PendingCall{Kind: arv1.CallKindModel, Seq: 3, RequestHash: "sha256:ab12"},
			`{"kind":"model","seq":3,"request_hash":"sha256:ab12"}`},
		{"tool with key", &arv1.PendingCall{Kind: arv1.CallKindTool, Seq: 4, Tool: "create_issue",
			Input: `{ "title": "x", "labels": ["a"] }`, Effect: arv1.EffectIdempotent, IdempotencyKey: "k-4"},
			`{"kind":"tool","seq":4,"tool":"create_issue","input":{"title":"x","labels":["a"]},"effect":"idempotent","idempotency_key":"k-4"}`},
		{"tool without key", &arv1.PendingCall{Kind: arv1.CallKindTool, Seq: 5, Tool: "git_push",
			Input: `{"branch":"main"}`, Effect: arv1.EffectWrite},
			`{"kind":"tool","seq":5,"tool":"git_push","input":{"branch":"main"},"effect":"write","idempotency_key":null}`},
		{"tool with no input", &arv1.PendingCall{Kind: arv1.CallKindTool, Seq: 6, Tool: "now", Effect: arv1.EffectRead},
			`{"kind":"tool","seq":6,"tool":"now","input":null,"effect":"read","idempotency_key":null}`},
		{"tool with input that is not JSON", &arv1.PendingCall{Kind: arv1.CallKindTool, Seq: 7, Tool: "sh",
			Input: `ls -l`, Effect: arv1.EffectRead},
			`{"kind":"tool","seq":7,"tool":"sh","input":"ls -l","effect":"read","idempotency_key":null}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := runWith(arv1.AgentRunStatus{Phase: arv1.PhaseRunning, PendingCall: tc.pc})
			if got := mustJSON(t, Pending(run)); got != tc.want {
				t.Errorf("Pending =\n  %s\nwant\n  %s", got, tc.want)
			}
		})
	}
}

func TestRunState(t *testing.T) {
	cases := []struct {
		name string
		st   arv1.AgentRunStatus
		want string
	}{
		{"fresh run", arv1.AgentRunStatus{},
			`{"status":{"state":"not_started"},"usage":{"prompt_tokens":0,"completion_tokens":0,"cached_tokens":0,"cache_write_tokens":0,"model_calls":0,"tool_calls":0,"cost_usd":0,"cost_priced_usd":0,"unpriced_calls":0,"cost_is_exact":false},"next_seq":null,"pending":null}`},
		{"awaiting a model, priced exactly", arv1.AgentRunStatus{Phase: arv1.PhaseRunning,
			Usage: arv1.Usage{PromptTokens: 1200, CompletionTokens: 300, CachedTokens: 800, CacheWriteTokens: 100,
				TotalTokens: 1500, ModelCalls: 3, ToolCalls: 2, CostUSD: "0.0042", CostPricedUSD: "0.0042", CostIsExact: true},
			PendingCall: &arv1.PendingCall{Kind: arv1.CallKindModel, Seq: 6, RequestHash: "h6"}},
			`{"status":{"state":"awaiting_model"},"usage":{"prompt_tokens":1200,"completion_tokens":300,"cached_tokens":800,"cache_write_tokens":100,"model_calls":3,"tool_calls":2,"cost_usd":0.0042,"cost_priced_usd":0.0042,"unpriced_calls":0,"cost_is_exact":true},"next_seq":7,"pending":{"kind":"model","seq":6,"request_hash":"h6"}}`},
		{"unknown cost", arv1.AgentRunStatus{Phase: arv1.PhaseComplete,
			Usage: arv1.Usage{PromptTokens: 10, CompletionTokens: 5, ModelCalls: 2, CostUSD: "unknown",
				CostPricedUSD: "0.01", UnpricedCalls: 1}},
			`{"status":{"state":"completed","output":null},"usage":{"prompt_tokens":10,"completion_tokens":5,"cached_tokens":0,"cache_write_tokens":0,"model_calls":2,"tool_calls":0,"cost_usd":null,"cost_priced_usd":0.01,"unpriced_calls":1,"cost_is_exact":false},"next_seq":null,"pending":null}`},
		{"unset cost with unpriced calls", arv1.AgentRunStatus{Phase: arv1.PhaseRunning,
			Usage: arv1.Usage{ModelCalls: 1, UnpricedCalls: 1}},
			`{"status":{"state":"running"},"usage":{"prompt_tokens":0,"completion_tokens":0,"cached_tokens":0,"cache_write_tokens":0,"model_calls":1,"tool_calls":0,"cost_usd":null,"cost_priced_usd":0,"unpriced_calls":1,"cost_is_exact":false},"next_seq":null,"pending":null}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustJSON(t, RunState(runWith(tc.st), now)); got != tc.want {
				t.Errorf("RunState =\n  %s\nwant\n  %s", got, tc.want)
			}
		})
	}
}

func TestObjectNilIsEmpty(t *testing.T) {
	if got := mustJSON(t, Object(nil)); got != `{}` {
		t.Errorf("nil Object = %s", got)
	}
	if got := mustJSON(t, map[string]any{"s": Object(nil)}); got != `{"s":{}}` {
		t.Errorf("nested nil Object = %s", got)
	}
}

func TestDuration(t *testing.T) {
	for in, want := range map[int64]string{-5: "0s", 0: "0s", 59: "59s", 60: "1m0s", 192: "3m12s",
		3599: "59m59s", 3600: "1h0m", 7500: "2h5m", 86400: "1d0h", 273600: "3d4h"} {
		if got := Duration(in); got != want {
			t.Errorf("Duration(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestParentOf(t *testing.T) {
	run := runWith(arv1.AgentRunStatus{})
	if got := ParentOf(run); got != "" {
		t.Errorf("top-level: %q", got)
	}
	run.OwnerReferences = []metav1.OwnerReference{
		{APIVersion: "v1", Kind: "ConfigMap", Name: "cm", Controller: ptr(true)},
		{APIVersion: "agentrun.dev/v1alpha1", Kind: "AgentRun", Name: "owner", Controller: ptr(false)},
	}
	if got := ParentOf(run); got != "" {
		t.Errorf("non-controller AgentRun owner counted: %q", got)
	}
	run.OwnerReferences[1].Controller = ptr(true)
	if got := ParentOf(run); got != "owner" {
		t.Errorf("controller owner: %q", got)
	}
	run.Status.ParentRun = "named"
	if got := ParentOf(run); got != "named" {
		t.Errorf("status.parentRun: %q", got)
	}
}

func TestNewPsRow(t *testing.T) {
	created := metav1.NewTime(now.Add(-2 * time.Hour))
	moved := metav1.NewTime(now.Add(-192 * time.Second))
	run := runWith(waiting(arv1.WaitingOn{Reason: arv1.WaitNeedsSetup, Summary: "NeedsSetup: SecretMissing",
		Blocker: arv1.BlockerSecretMissing, Remedy: "create it"}))
	run.CreationTimestamp = created
	run.Status.Stage = "plan 1/3"
	run.Status.Usage = arv1.Usage{PromptTokens: 100, CompletionTokens: 20, CostUSD: "unknown"}
	run.Status.Active = &arv1.ActiveClock{BankedSeconds: 60, Since: &moved}
	run.Status.LastProgressAt = &moved
	got := NewPsRow(run, now)
	want := PsRow{Namespace: "ns", Name: "r", Phase: "WaitingInput", Waiting: "NeedsSetup: SecretMissing",
		Stage: "plan 1/3", Tokens: 120, Cost: "unknown", Working: "4m12s", LastMoved: "3m12s",
		NeedsAPerson: true, State: StateSuspended, Created: created.Time}
	if got != want {
		t.Errorf("NewPsRow =\n  %+v\nwant\n  %+v", got, want)
	}
	fresh := NewPsRow(runWith(arv1.AgentRunStatus{}), now)
	if fresh.Phase != Empty || fresh.LastMoved != Empty || fresh.Cost != Empty || fresh.Working != "0s" {
		t.Errorf("fresh row: %+v", fresh)
	}
}
