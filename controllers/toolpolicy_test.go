package controllers_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool/mcptest"
	"github.com/agentrun-dev/agentrun-operator/internal/plugin"
	"github.com/agentrun-dev/agentrun-operator/internal/providers/providertest"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// createPolicy applies a tool policy (cluster-scoped when ns is empty) and
// deletes it when the test ends.
func createPolicy(t *testing.T, ns, name string, rules ...arv1.ToolPolicyRule) client.Object {
	t.Helper()
	spec := arv1.AgentToolPolicySpec{Rules: rules}
	var obj client.Object = &arv1.ClusterAgentToolPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	if ns != "" {
		obj = &arv1.AgentToolPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
	}
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), obj) })
	return obj
}

// ensureNamespace creates the namespace name if it does not exist.
func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k8s.Create(context.Background(), ns); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
}

// ticketRun starts, in ns, a run whose model (a loopback server speaking
// the OpenAI protocol) calls create_ticket with args on the MCP server at
// mcpURL, then completes. The blueprint allows the write.
func ticketRun(t *testing.T, ns, mcpURL, args string) (*providertest.Server, *arv1.AgentRun) {
	t.Helper()
	oa := providertest.NewOpenAIServer(t)
	oa.Push(
		providertest.Reply{ToolCall: &providertest.ToolCall{ID: "c1", Name: "create_ticket", Args: args}, PromptTokens: 10, CompletionTokens: 2},
		providertest.Reply{ToolCall: &providertest.ToolCall{Name: "complete", Args: `{"output":"done"}`}, PromptTokens: 20, CompletionTokens: 2},
	)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": providerConfig(openAIEntry("oa", oa.URL, true))})
	createSecret(t, ns, "oa-key", map[string]string{"api-key": "sk-openai-test"})
	createConfigMap(t, ns, "tickets", map[string]string{"agent.toml": fmt.Sprintf(`[agent]
name = "tickets"
[agent.title]
enabled = false
[mcp_servers.tracker]
url = %q
[tools.create_ticket]
permission = "allow"
[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "oa", model = "gpt-x"}]
`, mcpURL)})
	return oa, createRun(t, ns, "r", "tickets")
}

// toolMessage is the content of the tool message answering call id in
// the request's messages ("" when there is none).
func toolMessage(r providertest.Request, id string) string {
	for _, m := range r.Messages() {
		if m["role"] == "tool" && m["tool_call_id"] == id {
			s, _ := m["content"].(string)
			return s
		}
	}
	return ""
}

func transcriptOf(t *testing.T, ns string, run *arv1.AgentRun) string {
	t.Helper()
	var buf bytes.Buffer
	if err := plugin.RenderTranscript(&buf, journalEntries(t, ns, string(run.UID)), nil); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

const p0Message = "p0 tickets page the on-call engineer; only runs in the ops namespace open them."

// TestToolPolicyDeniesP0TicketsOutsideOps: a cluster policy denies
// create_ticket with priority p0 outside namespace ops. Elsewhere the MCP
// server receives nothing, the model's next request carries the policy's
// message as the call's result, the journal, an Event and the transcript
// name the policy and rule. The same call from a run in ops is made (and
// audited by the policy's second rule).
func TestToolPolicyDeniesP0TicketsOutsideOps(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	createPolicy(t, "", "tickets",
		arv1.ToolPolicyRule{Name: "no-p0-outside-ops", Action: arv1.ToolPolicyDeny, Message: p0Message,
			Match: `tool.name == "create_ticket" && args.?priority.orValue("") == "p0" && run.namespace != "ops"`},
		arv1.ToolPolicyRule{Name: "audit-tickets", Action: arv1.ToolPolicyAudit, Match: `tool.name == "create_ticket" && tool.server == "tracker"`},
	)
	startManager(t, managerOpts{})

	ns := newNamespace(t)
	oa, run := ticketRun(t, ns, srv.URL(), `{"title":"db down","priority":"p0"}`)
	waitFor(t, ns, "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	if srv.Calls("create_ticket") != 0 {
		t.Fatalf("the MCP server received create_ticket %d times; the policy denies it", srv.Calls("create_ticket"))
	}
	if oa.Requests() != 2 {
		t.Fatalf("model requests = %d, want 2", oa.Requests())
	}
	if told := toolMessage(oa.Last(), "c1"); !strings.Contains(told, p0Message) || !strings.Contains(told, "ClusterAgentToolPolicy tickets, rule no-p0-outside-ops") {
		t.Errorf("the model was told %q, want the policy's message naming the policy and rule", told)
	}
	d := entriesOf(t, ns, run, journal.ToolPolicyDecided)
	if len(d) != 1 || d[0].Policy == nil || d[0].Policy.Action != journal.PolicyDeny || d[0].Policy.Policy != "tickets" || d[0].Policy.Rule != "no-p0-outside-ops" || len(d[0].Policy.Matches) != 2 {
		t.Fatalf("policy decisions = %+v, want one Deny by tickets/no-p0-outside-ops recording both matches", d)
	}
	if c := entriesOf(t, ns, run, journal.ToolCallRequested); len(c) != 0 {
		t.Errorf("a denied call has intents %+v", c)
	}
	waitForEvent(t, ns, "r", "ToolPolicyDenied", "ClusterAgentToolPolicy tickets, rule no-p0-outside-ops")
	if tr := transcriptOf(t, ns, run); !strings.Contains(tr, "tool policy") || !strings.Contains(tr, "create_ticket Deny by ClusterAgentToolPolicy tickets, rule no-p0-outside-ops") {
		t.Errorf("the transcript does not name the policy and rule:\n%s", tr)
	}

	ensureNamespace(t, "ops")
	_, opsRun := ticketRun(t, "ops", srv.URL(), `{"title":"db down","priority":"p0"}`)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), opsRun) })
	waitFor(t, "ops", "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	if srv.Executed("create_ticket") != 1 {
		t.Errorf("create_ticket executed %d times from ops, want 1", srv.Executed("create_ticket"))
	}
	d = entriesOf(t, "ops", opsRun, journal.ToolPolicyDecided)
	if len(d) != 1 || d[0].Policy.Action != journal.PolicyAudit || d[0].Policy.Rule != "audit-tickets" {
		t.Errorf("policy decisions in ops = %+v, want only the Audit", d)
	}
	waitForEvent(t, "ops", "r", "ToolPolicyAudited", "rule audit-tickets")
}

// TestFailClosedDenialShowsItsCause: a Deny rule with a message whose
// match fails on the call (args.severity on a call without it) denies it,
// failing closed, and the model, the Event and the transcript show both
// the rule's message and why its match failed, not only the message.
func TestFailClosedDenialShowsItsCause(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	ns := newNamespace(t)
	const msg = "tickets need a severity the on-call can act on"
	createPolicy(t, "", "severity-"+ns, arv1.ToolPolicyRule{Name: "high-severity", Action: arv1.ToolPolicyDeny, Message: msg,
		Match: fmt.Sprintf(`tool.name == "create_ticket" && run.namespace == %q && args.severity == "high"`, ns)})
	startManager(t, managerOpts{})
	oa, run := ticketRun(t, ns, srv.URL(), `{"title":"db down"}`)
	waitFor(t, ns, "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	if srv.Calls("create_ticket") != 0 {
		t.Fatalf("the MCP server received create_ticket %d times; the rule fails closed", srv.Calls("create_ticket"))
	}
	const cause = "no such key: severity"
	rule := "ClusterAgentToolPolicy severity-" + ns + ", rule high-severity"
	if told := toolMessage(oa.Last(), "c1"); !strings.Contains(told, msg) || !strings.Contains(told, cause) || !strings.Contains(told, rule) {
		t.Errorf("the model was told %q, want the rule, its message and why its match failed", told)
	}
	waitForEvent(t, ns, "r", "ToolPolicyDenied", rule+" (its match could not be evaluated: "+cause+"; policies fail closed): "+msg)
	if tr := transcriptOf(t, ns, run); !strings.Contains(tr, cause) || !strings.Contains(tr, msg) {
		t.Errorf("the transcript does not show both the message and the cause:\n%s", tr)
	}
}

// kubectlAgentrun builds the plugin once per test and returns a function
// running `kubectl agentrun args...` as the suite's admin, with its
// stdout, stderr and exit code.
func kubectlAgentrun(t *testing.T) func(args ...string) (string, string, int) {
	t.Helper()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "kubectl-agentrun"), "./cmd/kubectl-agentrun")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the plugin: %v\n%s", err, out)
	}
	kubeconfig, err := env.Kubeconfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	return func(args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(testenv.KubectlPath(), append([]string{"agentrun"}, args...)...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
	}
}

// TestKubectlApproveArgsSaysWhatBecameOfTheCall: a person approves a call
// with `kubectl agentrun approve --args --wait`. Arguments the tool's
// input schema refuses are Rejected naming that schema (not the run's
// output schema). Arguments a cluster policy denies, evaluated again on
// the edit, are not reported Applied: the plugin says the edited call was
// denied, by which policy and rule, with the rule's message, and exits 1.
func TestKubectlApproveArgsSaysWhatBecameOfTheCall(t *testing.T) {
	agentrun := kubectlAgentrun(t)
	srv := mcptest.New(t, mcptest.Options{})
	oa := providertest.NewOpenAIServer(t)
	oa.Push(
		providertest.Reply{ToolCall: &providertest.ToolCall{ID: "c1", Name: "create_ticket", Args: `{"title":"printer jam"}`}, PromptTokens: 10, CompletionTokens: 2},
		providertest.Reply{ToolCall: &providertest.ToolCall{Name: "complete", Args: `{"output":"done"}`}, PromptTokens: 10, CompletionTokens: 2},
	)
	ns := newNamespace(t)
	const msg = "p0 tickets are opened by the on-call, not by agents"
	policy := "edits-" + ns
	createPolicy(t, "", policy, arv1.ToolPolicyRule{Name: "no-p0", Action: arv1.ToolPolicyDeny, Message: msg,
		Match: fmt.Sprintf(`tool.name == "create_ticket" && args.?priority.orValue("") == "p0" && run.namespace == %q`, ns)})
	startManager(t, managerOpts{})
	askTicketsAgent(t, ns, oa, srv)
	createRun(t, ns, "r", "tickets")
	waitFor(t, ns, "r", 30*time.Second, "ToolApproval", waitingOn(arv1.WaitToolApproval))

	out, errOut, code := agentrun("approve", "r", "-n", ns, "--args", `{"title":42}`, "--wait")
	if code != 1 || !strings.Contains(out, "Rejected: ") || !strings.Contains(out, "'https://agentrun.dev/schemas/tools/create_ticket/input.json#'") || strings.Contains(out, "output.json") {
		t.Errorf("args the tool's schema refuses: exit %d, stdout %q, stderr %q; want Rejected naming create_ticket's input schema", code, out, errOut)
	}

	out, errOut, code = agentrun("approve", "r", "-n", ns, "--args", `{"title":"printer jam","priority":"p0"}`, "--wait")
	want := fmt.Sprintf("Denied: the edited call create_ticket was not made: denied by ClusterAgentToolPolicy %s, rule no-p0: %s\n", policy, msg)
	if code != 1 || !strings.HasSuffix(out, want) || strings.Contains(out, "Applied") {
		t.Errorf("args the policy denies: exit %d, stdout %q, stderr %q; want it to end with %q", code, out, errOut, want)
	}
	waitFor(t, ns, "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	if n := srv.Calls("create_ticket"); n != 0 {
		t.Errorf("the MCP server received create_ticket %d times; the policy denies the edited call", n)
	}
}

// grantTenant lets user edit ConfigMaps and AgentRuns in ns, as a tenant
// who writes blueprints and runs may.
func grantTenant(t *testing.T, ns, user string) client.Client {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "update", "patch", "create"}},
		{APIGroups: []string{"agentrun.dev"}, Resources: []string{"agentruns"}, Verbs: []string{"get", "list", "update", "patch"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user + "-tenant", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "tenant"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}}}
	for _, o := range []client.Object{role, binding} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	return clientAs(t, user)
}

// heldByPolicy: the run waits on the ToolApproval a policy asks for.
func heldByPolicy(r *arv1.AgentRun) bool {
	w := r.Status.WaitingOn
	return w != nil && w.Reason == arv1.WaitToolApproval && strings.HasSuffix(w.Point, runstate.PolicyPointSuffix)
}

// TestToolPolicyRequireApprovalHoldsUnderYolo: the blueprint allows
// create_ticket and the run has spec.yolo, yet a cluster policy's
// RequireApproval holds the call for a person. The tenant cannot escape:
// the snapshot is immutable, editing the blueprint's source changes
// nothing, and the tenant may not touch the cluster policy. A person's
// approval lets the call through, once.
func TestToolPolicyRequireApprovalHoldsUnderYolo(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	manifest := toolAgent(srv.URL(), "", "[tools.create_ticket]\npermission = \"allow\"", `create_ticket {"title":"deploy prod"}`)
	ns := newNamespace(t)
	createPolicy(t, "", "deploys-"+ns, arv1.ToolPolicyRule{Name: "ask-tickets", Action: arv1.ToolPolicyRequireApproval,
		Message: "tickets from this namespace need a person's approval", RequireReason: true,
		Match: fmt.Sprintf(`tool.name == "create_ticket" && run.namespace == %q`, ns)})
	startManager(t, managerOpts{}) // after the policy: its cache holds it from the start
	createConfigMap(t, ns, "tooling", map[string]string{"agent.toml": manifest})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	run := createRun(t, ns, "r", "tooling", func(r *arv1.AgentRun) { r.Spec.Yolo = true })

	parked := waitFor(t, ns, "r", 20*time.Second, "the policy's ToolApproval", heldByPolicy)
	w := parked.Status.WaitingOn
	if !w.NeedsAPerson || !strings.Contains(w.Question, "ClusterAgentToolPolicy deploys-"+ns+", rule ask-tickets") || !strings.Contains(w.Question, `"deploy prod"`) {
		t.Errorf("waitingOn = %+v, want the call and the policy's rule shown to a person", w)
	}
	waitForEvent(t, ns, "r", "ToolPolicyRequiresApproval", "rule ask-tickets")

	tina := grantTenant(t, ns, "tina")
	ctx := context.Background()
	snap := &corev1.ConfigMap{}
	if err := tina.Get(ctx, client.ObjectKey{Namespace: ns, Name: parked.Status.BlueprintSnapshot}, snap); err != nil {
		t.Fatal(err)
	}
	snap.Data["agent.toml"] += "\n[yolo_profiles.escape]\napprove = [\"create_ticket\"]\n"
	if err := tina.Update(ctx, snap); !apierrors.IsInvalid(err) {
		t.Errorf("the tenant edited the run's blueprint snapshot: %v", err)
	}
	src := &corev1.ConfigMap{}
	if err := tina.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tooling"}, src); err != nil {
		t.Fatal(err)
	}
	src.Data["agent.toml"] = strings.Replace(manifest, `permission = "allow"`, `permission = "allow"`+"\n[yolo_profiles.escape]\napprove = [\"create_ticket\"]", 1)
	if err := tina.Update(ctx, src); err != nil {
		t.Fatalf("the tenant could not edit the blueprint's source: %v", err)
	}
	if err := tina.Delete(ctx, &arv1.ClusterAgentToolPolicy{ObjectMeta: metav1.ObjectMeta{Name: "deploys-" + ns}}); !apierrors.IsForbidden(err) {
		t.Errorf("the tenant deleted the cluster policy: %v", err)
	}
	if err := holdsFor(time.Second, func() error {
		if r := getRun(t, ns, "r"); !heldByPolicy(r) || srv.Calls("create_ticket") != 0 {
			return fmt.Errorf("waitingOn %+v, create_ticket calls %d", r.Status.WaitingOn, srv.Calls("create_ticket"))
		}
		return nil
	}); err != nil {
		t.Fatalf("the call escaped the policy: %v", err)
	}

	alice := grantAnswering(t, ns, "alice")
	answer(t, alice, ns, "no-reason", "alice", w, func(s *arv1.AgentRunAnswerSpec) { s.Decision = arv1.DecisionApprove })
	if st := answerState(t, ns, "no-reason"); st.State != arv1.AnswerRejected || !strings.Contains(st.Message, "reason is required to approve or deny this call (ClusterAgentToolPolicy deploys-"+ns+", rule ask-tickets)") {
		t.Errorf("an approval without the reason the policy requires = %+v, want Rejected", st)
	}
	answer(t, alice, ns, "ok", "alice", w, func(s *arv1.AgentRunAnswerSpec) {
		s.Decision, s.Text = arv1.DecisionApprove, ptr.To("checked with the on-call")
	})
	waitFor(t, ns, "r", 20*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	if srv.Executed("create_ticket") != 1 {
		t.Errorf("create_ticket executed %d times after the approval, want 1", srv.Executed("create_ticket"))
	}
	g := entriesOf(t, ns, run, journal.ToolCallDecided)
	if len(g) != 1 || g[0].Gate != journal.GatePolicy || !g[0].Approved || g[0].Auto || g[0].By != "alice" || g[0].Result != "checked with the on-call" {
		t.Errorf("gate decisions = %+v, want alice's approval of the policy gate with her reason (no automatic one)", g)
	}
}

// TestToolPolicyDecisionSurvivesRestart: a RequireApproval is journaled
// with the call; the manager stops, the policy is deleted, and the new
// manager still holds the call for a person: the journaled decision is
// applied, not a new evaluation.
func TestToolPolicyDecisionSurvivesRestart(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	ns := newNamespace(t)
	policy := createPolicy(t, ns, "asks", arv1.ToolPolicyRule{Name: "ask-writes", Action: arv1.ToolPolicyRequireApproval, Match: `tool.effect == "write"`})
	h1 := startManager(t, managerOpts{})
	createConfigMap(t, ns, "tooling", map[string]string{"agent.toml": toolAgent(srv.URL(), "", "[tools.create_ticket]\npermission = \"allow\"", `create_ticket {"title":"x"}`)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	run := createRun(t, ns, "r", "tooling", func(r *arv1.AgentRun) { r.Spec.Yolo = true })
	w := waitFor(t, ns, "r", 20*time.Second, "the policy's ToolApproval", heldByPolicy).Status.WaitingOn
	h1.stop()
	if err := k8s.Delete(context.Background(), policy); err != nil {
		t.Fatal(err)
	}
	startManager(t, managerOpts{identity: "after-restart"})
	heldByNew := func(r *arv1.AgentRun) bool {
		return r.Status.Driver == "after-restart" && r.Status.ObservedGeneration == r.Generation && heldByPolicy(r)
	}
	waitFor(t, ns, "r", 20*time.Second, "the new manager's record, still held by the policy", heldByNew)
	if err := holdsFor(time.Second, func() error {
		if r := getRun(t, ns, "r"); !heldByNew(r) || srv.Calls("create_ticket") != 0 {
			return fmt.Errorf("driver %q, waitingOn %+v, create_ticket calls %d", r.Status.Driver, r.Status.WaitingOn, srv.Calls("create_ticket"))
		}
		return nil
	}); err != nil {
		t.Fatalf("after the restart the deleted policy's journaled decision was not applied: %v", err)
	}
	alice := grantAnswering(t, ns, "alice")
	answer(t, alice, ns, "ok", "alice", w, func(s *arv1.AgentRunAnswerSpec) { s.Decision = arv1.DecisionApprove })
	waitFor(t, ns, "r", 20*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	d := entriesOf(t, ns, run, journal.ToolPolicyDecided)
	if len(d) != 1 || d[0].Policy.Action != journal.PolicyRequireApproval || d[0].Policy.PolicyKind != "AgentToolPolicy" || d[0].Policy.PolicyNamespace != ns {
		t.Errorf("policy decisions = %+v, want the one RequireApproval made before the restart", d)
	}
	if srv.Executed("create_ticket") != 1 {
		t.Errorf("create_ticket executed %d times, want 1", srv.Executed("create_ticket"))
	}
}
