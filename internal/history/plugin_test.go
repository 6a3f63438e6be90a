package history_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// The kubectl plugin against the history API: the built binary run by the
// real kubectl, as a user with the viewer roles.

// testScheme holds the AgentRun types the tests create.
var testScheme = func() *runtime.Scheme {
	logf.SetLogger(logr.Discard())
	s := runtime.NewScheme()
	utilruntime.Must(arv1.AddToScheme(s))
	return s
}()

var (
	pluginOnce sync.Once
	pluginBin  string
	pluginErr  error
)

// kubectlAgentrun runs `kubectl agentrun args...` with kubeconfig.
func kubectlAgentrun(t *testing.T, kubeconfig string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := agentrunCommand(t, kubeconfig, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// agentrunCommand is `kubectl agentrun args...` with kubeconfig, the
// plugin built once.
func agentrunCommand(t *testing.T, kubeconfig string, args ...string) *exec.Cmd {
	t.Helper()
	pluginOnce.Do(func() {
		pluginBin = filepath.Join(dir, "plugin-bin")
		build := exec.Command("go", "build", "-o", filepath.Join(pluginBin, "kubectl-agentrun"), "./cmd/kubectl-agentrun")
		build.Dir = testenv.RepoRoot()
		if out, err := build.CombinedOutput(); err != nil {
			pluginErr = &buildError{err: err, out: string(out)}
		}
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	cmd := exec.Command(testenv.KubectlPath(), append([]string{"agentrun"}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+pluginBin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+kubeconfig)
	return cmd
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return "building the plugin: " + e.err.Error() + "\n" + e.out }

// runReader lets user get and list AgentRuns in ns (what the plugin
// reads before it asks the history API).
func runReader(t *testing.T, ns, user string) {
	t.Helper()
	kube := kubernetes.NewForConfigOrDie(env.Config)
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "run-reader", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{arv1.GroupVersion.Group}, Resources: []string{"agentruns"}, Verbs: []string{"get", "list", "watch"}}}}
	if _, err := kube.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user + "-run-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "run-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
}

// liveRun creates an AgentRun whose status says its journal is in the
// database, and journals entries (and output, when given) there as the
// manager would.
func liveRun(t *testing.T, ns, name string, output *string, entries ...journal.Entry) *arv1.AgentRun {
	t.Helper()
	ctx := context.Background()
	c, err := client.New(env.Config, client.Options{Scheme: testScheme})
	if err != nil {
		t.Fatal(err)
	}
	run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: arv1.AgentRunSpec{Agent: "researcher", Task: "Survey retry libraries."}}
	if err := c.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	run.Status.Phase, run.Status.JournalStore = arv1.PhaseRunning, arv1.JournalDatabase
	if output != nil {
		run.Status.Phase = arv1.PhaseComplete
		run.Status.FinalOutput = &arv1.FinalOutputDescriptor{Bytes: int64(len(*output))}
	}
	if err := c.Status().Update(ctx, run); err != nil {
		t.Fatal(err)
	}
	if len(entries) > 0 {
		if err := arch.Append(ctx, run, entries...); err != nil {
			t.Fatal(err)
		}
	}
	if output != nil {
		if _, err := arch.PutOutput(ctx, run, *output); err != nil {
			t.Fatal(err)
		}
	}
	return run
}

func modelCall(seq int64, model, answer string) []journal.Entry {
	at := time.Now().UTC().Truncate(time.Second)
	return []journal.Entry{
		{Seq: seq, Kind: journal.ModelCallRequested, At: at, Stage: "work", Iteration: 1, Provider: "test", Model: model},
		{Seq: seq + 1, Kind: journal.ModelCallCompleted, At: at, Call: seq, Provider: "test", Model: model,
			Usage: &journal.Usage{Prompt: 10, Completion: 5}, CostNanoUSD: ptr.To[int64](1000), Response: &journal.Response{Text: answer}},
	}
}

// TestPluginReadsRecordsAndDatabaseJournals: kubectl agentrun transcript
// and output read a gone run's record (saying so) and a live run's
// journal in the database (not ConfigMaps); a run whose name an older
// record shares, with nothing journaled yet, shows no one else's
// transcript; a name with neither run nor record is not found.
func TestPluginReadsRecordsAndDatabaseJournals(t *testing.T) {
	ns := "plugin-reads"
	answer := "the archived answer"
	archiveRun(t, runSpec{ns: ns, name: "gone", agent: "researcher", phase: arv1.PhaseComplete, model: "archived-model",
		calls: []*int64{ptr.To[int64](1_000)}, output: &answer})
	archiveRun(t, runSpec{ns: ns, name: "reused", agent: "researcher", phase: arv1.PhaseComplete, model: "old-model", calls: []*int64{ptr.To[int64](1)}})
	kc, _ := userConfig(t, "dana")
	bind(t, ns, "dana", "agentrun-history-viewer")
	runReader(t, ns, "dana")

	out, errOut, err := kubectlAgentrun(t, kc, "transcript", "gone", "-n", ns)
	if err != nil || !strings.Contains(out, "test/archived-model") || !strings.Contains(errOut, "is gone: this is its archived record") {
		t.Errorf("transcript of a gone run: %v\n%s\n%s", err, out, errOut)
	}
	out, errOut, err = kubectlAgentrun(t, kc, "output", "gone", "-n", ns)
	if err != nil || out != answer || !strings.Contains(errOut, "is gone") {
		t.Errorf("output of a gone run: %v %q %s", err, out, errOut)
	}

	live := "the live answer"
	liveRun(t, ns, "live", &live, modelCall(0, "live-model", "hello")...)
	out, errOut, err = kubectlAgentrun(t, kc, "transcript", "live", "-n", ns)
	if err != nil || !strings.Contains(out, "test/live-model") || strings.Contains(errOut, "gone") {
		t.Errorf("transcript of a live run with a database journal: %v\n%s\n%s", err, out, errOut)
	}
	out, _, err = kubectlAgentrun(t, kc, "output", "live", "-n", ns)
	if err != nil || out != live {
		t.Errorf("output of a live run with a database journal: %v %q", err, out)
	}

	liveRun(t, ns, "reused", nil)
	out, errOut, err = kubectlAgentrun(t, kc, "transcript", "reused", "-n", ns)
	if err != nil || strings.Contains(out, "old-model") || !strings.Contains(errOut, "no journal entries yet") {
		t.Errorf("a new run named like an older record: %v\n%s\n%s", err, out, errOut)
	}

	liveRun(t, ns, "fresh", nil)
	out, errOut, err = kubectlAgentrun(t, kc, "transcript", "fresh", "-n", ns)
	if err != nil || out != "" || !strings.Contains(errOut, "no journal entries yet") {
		t.Errorf("a live run with nothing journaled and no record of its name: %v\n%s\n%s", err, out, errOut)
	}

	_, errOut, err = kubectlAgentrun(t, kc, "transcript", "never", "-n", ns)
	if err == nil || !strings.Contains(errOut, "nor an archived record") {
		t.Errorf("neither run nor record: %v %s", err, errOut)
	}
	other, _ := userConfig(t, "erin")
	runReader(t, ns, "erin")
	_, errOut, err = kubectlAgentrun(t, other, "transcript", "live", "-n", ns)
	if err == nil || !strings.Contains(errOut, "forbidden") {
		t.Errorf("a reader of runs without the history viewer role: %v %s", err, errOut)
	}
}

// TestPluginHistoryAndCost: kubectl agentrun history with the issue's
// filters, and cost by each dimension, unknown cost apart.
func TestPluginHistoryAndCost(t *testing.T) {
	ns := "plugin-history"
	// The runs are dated by the suite's clock, which other tests step
	// forward (past midnight, near the end of a UTC day): the day their
	// calls fall on is what cost --by day must show.
	finished := clk.Now().Add(-time.Minute)
	archiveRun(t, runSpec{ns: ns, name: "ok", agent: "researcher", phase: arv1.PhaseComplete, labels: map[string]string{"team": "x"},
		model: "m-priced", calls: []*int64{ptr.To[int64](2_500_000)}, finished: finished})
	archiveRun(t, runSpec{ns: ns, name: "failed", agent: "writer", phase: arv1.PhaseError, labels: map[string]string{"team": "x"},
		model: "m-unpriced", calls: []*int64{ptr.To[int64](1_000_000), nil}, finished: finished.Add(-2 * time.Second)})
	callDay := finished.Add(-time.Second).UTC().Format("2006-01-02")
	archiveRun(t, runSpec{ns: ns, name: "other-team", agent: "writer", phase: arv1.PhaseError, labels: map[string]string{"team": "y"}})
	kc, _ := userConfig(t, "frank")
	bind(t, ns, "frank", "agentrun-history-viewer")

	out, _, err := kubectlAgentrun(t, kc, "history", "-n", ns)
	for _, want := range []string{"NAME", "AGENT", "PHASE", "TOKENS", "COST", "DURATION", "FINISHED", "ok", "failed", "other-team", "$0.0025", "unknown (≥$0.001)"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("history lacks %q: %v\n%s", want, err, out)
		}
	}
	out, _, err = kubectlAgentrun(t, admin, "history", "-A", "-l", "team=x", "--phase", "Error", "--since", "30d")
	if err != nil || !strings.Contains(out, "NAMESPACE") || !strings.Contains(out, "failed") || strings.Contains(out, "other-team") || strings.Contains(out, " ok ") {
		t.Errorf("history -A -l team=x --phase Error: %v\n%s", err, out)
	}
	out, _, err = kubectlAgentrun(t, kc, "history", "-n", ns, "--limit", "1")
	if err != nil || strings.Count(out, "\n") != 2 {
		t.Errorf("history --limit 1: %v\n%s", err, out)
	}

	for by, want := range map[string][]string{
		"namespace":   {"NAMESPACE", ns, "unknown (≥$0.0035)"},
		"agent":       {"AGENT", "researcher", "$0.0025", "writer", "unknown (≥$0.001)"},
		"model":       {"MODEL", "m-priced", "m-unpriced"},
		"day":         {"DAY", callDay},
		"agent,model": {"AGENT", "MODEL", "writer", "m-unpriced"},
	} {
		out, _, err := kubectlAgentrun(t, kc, "cost", "-n", ns, "--by", by, "--since", "30d")
		for _, w := range want {
			if err != nil || !strings.Contains(out, w) {
				t.Errorf("cost --by %s lacks %q: %v\n%s", by, w, err, out)
			}
		}
	}
	if _, errOut, err := kubectlAgentrun(t, kc, "cost", "-n", ns, "--by", "colour"); err == nil || !strings.Contains(errOut, "namespace, agent, model or day") {
		t.Errorf("cost --by colour: %v %s", err, errOut)
	}
	if _, errOut, err := kubectlAgentrun(t, kc, "history", "-n", "plugin-reads"); err == nil || !strings.Contains(errOut, "forbidden") {
		t.Errorf("history of a namespace not granted: %v %s", err, errOut)
	}
}
