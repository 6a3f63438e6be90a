package plugin

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// TestKubectlAgentrunTranscriptFollow: `transcript -f` prints the journal
// so far, then each entry as it is journaled, while the run goes on, each
// once, and ends by itself when the run does, with the entries journaled
// just before its end, exit 0; --request-timeout bounds its requests, not
// how long it follows.
func TestKubectlAgentrunTranscriptFollow(t *testing.T) {
	controlPlane(t)
	ns := newNamespace(t)
	ctx := ctxFor(t)
	run := createRun(t, ns, "live", nil, arv1.AgentRunStatus{Phase: arv1.PhaseRunning})
	entries := []string{
		`{"seq":0,"kind":"ModelCallRequested","at":"2026-03-01T11:00:00Z","stage":"write","provider":"p","model":"m","requestHash":"h0"}`,
		`{"seq":1,"kind":"ModelCallCompleted","at":"2026-03-01T11:00:02Z","stage":"write","call":0,"provider":"p","model":"m","response":{"text":"A plan."},"usage":{"prompt":10,"completion":2}}`,
		`{"seq":2,"kind":"ModelCallRequested","at":"2026-03-01T11:00:02Z","stage":"write","iteration":1,"provider":"p","model":"m","requestHash":"h1"}`,
		`{"seq":3,"kind":"ModelCallCompleted","at":"2026-03-01T11:00:04Z","stage":"write","iteration":1,"call":2,"provider":"p","model":"m","response":{"text":"Done."},"usage":{"prompt":10,"completion":2}}`,
	}
	chunk := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: configmaps.ChunkName(run, 0), Labels: map[string]string{
			configmaps.LabelRunUID: string(run.UID), arv1.LabelComponent: configmaps.Component, configmaps.LabelChunk: "0"}},
		Data: map[string]string{"000000": entries[0]},
	}
	if err := k8sClient.Create(ctx, chunk); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(testenv.KubectlPath(), "agentrun", "transcript", "-f", "live", "-n", ns, "--request-timeout", "2s")
	cmd.Env = append(os.Environ(), "PATH="+pluginDir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+kubeconfig)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func(want string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok || !strings.HasPrefix(l, want+" ") {
				t.Fatalf("next line %q (more: %v), want one for %s; stderr %q", l, ok, want, stderr.String())
			}
			return l
		case <-time.After(20 * time.Second):
			t.Fatalf("no line for %s within 20s; stderr %q", want, stderr.String())
		}
		return ""
	}

	next("#0")                  // the journal so far
	time.Sleep(3 * time.Second) // past --request-timeout
	// An entry journaled while the run goes on shows while it goes on.
	chunk.Data["000001"] = entries[1]
	if err := k8sClient.Update(ctx, chunk); err != nil {
		t.Fatal(err)
	}
	if l := next("#1"); !strings.Contains(l, "write[0]") {
		t.Errorf("line %q does not place the answer in turn write[0]", l)
	}
	// The last entries and the end arrive together: the run's end makes
	// the command read the journal once more and stop.
	chunk.Data["000002"], chunk.Data["000003"] = entries[2], entries[3]
	if err := k8sClient.Update(ctx, chunk); err != nil {
		t.Fatal(err)
	}
	run.Status.Phase = arv1.PhaseComplete
	if err := k8sClient.Status().Update(ctx, run); err != nil {
		t.Fatal(err)
	}
	next("#2")
	if l := next("#3"); !strings.Contains(l, "write[1]") {
		t.Errorf("line %q does not place the answer in turn write[1]", l)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("transcript -f ended with %v; stderr %q", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("transcript -f did not end with the run; stderr %q", stderr.String())
	}
	for l := range lines {
		t.Errorf("a line after the end, or one printed twice: %q", l)
	}
	if !strings.Contains(stderr.String(), "ended: Complete") {
		t.Errorf("stderr %q does not say the run ended", stderr.String())
	}
}
