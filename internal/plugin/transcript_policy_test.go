package plugin

import (
	"bytes"
	"strings"
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// TestTranscriptNamesThePolicyAndRule: a tool policy's decision reads as
// the tool, the action, the deciding policy and rule with its message,
// and the other rules that matched; a policy gate's answer as a gate.
func TestTranscriptNamesThePolicyAndRule(t *testing.T) {
	d := &journal.PolicyDecision{Action: journal.PolicyDeny, PolicyKind: "ClusterAgentToolPolicy", Policy: "tickets", Rule: "no-p0", Message: "open a p1 instead",
		Matches: []journal.PolicyMatch{
			{PolicyKind: "ClusterAgentToolPolicy", Policy: "tickets", Rule: "no-p0", Action: journal.PolicyDeny},
			{PolicyKind: "AgentToolPolicy", PolicyNamespace: "team-a", Policy: "audit", Rule: "all-writes", Action: journal.PolicyAudit},
		}}
	entries := []journal.Entry{
		{Seq: 3, Kind: journal.ToolPolicyDecided, Tool: "create_ticket", Policy: d},
		{Seq: 4, Kind: journal.ToolCallDecided, Tool: "deploy", Gate: journal.GatePolicy, Approved: true, By: "alice", Result: "checked"},
	}
	var buf bytes.Buffer
	if err := RenderTranscript(&buf, entries, nil); err != nil {
		t.Fatal(err)
	}
	out := strings.Join(strings.Fields(buf.String()), " ")
	for _, want := range []string{
		`tool policy create_ticket Deny by ClusterAgentToolPolicy tickets, rule no-p0: "open a p1 instead"; also Audit AgentToolPolicy team-a/audit rule all-writes`,
		`tool gate deploy policy approved by alice, reason "checked"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("transcript lacks %q:\n%s", want, out)
		}
	}
}

// TestTranscriptShowsWhyARuleFailedClosed: a rule with a message that
// applied because its match could not be evaluated reads with both, the
// cause next to the rule, before the message (which may be cut).
func TestTranscriptShowsWhyARuleFailedClosed(t *testing.T) {
	d := &journal.PolicyDecision{Action: journal.PolicyDeny, PolicyKind: "ClusterAgentToolPolicy", Policy: "tickets", Rule: "sev", Message: "tickets need a severity",
		Matches: []journal.PolicyMatch{{PolicyKind: "ClusterAgentToolPolicy", Policy: "tickets", Rule: "sev", Action: journal.PolicyDeny, Error: "no such key: severity"}}}
	var buf bytes.Buffer
	if err := RenderTranscript(&buf, []journal.Entry{{Seq: 3, Kind: journal.ToolPolicyDecided, Tool: "create_ticket", Policy: d}}, nil); err != nil {
		t.Fatal(err)
	}
	want := `tool policy create_ticket Deny by ClusterAgentToolPolicy tickets, rule sev (its match could not be evaluated: no such key: severity; policies fail closed): "tickets need a severity"`
	if out := strings.Join(strings.Fields(buf.String()), " "); !strings.Contains(out, want) {
		t.Errorf("transcript lacks %q:\n%s", want, out)
	}
}
