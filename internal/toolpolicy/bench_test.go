package toolpolicy

import (
	"fmt"
	"testing"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// benchPolicies is a realistic set: three cluster policies and two
// namespaced ones (team-a, team-b), ten rules in all, over tool names,
// arguments (keys, nested lists), labels and stages.
func benchPolicies() []Policy {
	r := func(name, match string, a arv1.ToolPolicyAction) arv1.ToolPolicyRule {
		return arv1.ToolPolicyRule{Name: name, Match: match, Action: a, Message: name + " says no"}
	}
	return []Policy{
		cluster("tickets",
			r("no-p0-outside-ops", `tool.name == "create_ticket" && args.?priority.orValue("") == "p0" && run.namespace != "ops"`, arv1.ToolPolicyDeny),
			r("audit-ticket-writes", `tool.server == "tickets" && tool.effect == "write"`, arv1.ToolPolicyAudit),
		),
		cluster("infra",
			r("ask-prod-deploys", `tool.name == "deploy" && args.?env.orValue("") == "prod"`, arv1.ToolPolicyRequireApproval),
			r("no-deletes", `tool.name.startsWith("delete_") && !(run.labels.?tier.orValue("") == "admin")`, arv1.ToolPolicyDeny),
			r("no-secret-paths", `has(args.path) && args.path.matches("^/(etc|var/run/secrets)/")`, arv1.ToolPolicyDeny),
		),
		cluster("money",
			r("ask-big-refunds", `tool.name == "refund" && double(args.?amount.orValue(0)) > 500.0`, arv1.ToolPolicyRequireApproval),
		),
		namespaced("team-a", "tenant-a",
			r("ask-in-review", `run.stage == "review" && tool.effect != "read"`, arv1.ToolPolicyRequireApproval),
			r("audit-prod-tags", `has(args.tags) && args.tags.exists(t, t == "prod")`, arv1.ToolPolicyAudit),
		),
		namespaced("team-b", "tenant-b",
			r("no-external-mail", `tool.name == "send_email" && !args.?to.orValue("").endsWith("@example.com")`, arv1.ToolPolicyDeny),
			r("audit-agent", `run.agent == "triage" && run.labels["team"] == "payments"`, arv1.ToolPolicyAudit),
		),
	}
}

// benchCalls are n distinct calls across four namespaces and a dozen
// tools, with arguments of a few hundred bytes.
func benchCalls(n int) []Call {
	tools := []Tool{
		{Name: "create_ticket", Effect: "write", Server: "tickets"},
		{Name: "list_tickets", Effect: "read", Server: "tickets"},
		{Name: "deploy", Effect: "write", Server: "infra"},
		{Name: "delete_branch", Effect: "write", Server: "git"},
		{Name: "read_file", Effect: "read", Server: "fs"},
		{Name: "refund", Effect: "write", Server: "billing"},
		{Name: "send_email", Effect: "write", Server: "mail"},
		{Name: "search", Effect: "read", Server: "web"},
	}
	namespaces := []string{"team-a", "team-b", "ops", "team-c"}
	stages := []string{"plan", "act", "review"}
	calls := make([]Call, n)
	for i := range calls {
		args := fmt.Sprintf(`{"priority":"p%d","env":"%s","path":"/work/src/file%d.go","amount":%d,"to":"user%d@%s","tags":["t%d","%s","x"],"title":"call %d: a title of some length to look like a real ticket","body":"%0200d"}`,
			i%4, []string{"dev", "prod"}[i%2], i, i%1000, i, []string{"example.com", "elsewhere.org"}[i%2], i, []string{"dev", "prod"}[i%3%2], i, i)
		calls[i] = Call{
			Tool: tools[i%len(tools)],
			Args: []byte(args),
			Run: Run{
				Namespace: namespaces[i%len(namespaces)],
				Labels:    map[string]string{"team": []string{"payments", "search"}[i%2], "app": fmt.Sprintf("app-%d", i%17)},
				Agent:     []string{"triage", "coder"}[i%2],
				Stage:     stages[i%len(stages)],
			},
		}
	}
	return calls
}

// BenchmarkEvaluate10000Calls evaluates 10,000 distinct calls against five
// policies with ten rules; ns/call is what a policy check adds to one tool
// call (issue 28's bound: under 1 ms).
func BenchmarkEvaluate10000Calls(b *testing.B) {
	ps := benchPolicies()
	calls := benchCalls(10_000)
	e := NewEvaluator()
	actions := map[arv1.ToolPolicyAction]int{}
	for _, c := range calls { // compiles once, and checks the set decides something
		actions[e.Evaluate(ps, c).Action]++
	}
	for _, a := range []arv1.ToolPolicyAction{"", arv1.ToolPolicyAudit, arv1.ToolPolicyRequireApproval, arv1.ToolPolicyDeny} {
		if actions[a] == 0 {
			b.Fatalf("no call got %q: %v; the benchmark would not exercise every outcome", a, actions)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for _, c := range calls {
			e.Evaluate(ps, c)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(calls)), "ns/call")
}
