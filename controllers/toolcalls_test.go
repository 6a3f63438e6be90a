package controllers_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool/mcptest"
	"github.com/agentrun-dev/agentrun-operator/internal/providers/providertest"
	"github.com/agentrun-dev/agentrun-operator/internal/wirestatus"
)

// toolAgent is a blueprint whose scripted model makes the given tool calls,
// one turn each, then completes. extra is appended to the manifest (server
// options, permissions, profiles, limits).
func toolAgent(url, serverOpts, extra string, calls ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[agent]\nname = \"tooling\"\n[agent.title]\nenabled = false\n\n[mcp_servers.tracker]\nurl = %q\n%s\n%s\n\n[stages.work]\nallow_complete = true\n[stages.work.model]\nmodels = [{provider = \"demo\", model = \"scripted-1\"}]\n", url, serverOpts, extra)
	for i, c := range calls {
		name, args, _ := strings.Cut(c, " ")
		if args == "" {
			args = "{}"
		}
		fmt.Fprintf(&b, "[[stages.work.script]]\ntext = \"turn %d\"\ntool_calls = [{name = %q, arguments = '%s'}]\n", i, name, args)
	}
	b.WriteString("[[stages.work.script]]\ncomplete = true\noutput = \"done\"\n")
	return b.String()
}

// toolRun sets up a namespace with the blueprint and the scripted provider
// and starts a run of it.
func toolRun(t *testing.T, manifest string, mutate ...func(*arv1.AgentRun)) (string, *arv1.AgentRun) {
	t.Helper()
	ns := newNamespace(t)
	createConfigMap(t, ns, "tooling", map[string]string{"agent.toml": manifest})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	return ns, createRun(t, ns, "r", "tooling", mutate...)
}

func waitingOn(reason arv1.WaitReason) func(*arv1.AgentRun) bool {
	return func(r *arv1.AgentRun) bool { return r.Status.WaitingOn != nil && r.Status.WaitingOn.Reason == reason }
}

// grantAnswering lets user create (and read) agentrunanswers in ns, and
// nothing else.
func grantAnswering(t *testing.T, ns, user string) client.Client {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "answerer", Namespace: ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"agentrun.dev"}, Resources: []string{"agentrunanswers"}, Verbs: []string{"create", "get"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user + "-answers", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "answerer"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}}}
	for _, o := range []client.Object{role, binding} {
		if err := k8s.Create(ctx, o); client.IgnoreAlreadyExists(err) != nil {
			t.Fatal(err)
		}
	}
	return clientAs(t, user)
}

// refusedWithoutGrant: a user with no grant cannot answer the wait; the
// API server refuses before the run ever sees it.
func refusedWithoutGrant(t *testing.T, ns string, w *arv1.WaitingOn) {
	t.Helper()
	a := &arv1.AgentRunAnswer{ObjectMeta: metav1.ObjectMeta{GenerateName: "bob-", Namespace: ns},
		Spec: arv1.AgentRunAnswerSpec{Run: "r", Point: w.Point, Decision: arv1.DecisionApprove, By: "bob"}}
	if err := clientAs(t, "bob").Create(context.Background(), a); !apierrors.IsForbidden(err) {
		t.Fatalf("bob, without the grant, answered %s: %v", w.Reason, err)
	}
}

// answer creates an AgentRunAnswer to the run's current point as user.
func answer(t *testing.T, c client.Client, ns, name, user string, w *arv1.WaitingOn, mutate func(*arv1.AgentRunAnswerSpec)) {
	t.Helper()
	a := &arv1.AgentRunAnswer{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: arv1.AgentRunAnswerSpec{Run: "r", Point: w.Point, By: user}}
	mutate(&a.Spec)
	if err := c.Create(context.Background(), a); err != nil {
		t.Fatal(err)
	}
}

// answerState waits for the controller to record the answer's fate.
func answerState(t *testing.T, ns, name string) arv1.AgentRunAnswerStatus {
	t.Helper()
	a := &arv1.AgentRunAnswer{}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, a); err != nil {
			t.Fatal(err)
		}
		if a.Status.State != "" {
			return a.Status
		}
		if time.Now().After(deadline) {
			t.Fatalf("answer %s was never processed", name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func entriesOf(t *testing.T, ns string, run *arv1.AgentRun, kind journal.Kind) []journal.Entry {
	t.Helper()
	var out []journal.Entry
	for _, e := range journalEntries(t, ns, string(run.UID)) {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b journal.Entry) int { return int(a.Seq - b.Seq) })
	return out
}

// TestToolApprovalAnsweredByAllowedPerson: a write tool with permission
// "ask" parks on ToolApproval showing the call; bob (no grant) is refused
// by the API server; alice approves in her own name and the write runs
// once; the journal records alice.
func TestToolApprovalAnsweredByAllowedPerson(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	startManager(t, managerOpts{})
	ns, run := toolRun(t, toolAgent(srv.URL(), "", "", `read_doc {"id":"a"}`, `create_ticket {"title":"ship it"}`))
	parked := waitFor(t, ns, "r", 20*time.Second, "ToolApproval", waitingOn(arv1.WaitToolApproval))
	w := parked.Status.WaitingOn
	if !w.NeedsAPerson || w.Summary != "ToolApproval: create_ticket" || !strings.Contains(w.Question, "effect write") || !strings.Contains(w.Question, `"ship it"`) || w.Point == "" {
		t.Errorf("waitingOn = %+v: want the call (tool, effect, arguments) shown with a point to answer", w)
	}
	if srv.Calls("read_doc") != 1 || srv.Calls("create_ticket") != 0 {
		t.Errorf("calls read_doc=%d create_ticket=%d, want 1 and 0 (reads are allowed, the write waits)", srv.Calls("read_doc"), srv.Calls("create_ticket"))
	}
	alice := grantAnswering(t, ns, "alice")
	bob := clientAs(t, "bob")
	ans := &arv1.AgentRunAnswer{ObjectMeta: metav1.ObjectMeta{Name: "bob", Namespace: ns},
		Spec: arv1.AgentRunAnswerSpec{Run: "r", Point: w.Point, Decision: arv1.DecisionApprove, By: "bob"}}
	if err := bob.Create(context.Background(), ans); !apierrors.IsForbidden(err) {
		t.Fatalf("bob, without the grant, answered: %v", err)
	}
	answer(t, alice, ns, "ok", "alice", w, func(s *arv1.AgentRunAnswerSpec) { s.Decision = arv1.DecisionApprove })
	waitFor(t, ns, "r", 20*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	if st := answerState(t, ns, "ok"); st.State != arv1.AnswerApplied {
		t.Errorf("answer = %+v, want Applied", st)
	}
	answer(t, alice, ns, "late", "alice", w, func(s *arv1.AgentRunAnswerSpec) { s.Decision = arv1.DecisionApprove })
	if st := answerState(t, ns, "late"); st.State != arv1.AnswerRejected || st.Message != "The run has finished (Complete)" {
		t.Errorf("an answer after the end = %+v, want Rejected as the run has finished", st)
	}
	if srv.Executed("create_ticket") != 1 {
		t.Errorf("create_ticket executed %d times, want 1", srv.Executed("create_ticket"))
	}
	d := entriesOf(t, ns, run, journal.ToolCallDecided)
	if len(d) != 1 || d[0].By != "alice" || !d[0].Approved || d[0].Auto || d[0].Message != "ok" {
		t.Errorf("decisions = %+v, want alice's approval by answer ok", d)
	}
}

// TestDeniedAndExpiredApprovalsNeverCallTheTool: a denial and an expiry
// both leave the write unmade and tell the model; the run goes on.
func TestDeniedAndExpiredApprovalsNeverCallTheTool(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	startManager(t, managerOpts{})

	ns, run := toolRun(t, toolAgent(srv.URL(), "", "", `create_ticket {"title":"no"}`))
	w := waitFor(t, ns, "r", 20*time.Second, "ToolApproval", waitingOn(arv1.WaitToolApproval)).Status.WaitingOn
	alice := grantAnswering(t, ns, "alice")
	answer(t, alice, ns, "no", "alice", w, func(s *arv1.AgentRunAnswerSpec) { s.Decision, s.Text = arv1.DecisionDeny, ptr.To("not on a Friday") })
	waitFor(t, ns, "r", 20*time.Second, "Complete after the denial", phaseIs(arv1.PhaseComplete))
	if d := entriesOf(t, ns, run, journal.ToolCallDecided); len(d) != 1 || d[0].Approved || d[0].By != "alice" || d[0].Expired || d[0].Result != "not on a Friday" {
		t.Errorf("decisions = %+v, want alice's denial with her reason", d)
	}

	ns2, run2 := toolRun(t, toolAgent(srv.URL(), "", "[limits]\ninteraction_timeout_secs = 2", `create_ticket {"title":"late"}`))
	waitFor(t, ns2, "r", 20*time.Second, "ToolApproval", waitingOn(arv1.WaitToolApproval))
	waitFor(t, ns2, "r", 20*time.Second, "Complete after expiry", phaseIs(arv1.PhaseComplete))
	d := entriesOf(t, ns2, run2, journal.ToolCallDecided)
	if len(d) != 1 || d[0].Approved || !d[0].Expired {
		t.Errorf("decisions = %+v, want one expired denial (a timeout is never consent)", d)
	}
	if srv.Calls("create_ticket") != 0 {
		t.Errorf("create_ticket called %d times after a denial and an expiry", srv.Calls("create_ticket"))
	}
}

// TestDenyHoldsUnderYoloAndProfilesSurviveRestart: "deny" is never lifted
// by yolo; a named profile approves only what it lists, and after a
// manager restart the run is still held to the profile, not bare yolo.
func TestDenyHoldsUnderYoloAndProfilesSurviveRestart(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	h1 := startManager(t, managerOpts{})

	ns, run := toolRun(t, toolAgent(srv.URL(), "", "[tools.create_ticket]\npermission = \"deny\"", `create_ticket {"title":"x"}`),
		func(r *arv1.AgentRun) { r.Spec.Yolo = true })
	waitFor(t, ns, "r", 20*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	d := entriesOf(t, ns, run, journal.ToolCallDecided)
	if len(d) != 1 || d[0].Approved || d[0].By != "policy: permission deny" || srv.Calls("create_ticket") != 0 {
		t.Errorf("decisions = %+v, calls = %d: deny must hold under yolo", d, srv.Calls("create_ticket"))
	}

	profile := "[yolo_profiles.ci]\napprove = [\"upsert_record\"]"
	ns2, run2 := toolRun(t, toolAgent(srv.URL(), "", profile, `upsert_record {"id":"1","value":"v"}`, `create_ticket {"title":"y"}`),
		func(r *arv1.AgentRun) { r.Spec.Yolo, r.Spec.YoloProfile = true, "ci" })
	waitFor(t, ns2, "r", 20*time.Second, "ToolApproval for the unlisted write", waitingOn(arv1.WaitToolApproval))
	h1.stop()
	startManager(t, managerOpts{identity: "after-restart"})
	// The record the first manager wrote already shows ToolApproval, so
	// waiting for that alone passes before the new manager has looked.
	// Wait for the new manager's own record (it names it as the driver),
	// still holding the call, with the spec observed.
	heldByNew := func(r *arv1.AgentRun) bool {
		return r.Status.Driver == "after-restart" && r.Status.ObservedGeneration == r.Generation && waitingOn(arv1.WaitToolApproval)(r)
	}
	w := waitFor(t, ns2, "r", 20*time.Second, "the new manager's record, still ToolApproval", heldByNew).Status.WaitingOn
	// A wrong approval could still come from a later reconcile (one woken
	// when the new manager's listing of the tool server completes, say),
	// and nothing signals that none will: look for a second.
	if err := holdsFor(time.Second, func() error {
		if r := getRun(t, ns2, "r"); !heldByNew(r) || srv.Calls("create_ticket") != 0 {
			return fmt.Errorf("after the restart: driver %q, waitingOn %+v, create_ticket calls %d", r.Status.Driver, r.Status.WaitingOn, srv.Calls("create_ticket"))
		}
		return nil
	}); err != nil {
		t.Fatalf("the new manager let the unlisted write through: %v", err)
	}
	if !strings.Contains(w.Question, "create_ticket") {
		t.Errorf("question = %q, want the create_ticket call", w.Question)
	}
	d = entriesOf(t, ns2, run2, journal.ToolCallDecided)
	if len(d) != 1 || d[0].Tool != "upsert_record" || !d[0].Auto || d[0].By != "policy: yolo profile ci" {
		t.Errorf("decisions = %+v, want only upsert_record approved by the profile", d)
	}
	if srv.Executed("upsert_record") != 1 || srv.Calls("create_ticket") != 0 {
		t.Errorf("upsert_record executed %d, create_ticket called %d", srv.Executed("upsert_record"), srv.Calls("create_ticket"))
	}
}

// TestTaintGateHoldsAWriteAfterTaintedInput: a read from a server above the
// run's clearance taints it; the next write parks on TaintGate even though
// it is allowed, until a person clears it.
func TestTaintGateHoldsAWriteAfterTaintedInput(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	startManager(t, managerOpts{})
	extra := "[tools.create_ticket]\npermission = \"allow\"\n[agent2]"
	extra = strings.TrimSuffix(extra, "\n[agent2]")
	manifest := strings.Replace(toolAgent(srv.URL(), "level = \"internal\"", extra, `read_doc {"id":"secret"}`, `create_ticket {"title":"leak?"}`),
		"name = \"tooling\"\n", "name = \"tooling\"\nclearance = \"public\"\n", 1)
	ns, run := toolRun(t, manifest)
	w := waitFor(t, ns, "r", 20*time.Second, "TaintGate", waitingOn(arv1.WaitTaintGate)).Status.WaitingOn
	if !w.NeedsAPerson || !strings.Contains(w.Question, "read_doc") || srv.Calls("create_ticket") != 0 {
		t.Errorf("waitingOn = %+v, create_ticket calls = %d", w, srv.Calls("create_ticket"))
	}
	refusedWithoutGrant(t, ns, w)
	alice := grantAnswering(t, ns, "alice")
	answer(t, alice, ns, "clear", "alice", w, func(s *arv1.AgentRunAnswerSpec) { s.Decision = arv1.DecisionApprove })
	waitFor(t, ns, "r", 20*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	d := entriesOf(t, ns, run, journal.ToolCallDecided)
	if len(d) != 1 || d[0].Gate != journal.GateTaint || d[0].By != "alice" || srv.Executed("create_ticket") != 1 {
		t.Errorf("decisions = %+v, executed = %d", d, srv.Executed("create_ticket"))
	}
}

// TestAskUserAnswersAreValidated: a choice not offered and input failing
// the question's schema are Rejected and the run keeps waiting; an offered
// choice and a null input (null counts as input) are applied.
func TestAskUserAnswersAreValidated(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	startManager(t, managerOpts{})
	ns, run := toolRun(t, toolAgent(srv.URL(), "", "",
		`ask_user {"question":"Which environment?","options":["staging","prod"]}`,
		`ask_user {"question":"Any overrides?","input_schema":{"type":["object","null"]}}`))
	w := waitFor(t, ns, "r", 20*time.Second, "UserPrompt", waitingOn(arv1.WaitUserPrompt)).Status.WaitingOn
	if !w.NeedsAPerson || !strings.Contains(w.Question, "Which environment?") || !strings.Contains(w.Question, `"prod"`) {
		t.Errorf("waitingOn = %+v", w)
	}
	refusedWithoutGrant(t, ns, w)
	alice := grantAnswering(t, ns, "alice")
	answer(t, alice, ns, "dev", "alice", w, func(s *arv1.AgentRunAnswerSpec) { s.Text = ptr.To("dev") })
	if st := answerState(t, ns, "dev"); st.State != arv1.AnswerRejected || !strings.Contains(st.Message, "must be one of") {
		t.Errorf("answer dev = %+v, want Rejected as not a choice", st)
	}
	answer(t, alice, ns, "prod", "alice", w, func(s *arv1.AgentRunAnswerSpec) { s.Text = ptr.To("prod") })
	w2 := waitFor(t, ns, "r", 20*time.Second, "the second question", func(r *arv1.AgentRun) bool {
		return r.Status.WaitingOn != nil && strings.Contains(r.Status.WaitingOn.Question, "overrides")
	}).Status.WaitingOn
	if w2.InputSchema != `{"type":["object","null"]}` || w.InputSchema != `{"enum":["staging","prod"],"type":"string"}` {
		t.Errorf("inputSchema = %q then %q, want the choices' schema then the agent's own", w.InputSchema, w2.InputSchema)
	}
	answer(t, alice, ns, "num", "alice", w2, func(s *arv1.AgentRunAnswerSpec) { s.Input = ptr.To("42") })
	if st := answerState(t, ns, "num"); st.State != arv1.AnswerRejected || !strings.Contains(st.Message, "schema") {
		t.Errorf("answer 42 = %+v, want Rejected by the schema", st)
	}
	answer(t, alice, ns, "null", "alice", w2, func(s *arv1.AgentRunAnswerSpec) { s.Input = ptr.To("null") })
	waitFor(t, ns, "r", 20*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	var results []string
	for _, e := range entriesOf(t, ns, run, journal.ToolCallCompleted) {
		results = append(results, e.By+"="+e.Result)
	}
	if want := []string{`alice="prod"`, `alice=null`}; !slices.Equal(results, want) {
		t.Errorf("results = %q, want %q", results, want)
	}
}

// TestSignalIsDeliveredThroughAnAnswer: wait_for_signal parks on Signal,
// which needs no person; a service's answer carries the payload on.
func TestSignalIsDeliveredThroughAnAnswer(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	startManager(t, managerOpts{})
	ns, run := toolRun(t, toolAgent(srv.URL(), "", "", `wait_for_signal {"reason":"the build finishes","input_schema":{"type":"object","required":["ok"]}}`))
	w := waitFor(t, ns, "r", 20*time.Second, "Signal", waitingOn(arv1.WaitSignal)).Status.WaitingOn
	if w.NeedsAPerson || w.Signal != "the build finishes" || w.Point == "" || w.InputSchema != `{"type":"object","required":["ok"]}` {
		t.Errorf("waitingOn = %+v, want a Signal that needs no person", w)
	}
	refusedWithoutGrant(t, ns, w)
	ci := grantAnswering(t, ns, "ci-bot")
	answer(t, ci, ns, "bad", "ci-bot", w, func(s *arv1.AgentRunAnswerSpec) { s.Input = ptr.To(`{}`) })
	if st := answerState(t, ns, "bad"); st.State != arv1.AnswerRejected {
		t.Errorf("a payload failing the schema = %+v, want Rejected", st)
	}
	answer(t, ci, ns, "built", "ci-bot", w, func(s *arv1.AgentRunAnswerSpec) { s.Input = ptr.To(`{"ok":true}`) })
	waitFor(t, ns, "r", 20*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	c := entriesOf(t, ns, run, journal.ToolCallCompleted)
	if len(c) != 1 || c[0].Result != `{"ok":true}` || c[0].By != "ci-bot" {
		t.Errorf("completions = %+v", c)
	}
}

// TestToolServerTokenSecretIsASetupBlocker: a server whose token Secret is
// missing parks the run on NeedsSetup naming it; creating the Secret lets
// the call through with the token.
func TestToolServerTokenSecretIsASetupBlocker(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{Token: "tok-123"})
	startManager(t, managerOpts{})
	ns, _ := toolRun(t, toolAgent(srv.URL(), "auth_secret = \"tracker-token\"", "", `read_doc {"id":"a"}`))
	w := waitFor(t, ns, "r", 20*time.Second, "NeedsSetup", blockedOn(arv1.BlockerSecretMissing)).Status.WaitingOn
	if !strings.Contains(w.Remedy, "tracker-token") || !strings.Contains(w.Remedy, "MCP server") {
		t.Errorf("remedy = %q", w.Remedy)
	}
	createSecret(t, ns, "tracker-token", map[string]string{"token": "tok-123"})
	done := waitFor(t, ns, "r", 20*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	if srv.Executed("read_doc") != 1 {
		t.Errorf("read_doc executed %d times", srv.Executed("read_doc"))
	}
	if strings.Contains(fmt.Sprintf("%+v", done.Status), "tok-123") {
		t.Error("the token appears in status")
	}
}

// TestInterruptedReadAndIdempotentCallsReExecute: a read and an idempotent
// call cut off by a manager stop run again on the next manager; the
// idempotent one carries the same recorded key.
func TestInterruptedReadAndIdempotentCallsReExecute(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	for tool, args := range map[string]string{"read_doc": `{"id":"k"}`, "upsert_record": `{"id":"k","value":"v"}`} {
		t.Run(tool, func(t *testing.T) {
			entered, release := srv.Hold(tool)
			h := startManager(t, managerOpts{})
			before := srv.Calls(tool)
			ns, run := toolRun(t, toolAgent(srv.URL(), "", "[tools.upsert_record]\npermission = \"allow\"", tool+" "+args))
			awaitEntered(t, entered, ns)
			h.stop()
			release()
			startManager(t, managerOpts{})
			waitFor(t, ns, "r", 20*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
			if got := srv.Calls(tool) - before; got != 2 {
				t.Errorf("%s reached the server %d times, want 2 (interrupted, then re-executed)", tool, got)
			}
			req := entriesOf(t, ns, run, journal.ToolCallRequested)
			if len(req) != 1 {
				t.Fatalf("intents = %+v, want one (re-executed under the same intent)", req)
			}
			if tool == "upsert_record" {
				keys := srv.Keys(tool)
				last2 := keys[len(keys)-2:]
				if last2[0] != req[0].IdempotencyKey || last2[1] != req[0].IdempotencyKey {
					t.Errorf("keys = %q, want both %q", last2, req[0].IdempotencyKey)
				}
			}
		})
	}
}

// TestDanglingWriteWaitsForAPerson: a write cut off mid-call is never
// issued again by itself: the next manager parks the run on
// NeedsReconciliation naming it, and each of a person's three answers does
// what it says (Done records the output, Retry issues it again, Abandon
// ends the run with the write on record).
func TestDanglingWriteWaitsForAPerson(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	for _, decision := range []arv1.AnswerDecision{arv1.DecisionDone, arv1.DecisionRetry, arv1.DecisionAbandon} {
		t.Run(string(decision), func(t *testing.T) {
			entered, release := srv.Hold("create_ticket")
			h := startManager(t, managerOpts{})
			before := srv.Calls("create_ticket")
			ns, run := toolRun(t, toolAgent(srv.URL(), "", "[tools.create_ticket]\npermission = \"allow\"", `create_ticket {"title":"once"}`))
			awaitEntered(t, entered, ns)
			h.stop()
			release()
			startManager(t, managerOpts{})
			parked := waitFor(t, ns, "r", 20*time.Second, "NeedsReconciliation", waitingOn(arv1.WaitNeedsReconciliation))
			w, p := parked.Status.WaitingOn, parked.Status.PendingCall
			// The write's intent was recorded in status before the call;
			// the journal records it only with an outcome.
			if p == nil || p.Kind != arv1.CallKindTool || p.Effect != arv1.EffectWrite || w.Seq == nil || *w.Seq != p.Seq || w.Tool != "create_ticket" || !w.NeedsAPerson {
				t.Fatalf("waitingOn = %+v, pendingCall = %+v", w, p)
			}
			if req := entriesOf(t, ns, run, journal.ToolCallRequested); len(req) != 0 {
				t.Fatalf("intents journaled before any outcome: %+v", req)
			}
			// The park is the new manager's decision (the stopped one never
			// wrote it), so it has looked at the write. That it does not
			// issue the write again later either has no event to wait on:
			// look for half a second, the run still parked.
			if err := holdsFor(500*time.Millisecond, func() error {
				if got := srv.Calls("create_ticket") - before; got != 1 {
					return fmt.Errorf("the write reached the server %d times before anyone decided", got)
				}
				if r := getRun(t, ns, "r"); !waitingOn(arv1.WaitNeedsReconciliation)(r) {
					return fmt.Errorf("the run left NeedsReconciliation before anyone decided: phase %s, waitingOn %+v", r.Status.Phase, r.Status.WaitingOn)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			refusedWithoutGrant(t, ns, w)
			alice := grantAnswering(t, ns, "alice")
			answer(t, alice, ns, "settle", "alice", w, func(s *arv1.AgentRunAnswerSpec) {
				s.Decision = decision
				if decision == arv1.DecisionDone {
					s.Text = ptr.To("ticket 7 created")
				}
			})
			switch decision {
			case arv1.DecisionDone:
				waitFor(t, ns, "r", 20*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
				c := entriesOf(t, ns, run, journal.ToolCallCompleted)
				if len(c) != 1 || c[0].Result != `"ticket 7 created"` || c[0].By != "alice" || srv.Calls("create_ticket")-before != 1 {
					t.Errorf("completions = %+v, calls = %d", c, srv.Calls("create_ticket")-before)
				}
			case arv1.DecisionRetry:
				waitFor(t, ns, "r", 20*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
				if got := srv.Calls("create_ticket") - before; got != 2 {
					t.Errorf("calls = %d, want 2 (the retry a person asked for)", got)
				}
			case arv1.DecisionAbandon:
				done := waitFor(t, ns, "r", 20*time.Second, "Cancelled", phaseIs(arv1.PhaseCancelled))
				pc := done.Status.PendingCall
				if pc == nil || pc.Tool != "create_ticket" || pc.Seq != p.Seq || pc.Effect != arv1.EffectWrite {
					t.Errorf("pendingCall = %+v, want the unresolved write on record", pc)
				}
				if srv.Calls("create_ticket")-before != 1 {
					t.Errorf("calls = %d after abandon", srv.Calls("create_ticket")-before)
				}
			}
			if st := answerState(t, ns, "settle"); st.State != arv1.AnswerApplied {
				t.Errorf("answer = %+v", st)
			}
		})
	}
}

// awaitEntered waits for a held tool call to reach the server.
func awaitEntered(t *testing.T, entered <-chan struct{}, ns string) {
	t.Helper()
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		r := getRun(t, ns, "r")
		t.Fatalf("the tool call never reached the server; phase=%s waitingOn=%+v", r.Status.Phase, r.Status.WaitingOn)
	}
}

// TestModelCallsMCPToolsThroughTheSDK: a model behind the OpenAI SDK is
// offered the MCP server's tools (listed, filtered, denied ones hidden) and
// the built-ins; its call to read_doc runs on the MCP server, and the next
// request carries the result back as a tool message.
func TestModelCallsMCPToolsThroughTheSDK(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	oa := providertest.NewOpenAIServer(t)
	oa.Push(
		providertest.Reply{ToolCall: &providertest.ToolCall{ID: "c1", Name: "read_doc", Args: `{"id":"spec"}`}, PromptTokens: 10, CompletionTokens: 2},
		providertest.Reply{ToolCall: &providertest.ToolCall{Name: "complete", Args: `{"output":"read it"}`}, PromptTokens: 20, CompletionTokens: 2},
	)
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": providerConfig(openAIEntry("oa", oa.URL, true))})
	createSecret(t, ns, "oa-key", map[string]string{"api-key": "sk-openai-test"})
	createConfigMap(t, ns, "mcp", map[string]string{"agent.toml": fmt.Sprintf(`[agent]
name = "mcp"
[agent.title]
enabled = false
[agent.tool_permissions]
fail_tool = "deny"
[mcp_servers.tracker]
url = %q
[mcp_servers.locked]
url = %q
auth_secret = "locked-token"
tools = ["vault_read"]
[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "oa", model = "gpt-x"}]
`, srv.URL(), srv.URL())})
	run := createRun(t, ns, "r", "mcp")
	waitFor(t, ns, "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	if srv.Executed("read_doc") != 1 {
		t.Errorf("read_doc executed %d times, want 1", srv.Executed("read_doc"))
	}
	if oa.Requests() != 2 {
		t.Fatalf("model requests = %d, want 2", oa.Requests())
	}
	offered := oa.Last().Tools()
	for _, name := range []string{"read_doc", "upsert_record", "create_ticket", "ask_user", "check_agent", "transition", "complete"} {
		if _, ok := offered[name]; !ok {
			t.Errorf("tool %s not offered to the model (offered %v)", name, slices.Sorted(maps.Keys(offered)))
		}
	}
	if _, ok := offered["fail_tool"]; ok {
		t.Error("a denied tool is offered to the model")
	}
	// The locked server's Secret is missing: its tools are not offered, and
	// a Warning event says why instead of the run silently lacking them.
	waitForEvent(t, ns, "r", "ToolServerUnavailable", `MCP server "locked" are not offered`)
	var toolMsg map[string]any
	for _, m := range oa.Last().Messages() {
		if m["role"] == "tool" {
			toolMsg = m
		}
	}
	if toolMsg == nil || toolMsg["tool_call_id"] != "c1" || toolMsg["content"] != "doc spec" {
		t.Errorf("the second request's tool message = %v, want the result of c1", toolMsg)
	}
	if c := entriesOf(t, ns, run, journal.ToolCallCompleted); len(c) != 1 || c[0].Result != "doc spec" {
		t.Errorf("completions = %+v", c)
	}
}

// TestWritesWaitingForAnExecutorSlotAreNotDangling: with one executor slot
// and five runs each making a slow write, every write waits its turn and
// runs exactly once; none is mistaken for a dangling write.
func TestWritesWaitingForAnExecutorSlotAreNotDangling(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	srv.SetDelay("create_ticket", 200*time.Millisecond)
	startManager(t, managerOpts{steps: 1})
	ns := newNamespace(t)
	createConfigMap(t, ns, "tooling", map[string]string{"agent.toml": toolAgent(srv.URL(), "", "[tools.create_ticket]\npermission = \"allow\"", `create_ticket {"title":"{task}"}`)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	const runs = 5
	var uids []string
	for i := range runs {
		uids = append(uids, string(createRun(t, ns, fmt.Sprintf("w%d", i), "tooling").UID))
	}
	for i := range runs {
		name := fmt.Sprintf("w%d", i)
		done := waitFor(t, ns, name, 60*time.Second, "Complete or parked", func(r *arv1.AgentRun) bool {
			return r.Status.Phase == arv1.PhaseComplete || (r.Status.WaitingOn != nil && r.Status.WaitingOn.Reason == arv1.WaitNeedsReconciliation)
		})
		if done.Status.Phase != arv1.PhaseComplete {
			t.Errorf("%s parked on %+v: a write that never started was taken for a dangling one", name, done.Status.WaitingOn)
		}
		if n := callsOf(srv, uids[i]); n != 1 {
			t.Errorf("%s: its write reached the server %d times, want 1", name, n)
		}
	}
}

// TestCancelDuringAWriteKeepsTheEvidence: cancelling a run while its write
// is at the server stops the call and ends the run Cancelled; whether the
// write happened is unknown, so the write stays on record as unresolved
// (status.pendingCall, and unresolved_write in the wire status).
func TestCancelDuringAWriteKeepsTheEvidence(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	entered, release := srv.Hold("create_ticket")
	defer release()
	startManager(t, managerOpts{})
	ns, _ := toolRun(t, toolAgent(srv.URL(), "", "[tools.create_ticket]\npermission = \"allow\"", `create_ticket {"title":"halfway"}`))
	awaitEntered(t, entered, ns)
	patchSpec(t, ns, "r", func(r *arv1.AgentRun) { r.Spec.Cancel = true })
	done := waitFor(t, ns, "r", 20*time.Second, "Cancelled", phaseIs(arv1.PhaseCancelled))
	pc := done.Status.PendingCall
	if pc == nil || pc.Tool != "create_ticket" || pc.Effect != arv1.EffectWrite {
		t.Fatalf("pendingCall = %+v, want the write on record", pc)
	}
	st := wirestatus.Status(done, time.Now())
	if w, ok := st.Get("unresolved_write"); !ok || w == nil {
		b, _ := st.MarshalJSON()
		t.Errorf("wire status %s lacks unresolved_write", b)
	}
}

// TestToolRoutingPicksTheServer: with two servers that may both offer
// read_doc, the blueprint alone cannot say which (the call fails closed);
// the stage's tool_routing sends it to the one it names.
func TestToolRoutingPicksTheServer(t *testing.T) {
	a, b := mcptest.New(t, mcptest.Options{}), mcptest.New(t, mcptest.Options{})
	startManager(t, managerOpts{})
	manifest := fmt.Sprintf(`[agent]
name = "tooling"
[agent.title]
enabled = false
[mcp_servers.a]
url = %q
[mcp_servers.b]
url = %q
[stages.work]
allow_complete = true
[stages.work.tool_routing]
read_doc = "b"
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.work.script]]
tool_calls = [{name = "read_doc", arguments = '{"id": "x"}'}]
[[stages.work.script]]
complete = true
output = "done"
`, a.URL(), b.URL())
	ns, run := toolRun(t, manifest)
	waitFor(t, ns, "r", 20*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	if a.Executed("read_doc") != 0 || b.Executed("read_doc") != 1 {
		t.Errorf("read_doc executed on a %d times, on b %d times; want only b, once", a.Executed("read_doc"), b.Executed("read_doc"))
	}
	c := entriesOf(t, ns, run, journal.ToolCallCompleted)
	if len(c) != 1 || c[0].IsError {
		t.Errorf("completions = %+v", c)
	}
}
