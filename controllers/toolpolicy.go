package controllers

// Tool policies: the ClusterAgentToolPolicies and the run's namespace's
// AgentToolPolicies, read from the informer cache and evaluated when a
// tool call is about to start; the decision is journaled (so a restart
// applies it as made), then shown as an Event and counted.

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/metrics"
	"github.com/agentrun-dev/agentrun-operator/internal/toolpolicy"
)

// toolPolicies reads and evaluates the policies.
type toolPolicies struct {
	reader client.Reader
	eval   *toolpolicy.Evaluator
	// cluster: ClusterAgentToolPolicies apply. Off in a namespace-scoped
	// install, whose Roles cannot list them: a cluster-scoped informer
	// would never sync and hold every run that reads it.
	cluster bool
}

func newToolPolicies(reader client.Reader, namespaces []string) *toolPolicies {
	return &toolPolicies{reader: reader, eval: toolpolicy.NewEvaluator(), cluster: len(namespaces) == 0}
}

// handlers drop a deleted policy's compiled rules. Registered with the
// manager, they also start the policies' informers with it, so the first
// tool call does not wait for a list.
func (p *toolPolicies) handlers() []InformerHandler {
	hs := []InformerHandler{{Object: &arv1.AgentToolPolicy{}, Handler: toolscache.ResourceEventHandlerFuncs{DeleteFunc: p.forget}}}
	if p.cluster {
		hs = append(hs, InformerHandler{Object: &arv1.ClusterAgentToolPolicy{}, Handler: toolscache.ResourceEventHandlerFuncs{DeleteFunc: p.forget}})
	}
	return hs
}

func (p *toolPolicies) forget(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if o, ok := obj.(client.Object); ok {
		p.eval.Forget(o.GetUID())
	}
}

// applying lists the policies that apply to the runs of ns, from the
// cache.
func (p *toolPolicies) applying(ctx context.Context, ns string) ([]toolpolicy.Policy, error) {
	var out []toolpolicy.Policy
	if p.cluster {
		var cl arv1.ClusterAgentToolPolicyList
		if err := p.reader.List(ctx, &cl); err != nil {
			return nil, fmt.Errorf("listing ClusterAgentToolPolicies: %w", err)
		}
		for i := range cl.Items {
			out = append(out, toolpolicy.FromCluster(&cl.Items[i]))
		}
	}
	var nl arv1.AgentToolPolicyList
	if err := p.reader.List(ctx, &nl, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("listing AgentToolPolicies: %w", err)
	}
	for i := range nl.Items {
		out = append(out, toolpolicy.FromNamespaced(&nl.Items[i]))
	}
	return out, nil
}

// policyFacts evaluates the policies on the run's next tool call when it
// is about to be settled: its tool is known (a built-in, or listed by its
// server, which can be used) and no decision is journaled for it yet. A
// call no rule matches leaves Facts.Policy nil: the blueprint decides.
func (ts *toolSettler) policyFacts(ctx context.Context, run *arv1.AgentRun, f *facts) error {
	h, t := f.State.HeadCall(), f.Tool
	if h == nil || h.Intent != nil || h.Policy != nil || t == nil || !t.Known || t.Pending || t.Setup != nil {
		return nil
	}
	ps, err := ts.policies.applying(ctx, run.Namespace)
	if err != nil || len(ps) == 0 {
		return err
	}
	d := ts.policies.eval.Evaluate(ps, toolpolicy.Call{
		Tool: toolpolicy.Tool{Name: h.Name, Effect: t.Effect, Server: t.Server},
		Args: json.RawMessage(h.Arguments),
		Run:  toolpolicy.Run{Namespace: run.Namespace, Labels: run.Labels, Agent: run.Spec.Agent, Stage: f.State.Stage},
	})
	if d.Action != "" {
		f.Policy = journalDecision(&d)
	}
	return nil
}

// journalDecision is the journal's record of d, naming the rule that
// decided (the first match of the strictest action).
func journalDecision(d *toolpolicy.Decision) *journal.PolicyDecision {
	out := &journal.PolicyDecision{Action: string(d.Action), Message: d.Message, RequireReason: d.RequireReason, ArgsSHA256: d.ArgsSHA256}
	decided := false
	for _, m := range d.Matches {
		out.Matches = append(out.Matches, journal.PolicyMatch{
			PolicyKind: m.PolicyKind, PolicyNamespace: m.PolicyNamespace, Policy: m.Policy, Rule: m.Rule, Action: string(m.Action), Error: m.Error,
		})
		if !decided && m.Action == d.Action {
			out.PolicyKind, out.PolicyNamespace, out.Policy, out.Rule = m.PolicyKind, m.PolicyNamespace, m.Policy, m.Rule
			decided = true
		}
	}
	return out
}

// Event reasons of tool-policy decisions, one per action.
const (
	// ReasonToolPolicyDenied (Warning): a policy denied a tool call; the
	// model was told the policy's message.
	ReasonToolPolicyDenied = "ToolPolicyDenied"
	// ReasonToolPolicyRequiresApproval (Warning): a policy holds a tool
	// call for a person's approval.
	ReasonToolPolicyRequiresApproval = "ToolPolicyRequiresApproval"
	// ReasonToolPolicyAudited (Normal): a policy let a tool call through,
	// on record.
	ReasonToolPolicyAudited = "ToolPolicyAudited"
)

// policyDecided reports a journaled decision: an Event on the run naming
// the policy and rule, and the metric counting every rule that matched.
func (ts *toolSettler) policyDecided(run *arv1.AgentRun, tool string, d *journal.PolicyDecision) {
	typ, reason, verb := corev1.EventTypeWarning, ReasonToolPolicyDenied, "denied"
	switch d.Action {
	case journal.PolicyRequireApproval:
		reason, verb = ReasonToolPolicyRequiresApproval, "held for approval"
	case journal.PolicyAudit:
		typ, reason, verb = corev1.EventTypeNormal, ReasonToolPolicyAudited, "audited"
	}
	note := fmt.Sprintf("Tool call %s %s by %s", tool, verb, d.Cause())
	if d.Message != "" {
		note += ": " + d.Message
	}
	ts.recorder.Eventf(run, nil, typ, reason, "ToolPolicy", "%s", clipTo(note, 1024))
	for _, m := range d.Matches {
		policy := m.Policy
		if m.PolicyNamespace != "" {
			policy = m.PolicyNamespace + "/" + m.Policy
		}
		metrics.ToolPolicyDecisions.WithLabelValues(policy, m.Rule, m.Action).Inc()
	}
}
