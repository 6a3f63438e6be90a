package plugin

// These tests run the built plugin binary through the real kubectl against a
// real API server (internal/testenv), so what they check is what a person at
// a terminal sees. The control plane is started only when one of them runs;
// the pure tests in this package do not need it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
	"github.com/agentrun-dev/agentrun-operator/internal/wirestatus"
)

var (
	envOnce    sync.Once
	envErr     error
	env        *testenv.Env
	k8sClient  client.Client
	kubeconfig string
	pluginDir  string
	scratchDir string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the test control plane: %v\n", err)
		}
	}
	if scratchDir != "" {
		os.RemoveAll(scratchDir)
	}
	os.Exit(code)
}

// controlPlane starts the API server and builds the plugin, once per test
// binary.
func controlPlane(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a control plane; skipped with -short")
	}
	envOnce.Do(func() {
		logf.SetLogger(logr.Discard())
		scheme := runtime.NewScheme()
		utilruntime.Must(corev1.AddToScheme(scheme))
		utilruntime.Must(rbacv1.AddToScheme(scheme))
		utilruntime.Must(appsv1.AddToScheme(scheme))
		utilruntime.Must(coordinationv1.AddToScheme(scheme))
		utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
		utilruntime.Must(arv1.AddToScheme(scheme))
		if scratchDir, envErr = os.MkdirTemp("", "kubectl-agentrun-test-"); envErr != nil {
			return
		}
		pluginDir = filepath.Join(scratchDir, "bin")
		build := exec.Command("go", "build", "-o", filepath.Join(pluginDir, "kubectl-agentrun"), "./cmd/kubectl-agentrun")
		build.Dir = testenv.RepoRoot()
		if out, err := build.CombinedOutput(); err != nil {
			envErr = fmt.Errorf("building the plugin: %v\n%s", err, out)
			return
		}
		if env, envErr = testenv.Start(); envErr != nil {
			return
		}
		if k8sClient, envErr = client.New(env.Config, client.Options{Scheme: scheme}); envErr != nil {
			return
		}
		kubeconfig, envErr = env.Kubeconfig(scratchDir)
	})
	if envErr != nil {
		t.Fatal(envErr)
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// kubectlPlugin runs `kubectl agentrun args...` with the plugin first in
// PATH and KUBECONFIG pointing at the test API server.
func kubectlPlugin(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return startPlugin(t, args...)()
}

// startPlugin starts `kubectl agentrun args...` and returns a function that
// waits for it to end.
func startPlugin(t *testing.T, args ...string) func() (stdout, stderr string, code int) {
	t.Helper()
	return startPluginWith(t, nil, args...)
}

// startPluginWith is startPlugin with stdin (nil: none).
func startPluginWith(t *testing.T, stdin io.Reader, args ...string) func() (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(testenv.KubectlPath(), append([]string{"agentrun"}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+pluginDir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+kubeconfig)
	cmd.Stdin = stdin
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatalf("running kubectl agentrun %s: %v", strings.Join(args, " "), err)
	}
	return func() (string, string, int) {
		t.Helper()
		err := cmd.Wait()
		var exitErr *exec.ExitError
		code := 0
		switch {
		case err == nil:
		case errors.As(err, &exitErr):
			code = exitErr.ExitCode()
		default:
			t.Fatalf("running kubectl agentrun %s: %v", strings.Join(args, " "), err)
		}
		return out.String(), errOut.String(), code
	}
}

func mustPlugin(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := kubectlPlugin(t, args...)
	if code != 0 {
		t.Fatalf("kubectl agentrun %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "plugintest-"}}
	if err := k8sClient.Create(ctxFor(t), ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	return ns.Name
}

// createRun creates a run, then writes st through the status subresource,
// the way the controller would.
func createRun(t *testing.T, ns, name string, mutate func(*arv1.AgentRun), st arv1.AgentRunStatus) *arv1.AgentRun {
	t.Helper()
	ctx := ctxFor(t)
	run := &arv1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       arv1.AgentRunSpec{Agent: "researcher", Task: "Survey retry libraries."},
	}
	if mutate != nil {
		mutate(run)
	}
	if err := k8sClient.Create(ctx, run); err != nil {
		t.Fatalf("creating %s: %v", name, err)
	}
	run.Status = st
	if err := k8sClient.Status().Update(ctx, run); err != nil {
		t.Fatalf("writing the status of %s: %v", name, err)
	}
	return run
}

func metaTime(t time.Time) *metav1.Time { m := metav1.NewTime(t.Truncate(time.Second)); return &m }

// psRows cuts the listing at the header's column offsets (cells contain
// single spaces) and returns rows keyed by the RUN cell with its tree
// drawing removed, plus the raw RUN cells in order and the footer.
func psRows(t *testing.T, out string, header []string) (map[string]map[string]string, []string, string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) < 3 || lines[len(lines)-2] != "" {
		t.Fatalf("no blank line before the footer:\n%s", out)
	}
	footer := lines[len(lines)-1]
	lines = lines[:len(lines)-2]
	head := []rune(lines[0])
	starts := make([]int, len(header))
	pos := 0
	for i, h := range header {
		idx := strings.Index(string(head[pos:]), h)
		if idx < 0 {
			t.Fatalf("header %q lacks %q", lines[0], h)
		}
		starts[i] = pos + len([]rune(string(head[pos:])[:idx]))
		pos = starts[i] + len(h)
	}
	rows := map[string]map[string]string{}
	var order []string
	for _, l := range lines[1:] {
		r := []rune(l)
		row := map[string]string{}
		for i, h := range header {
			from, to := starts[i], len(r)
			if i+1 < len(starts) {
				to = min(starts[i+1], len(r))
			}
			if from < len(r) {
				row[h] = strings.TrimSpace(string(r[from:to]))
			}
		}
		order = append(order, row["RUN"])
		rows[strings.TrimLeft(row["RUN"], "│├└─ ")] = row
	}
	return rows, order, footer
}

func TestKubectlAgentrunPs(t *testing.T) {
	controlPlane(t)
	ns := newNamespace(t)
	other := newNamespace(t)
	now := time.Now()

	parent := createRun(t, ns, "survey", nil, arv1.AgentRunStatus{
		Phase: arv1.PhaseWaitingInput,
		WaitingOn: &arv1.WaitingOn{Reason: arv1.WaitChildren, Summary: "Children(2)", Outstanding: ptr(int32(2)),
			Since: metaTime(now)},
		Stage: "fan-out 2/4", Usage: arv1.Usage{TotalTokens: 5400, CostUSD: "0.0312"},
		Active: &arv1.ActiveClock{BankedSeconds: 192}, LastProgressAt: metaTime(now.Add(-20 * time.Minute)),
	})
	owned := func(r *arv1.AgentRun) {
		r.Spec.Depth = 1
		r.OwnerReferences = []metav1.OwnerReference{{APIVersion: arv1.GroupVersion.String(), Kind: "AgentRun",
			Name: parent.Name, UID: parent.UID, Controller: ptr(true), BlockOwnerDeletion: ptr(true)}}
	}
	createRun(t, ns, "survey-item-1", owned, arv1.AgentRunStatus{
		Phase: arv1.PhaseRunning, ParentRun: "survey", Stage: "read 1/2",
		Usage:  arv1.Usage{TotalTokens: 800, CostUSD: "0.002"},
		Active: &arv1.ActiveClock{BankedSeconds: 30},
	})
	createRun(t, ns, "survey-item-2", owned, arv1.AgentRunStatus{
		Phase: arv1.PhaseWaitingInput, ParentRun: "survey",
		WaitingOn: &arv1.WaitingOn{Reason: arv1.WaitToolApproval, NeedsAPerson: true, Summary: "ToolApproval",
			Question: "Run shell: make deploy?"},
		Usage: arv1.Usage{TotalTokens: 1500, CostUSD: "unknown", UnpricedCalls: 1},
	})
	// Creation timestamps have whole seconds: make triage strictly newer.
	time.Sleep(1100 * time.Millisecond)
	createRun(t, ns, "triage", nil, arv1.AgentRunStatus{
		Phase: arv1.PhaseWaitingInput,
		WaitingOn: &arv1.WaitingOn{Reason: arv1.WaitNeedsSetup, NeedsAPerson: true, Summary: "NeedsSetup: SecretMissing",
			Blocker: arv1.BlockerSecretMissing, Remedy: `create Secret "anthropic" with key "api-key"`},
		Stage: "plan 1/3",
	})
	createRun(t, ns, "changelog", nil, arv1.AgentRunStatus{
		Phase: arv1.PhaseComplete, Stage: "write 3/3", Usage: arv1.Usage{TotalTokens: 12000, CostUSD: "0.18"},
	})
	createRun(t, other, "nightly", nil, arv1.AgentRunStatus{
		Phase: arv1.PhaseWaitingInput,
		WaitingOn: &arv1.WaitingOn{Reason: arv1.WaitSleeping, Summary: "Sleeping",
			WakeAt: metaTime(now.Add(time.Hour))},
	})

	out := mustPlugin(t, "ps", "-n", ns)
	header := []string{"RUN", "PHASE", "WAITING", "STAGE", "TOKENS", "COST", "WORKING", "LAST MOVED", "DRIVER"}
	rows, order, footer := psRows(t, out, header)
	if footer != "2 runs need an answer" {
		t.Errorf("footer %q\n%s", footer, out)
	}
	// triage and the survey tree both hold a run needing a person; triage
	// is newer. Within the tree, the child needing a person leads.
	wantOrder := []string{"triage", "survey", "├─ survey-item-2", "└─ survey-item-1", "changelog"}
	if !reflect.DeepEqual(order, wantOrder) {
		t.Errorf("RUN column = %q, want %q\n%s", order, wantOrder, out)
	}
	want := map[string]map[string]string{
		"survey": {"PHASE": "WaitingInput", "WAITING": "Children(2)", "STAGE": "fan-out 2/4", "TOKENS": "5400",
			"COST": "0.0312", "WORKING": "3m12s", "LAST MOVED": "20m0s"},
		"survey-item-2": {"PHASE": "WaitingInput", "WAITING": "ToolApproval", "STAGE": "-", "TOKENS": "1500",
			"COST": "unknown", "WORKING": "0s", "LAST MOVED": "-"},
		"survey-item-1": {"PHASE": "Running", "WAITING": "-", "TOKENS": "800", "COST": "0.002", "WORKING": "30s"},
		"triage":        {"PHASE": "WaitingInput", "WAITING": "NeedsSetup: SecretMissing", "STAGE": "plan 1/3", "COST": "-"},
		"changelog":     {"PHASE": "Complete", "WAITING": "-", "TOKENS": "12000", "COST": "0.18", "DRIVER": "-"},
	}
	for name, cells := range want {
		for col, v := range cells {
			got := rows[name][col]
			if col == "LAST MOVED" && v != "-" {
				// Seconds may tick between writing and listing.
				if !strings.HasPrefix(got, "20m") {
					t.Errorf("%s %s = %q, want about %q", name, col, got, v)
				}
				continue
			}
			if got != v {
				t.Errorf("%s %s = %q, want %q\n%s", name, col, got, v, out)
			}
		}
	}

	// -A adds the namespace column and the other namespace's run; the
	// kubeconfig can also be given as a flag after the plugin name.
	all := mustPlugin(t, "ps", "-A", "--kubeconfig", kubeconfig)
	rows, _, footer = psRows(t, all, append([]string{"NAMESPACE"}, header...))
	if rows["nightly"]["NAMESPACE"] != other || rows["nightly"]["WAITING"] != "Sleeping" || rows["triage"]["NAMESPACE"] != ns {
		t.Errorf("-A rows: %v\n%s", rows, all)
	}
	if !strings.HasSuffix(footer, "need an answer") && !strings.HasSuffix(footer, "needs an answer") {
		t.Errorf("-A footer %q", footer)
	}

	empty := newNamespace(t)
	stdout, stderr, code := kubectlPlugin(t, "ps", "-n", empty)
	if code != 0 || stdout != "" || !strings.Contains(stderr, "No AgentRuns found") {
		t.Errorf("empty namespace: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestKubectlAgentrunStatusJSON(t *testing.T) {
	controlPlane(t)
	ns := newNamespace(t)
	now := time.Now()
	runs := map[string]arv1.AgentRunStatus{
		"fresh": {},
		"awaiting-tool": {Phase: arv1.PhaseRunning, Usage: arv1.Usage{PromptTokens: 10, CompletionTokens: 5, ModelCalls: 1,
			CostUSD: "0.0042", CostPricedUSD: "0.0042", CostIsExact: true},
			PendingCall: &arv1.PendingCall{Kind: arv1.CallKindTool, Seq: 3, Tool: "create_issue", Input: `{"title":"x"}`,
				Effect: arv1.EffectIdempotent, IdempotencyKey: "k3"}},
		"setup": {Phase: arv1.PhaseWaitingInput, WaitingOn: &arv1.WaitingOn{Reason: arv1.WaitNeedsSetup, NeedsAPerson: true,
			Summary: "NeedsSetup: SecretMissing", Blocker: arv1.BlockerSecretMissing, Remedy: "create the Secret"}},
		"overdue": {Phase: arv1.PhaseWaitingInput, WaitingOn: &arv1.WaitingOn{Reason: arv1.WaitSleeping,
			WakeAt: metaTime(now.Add(-90 * time.Second))}},
		"asleep": {Phase: arv1.PhaseWaitingInput, WaitingOn: &arv1.WaitingOn{Reason: arv1.WaitSleeping,
			WakeAt: metaTime(now.Add(time.Hour))}},
		"budget": {Phase: arv1.PhaseWaitingInput, WaitingOn: &arv1.WaitingOn{Reason: arv1.WaitBudgetExceeded, NeedsAPerson: true,
			Budget: &arv1.BudgetLimit{Kind: arv1.BudgetCostUSD, Limit: "2.50"}, Observed: "2.5013"}},
		"signal": {Phase: arv1.PhaseWaitingInput, WaitingOn: &arv1.WaitingOn{Reason: arv1.WaitSignal, Signal: "CI webhook"}},
		"done": {Phase: arv1.PhaseComplete, Usage: arv1.Usage{CostUSD: "unknown", UnpricedCalls: 2},
			FinalOutput: &arv1.FinalOutputDescriptor{Format: arv1.OutputFormatText, Bytes: 5, ObjectName: "done-output"}},
		"failed":    {Phase: arv1.PhaseError, Error: "the model rejected the request"},
		"cancelled": {Phase: arv1.PhaseCancelled},
	}
	for name, st := range runs {
		createRun(t, ns, name, nil, st)
	}
	for name := range runs {
		t.Run(name, func(t *testing.T) {
			var run arv1.AgentRun
			if err := k8sClient.Get(ctxFor(t), client.ObjectKey{Namespace: ns, Name: name}, &run); err != nil {
				t.Fatal(err)
			}
			before := time.Now()
			out := mustPlugin(t, "status", name, "-n", ns, "-o", "json")
			after := time.Now()
			var got any
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("status -o json is not JSON: %v\n%s", err, out)
			}
			if !strings.HasPrefix(out, "{\n  \"status\": {") || !strings.HasSuffix(out, "}\n") {
				t.Errorf("not 2-space indented JSON:\n%s", out)
			}
			lo, hi := decode(t, wirestatus.RunState(&run, before)), decode(t, wirestatus.RunState(&run, after))
			if reflect.DeepEqual(got, lo) || reflect.DeepEqual(got, hi) {
				return
			}
			// Only overdue_seconds may fall strictly between the two.
			gs := got.(map[string]any)["status"].(map[string]any)
			ls, hs := lo.(map[string]any)["status"].(map[string]any), hi.(map[string]any)["status"].(map[string]any)
			if s, ok := gs["overdue_seconds"].(float64); ok && s >= ls["overdue_seconds"].(float64) && s <= hs["overdue_seconds"].(float64) {
				gs["overdue_seconds"] = hs["overdue_seconds"]
				if reflect.DeepEqual(got, hi) {
					return
				}
			}
			t.Errorf("status -o json =\n%s\nwant wirestatus.RunState =\n%s", out, mustIndent(t, wirestatus.RunState(&run, after)))
		})
	}

	// A human summary without -o.
	if out := mustPlugin(t, "status", "setup", "-n", ns); !strings.Contains(out, "suspended") || !strings.Contains(out, "create the Secret") {
		t.Errorf("status: %s", out)
	}
	if _, stderr, code := kubectlPlugin(t, "status", "nope", "-n", ns); code != 1 || !strings.Contains(stderr, `agentrun "nope" not found in namespace "`+ns+`"`) {
		t.Errorf("status of a missing run: exit %d, %q", code, stderr)
	}
}

func decode(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func mustIndent(t *testing.T, v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestKubectlAgentrunPauseResumeCancel(t *testing.T) {
	controlPlane(t)
	ns := newNamespace(t)
	createRun(t, ns, "r", nil, arv1.AgentRunStatus{Phase: arv1.PhaseRunning})
	get := func() arv1.AgentRunSpec {
		var run arv1.AgentRun
		if err := k8sClient.Get(ctxFor(t), client.ObjectKey{Namespace: ns, Name: "r"}, &run); err != nil {
			t.Fatal(err)
		}
		return run.Spec
	}
	if out := mustPlugin(t, "pause", "r", "-n", ns); out != "agentrun.agentrun.dev/r paused\n" {
		t.Errorf("pause said %q", out)
	}
	if s := get(); !s.Paused || s.Cancel {
		t.Errorf("after pause: %+v", s)
	}
	mustPlugin(t, "resume", "r", "-n", ns)
	if s := get(); s.Paused || s.Cancel {
		t.Errorf("after resume: %+v", s)
	}
	mustPlugin(t, "cancel", "r", "-n", ns)
	if s := get(); !s.Cancel {
		t.Errorf("after cancel: %+v", s)
	}
	if s := get(); s.Agent != "researcher" || s.Task != "Survey retry libraries." {
		t.Errorf("the patch touched other fields: %+v", s)
	}
	if _, stderr, code := kubectlPlugin(t, "pause", "missing", "-n", ns); code != 1 || !strings.Contains(stderr, "not found") {
		t.Errorf("pause of a missing run: exit %d, %q", code, stderr)
	}
}

func TestKubectlAgentrunOutputTranscriptDescribe(t *testing.T) {
	controlPlane(t)
	ns := newNamespace(t)
	ctx := ctxFor(t)
	done := createRun(t, ns, "done", nil, arv1.AgentRunStatus{Phase: arv1.PhaseComplete,
		FinalOutput: &arv1.FinalOutputDescriptor{Format: arv1.OutputFormatMarkdown, Bytes: 17, ObjectName: "done-output"}})
	if err := k8sClient.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "done-output"},
		Data:       map[string]string{"output": "# Report\n\nAll good."},
	}); err != nil {
		t.Fatal(err)
	}
	if out := mustPlugin(t, "output", "done", "-n", ns); out != "# Report\n\nAll good." {
		t.Errorf("output = %q", out)
	}
	createRun(t, ns, "busy", nil, arv1.AgentRunStatus{Phase: arv1.PhaseRunning})
	if stdout, stderr, code := kubectlPlugin(t, "output", "busy", "-n", ns); code != 1 || stdout != "" ||
		!strings.Contains(stderr, "has no output (phase: Running)") {
		t.Errorf("output of a running run: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	for seq, data := range []string{
		`{"seq":0,"kind":"ModelCallRequested","at":"2026-03-01T11:00:00Z","stage":"write","provider":"anthropic","model":"claude","requestHash":"h0"}`,
		`{"seq":1,"kind":"ModelCallCompleted","at":"2026-03-01T11:01:00Z","stage":"write","call":0,"provider":"anthropic","model":"claude","response":{"text":"Done.","complete":true,"output":"# Report"},"usage":{"prompt":100,"completion":20},"costNanoUSD":1500000,"costExact":true}`,
	} {
		if err := k8sClient.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("done-j%06d", seq), Labels: map[string]string{
				configmaps.LabelRunUID: string(done.UID), arv1.LabelComponent: configmaps.Component}},
			Data: map[string]string{"entry": data},
		}); err != nil {
			t.Fatal(err)
		}
	}
	out := mustPlugin(t, "transcript", "done", "-n", ns)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "#0 ") || !strings.Contains(lines[0], "model call") ||
		!strings.HasPrefix(lines[1], "#1 ") || !strings.Contains(lines[1], "$0.0015") || !strings.Contains(lines[1], "complete") {
		t.Errorf("transcript:\n%s", out)
	}

	desc := mustPlugin(t, "describe", "done", "-n", ns)
	for _, want := range []string{"Name:", "done", "Phase:", "Complete", "State:", "completed", "in ConfigMap done-output"} {
		if !strings.Contains(desc, want) {
			t.Errorf("describe lacks %q:\n%s", want, desc)
		}
	}

	if _, stderr, code := kubectlPlugin(t, "approve", "done", "-n", ns); code != 1 || !strings.Contains(stderr, `agentrun "done" is not waiting on anything to answer (phase Complete)`) {
		t.Errorf("approve of a finished run: exit %d, %q", code, stderr)
	}
}

// answerCreated is the line an answer command prints; its first group is
// the answer's name.
var answerCreated = regexp.MustCompile(`^agentrunanswer\.agentrun\.dev/(\S+) created: `)

// TestKubectlAgentrunAnswers: each answer command creates, for every wait it
// fits, an answer to the run's point in the authenticated user's name (the
// admission policy refuses any other), carrying the decision, text or input
// the command line gave. No controller runs here: the answers stay
// unapplied.
func TestKubectlAgentrunAnswers(t *testing.T) {
	controlPlane(t)
	ns := newNamespace(t)
	waits := map[string]*arv1.WaitingOn{"checkpoint": waitCheckpoint, "tool": waitTool, "taint": waitTaint, "review": waitReview,
		"question": waitQuestion, "signal": waitSignal, "write": waitWrite}
	for name, w := range waits {
		createRun(t, ns, name, nil, arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput, WaitingOn: w.DeepCopy()})
	}
	for _, tc := range []struct {
		args []string
		// line is what the command prints after the answer's name.
		line string
		want arv1.AgentRunAnswerSpec
	}{
		{[]string{"approve", "checkpoint"}, `approve "approve-deploy" of checkpoint as test-admin`,
			arv1.AgentRunAnswerSpec{Decision: arv1.DecisionApprove}},
		{[]string{"deny", "checkpoint"}, `deny "approve-deploy" of checkpoint as test-admin`,
			arv1.AgentRunAnswerSpec{Decision: arv1.DecisionDeny}},
		{[]string{"approve", "tool"}, `approve "call-3" of tool as test-admin`, arv1.AgentRunAnswerSpec{Decision: arv1.DecisionApprove}},
		{[]string{"deny", "tool", "--reason", "not on a Friday"}, `deny "call-3" of tool as test-admin`,
			arv1.AgentRunAnswerSpec{Decision: arv1.DecisionDeny, Reason: "not on a Friday"}},
		{[]string{"approve", "taint"}, `approve "call-4" of taint as test-admin`, arv1.AgentRunAnswerSpec{Decision: arv1.DecisionApprove}},
		{[]string{"approve", "review"}, `approve "call-5" of review as test-admin`, arv1.AgentRunAnswerSpec{Decision: arv1.DecisionApprove}},
		{[]string{"deny", "review", "--reason=add tests first"}, `deny "call-5" of review as test-admin`,
			arv1.AgentRunAnswerSpec{Decision: arv1.DecisionDeny, Reason: "add tests first"}},
		{[]string{"answer", "question", "staging"}, `answer "call-6" of question as test-admin`, arv1.AgentRunAnswerSpec{Text: ptr("staging")}},
		{[]string{"answer", "question", "--", "-1"}, `answer "call-6" of question as test-admin`, arv1.AgentRunAnswerSpec{Text: ptr("-1")}},
		{[]string{"answer", "question", "--json", `{"cluster": "prod"}`}, `answer "call-6" of question as test-admin`,
			arv1.AgentRunAnswerSpec{Input: ptr(`{"cluster": "prod"}`)}},
		{[]string{"answer", "signal", "--null"}, `answer "call-7" of signal as test-admin`, arv1.AgentRunAnswerSpec{Input: ptr("null")}},
		{[]string{"answer", "signal", "build 1841 passed"}, `answer "call-7" of signal as test-admin`,
			arv1.AgentRunAnswerSpec{Text: ptr("build 1841 passed")}},
		{[]string{"resolve", "write", "--done", "--output", "issue #12 created"}, `done "call-8" of write (write create_issue #8) as test-admin`,
			arv1.AgentRunAnswerSpec{Decision: arv1.DecisionDone, Text: ptr("issue #12 created")}},
		{[]string{"resolve", "write", "--done", "--output-json", `{"id":12}`}, `done "call-8" of write (write create_issue #8) as test-admin`,
			arv1.AgentRunAnswerSpec{Decision: arv1.DecisionDone, Input: ptr(`{"id":12}`)}},
		{[]string{"resolve", "write", "--retry"}, `retry "call-8" of write (write create_issue #8) as test-admin`,
			arv1.AgentRunAnswerSpec{Decision: arv1.DecisionRetry}},
		{[]string{"resolve", "write", "--abandon"}, `abandon "call-8" of write (write create_issue #8) as test-admin`,
			arv1.AgentRunAnswerSpec{Decision: arv1.DecisionAbandon}},
	} {
		// -n before NAME, so that it stays a flag in a command line using "--".
		out := mustPlugin(t, slices.Concat(tc.args[:1], []string{"-n", ns}, tc.args[1:])...)
		m := answerCreated.FindStringSubmatch(out)
		if m == nil || out != m[0]+tc.line+"\n" {
			t.Errorf("%q printed %q, want agentrunanswer.agentrun.dev/NAME created: %s", tc.args, out, tc.line)
			continue
		}
		var ans arv1.AgentRunAnswer
		if err := k8sClient.Get(ctxFor(t), client.ObjectKey{Namespace: ns, Name: m[1]}, &ans); err != nil {
			t.Fatal(err)
		}
		want := tc.want
		want.Run, want.Point, want.By = tc.args[1], waits[tc.args[1]].Point, "test-admin"
		if !reflect.DeepEqual(ans.Spec, want) {
			t.Errorf("%q created %s with spec %s, want %s", tc.args, ans.Name, mustIndent(t, ans.Spec), mustIndent(t, want))
		}
	}

	// A command that does not fit the wait, or arguments that cannot make
	// an answer, create nothing.
	count := func() int {
		var list arv1.AgentRunAnswerList
		if err := k8sClient.List(ctxFor(t), &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	before := count()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"approve", "question"}, 1, `agentrun "question" waits on a question (UserPrompt), which approve does not answer; use kubectl agentrun answer question "..." -n ` + ns},
		{[]string{"deny", "write"}, 1, "waits on a dangling write (NeedsReconciliation: create_issue #8), which deny does not answer; use kubectl agentrun resolve write --done"},
		{[]string{"answer", "checkpoint", "yes"}, 1, `waits on checkpoint "approve-deploy" (InteractionPoint), which answer does not answer; use kubectl agentrun approve checkpoint -n ` + ns},
		{[]string{"answer", "review", "looks good"}, 1, "waits on a review (UserPrompt), which answer does not answer; use kubectl agentrun approve review"},
		{[]string{"resolve", "signal", "--retry"}, 1, "waits on a signal (Signal: CI webhook), which resolve does not answer; use kubectl agentrun answer signal"},
		{[]string{"answer", "missing", "x"}, 1, `agentrun "missing" not found in namespace "` + ns + `"`},
		{[]string{"answer", "question", "--json", "prod"}, 2, `--json "prod" is not valid JSON`},
		{[]string{"resolve", "write"}, 2, "resolve needs exactly one of --done, --retry or --abandon"},
	} {
		stdout, stderr, code := kubectlPlugin(t, append(tc.args, "-n", ns)...)
		if code != tc.code || stdout != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.args, code, stdout, stderr, tc.code, tc.want)
		}
	}
	if n := count(); n != before {
		t.Errorf("refused commands created %d answers", n-before)
	}

	// describe names the command that answers each wait.
	for name, want := range map[string]string{
		"checkpoint": "kubectl agentrun approve checkpoint -n " + ns,
		"question":   `kubectl agentrun answer question "..." -n ` + ns,
		"write":      "kubectl agentrun resolve write --retry -n " + ns,
	} {
		if out := mustPlugin(t, "describe", name, "-n", ns); !strings.Contains(out, want) {
			t.Errorf("describe %s lacks %q:\n%s", name, want, out)
		}
	}
}

// TestKubectlAgentrunAnswerWait: --wait prints what the controller (played
// here by the test) records on the answer, and exits 1 on a rejection.
func TestKubectlAgentrunAnswerWait(t *testing.T) {
	controlPlane(t)
	ns := newNamespace(t)
	createRun(t, ns, "gate", nil, arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput, WaitingOn: waitCheckpoint.DeepCopy()})
	for _, verdict := range []arv1.AgentRunAnswerStatus{
		{State: arv1.AnswerRejected, Message: `Point "approve-deploy" was already answered by gate-abcde`},
		{State: arv1.AnswerApplied, Message: "Applied to the run"},
	} {
		finish := startPlugin(t, "approve", "gate", "-n", ns, "--wait")
		ans := awaitAnswer(t, ns, "gate")
		ans.Status = verdict
		if err := k8sClient.Status().Update(ctxFor(t), ans); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := finish()
		line := fmt.Sprintf("agentrunanswer.agentrun.dev/%s created: approve \"approve-deploy\" of gate as test-admin\n", ans.Name)
		switch verdict.State {
		case arv1.AnswerRejected:
			if code != 1 || stdout != line+"Rejected: "+verdict.Message+"\n" || stderr != "" {
				t.Errorf("rejected: exit %d, stdout %q, stderr %q", code, stdout, stderr)
			}
		default:
			if code != 0 || stdout != line+"Applied\n" || stderr != "" {
				t.Errorf("applied: exit %d, stdout %q, stderr %q", code, stdout, stderr)
			}
		}
	}
}

// awaitAnswer returns the first answer to run that has no state yet, once
// the plugin has created it.
func awaitAnswer(t *testing.T, ns, run string) *arv1.AgentRunAnswer {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var list arv1.AgentRunAnswerList
		if err := k8sClient.List(ctxFor(t), &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			if a := &list.Items[i]; a.Spec.Run == run && a.Status.State == "" {
				return a
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no answer to %s appeared", run)
	return nil
}
