package v1alpha1_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// applyQuota applies manifest with the real kubectl and returns its output
// and whether it was accepted.
func applyQuota(t *testing.T, manifest string) (string, bool) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "quota.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := testenv.Kubectl(kubeconfig, "apply", "-f", f)
	return out, err == nil
}

// TestQuotaBadInputRefusedNamingTheField: a quota with a negative or
// non-numeric limit, an unknown period, a time zone that is not one, a
// time zone without a period, or no limit at all is refused by kubectl
// apply, and the message names the field at fault. (A spend quota without
// a database store is refused by the manager's admission policy:
// controllers' TestQuotaSpendRefusedWithoutDatabase.)
func TestQuotaBadInputRefusedNamingTheField(t *testing.T) {
	ns := newNamespace(t)
	quota := func(spec string) string {
		return "apiVersion: agentrun.dev/v1alpha1\nkind: AgentRunQuota\nmetadata:\n  name: q\n  namespace: " + ns + "\nspec:\n" + spec
	}
	cluster := func(spec string) string {
		return "apiVersion: agentrun.dev/v1alpha1\nkind: ClusterAgentRunQuota\nmetadata:\n  name: q-" + ns + "\nspec:\n" + spec
	}
	cases := []struct {
		name, manifest string
		want           []string
	}{
		{"negative tokens", quota("  hard:\n    tokens: -1\n"), []string{"spec.hard.tokens", "greater than or equal to 0"}},
		{"non-numeric tokens", quota("  hard:\n    tokens: lots\n"), []string{"spec.hard.tokens", "integer"}},
		{"negative active runs", quota("  hard:\n    activeRuns: -3\n"), []string{"spec.hard.activeRuns", "greater than or equal to 0"}},
		{"negative runs", quota("  hard:\n    runs: -3\n"), []string{"spec.hard.runs", "greater than or equal to 0"}},
		{"negative cost", quota("  hard:\n    cost: \"-1\"\n"), []string{"spec.hard.cost", "should match"}},
		{"non-numeric cost", quota("  hard:\n    cost: ten dollars\n"), []string{"spec.hard.cost", "should match"}},
		{"cost with ten decimals", quota("  hard:\n    cost: \"0.0000000001\"\n"), []string{"spec.hard.cost", "should match"}},
		{"unknown period", quota("  hard:\n    activeRuns: 3\n  period: Fortnight\n"), []string{"spec.period", `Unsupported value: "Fortnight"`}},
		{"bad time zone", quota("  hard:\n    activeRuns: 3\n  period: Day\n  timeZone: Mars/Olympus_Mons\n"), []string{"spec.timeZone", "IANA time zone"}},
		{"time zone that is no name", quota("  hard:\n    activeRuns: 3\n  period: Day\n  timeZone: \"12:00\"\n"), []string{"spec.timeZone", "IANA time zone"}},
		{"time zone without period", quota("  hard:\n    activeRuns: 3\n  timeZone: Europe/Berlin\n"), []string{"spec.timeZone", "needs spec.period"}},
		{"no limit", quota("  hard: {}\n  period: Day\n"), []string{"spec.hard", "at least one of cost, tokens, runs and activeRuns"}},
		{"cluster quota with a bad time zone", cluster("  hard:\n    activeRuns: 3\n  period: Week\n  timeZone: Nowhere/Town\n"), []string{"spec.timeZone", "IANA time zone"}},
		{"cluster quota with negative tokens", cluster("  hard:\n    tokens: -5\n"), []string{"spec.hard.tokens", "greater than or equal to 0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, ok := applyQuota(t, c.manifest)
			if ok {
				t.Fatalf("kubectl apply accepted it:\n%s", out)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("kubectl said %q; want it to contain %q", strings.TrimSpace(out), w)
				}
			}
		})
	}
	// The same fields, valid, are accepted (activeRuns alone needs no
	// database store, so no admission policy stands in the way).
	for _, ok := range []string{
		quota("  hard:\n    activeRuns: 3\n"),
		cluster("  hard:\n    activeRuns: 0\n  namespaceSelector:\n    matchLabels:\n      team: a\n"),
	} {
		if out, accepted := applyQuota(t, ok); !accepted {
			t.Errorf("a valid quota was refused: %s", out)
		}
	}
}
