package history_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hv1 "github.com/agentrun-dev/agentrun-operator/api/history/v1alpha1"
	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/history/historyclient"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// The journal subresource, and the plugin's commands that work on a run's
// entries (describe, regions, fork --from-entry, transcript --follow,
// approve --args --wait) reading a database journal through it.

// TestJournalSubresource: agentrunrecords/NAME/journal serves a live
// run's database journal (source journal, the run's uid) and an archived
// record's (source archive) as the entries stored; the viewer role grants
// it as it grants the transcript, and a user without it is refused.
func TestJournalSubresource(t *testing.T) {
	ns := "journal-sub"
	ctx := context.Background()
	gone := archiveRun(t, runSpec{ns: ns, name: "gone", agent: "researcher", phase: arv1.PhaseComplete, calls: []*int64{ptr.To[int64](1), ptr.To[int64](2)}})
	_, viewer := userConfig(t, "jules")
	bind(t, ns, "jules", "agentrun-history-viewer")
	live := liveRun(t, ns, "live", nil, modelCall(0, "live-model", "hello")...)

	h, err := historyclient.New(viewer)
	if err != nil {
		t.Fatal(err)
	}
	j, err := h.Journal(ctx, ns, "live")
	if err != nil {
		t.Fatal(err)
	}
	if j.UID != live.UID || j.Annotations[hv1.SourceAnnotation] != hv1.SourceJournal || len(j.Entries) != 2 {
		t.Errorf("the live run's journal: uid %s (want %s), source %q, %d entries", j.UID, live.UID, j.Annotations[hv1.SourceAnnotation], len(j.Entries))
	}
	for i, want := range []journal.Kind{journal.ModelCallRequested, journal.ModelCallCompleted} {
		var e journal.Entry
		if i >= len(j.Entries) {
			break
		}
		if err := json.Unmarshal(j.Entries[i].Raw, &e); err != nil || e.Kind != want || e.Seq != int64(i) || e.Model != "live-model" {
			t.Errorf("entry %d: %+v (%v), want seq %d %s of live-model", i, e, err, i, want)
		}
	}
	if e := j.Entries[1].Raw; !bytes.Contains(e, []byte(`"text":"hello"`)) {
		t.Errorf("entry 1 is not the entry as stored: %s", e)
	}

	j, err = h.Journal(ctx, ns, "gone")
	if err != nil {
		t.Fatal(err)
	}
	if j.UID != gone.UID || j.Annotations[hv1.SourceAnnotation] != hv1.SourceArchive || len(j.Entries) != 4 {
		t.Errorf("the record's journal: uid %s (want %s), source %q, %d entries (want 4)", j.UID, gone.UID, j.Annotations[hv1.SourceAnnotation], len(j.Entries))
	}
	if _, err := h.Journal(ctx, ns, "never"); !apierrors.IsNotFound(err) {
		t.Errorf("the journal of a name with no run nor record: %v, want NotFound", err)
	}

	_, stranger := userConfig(t, "kim")
	hs, err := historyclient.New(stranger)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hs.Journal(ctx, ns, "live"); !apierrors.IsForbidden(err) {
		t.Errorf("a user without the viewer role: %v, want Forbidden", err)
	}
	if _, err := hs.Transcript(ctx, ns, "live"); !apierrors.IsForbidden(err) {
		t.Errorf("a user without the viewer role reads the transcript: %v, want Forbidden", err)
	}
}

// failover is a stage's model failing and another answering: describe
// names it.
func failover(at time.Time) []journal.Entry {
	return []journal.Entry{
		{Seq: 0, Kind: journal.ModelCallRequested, At: at, Stage: "plan", Provider: "anthropic", Model: "a"},
		{Seq: 1, Kind: journal.ModelCallFailed, At: at, Call: 0, Failure: &journal.Failure{Class: journal.FailAuth, Status: 401}},
		{Seq: 2, Kind: journal.ModelCallRequested, At: at, Stage: "plan", Provider: "openai", Model: "b"},
		{Seq: 3, Kind: journal.ModelCallCompleted, At: at, Call: 2, Provider: "openai", Model: "b", Usage: &journal.Usage{Prompt: 10, Completion: 5},
			Response: &journal.Response{Text: "a plan"}},
		{Seq: 4, Kind: journal.RegionWritten, At: at, Region: "draft", Content: "the first draft\n", By: "model"},
	}
}

// TestPluginCommandsReadDatabaseJournals: describe, regions and fork
// --from-entry read a database run's journal through the history API as
// the person running them, not an empty set of ConfigMaps; without the
// history role they say it is forbidden.
func TestPluginCommandsReadDatabaseJournals(t *testing.T) {
	ns := "plugin-journal"
	kc, _ := userConfig(t, "lena")
	bind(t, ns, "lena", "agentrun-history-viewer")
	runReader(t, ns, "lena")
	liveRun(t, ns, "db", nil, failover(time.Now().UTC().Truncate(time.Second))...)

	out, errOut, err := kubectlAgentrun(t, kc, "describe", "db", "-n", ns)
	if want := "stage plan: anthropic/a failed (AuthFailed, HTTP 401), answered by openai/b"; err != nil || !strings.Contains(out, want) {
		t.Errorf("describe lacks the failover %q: %v\n%s\n%s", want, err, out, errOut)
	}
	out, errOut, err = kubectlAgentrun(t, kc, "regions", "db", "-n", ns)
	if err != nil || !strings.Contains(out, "draft") || !strings.Contains(out, "#4") || !strings.Contains(out, "the first draft") {
		t.Errorf("regions: %v\n%s\n%s", err, out, errOut)
	}
	out, errOut, err = kubectlAgentrun(t, kc, "regions", "db", "draft", "-n", ns)
	if err != nil || out != "the first draft\n" {
		t.Errorf("regions db draft: %v %q %s", err, out, errOut)
	}

	out, errOut, err = kubectlAgentrun(t, admin, "fork", "db", "--from-entry", "5", "--name", "db-fork", "-n", ns)
	if err != nil || !strings.Contains(out, "db-fork created (fork of db from entry 5)") {
		t.Errorf("fork --from-entry 5 of a 5-entry database journal: %v\n%s\n%s", err, out, errOut)
	}
	_, errOut, err = kubectlAgentrun(t, admin, "fork", "db", "--from-entry", "6", "-n", ns)
	if err == nil || !strings.Contains(errOut, "entry 6 is out of range: the journal of db holds 5 entries") {
		t.Errorf("fork --from-entry 6: %v %s", err, errOut)
	}

	other, _ := userConfig(t, "mo")
	runReader(t, ns, "mo")
	for _, args := range [][]string{{"describe", "db"}, {"regions", "db"}} {
		_, errOut, err := kubectlAgentrun(t, other, append(args, "-n", ns)...)
		if err == nil || !strings.Contains(errOut, "forbidden") || !strings.Contains(errOut, "the view role grants it") {
			t.Errorf("%s by a reader of runs without the history viewer role: %v %s", args[0], err, errOut)
		}
	}
}

// syncBuffer is a bytes.Buffer a running command writes while the test
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// started is a plugin command running in the background.
type started struct {
	cmd         *exec.Cmd
	out, errOut *syncBuffer
	done        chan error
}

func startAgentrun(t *testing.T, kubeconfig string, args ...string) *started {
	t.Helper()
	s := &started{cmd: agentrunCommand(t, kubeconfig, args...), out: &syncBuffer{}, errOut: &syncBuffer{}, done: make(chan error, 1)}
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.errOut
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			_ = s.cmd.Process.Kill()
			if err := <-s.done; err != nil {
				t.Logf("%s killed: %v", s.cmd, err)
			}
		}
	})
	return s
}

// await waits (30 s at most) until stdout holds want.
func (s *started) await(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(s.out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("stdout never held %q:\n%s\nstderr:\n%s", want, s.out, s.errOut)
		}
		select {
		case err := <-s.done:
			s.done <- err
			if !strings.Contains(s.out.String(), want) {
				t.Fatalf("the command ended (%v) without printing %q:\n%s\nstderr:\n%s", err, want, s.out, s.errOut)
			}
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// wait waits (30 s at most) for the command to end and returns its exit
// code.
func (s *started) wait(t *testing.T) int {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err
		var exit *exec.ExitError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &exit):
			return exit.ExitCode()
		}
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatalf("the command did not end:\n%s\nstderr:\n%s", s.out, s.errOut)
	}
	return -1
}

// setStatus rewrites the run's status as the manager would after
// journaling.
func setStatus(t *testing.T, ns, name string, mutate func(*arv1.AgentRunStatus)) {
	t.Helper()
	c, err := client.New(env.Config, client.Options{Scheme: testScheme})
	if err != nil {
		t.Fatal(err)
	}
	var run arv1.AgentRun
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &run); err != nil {
		t.Fatal(err)
	}
	mutate(&run.Status)
	if err := c.Status().Update(context.Background(), &run); err != nil {
		t.Fatal(err)
	}
}

// TestPluginFollowsDatabaseJournal: transcript --follow of a database
// run prints the journal, then each entry once as the run's status moves
// past it, and ends with the run, its last entries printed; it is not cut
// short by --request-timeout, which bounds each request, not the follow.
func TestPluginFollowsDatabaseJournal(t *testing.T) {
	ns := "plugin-follow"
	kc, _ := userConfig(t, "nia")
	bind(t, ns, "nia", "agentrun-history-viewer")
	runReader(t, ns, "nia")
	run := liveRun(t, ns, "db", nil, modelCall(0, "first-model", "one")...)

	f := startAgentrun(t, kc, "transcript", "db", "-n", ns, "--follow", "--request-timeout", "2s")
	f.await(t, "test/first-model")
	time.Sleep(3 * time.Second) // past --request-timeout

	if err := arch.Append(context.Background(), run, modelCall(2, "second-model", "two")...); err != nil {
		t.Fatal(err)
	}
	setStatus(t, ns, "db", func(s *arv1.AgentRunStatus) { s.Iteration = 2 })
	f.await(t, "test/second-model")

	if err := arch.Append(context.Background(), run, modelCall(4, "third-model", "three")...); err != nil {
		t.Fatal(err)
	}
	setStatus(t, ns, "db", func(s *arv1.AgentRunStatus) { s.Phase = arv1.PhaseComplete })
	if code := f.wait(t); code != 0 {
		t.Fatalf("exit %d:\n%s\nstderr:\n%s", code, f.out, f.errOut)
	}
	out := f.out.String()
	for seq := range 6 {
		if n := strings.Count(out, fmt.Sprintf("#%d ", seq)); n != 1 {
			t.Errorf("entry #%d printed %d times:\n%s", seq, n, out)
		}
	}
	if !strings.Contains(out, "test/third-model") || !strings.Contains(f.errOut.String(), "run "+ns+"/db ended: Complete") {
		t.Errorf("the end: stdout\n%s\nstderr\n%s", out, f.errOut)
	}
}

// TestPluginApproveArgsDatabaseRun: approve --args --wait on a database
// run reads, through the history API, what became of the edited call: a
// policy's denial is printed with its rule, exit 1 (issue 48's fix, which
// read ConfigMaps only).
func TestPluginApproveArgsDatabaseRun(t *testing.T) {
	ns := "plugin-approve"
	ctx := context.Background()
	bind(t, ns, "nobody", "agentrun-history-viewer") // makes the namespace
	run := liveRun(t, ns, "db", nil, modelCall(0, "m", "call the tool")...)
	setStatus(t, ns, "db", func(s *arv1.AgentRunStatus) {
		s.Phase = arv1.PhaseWaitingInput
		s.WaitingOn = &arv1.WaitingOn{Reason: arv1.WaitToolApproval, Point: "call-3", Question: "Approve tool call create_ticket?"}
	})

	a := startAgentrun(t, admin, "approve", "db", "-n", ns, "--args", `{"priority":"p0"}`, "--wait")
	c, err := client.New(env.Config, client.Options{Scheme: testScheme})
	if err != nil {
		t.Fatal(err)
	}
	var ans *arv1.AgentRunAnswer
	for deadline := time.Now().Add(30 * time.Second); ans == nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no answer was created:\n%s\n%s", a.out, a.errOut)
		}
		var list arv1.AgentRunAnswerList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) > 0 {
			ans = &list.Items[0]
		}
	}
	// The run takes the answer (its decision journaled, the answer
	// Applied); the plugin then reads the journal, which does not say yet
	// what became of the call.
	at := time.Now().UTC().Truncate(time.Second)
	if err := arch.Append(ctx, run, journal.Entry{Seq: 2, Kind: journal.ToolCallDecided, At: at, Tool: "create_ticket", Gate: journal.GateApproval,
		Approved: true, By: "test-admin", Message: ans.Name, Input: `{"priority":"p0"}`}); err != nil {
		t.Fatal(err)
	}
	ans.Status = arv1.AgentRunAnswerStatus{State: arv1.AnswerApplied, Message: "Applied to the run"}
	if err := c.Status().Update(ctx, ans); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	// The policies deny the edited call; the run goes on.
	if err := arch.Append(ctx, run, journal.Entry{Seq: 3, Kind: journal.ToolPolicyDecided, At: at, Tool: "create_ticket", Policy: &journal.PolicyDecision{
		Action: journal.PolicyDeny, PolicyKind: "ClusterAgentToolPolicy", Policy: "tickets", Rule: "no-p0", Message: "ask the on-call"}}); err != nil {
		t.Fatal(err)
	}
	setStatus(t, ns, "db", func(s *arv1.AgentRunStatus) { s.Phase, s.WaitingOn = arv1.PhaseRunning, nil })
	code := a.wait(t)
	want := "Denied: the edited call create_ticket was not made: denied by ClusterAgentToolPolicy tickets, rule no-p0: ask the on-call\n"
	if code != 1 || !strings.HasSuffix(a.out.String(), want) {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 and %q", code, a.out, a.errOut, want)
	}
}
