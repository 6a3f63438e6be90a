package plugin

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// completion runs the plugin binary itself (as a shell's completion script
// does) with args and KUBECONFIG set, and returns its stdout.
func completion(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "PATH="+pluginDir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+kubeconfig)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %q: %v\n%s", filepath.Base(bin), args, err, errOut.String())
	}
	return out.String()
}

// TestKubectlAgentrunCompletion: cobra's __complete protocol answers run
// names from the namespace the command line's flags choose, each described
// by its phase and wait; -n completes namespaces. The real kubectl, asked
// to complete `kubectl agentrun ...`, gets the same names through the
// kubectl_complete-agentrun link.
func TestKubectlAgentrunCompletion(t *testing.T) {
	controlPlane(t)
	ns := newNamespace(t)
	other := newNamespace(t)
	createRun(t, ns, "alpha", nil, arv1.AgentRunStatus{Phase: arv1.PhaseRunning})
	createRun(t, ns, "beta", nil, arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput,
		WaitingOn: &arv1.WaitingOn{Reason: arv1.WaitToolApproval, Summary: "ToolApproval", Point: "call-1"}})
	createRun(t, other, "gamma", nil, arv1.AgentRunStatus{})
	bin := filepath.Join(pluginDir, "kubectl-agentrun")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"__complete", "describe", "-n", ns, ""}, "alpha\tRunning\nbeta\tWaitingInput: ToolApproval\n:4\n"},
		{[]string{"__complete", "approve", "--namespace=" + ns, "b"}, "beta\tWaitingInput: ToolApproval\n:4\n"},
		{[]string{"__completeNoDesc", "transcript", "-n", other, ""}, "gamma\n:4\n"},
		// A run NAME is there already: nothing more to complete.
		{[]string{"__complete", "describe", "-n", ns, "alpha", ""}, ":4\n"},
		{[]string{"__complete", "ps", "-n", ns, "-o", "wide", ""}, ":4\n"},
		// check is a command, with its own flags; it takes no arguments.
		{[]string{"__complete", "che"}, "check\tCheck the install and what a namespace's runs need\n:4\n"},
		{[]string{"__complete", "check", "--op"}, "--operator-namespace\twhere the manager's Deployment runs (default: agentrun-system)\n:4\n"},
	} {
		if got := completion(t, bin, tc.args...); got != tc.want {
			t.Errorf("%q printed %q, want %q", tc.args, got, tc.want)
		}
	}
	for _, flag := range []string{"-n", "--operator-namespace"} {
		if got := completion(t, bin, "__complete", "check", flag, ns[:len(ns)-2]); !strings.Contains(got, "\n"+ns+"\n") && !strings.HasPrefix(got, ns+"\n") {
			t.Errorf("%s completion lacks %s:\n%s", flag, ns, got)
		}
	}
	if got := completion(t, bin, "__complete", "ps", "-n", ns[:len(ns)-2]); !strings.Contains(got, "\n"+ns+"\n") && !strings.HasPrefix(got, ns+"\n") {
		t.Errorf("-n completion lacks %s:\n%s", ns, got)
	}
	// A kubeconfig that reaches nothing: an error directive, not a hang or
	// a file list.
	if got := completion(t, bin, "__complete", "describe", "--kubeconfig", filepath.Join(t.TempDir(), "none"), ""); got != ":1\n" {
		t.Errorf("completion without a cluster printed %q, want the error directive", got)
	}

	// kubectl itself: `kubectl agentrun describe <TAB>` in any shell whose
	// kubectl completion is loaded.
	helper := filepath.Join(pluginDir, completeHelper)
	if err := os.Symlink("kubectl-agentrun", helper); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	got := completion(t, testenv.KubectlPath(), "__complete", "agentrun", "describe", "-n", ns, "")
	if !strings.HasPrefix(got, "alpha\tRunning\nbeta\tWaitingInput: ToolApproval\n:4\n") {
		t.Errorf("kubectl __complete agentrun describe printed %q", got)
	}
}

// TestCompletionScripts: `completion SHELL` prints a script for each shell
// cobra supports, for the kubectl-agentrun command; bash parses its own.
func TestCompletionScripts(t *testing.T) {
	for shell, marker := range map[string]string{
		"bash":       "__start_kubectl-agentrun",
		"zsh":        "#compdef kubectl-agentrun",
		"fish":       "complete -c kubectl-agentrun",
		"powershell": "Register-ArgumentCompleter -CommandName 'kubectl-agentrun'",
	} {
		var out, errOut bytes.Buffer
		if code := Main([]string{"kubectl-agentrun", "completion", shell}, &out, &errOut); code != ExitOK || !strings.Contains(out.String(), marker) {
			t.Errorf("completion %s: exit %d, %d bytes, lacks %q; stderr %q", shell, code, out.Len(), marker, errOut.String())
		}
		if shell == "bash" {
			check := exec.Command("bash", "-n")
			check.Stdin = &out
			if b, err := check.CombinedOutput(); err != nil {
				t.Errorf("bash -n on the bash script: %v\n%s", err, b)
			}
		}
	}
	var out, errOut bytes.Buffer
	if code := Main([]string{"kubectl-agentrun", "completion", "tcsh"}, &out, &errOut); code != ExitUsage {
		t.Errorf("completion tcsh: exit %d, %q", code, errOut.String())
	}
}
