package controllers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool/mcptest"
)

// requiringAgent is a one-stage blueprint whose stage requires tool from
// the tracker server at url (with serverOpts) and completes at once.
func requiringAgent(url, serverOpts, tool string) string {
	return fmt.Sprintf(`[agent]
name = "tooling"
[agent.title]
enabled = false
[mcp_servers.tracker]
url = %q
%s
[stages.work]
allow_complete = true
required_tools = [%q]
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.work.script]]
complete = true
output = "done"
`, url, serverOpts, tool)
}

// TestRequiredToolsHoldTheModelCall: a stage whose required tool's server
// has no token parks on NeedsSetup naming the tool, before any model
// call, and goes on once the Secret exists; a required tool the server
// does not list parks on ToolServerUnavailable.
func TestRequiredToolsHoldTheModelCall(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{Token: "tok-1"})
	h := startManager(t, managerOpts{})
	ns, run := toolRun(t, requiringAgent(srv.URL(), `auth_secret = "tracker-token"`, "read_doc"))
	w := waitFor(t, ns, "r", 20*time.Second, "NeedsSetup", blockedOn(arv1.BlockerSecretMissing)).Status.WaitingOn
	if !strings.Contains(w.Remedy, `Stage "work" requires tool "read_doc"`) || !strings.Contains(w.Remedy, "tracker-token") {
		t.Errorf("remedy = %q, want the required tool and the Secret named", w.Remedy)
	}
	if n := h.scripted.Calls(string(run.UID)); n != 0 {
		t.Errorf("%d model calls before the required tool was available", n)
	}
	createSecret(t, ns, "tracker-token", map[string]string{"token": "tok-1"})
	waitFor(t, ns, "r", 20*time.Second, "Complete", phaseIs(arv1.PhaseComplete))

	open := mcptest.New(t, mcptest.Options{})
	ns2, run2 := toolRun(t, requiringAgent(open.URL(), `tools = ["read_doc", "not_listed"]`, "not_listed"))
	w = waitFor(t, ns2, "r", 20*time.Second, "NeedsSetup", blockedOn(arv1.BlockerToolServerUnavailable)).Status.WaitingOn
	if !strings.Contains(w.Remedy, `requires tool "not_listed"`) || !strings.Contains(w.Remedy, "does not list it") {
		t.Errorf("remedy = %q", w.Remedy)
	}
	if n := h.scripted.Calls(string(run2.UID)); n != 0 {
		t.Errorf("%d model calls with a required tool missing", n)
	}
}
