package plugin

import (
	"errors"
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// TestFateOfEdit: what an approval with edited arguments came to is read
// from the entries after its decision: a policy's Deny ends the call (and
// the command, errEditDenied), a RequireApproval holds it unless the
// approval answered the policy itself, an Audit settles nothing, an
// intent or a result means the call was made; nothing yet while none of
// these follows the answer's own decision.
func TestFateOfEdit(t *testing.T) {
	decided := func(gate string) journal.Entry {
		return journal.Entry{Seq: 5, Kind: journal.ToolCallDecided, Tool: "create_ticket", Gate: gate, Approved: true, By: "alice", Message: "r-abcde", Input: `{"priority":"p0"}`}
	}
	policy := func(action, msg string) journal.Entry {
		return journal.Entry{Seq: 6, Kind: journal.ToolPolicyDecided, Tool: "create_ticket", Policy: &journal.PolicyDecision{
			Action: action, PolicyKind: "ClusterAgentToolPolicy", Policy: "tickets", Rule: "no-p0", Message: msg}}
	}
	made := journal.Entry{Seq: 7, Kind: journal.ToolCallRequested, Tool: "create_ticket"}
	earlier := journal.Entry{Seq: 2, Kind: journal.ToolPolicyDecided, Tool: "create_ticket", Policy: &journal.PolicyDecision{Action: journal.PolicyDeny}}
	for _, c := range []struct {
		name    string
		entries []journal.Entry
		line    string
		denied  bool
	}{
		{"nothing after the decision yet", []journal.Entry{earlier, decided(journal.GateApproval)}, "", false},
		{"not journaled yet", []journal.Entry{earlier}, "", false},
		{"denied by a policy", []journal.Entry{decided(journal.GateApproval), policy(journal.PolicyDeny, "ask the on-call")},
			"Denied: the edited call create_ticket was not made: denied by ClusterAgentToolPolicy tickets, rule no-p0: ask the on-call", true},
		{"held by a policy", []journal.Entry{decided(journal.GateApproval), policy(journal.PolicyRequireApproval, "")},
			"Held: the edited call create_ticket waits on another approval, required by ClusterAgentToolPolicy tickets, rule no-p0", false},
		{"the policy's own approval answers it again", []journal.Entry{decided(journal.GatePolicy), policy(journal.PolicyRequireApproval, ""), made},
			"Applied: create_ticket is made with the edited arguments", false},
		{"audited, then made", []journal.Entry{decided(journal.GateApproval), policy(journal.PolicyAudit, "")}, "", false},
		{"made", []journal.Entry{decided(journal.GateApproval), policy(journal.PolicyAudit, ""), made},
			"Applied: create_ticket is made with the edited arguments", false},
		{"read out of order", []journal.Entry{policy(journal.PolicyDeny, ""), earlier, decided(journal.GateApproval)},
			"Denied: the edited call create_ticket was not made: denied by ClusterAgentToolPolicy tickets, rule no-p0", true},
		{"the run ended first", []journal.Entry{decided(journal.GateApproval), {Seq: 6, Kind: journal.RunCancelled}},
			"Applied, but the run ended before create_ticket was made", false},
	} {
		f, ok := fateOfEdit(c.entries, "r-abcde")
		if ok != (c.line != "") || f.line != c.line || errors.Is(f.err, errEditDenied) != c.denied {
			t.Errorf("%s: %q (ok %v, err %v), want %q (denied %v)", c.name, f.line, ok, f.err, c.line, c.denied)
		}
	}
}
