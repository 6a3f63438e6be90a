package toolpolicy

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	k8stypes "k8s.io/apimachinery/pkg/types"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

func rule(name, match string, action arv1.ToolPolicyAction) arv1.ToolPolicyRule {
	return arv1.ToolPolicyRule{Name: name, Match: match, Action: action}
}

func cluster(name string, rules ...arv1.ToolPolicyRule) Policy {
	return Policy{Kind: KindCluster, Name: name, UID: k8stypes.UID("uid-" + name), Generation: 1, Rules: rules}
}

func namespaced(ns, name string, rules ...arv1.ToolPolicyRule) Policy {
	return Policy{Kind: KindNamespaced, Namespace: ns, Name: name, UID: k8stypes.UID("uid-" + ns + "-" + name), Generation: 1, Rules: rules}
}

func call(tool, args, ns string) Call {
	return Call{
		Tool: Tool{Name: tool, Effect: "write", Server: "tickets"},
		Args: json.RawMessage(args),
		Run:  Run{Namespace: ns, Labels: map[string]string{"team": "payments"}, Agent: "triage", Stage: "act"},
	}
}

// rules names the matched rules, "policy/rule" each.
func rules(d Decision) []string {
	var out []string
	for _, m := range d.Matches {
		out = append(out, m.Policy+"/"+m.Rule)
	}
	return out
}

// The example: create_ticket with priority p0 is denied outside
// namespace ops, and allowed inside it.
const noP0 = `tool.name == "create_ticket" && args.priority == "p0" && run.namespace != "ops"`

func TestEachAction(t *testing.T) {
	e := NewEvaluator()
	for _, a := range []arv1.ToolPolicyAction{arv1.ToolPolicyDeny, arv1.ToolPolicyRequireApproval, arv1.ToolPolicyAudit} {
		t.Run(string(a), func(t *testing.T) {
			r := rule("r", noP0, a)
			r.Message = "p0 tickets are opened by the ops team"
			ps := []Policy{cluster("p-"+strings.ToLower(string(a)), r)}

			d := e.Evaluate(ps, call("create_ticket", `{"priority":"p0","title":"db down"}`, "team-a"))
			if d.Action != a || d.Message != r.Message || len(d.Matches) != 1 {
				t.Fatalf("p0 in team-a: %+v", d)
			}
			if d.Denied() != (a == arv1.ToolPolicyDeny) || d.NeedsApproval() != (a == arv1.ToolPolicyRequireApproval) {
				t.Errorf("Denied()=%v NeedsApproval()=%v for %s", d.Denied(), d.NeedsApproval(), a)
			}
			m := d.Matches[0]
			if m.PolicyKind != KindCluster || m.Policy != ps[0].Name || m.Rule != "r" || m.Action != a || m.Error != "" {
				t.Errorf("match %+v", m)
			}
			for _, c := range []Call{
				call("create_ticket", `{"priority":"p0","title":"db down"}`, "ops"),
				call("create_ticket", `{"priority":"p2"}`, "team-a"),
				call("list_tickets", `{}`, "team-a"),
			} {
				if d := e.Evaluate(ps, c); d.Action != "" || len(d.Matches) != 0 {
					t.Errorf("%s %s in %s: %+v, want no match", c.Tool.Name, c.Args, c.Run.Namespace, d)
				}
			}
		})
	}
}

func TestStrictestWins(t *testing.T) {
	tickets := `tool.name == "create_ticket"`
	audit := rule("audit-tickets", tickets, arv1.ToolPolicyAudit)
	ask := rule("ask-tickets", tickets, arv1.ToolPolicyRequireApproval)
	ask.RequireReason = true
	deny := rule("deny-p0", noP0, arv1.ToolPolicyDeny)
	deny.Message = "no p0 tickets outside ops"
	ps := []Policy{
		namespaced("team-a", "tenant", audit),
		cluster("b-admin", deny),
		cluster("a-admin", ask),
	}
	e := NewEvaluator()

	d := e.Evaluate(ps, call("create_ticket", `{"priority":"p0"}`, "team-a"))
	if d.Action != arv1.ToolPolicyDeny || d.Message != deny.Message || !d.RequireReason {
		t.Fatalf("decision %+v", d)
	}
	// Cluster policies first, in name order, then the namespace's.
	if got, want := rules(d), []string{"a-admin/ask-tickets", "b-admin/deny-p0", "tenant/audit-tickets"}; !reflect.DeepEqual(got, want) {
		t.Errorf("matches %v, want %v", got, want)
	}
	// The order the policies come in does not change the record.
	rev := []Policy{ps[2], ps[1], ps[0]}
	if d2 := e.Evaluate(rev, call("create_ticket", `{"priority":"p0"}`, "team-a")); !reflect.DeepEqual(d, d2) {
		t.Errorf("reordered policies decided\n%+v\nnot\n%+v", d2, d)
	}

	d = e.Evaluate(ps, call("create_ticket", `{"priority":"p3"}`, "team-a"))
	if d.Action != arv1.ToolPolicyRequireApproval || len(d.Matches) != 2 || !d.RequireReason {
		t.Fatalf("p3: %+v", d)
	}
	if !strings.Contains(d.Message, "a-admin") || !strings.Contains(d.Message, "ask-tickets") {
		t.Errorf("a rule without a message is explained by its policy and rule, got %q", d.Message)
	}

	if got := Strictest(arv1.ToolPolicyAudit, arv1.ToolPolicyDeny); got != arv1.ToolPolicyDeny {
		t.Errorf("Strictest(Audit, Deny) = %s", got)
	}
	if got := Strictest(arv1.ToolPolicyRequireApproval, ""); got != arv1.ToolPolicyRequireApproval {
		t.Errorf("Strictest(RequireApproval, none) = %s", got)
	}
}

func TestNamespacedPolicyAppliesOnlyInItsNamespace(t *testing.T) {
	ps := []Policy{namespaced("team-a", "no-tickets", rule("deny", `tool.name == "create_ticket"`, arv1.ToolPolicyDeny))}
	e := NewEvaluator()
	if d := e.Evaluate(ps, call("create_ticket", `{}`, "team-a")); !d.Denied() || d.Matches[0].PolicyNamespace != "team-a" || d.Matches[0].PolicyKind != KindNamespaced {
		t.Errorf("team-a: %+v", d)
	}
	if d := e.Evaluate(ps, call("create_ticket", `{}`, "team-b")); d.Action != "" {
		t.Errorf("team-a's policy applied in team-b: %+v", d)
	}
}

func TestVariables(t *testing.T) {
	e := NewEvaluator()
	c := call("create_ticket", `{"priority":"p0","count":3,"tags":["db","prod"],"owner":{"team":"sre"}}`, "team-a")
	for _, match := range []string{
		`args.priority == "p0"`,
		`args.count == 3 && args.count > 2.5`,
		`"prod" in args.tags`,
		`args.owner.team == "sre"`,
		`args.?missing.orValue("none") == "none"`,
		`!has(args.missing)`,
		`run.labels["team"] == "payments"`,
		`run.namespace == "team-a" && run.agent == "triage" && run.stage == "act"`,
		`tool.effect == "write" && tool.server == "tickets"`,
		`tool.name.startsWith("create_") && args.priority.lowerAscii() == "p0"`,
	} {
		ps := []Policy{cluster("p", rule("r", match, arv1.ToolPolicyAudit))}
		d := e.Evaluate(ps, c)
		if len(d.Matches) != 1 || d.Matches[0].Error != "" {
			t.Errorf("%s: %+v, want a clean match", match, d)
		}
		// The negation does not match: the expression was really evaluated.
		ps[0].Rules[0].Match = "!(" + match + ")"
		ps[0].UID = ""
		if d := e.Evaluate(ps, c); len(d.Matches) != 0 {
			t.Errorf("!(%s) matched: %+v", match, d)
		}
	}
}

func TestRuntimeErrorFailsClosed(t *testing.T) {
	e := NewEvaluator()
	deny := rule("deny-p0", `tool.name == "create_ticket" && args.priority == "p0"`, arv1.ToolPolicyDeny)
	ps := []Policy{cluster("p", deny)}

	// No priority key: the match cannot be decided, so the rule applies.
	d := e.Evaluate(ps, call("create_ticket", `{"title":"x"}`, "team-a"))
	if !d.Denied() || len(d.Matches) != 1 || !strings.Contains(d.Matches[0].Error, "priority") {
		t.Fatalf("missing key: %+v", d)
	}
	// The message names the rule; the error stays on the match, which
	// every surface shows after the rule's name (journal's Cause).
	if !strings.Contains(d.Message, "rule deny-p0") || strings.Contains(d.Message, "priority") {
		t.Errorf("message %q: want the rule named, its match's error left to the match", d.Message)
	}
	// A call the && already rules out does not reach the missing key.
	if d := e.Evaluate(ps, call("list_tickets", `{}`, "team-a")); d.Action != "" {
		t.Errorf("list_tickets: %+v", d)
	}
	// Arguments that do not parse match every rule.
	if d := e.Evaluate(ps, call("list_tickets", `{"priority":`, "team-a")); !d.Denied() || !strings.Contains(d.Matches[0].Error, "not JSON") {
		t.Errorf("unparseable arguments: %+v", d)
	}
	// A dyn match that is not a bool at run time.
	ps = []Policy{cluster("q", rule("urgent", `args.urgent`, arv1.ToolPolicyRequireApproval))}
	if d := e.Evaluate(ps, call("x", `{"urgent":"yes"}`, "team-a")); !d.NeedsApproval() || !strings.Contains(d.Matches[0].Error, "not a bool") {
		t.Errorf("string-valued match: %+v", d)
	}
	if d := e.Evaluate(ps, call("x", `{"urgent":false}`, "team-a")); d.Action != "" {
		t.Errorf("urgent=false: %+v", d)
	}
	// A stored rule that does not compile applies to every call.
	ps = []Policy{cluster("r", rule("broken", `tool.nmae == "x"`, arv1.ToolPolicyDeny))}
	if d := e.Evaluate(ps, call("x", `{}`, "team-a")); !d.Denied() || !strings.Contains(d.Matches[0].Error, "does not compile") {
		t.Errorf("broken rule: %+v", d)
	}
}

func TestRuntimeCostLimit(t *testing.T) {
	// Estimated within budget for 64 KiB of arguments, but given a list of
	// a million elements the evaluation runs out of cost and fails closed.
	match := `args.items.exists(x, x == "never")`
	if errs := Validate(&arv1.AgentToolPolicySpec{Rules: []arv1.ToolPolicyRule{rule("r", match, arv1.ToolPolicyDeny)}}); len(errs) != 0 {
		t.Fatalf("refused: %v", errs)
	}
	ps := []Policy{cluster("p", rule("r", match, arv1.ToolPolicyDeny))}
	e := NewEvaluator()
	if d := e.Evaluate(ps, call("x", `{"items":["a","b"]}`, "ns")); d.Action != "" {
		t.Fatalf("small list: %+v", d)
	}
	big := `{"items":[` + strings.Repeat(`"a",`, 1_000_000) + `"a"]}`
	d := e.Evaluate(ps, call("x", big, "ns"))
	if !d.Denied() || !strings.Contains(d.Matches[0].Error, "cost") {
		t.Fatalf("million items: %+v", d)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		match, want string
	}{
		{`tool.nmae == "x"`, "undefined field 'nmae'"},
		{`tool.name ==`, "Syntax error"},
		{`nope == 1`, "undeclared reference to 'nope'"},
		{`tool.name`, "must be a bool expression"},
		{`args.a.all(x, args.b.all(y, args.c.all(z, x == y && y == z)))`, "exceeds the budget"},
		{`args.a.all(x, args.b.exists(y, x == y))`, "exceeds the budget"},
	} {
		spec := &arv1.AgentToolPolicySpec{Rules: []arv1.ToolPolicyRule{
			rule("fine", `tool.name == "x"`, arv1.ToolPolicyAudit),
			rule("bad", c.match, arv1.ToolPolicyDeny),
		}}
		errs := Validate(spec)
		if len(errs) != 1 {
			t.Errorf("%s: %d errors %v, want 1", c.match, len(errs), errs)
			continue
		}
		if errs[0].Field != "spec.rules[1].match" || !strings.Contains(errs[0].Error(), c.want) || !strings.Contains(errs[0].Error(), `rule "bad"`) {
			t.Errorf("%s: %q, want spec.rules[1].match and %q", c.match, errs[0].Error(), c.want)
		}
	}
	ok := &arv1.AgentToolPolicySpec{Rules: []arv1.ToolPolicyRule{
		rule("p0", noP0, arv1.ToolPolicyDeny),
		rule("labels", `run.labels.exists(k, k.startsWith("team")) && args.tags.exists(t, t == "prod")`, arv1.ToolPolicyAudit),
	}}
	if errs := Validate(ok); len(errs) != 0 {
		t.Errorf("valid rules refused: %v", errs)
	}
}

func TestProgramsAreCachedPerGeneration(t *testing.T) {
	e := NewEvaluator()
	p := cluster("p", rule("r", `tool.name == "a"`, arv1.ToolPolicyDeny))
	c := call("a", `{}`, "ns")
	e.Evaluate([]Policy{p}, c)
	first := e.cache[p.UID]
	if first == nil {
		t.Fatal("nothing cached")
	}
	e.Evaluate([]Policy{p}, c)
	if e.cache[p.UID] != first {
		t.Error("the same generation was compiled again")
	}
	// A new generation with a new match is compiled anew and used.
	p.Generation, p.Rules = 2, []arv1.ToolPolicyRule{rule("r", `tool.name == "b"`, arv1.ToolPolicyDeny)}
	if d := e.Evaluate([]Policy{p}, c); d.Action != "" {
		t.Errorf("generation 2 decided with generation 1's program: %+v", d)
	}
	if e.cache[p.UID] == first {
		t.Error("generation 2 not recompiled")
	}
	e.Forget(p.UID)
	if _, ok := e.cache[p.UID]; ok {
		t.Error("Forget left the programs")
	}
}

func TestDecisionRoundTripsThroughJSON(t *testing.T) {
	r := rule("deny-p0", noP0, arv1.ToolPolicyDeny)
	r.Message, r.RequireReason = "no p0 outside ops", true
	d := NewEvaluator().Evaluate([]Policy{cluster("admin", r)}, call("create_ticket", `{"priority":"p0"}`, "team-a"))
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var back Decision
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, d) {
		t.Fatalf("round trip\n%s\ngave %+v", b, back)
	}
	for _, want := range []string{`"action":"Deny"`, `"policyKind":"ClusterAgentToolPolicy"`, `"policy":"admin"`, `"rule":"deny-p0"`, `"message":"no p0 outside ops"`, `"policyUID":"uid-admin"`, `"argsSHA256":"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("record %s lacks %s", b, want)
		}
	}
}

func TestReadyCondition(t *testing.T) {
	spec := &arv1.AgentToolPolicySpec{Rules: []arv1.ToolPolicyRule{
		rule("a", noP0, arv1.ToolPolicyDeny),
		rule("b", `tool.name == "deploy"`, arv1.ToolPolicyRequireApproval),
		rule("c", `tool.effect == "write"`, arv1.ToolPolicyDeny),
	}}
	c := ReadyCondition(spec, 4)
	if c.Type != arv1.ConditionReady || c.Status != "True" || c.Reason != arv1.ReasonRulesCompiled || c.ObservedGeneration != 4 ||
		c.Message != "3 rules compiled: 2 Deny, 1 RequireApproval" {
		t.Errorf("valid rules: %+v", c)
	}
	spec.Rules[1].Match = `tool.nmae == "deploy"`
	c = ReadyCondition(spec, 5)
	if c.Status != "False" || c.Reason != arv1.ReasonInvalidRule || !strings.Contains(c.Message, "spec.rules[1].match") || !strings.Contains(c.Message, "undefined field 'nmae'") {
		t.Errorf("invalid rule: %+v", c)
	}
}
