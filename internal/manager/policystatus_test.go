package manager_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// TestManagerShowsToolPolicyReadiness: the manager internal/manager builds
// writes every tool policy's Ready condition, so `kubectl get -o wide`
// shows a cluster policy whose rule was stored without admission (no
// webhook here) as False InvalidRule with the CEL error, and a good
// namespace policy as True RulesCompiled with its rules counted.
func TestManagerShowsToolPolicyReadiness(t *testing.T) {
	kubeconfig, err := env.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if out, err := testenv.Kubectl(kubeconfig, "create", "namespace", "policy-status"); err != nil {
		t.Fatal(err, out)
	}
	for _, doc := range []string{`apiVersion: agentrun.dev/v1alpha1
kind: ClusterAgentToolPolicy
metadata: {name: stored-broken}
spec:
  rules:
  - {name: typo, match: 'tool.nmae == "deploy"', action: Deny}
`, `apiVersion: agentrun.dev/v1alpha1
kind: AgentToolPolicy
metadata: {name: fine, namespace: policy-status}
spec:
  rules:
  - {name: ask-deploys, match: 'tool.name == "deploy"', action: RequireApproval}
  - {name: audit-writes, match: 'tool.effect == "write"', action: Audit}
`} {
		if out, err := applyYAML(t, kubeconfig, doc); err != nil {
			t.Fatal(err, out)
		}
	}
	mgr, err := manager.New(env.Config, manager.Options{MetricsAddr: "0", SkipNameValidation: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the manager ended with %v", err)
		}
	})

	for _, c := range []struct {
		args []string
		want []string // READY, REASON, and words of MESSAGE
	}{
		{[]string{"clusteragenttoolpolicies", "stored-broken"}, []string{"False", "InvalidRule", "spec.rules[0].match:", "undefined", "'nmae'"}},
		{[]string{"agenttoolpolicies", "fine", "-n", "policy-status"}, []string{"True", "RulesCompiled", "2", "rules", "compiled:", "1", "RequireApproval,", "1", "Audit"}},
	} {
		var row []string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			out, err := testenv.Kubectl(kubeconfig, append([]string{"get", "-o", "wide", "--no-headers"}, c.args...)...)
			if err != nil {
				return false, nil
			}
			row = strings.Fields(out)
			return len(row) > 2 && row[1] == c.want[0] && row[2] == c.want[1], nil
		})
		if err != nil || !containsInOrder(row, c.want) {
			t.Errorf("kubectl get -o wide %s: %q, want READY, REASON and MESSAGE %q", strings.Join(c.args, " "), row, c.want)
		}
	}
}

// containsInOrder: every word of want begins a word of row, in that
// order (kubectl ends a message of several lines with "...").
func containsInOrder(row, want []string) bool {
	i := 0
	for _, w := range row {
		if i < len(want) && strings.HasPrefix(w, want[i]) {
			i++
		}
	}
	return i == len(want)
}
