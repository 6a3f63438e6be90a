package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/priority"
	"github.com/agentrun-dev/agentrun-operator/internal/shards"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

var fixedNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

func ago(d time.Duration) *metav1.Time { t := metav1.NewTime(fixedNow.Add(-d)); return &t }

// fixtureRuns is the fixed set the golden listing is rendered from: a parent
// with two children (one parked on a tool approval, with a child of its
// own), a NeedsSetup run, a
// completed run, a run with unknown cost, one that has not been seen by the
// controller, and a sleeping run in another namespace.
func fixtureRuns() []arv1.AgentRun {
	mk := func(ns, name string, age time.Duration, st arv1.AgentRunStatus) arv1.AgentRun {
		return arv1.AgentRun{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(name + "-uid"),
				CreationTimestamp: *ago(age)},
			Spec:   arv1.AgentRunSpec{Agent: "researcher", Task: "t"},
			Status: st,
		}
	}
	parent := mk("team-a", "survey", 2*time.Hour, arv1.AgentRunStatus{
		Phase: arv1.PhaseWaitingInput,
		WaitingOn: &arv1.WaitingOn{Reason: arv1.WaitChildren, Summary: "Children(2)", Outstanding: ptr(int32(2)),
			Since: ago(20 * time.Minute)},
		Stage: "fan-out 2/4", Usage: arv1.Usage{TotalTokens: 5400, CostUSD: "0.0312", CostIsExact: true},
		Active:         &arv1.ActiveClock{BankedSeconds: 192},
		LastProgressAt: ago(20 * time.Minute),
	})
	childA := mk("team-a", "survey-item-1", 20*time.Minute, arv1.AgentRunStatus{
		Phase: arv1.PhaseRunning, ParentRun: "survey", Stage: "read 1/2",
		Usage:          arv1.Usage{TotalTokens: 800, CostUSD: "0.002"},
		Active:         &arv1.ActiveClock{BankedSeconds: 30, Since: ago(45 * time.Second)},
		LastProgressAt: ago(45 * time.Second),
	})
	// The second child names its parent only by the controller owner
	// reference.
	childB := mk("team-a", "survey-item-2", 19*time.Minute, arv1.AgentRunStatus{
		Phase: arv1.PhaseWaitingInput,
		WaitingOn: &arv1.WaitingOn{Reason: arv1.WaitToolApproval, NeedsAPerson: true, Summary: "ToolApproval",
			Question: "Run shell: make deploy?"},
		Stage: "act 2/2", Usage: arv1.Usage{TotalTokens: 1500, CostUSD: "0.0045"},
		Active:         &arv1.ActiveClock{BankedSeconds: 310},
		LastProgressAt: ago(4 * time.Minute),
	})
	childB.OwnerReferences = []metav1.OwnerReference{{APIVersion: "agentrun.dev/v1alpha1", Kind: "AgentRun",
		Name: "survey", UID: "survey-uid", Controller: ptr(true)}}
	grandchild := mk("team-a", "survey-item-2-check", 5*time.Minute, arv1.AgentRunStatus{
		Phase: arv1.PhaseComplete, ParentRun: "survey-item-2", Stage: "check 1/1",
		Usage:          arv1.Usage{TotalTokens: 90, CostUSD: "0.0001"},
		Active:         &arv1.ActiveClock{BankedSeconds: 12},
		LastProgressAt: ago(5 * time.Minute),
	})
	setup := mk("team-a", "triage", 30*time.Minute, arv1.AgentRunStatus{
		Phase: arv1.PhaseWaitingInput,
		WaitingOn: &arv1.WaitingOn{Reason: arv1.WaitNeedsSetup, NeedsAPerson: true, Summary: "NeedsSetup: SecretMissing",
			Blocker: arv1.BlockerSecretMissing, Remedy: `create Secret "anthropic" in namespace "team-a"`},
		Stage: "plan 1/3", Active: &arv1.ActiveClock{},
	})
	done := mk("team-a", "changelog", 26*time.Hour, arv1.AgentRunStatus{
		Phase: arv1.PhaseComplete, Stage: "write 3/3",
		Stages: []arv1.StageStatus{
			{Name: "gather", State: arv1.StageComplete, Entered: ago(26 * time.Hour), Visits: 1, Iterations: 2, TimeInStage: &metav1.Duration{Duration: 90 * time.Second}},
			{Name: "draft", State: arv1.StageComplete, Entered: ago(26 * time.Hour), Visits: 2, Iterations: 3, TimeInStage: &metav1.Duration{Duration: 20 * time.Minute}},
			{Name: "polish", State: arv1.StageSkipped},
			{Name: "write", State: arv1.StageComplete, Entered: ago(25 * time.Hour), Visits: 1, Iterations: 1, TimeInStage: &metav1.Duration{Duration: 45 * time.Second}},
		},
		Usage:          arv1.Usage{TotalTokens: 12000, CostUSD: "0.18", CostIsExact: true},
		Active:         &arv1.ActiveClock{BankedSeconds: 4000},
		LastProgressAt: ago(25 * time.Hour),
		FinalOutput:    &arv1.FinalOutputDescriptor{Format: arv1.OutputFormatMarkdown, Bytes: 2048, ObjectName: "changelog-output"},
	})
	unknown := mk("team-a", "local-model", 10*time.Minute, arv1.AgentRunStatus{
		Phase: arv1.PhaseRunning, Stage: "draft 1/1",
		Usage:          arv1.Usage{PromptTokens: 700, CompletionTokens: 200, CostUSD: "unknown", UnpricedCalls: 2},
		StartedAt:      ago(10 * time.Minute),
		UpdatedAt:      ago(1 * time.Minute),
		LastProgressAt: ago(1 * time.Minute),
	})
	// Not taken up yet: the API server's status default reads Queued.
	fresh := mk("team-a", "just-created", 5*time.Second, arv1.AgentRunStatus{ObservedGeneration: -1, Phase: arv1.PhaseQueued})
	fresher := mk("team-a", "just-created-2", 2*time.Second, arv1.AgentRunStatus{ObservedGeneration: -1, Phase: arv1.PhaseQueued})
	sleeping := mk("team-b", "nightly", 3*time.Hour, arv1.AgentRunStatus{
		Phase: arv1.PhaseWaitingInput,
		WaitingOn: &arv1.WaitingOn{Reason: arv1.WaitSleeping, Summary: "Sleeping until 2026-03-01T13:00:00Z",
			WakeAt: ptr(metav1.NewTime(fixedNow.Add(time.Hour)))},
		Active:         &arv1.ActiveClock{BankedSeconds: 59},
		LastProgressAt: ago(2 * time.Hour),
	})
	// Deliberately not in display order.
	return []arv1.AgentRun{done, childA, fresher, fresh, setup, grandchild, unknown, parent, sleeping, childB}
}

func inNamespace(runs []arv1.AgentRun, ns string) []arv1.AgentRun {
	var out []arv1.AgentRun
	for _, r := range runs {
		if r.Namespace == ns {
			out = append(out, r)
		}
	}
	return out
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s (run with -update to write it): %v", path, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run with -update to accept):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestPsGolden(t *testing.T) {
	var buf bytes.Buffer
	if err := RenderPs(&buf, inNamespace(fixtureRuns(), "team-a"), fixedNow, false, nil, priority.Classes{}); err != nil {
		t.Fatal(err)
	}
	golden(t, "ps.golden", buf.Bytes())

	buf.Reset()
	if err := RenderPs(&buf, fixtureRuns(), fixedNow, true, nil, priority.Classes{}); err != nil {
		t.Fatal(err)
	}
	golden(t, "ps-all-namespaces.golden", buf.Bytes())
}

// The ordering rules, independently of the golden file's bytes.
func TestPsOrder(t *testing.T) {
	var buf bytes.Buffer
	if err := RenderPs(&buf, inNamespace(fixtureRuns(), "team-a"), fixedNow, false, nil, priority.Classes{}); err != nil {
		t.Fatal(err)
	}
	var names []string
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	for _, l := range lines[1 : len(lines)-2] {
		f := strings.Fields(strings.TrimLeft(l, " │├└─"))
		names = append(names, f[0])
	}
	// Trees holding a run that needs a person first, newest first (triage,
	// 30m old, before survey, 2h old, which holds survey-item-2); within
	// survey the child needing a person before its newer sibling; then the
	// rest newest first.
	want := []string{"triage", "survey", "survey-item-2", "survey-item-2-check", "survey-item-1", "just-created-2", "just-created", "local-model", "changelog"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Errorf("order = %v, want %v\n%s", names, want, buf.String())
	}
	if last := lines[len(lines)-1]; last != "2 runs need an answer" {
		t.Errorf("footer = %q", last)
	}
}

// Runs still in line show how many listed runs are ahead of them, in
// admission's order: a child queues with its tree root's place, and a
// parked or started run is not in line.
func TestPsShowsThePlaceInLine(t *testing.T) {
	mk := func(name string, age time.Duration, st arv1.AgentRunStatus, labels map[string]string) arv1.AgentRun {
		return arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: name, CreationTimestamp: *ago(age), Labels: labels}, Status: st}
	}
	queued := arv1.AgentRunStatus{ObservedGeneration: -1, Phase: arv1.PhaseQueued}
	runs := []arv1.AgentRun{
		mk("late", 1*time.Second, queued, nil),
		mk("early", 30*time.Second, queued, nil),
		// Created last, but its tree's root was created an hour ago.
		mk("old-tree-worker", 0, queued, map[string]string{
			arv1.LabelRoot: "old-tree", arv1.LabelRootCreated: strconv.FormatInt(fixedNow.Add(-time.Hour).UnixNano(), 10)}),
		mk("working", 2*time.Minute, arv1.AgentRunStatus{Phase: arv1.PhaseRunning}, nil),
		mk("unset", 10*time.Second, arv1.AgentRunStatus{}, nil),
		mk("parked", time.Minute, arv1.AgentRunStatus{WaitingOn: &arv1.WaitingOn{Reason: arv1.WaitSleeping, Summary: "Sleeping"}}, nil),
	}
	var buf bytes.Buffer
	if err := RenderPs(&buf, runs, fixedNow, false, nil, priority.Classes{}); err != nil {
		t.Fatal(err)
	}
	waiting := map[string]string{}
	for _, l := range strings.Split(buf.String(), "\n")[1:] {
		if cells := regexp.MustCompile(`\s{3,}`).Split(strings.TrimSpace(l), -1); len(cells) > 2 {
			waiting[cells[0]] = cells[2]
		}
	}
	want := map[string]string{
		"old-tree-worker": "next in line", "early": "1 ahead in line", "unset": "2 ahead in line", "late": "3 ahead in line",
		"working": "-", "parked": "Sleeping",
	}
	if !maps.Equal(waiting, want) {
		t.Errorf("WAITING cells = %v, want %v\n%s", waiting, want, buf.String())
	}
}

// TestPsParentCycleIsShown: runs whose parents form a cycle (which the
// API server cannot rule out: status.parentRun is only a name) are each
// listed exactly once. The cycle is broken at its first run in the
// listing's order (the API server lists by name), which is drawn as a
// top-level run with the rest of the cycle under it; nothing else marks
// the cycle. A run naming itself is top-level. A cycle holding a run that
// needs a person sorts first, like any tree that does.
func TestPsParentCycleIsShown(t *testing.T) {
	mk := func(name, parent string, w *arv1.WaitingOn) arv1.AgentRun {
		phase := arv1.PhaseRunning
		if w != nil {
			phase = arv1.PhaseWaitingInput
		}
		return arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: name, CreationTimestamp: *ago(time.Hour)},
			Status: arv1.AgentRunStatus{Phase: phase, ParentRun: parent, WaitingOn: w}}
	}
	approval := &arv1.WaitingOn{Reason: arv1.WaitToolApproval, NeedsAPerson: true, Summary: "ToolApproval"}
	runs := []arv1.AgentRun{
		mk("a", "b", nil), mk("b", "a", nil), // a two-run cycle
		mk("c", "e", nil), mk("d", "c", nil), mk("e", "d", approval), // three, one needing a person
		mk("s", "s", nil), // its own parent
	}
	var buf bytes.Buffer
	if err := RenderPs(&buf, runs, fixedNow, false, nil, priority.Classes{}); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"RUN       PHASE          WAITING        STAGE   TOKENS   COST   WORKING   LAST MOVED   DRIVER",
		"c         Running        -              -       0        -      0s        -            -",
		"└─ d      Running        -              -       0        -      0s        -            -",
		"   └─ e   WaitingInput   ToolApproval   -       0        -      0s        -            -",
		"a         Running        -              -       0        -      0s        -            -",
		"└─ b      Running        -              -       0        -      0s        -            -",
		"s         Running        -              -       0        -      0s        -            -",
		"",
		"1 run needs an answer",
		"",
	}, "\n")
	if got := buf.String(); got != want {
		t.Errorf("listing of runs in parent cycles:\n%s\nwant:\n%s", got, want)
	}
}

func TestFooter(t *testing.T) {
	for n, want := range map[int]string{0: "no run needs an answer", 1: "1 run needs an answer", 3: "3 runs need an answer"} {
		if got := Footer(n); got != want {
			t.Errorf("Footer(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestRenderTranscript(t *testing.T) {
	entry := func(_, data string) journal.Entry {
		var e journal.Entry
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	cms := []journal.Entry{
		entry("r-j000002", `{"seq":2,"kind":"ModelCallFailed","at":"2026-03-01T11:02:00Z","stage":"plan","iteration":1,"call":1,"provider":"anthropic","model":"claude","failure":{"class":"AuthFailed","status":401,"message":"invalid x-api-key"}}`),
		entry("r-j000000", `{"seq":0,"kind":"ModelCallRequested","at":"2026-03-01T11:00:00Z","stage":"plan","provider":"anthropic","model":"claude","requestHash":"h0"}`),
		entry("r-j000001", `{"seq":1,"kind":"ModelCallCompleted","at":"2026-03-01T11:01:00Z","stage":"plan","call":0,"provider":"anthropic","model":"claude","response":{"text":"Here is\nthe plan.","next":"build"},"usage":{"prompt":1200,"completion":300,"cached":800},"costNanoUSD":4200000,"costExact":true}`),
		entry("r-j000003", `{"seq":3,"kind":"InteractionAnswered","at":"2026-03-01T11:03:00Z","point":"review-plan","approved":true,"by":"alice"}`),
		entry("r-j000004", `{"seq":4,"kind":"RunCancelled","at":"2026-03-01T11:04:00Z"}`),
	}
	tools := []journal.Entry{
		entry("t-j000001", `{"seq":1,"kind":"ModelCallCompleted","at":"2026-03-01T11:01:00Z","call":0,"provider":"demo","model":"m","response":{"text":"checking","calls":[{"name":"read_doc","arguments":"{}"},{"name":"create_ticket","arguments":"{\"title\":\"x\"}"}]},"costNanoUSD":0}`),
		entry("t-j000002", `{"seq":2,"kind":"ToolCallRequested","at":"2026-03-01T11:02:00Z","tool":"read_doc","input":"{}","effect":"read","server":"tracker","idempotencyKey":"u-2"}`),
		entry("t-j000003", `{"seq":3,"kind":"ToolCallCompleted","at":"2026-03-01T11:03:00Z","call":2,"tool":"read_doc","result":"doc a"}`),
		entry("t-j000004", `{"seq":4,"kind":"QuestionAsked","at":"2026-03-01T11:04:00Z","point":"call-1-1-approval"}`),
		entry("t-j000005", `{"seq":5,"kind":"ToolCallDecided","at":"2026-03-01T11:05:00Z","index":1,"tool":"create_ticket","gate":"approval","by":"alice","result":"not today"}`),
		entry("t-j000006", `{"seq":6,"kind":"RunAbandoned","at":"2026-03-01T11:06:00Z","by":"bob"}`),
	}
	var buf bytes.Buffer
	if err := RenderTranscript(&buf, cms, nil); err != nil {
		t.Fatal(err)
	}
	golden(t, "transcript.golden", buf.Bytes())
	buf.Reset()
	if err := RenderTranscript(&buf, tools, nil); err != nil {
		t.Fatal(err)
	}
	golden(t, "transcript-tools.golden", buf.Bytes())

	buf.Reset()
	err := RenderTranscript(&buf, cms, []string{"r-journal 000009: unreadable entry: invalid character"})
	if err == nil || !strings.Contains(buf.String(), "r-journal 000009: unreadable entry") {
		t.Errorf("a corrupt entry: err %v, output\n%s", err, buf.String())
	}
}

func TestDescribeGolden(t *testing.T) {
	runs := fixtureRuns()
	var buf bytes.Buffer
	for _, name := range []string{"triage", "survey-item-2", "changelog", "local-model"} {
		for i := range runs {
			if runs[i].Name == name {
				buf.WriteString("=== " + name + "\n")
				if err := RenderDescribe(&buf, &runs[i], fixedNow, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	golden(t, "describe.golden", buf.Bytes())
}

// parse runs the plugin on args with a kubeconfig that does not exist, so
// that a command stops right after parsing (exit 1 when connecting), and
// returns the app with what it parsed.
func parse(t *testing.T, args ...string) (*app, int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	a := newApp(&out, &errOut)
	code := a.execute(context.Background(), append([]string{"--kubeconfig", "/nonexistent/kubeconfig"}, args...))
	return a, code, errOut.String()
}

// TestFlagSpellings: flags anywhere among the arguments, in every spelling
// kubectl takes ("-n ns", "-nns", "-n=ns", "--namespace ns",
// "--namespace=ns", "-ojson"), kubectl's connection flags before or after
// the command, and "--" ending the flags.
func TestFlagSpellings(t *testing.T) {
	a, code, errOut := parse(t, "status", "x", "-n", "ns", "-ojson", "--context", "c", "--as=alice", "--as-group", "g1", "--as-group=g2")
	if code != ExitError || !strings.Contains(errOut, "loading the kubeconfig") {
		t.Fatalf("exit %d, %q", code, errOut)
	}
	if o := a.parsed; o == nil || o.output != "json" || len(o.args) != 1 || o.args[0] != "x" {
		t.Errorf("parsed %+v", a.parsed)
	}
	if f := a.flags; *f.Namespace != "ns" || *f.Context != "c" || *f.Impersonate != "alice" ||
		strings.Join(*f.ImpersonateGroup, ",") != "g1,g2" || *f.KubeConfig != "/nonexistent/kubeconfig" {
		t.Errorf("connection flags: ns %q context %q as %q groups %q", *f.Namespace, *f.Context, *f.Impersonate, *f.ImpersonateGroup)
	}
	for _, args := range [][]string{{"ps", "-nns"}, {"ps", "-n=ns"}, {"ps", "--namespace", "ns"}, {"-n", "ns", "ps"}, {"--namespace=ns", "ps", "-w"}} {
		if a, code, errOut := parse(t, args...); code != ExitError || *a.flags.Namespace != "ns" {
			t.Errorf("%q: exit %d, namespace %q, %s", args, code, *a.flags.Namespace, errOut)
		}
	}
	if a, _, _ := parse(t, "ps", "-A=false", "--watch"); a.parsed.allNamespaces || !a.parsed.watch {
		t.Errorf("-A=false --watch: %+v", a.parsed)
	}
	if a, _, _ := parse(t, "answer", "r", "--", "-n"); a.parsed == nil || strings.Join(a.parsed.args, ",") != "r,-n" || *a.flags.Namespace != "" {
		t.Errorf(`"--" did not end the flags: %+v`, a.parsed)
	}
	for _, bad := range [][]string{{"describe", "x", "-A"}, {"describe", "x", "-o", "json"}, {"ps", "--bogus"}, {"ps", "-n"}, {"ps", "-A=maybe"}} {
		if _, code, errOut := parse(t, bad...); code != ExitUsage {
			t.Errorf("%q: exit %d, %q", bad, code, errOut)
		}
	}
}

func TestUsageAndGates(t *testing.T) {
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"kubectl-agentrun"}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, _, errOut := run(); code != ExitUsage || !strings.Contains(errOut, "Answer what a run waits on:") {
		t.Errorf("no command: %d %q", code, errOut)
	}
	if code, out, _ := run("--help"); code != ExitOK || !strings.Contains(out, "transcript") {
		t.Errorf("--help: %d %q", code, out)
	}
	for _, c := range []string{"ps", "describe", "status", "pause", "resume", "cancel", "output", "transcript", "approve", "deny", "answer", "resolve"} {
		if code, out, _ := run(c, "--help"); code != ExitOK || !strings.Contains(out, "\nUsage:\n  kubectl agentrun "+c+" ") ||
			!strings.Contains(out, "--request-timeout") {
			t.Errorf("%s --help: %d %q", c, code, out)
		}
	}
	if code, _, errOut := run("describe"); code != ExitUsage || !strings.Contains(errOut, "exactly one run NAME") {
		t.Errorf("describe without a name: %d %q", code, errOut)
	}
	if code, _, errOut := run("status", "x", "-o", "wide"); code != ExitUsage || !strings.Contains(errOut, "unsupported output format") {
		t.Errorf("status -o wide: %d %q", code, errOut)
	}
	if code, _, errOut := run("ps", "-o", "csv"); code != ExitUsage || !strings.Contains(errOut, `unsupported output format "csv" (supported: wide, json, yaml`) {
		t.Errorf("ps -o csv: %d %q", code, errOut)
	}
	if code, out, _ := run("help", "deny"); code != ExitOK || !strings.Contains(out, "--reason") {
		t.Errorf("help deny: %d %q", code, out)
	}
	if code, _, errOut := run("ps", "-A", "-n", "x"); code != ExitUsage || !strings.Contains(errOut, "cannot be used together") {
		t.Errorf("ps -A -n: %d %q", code, errOut)
	}
	if code, _, errOut := run("frobnicate"); code != ExitUsage || !strings.Contains(errOut, `unknown command "frobnicate" for "kubectl agentrun"`) {
		t.Errorf("unknown command: %d %q", code, errOut)
	}
	if code, _, errOut := run("ps", "--kubeconfig", "/nonexistent/kubeconfig"); code != ExitError || !strings.Contains(errOut, "kubeconfig") {
		t.Errorf("missing kubeconfig: %d %q", code, errOut)
	}
}

// DRIVER says who drives each unfinished run, and tells a shard changing
// hands from one no replica is alive to take.
func TestDriverText(t *testing.T) {
	run := func(phase arv1.Phase, shard, driver string) *arv1.AgentRun {
		r := &arv1.AgentRun{}
		r.Status.Phase, r.Status.Driver = phase, driver
		if shard != "" {
			r.Labels = map[string]string{shards.LabelShard: shard}
		}
		return r
	}
	held := &shards.Ownership{Sharded: true, Holders: map[int]string{0: "manager-a"}, LiveMembers: 2}
	orphaned := &shards.Ownership{Sharded: true, Holders: map[int]string{}, LiveMembers: 0}
	single := &shards.Ownership{Holders: map[int]string{}, LiveMembers: 0}
	for _, c := range []struct {
		name string
		run  *arv1.AgentRun
		own  *shards.Ownership
		want string
	}{
		{"finished runs have no driver", run(arv1.PhaseComplete, "0", "manager-a"), held, "-"},
		{"Leases unreadable: status.driver", run(arv1.PhaseRunning, "0", "manager-b"), nil, "manager-b"},
		{"one replica: status.driver", run(arv1.PhaseRunning, "", "manager-b"), single, "manager-b"},
		{"not driven yet", run(arv1.PhaseRunning, "", ""), nil, "-"},
		{"the shard's holder, over a stale status.driver", run(arv1.PhaseRunning, "0", "manager-old"), held, "manager-a"},
		{"changing hands", run(arv1.PhaseRunning, "1", "manager-old"), held, "(shard 1 changing hands)"},
		{"no live replica", run(arv1.PhaseRunning, "1", "manager-old"), orphaned, "none (shard 1: no live replica)"},
		{"no shard yet", run(arv1.PhaseStarting, "", ""), held, "(getting its shard)"},
		{"no shard and nobody to give one", run(arv1.PhaseStarting, "", ""), orphaned, "none (no live replica)"},
	} {
		if got := DriverText(c.run, c.own); got != c.want {
			t.Errorf("%s: DriverText = %q, want %q", c.name, got, c.want)
		}
	}
}

// TestTransitionLine: describe shows the last stage change and, for a
// runtime signal, why.
func TestTransitionLine(t *testing.T) {
	for _, tc := range []struct {
		l    arv1.StageTransition
		want string
	}{
		{arv1.StageTransition{From: "plan", To: "build", Condition: "llm_choice"}, "plan -> build (llm_choice)"},
		{arv1.StageTransition{From: "build", To: "fix", Condition: "error", Reason: "model call failed: boom"}, "build -> fix (error): model call failed: boom"},
		{arv1.StageTransition{From: "split", To: "merge"}, "split -> merge"},
	} {
		if got := transitionLine(&tc.l); got != tc.want {
			t.Errorf("%q, want %q", got, tc.want)
		}
	}
}
