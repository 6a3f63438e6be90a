package journal

import "testing"

// TestPolicyCause: a decision names its rule, and the error of the
// deciding rule's match when the rule applied by failing closed; an
// error the message already states (a decision journaled before the cause
// was shown apart) is not repeated, and another rule's error is not the
// deciding one's.
func TestPolicyCause(t *testing.T) {
	deciding := PolicyMatch{PolicyKind: "AgentToolPolicy", PolicyNamespace: "team-a", Policy: "p", Rule: "r", Action: PolicyDeny}
	other := PolicyMatch{PolicyKind: "ClusterAgentToolPolicy", Policy: "p", Rule: "r", Action: PolicyAudit, Error: "no such key: team"}
	failed := deciding
	failed.Error = "no such key: severity"
	for _, c := range []struct {
		name    string
		message string
		matches []PolicyMatch
		want    string
	}{
		{"a match that was true", "m", []PolicyMatch{other, deciding}, "AgentToolPolicy team-a/p, rule r"},
		{"a match that failed", "m", []PolicyMatch{other, failed}, "AgentToolPolicy team-a/p, rule r (its match could not be evaluated: no such key: severity; policies fail closed)"},
		{"an older message that states it", "this tool call denied ... (its match could not be evaluated, so it applies: no such key: severity)", []PolicyMatch{failed}, "AgentToolPolicy team-a/p, rule r"},
		{"no matches recorded", "m", nil, "AgentToolPolicy team-a/p, rule r"},
	} {
		d := PolicyDecision{Action: PolicyDeny, PolicyKind: "AgentToolPolicy", PolicyNamespace: "team-a", Policy: "p", Rule: "r", Message: c.message, Matches: c.matches}
		if got := d.Cause(); got != c.want {
			t.Errorf("%s: Cause() = %q, want %q", c.name, got, c.want)
		}
	}
}
