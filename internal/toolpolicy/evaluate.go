package toolpolicy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	k8stypes "k8s.io/apimachinery/pkg/types"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// Policy kinds, as Match.PolicyKind names them.
const (
	KindCluster    = "ClusterAgentToolPolicy"
	KindNamespaced = "AgentToolPolicy"
)

// Policy is one ClusterAgentToolPolicy or AgentToolPolicy as the evaluator
// sees it. UID and Generation key the compiled-program cache: the same
// UID and generation are never compiled twice.
type Policy struct {
	Kind string
	// Namespace is empty for a ClusterAgentToolPolicy; an AgentToolPolicy
	// applies only to the runs in its Namespace.
	Namespace  string
	Name       string
	UID        k8stypes.UID
	Generation int64
	Rules      []arv1.ToolPolicyRule
}

// FromCluster returns the evaluator's view of a ClusterAgentToolPolicy.
func FromCluster(p *arv1.ClusterAgentToolPolicy) Policy {
	return Policy{Kind: KindCluster, Name: p.Name, UID: p.UID, Generation: p.Generation, Rules: p.Spec.Rules}
}

// FromNamespaced returns the evaluator's view of an AgentToolPolicy.
func FromNamespaced(p *arv1.AgentToolPolicy) Policy {
	return Policy{Kind: KindNamespaced, Namespace: p.Namespace, Name: p.Name, UID: p.UID, Generation: p.Generation, Rules: p.Spec.Rules}
}

// appliesTo says whether the policy governs the calls of runs in ns.
func (p *Policy) appliesTo(ns string) bool {
	if p.Kind == KindCluster {
		return true
	}
	return p.Namespace == ns
}

// Call is one tool call about to be made.
type Call struct {
	Tool Tool
	// Args is the call's JSON arguments (an object); empty means {}.
	Args json.RawMessage
	Run  Run
}

// Match is one rule that matched a call.
type Match struct {
	PolicyKind       string       `json:"policyKind"`
	PolicyNamespace  string       `json:"policyNamespace,omitempty"`
	Policy           string       `json:"policy"`
	PolicyUID        k8stypes.UID `json:"policyUID,omitempty"`
	PolicyGeneration int64        `json:"policyGeneration,omitempty"`
	Rule             string       `json:"rule"`
	// Action is the rule's action.
	Action arv1.ToolPolicyAction `json:"action"`
	// Message is the rule's message (empty when it has none).
	Message string `json:"message,omitempty"`
	// RequireReason is the rule's requireReason.
	RequireReason bool `json:"requireReason,omitempty"`
	// Error, when set, says why the rule counts as matched without its
	// match having been true: the match failed when evaluated, or the rule
	// does not compile (fail closed).
	Error string `json:"error,omitempty"`
}

// Decision is what the policies say about one call, and the record the
// journal keeps of it: JSON-serialisable and self-contained, so a restart
// re-applies the journaled decision instead of evaluating again against
// policies that may have changed since.
type Decision struct {
	// Tool is the tool called.
	Tool string `json:"tool"`
	// ArgsSHA256 is the hex SHA-256 of the arguments evaluated, so the
	// journal can tell which arguments (the model's, or an approver's
	// edit) the decision was made on.
	ArgsSHA256 string `json:"argsSHA256"`
	// Action is the strictest action of the matches; empty when no rule
	// matched (the blueprint alone decides).
	Action arv1.ToolPolicyAction `json:"action,omitempty"`
	// Message explains Action: under Deny it is what the model is told,
	// under RequireApproval what the approver is shown. It is the first
	// such match's message, or a sentence naming its policy and rule.
	Message string `json:"message,omitempty"`
	// RequireReason: an answer approving or denying the call must carry a
	// reason (some matched rule requires one).
	RequireReason bool `json:"requireReason,omitempty"`
	// Matches are every rule that matched, cluster policies first, then
	// the namespace's, each in name order, rules in their order.
	Matches []Match `json:"matches,omitempty"`
}

// Denied says whether the call must not be made.
func (d *Decision) Denied() bool { return d.Action == arv1.ToolPolicyDeny }

// NeedsApproval says whether the call must wait for a person's approval,
// whatever the blueprint or spec.yolo say.
func (d *Decision) NeedsApproval() bool { return d.Action == arv1.ToolPolicyRequireApproval }

// rank orders actions by strictness: Deny > RequireApproval > Audit > none.
func rank(a arv1.ToolPolicyAction) int {
	switch a {
	case arv1.ToolPolicyDeny:
		return 3
	case arv1.ToolPolicyRequireApproval:
		return 2
	case arv1.ToolPolicyAudit:
		return 1
	}
	return 0
}

// Strictest returns the stricter of two actions (Deny > RequireApproval >
// Audit > ""), for combining a policy's decision with another source's.
func Strictest(a, b arv1.ToolPolicyAction) arv1.ToolPolicyAction {
	if rank(b) > rank(a) {
		return b
	}
	return a
}

// compiledRule is a rule with its program, or the error compiling it.
type compiledRule struct {
	rule arv1.ToolPolicyRule
	prg  cel.Program
	err  error
}

type compiledPolicy struct {
	generation int64
	rules      []compiledRule
}

// maxCached bounds the program cache; past it the cache starts over
// (policies are few, so this only matters if Forget is never called).
const maxCached = 4096

// Evaluator evaluates calls against policies, compiling each policy's
// rules once per UID and generation. It is safe for concurrent use; the
// zero value is not: use NewEvaluator.
type Evaluator struct {
	mu    sync.RWMutex
	cache map[k8stypes.UID]*compiledPolicy
}

// NewEvaluator returns an Evaluator with an empty program cache.
func NewEvaluator() *Evaluator {
	return &Evaluator{cache: map[k8stypes.UID]*compiledPolicy{}}
}

// Forget drops a deleted policy's programs from the cache.
func (e *Evaluator) Forget(uid k8stypes.UID) {
	e.mu.Lock()
	delete(e.cache, uid)
	e.mu.Unlock()
}

// compiled returns p's programs, from the cache when its UID and
// generation were compiled before. A policy without a UID is compiled
// every time and not cached.
func (e *Evaluator) compiled(p *Policy) *compiledPolicy {
	if p.UID != "" {
		e.mu.RLock()
		c := e.cache[p.UID]
		e.mu.RUnlock()
		if c != nil && c.generation == p.Generation {
			return c
		}
	}
	c := &compiledPolicy{generation: p.Generation, rules: make([]compiledRule, len(p.Rules))}
	for i, r := range p.Rules {
		prg, err := compileMatch(r.Match)
		c.rules[i] = compiledRule{rule: r, prg: prg, err: err}
	}
	if p.UID != "" {
		e.mu.Lock()
		if len(e.cache) >= maxCached {
			clear(e.cache)
		}
		e.cache[p.UID] = c
		e.mu.Unlock()
	}
	return c
}

// Evaluate returns what policies say about call: every rule of the
// cluster policies and of the policies in the run's namespace (policies
// of other namespaces are skipped) is evaluated, and the strictest action
// of those that match is the decision's. Policies may come in any order;
// the matches are recorded in a fixed one.
func (e *Evaluator) Evaluate(policies []Policy, call Call) Decision {
	sum := sha256.Sum256(call.Args)
	d := Decision{Tool: call.Tool.Name, ArgsSHA256: hex.EncodeToString(sum[:])}

	order := make([]*Policy, 0, len(policies))
	for i := range policies {
		if policies[i].appliesTo(call.Run.Namespace) {
			order = append(order, &policies[i])
		}
	}
	if len(order) == 0 {
		return d
	}
	slices.SortStableFunc(order, func(a, b *Policy) int {
		if (a.Kind == KindCluster) != (b.Kind == KindCluster) {
			if a.Kind == KindCluster {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})

	vars, argsErr := activation(call)
	for _, p := range order {
		c := e.compiled(p)
		for i := range c.rules {
			r := &c.rules[i]
			matched, err := r.eval(vars, argsErr)
			if !matched {
				continue
			}
			m := Match{
				PolicyKind: p.Kind, PolicyNamespace: p.Namespace, Policy: p.Name,
				PolicyUID: p.UID, PolicyGeneration: p.Generation,
				Rule: r.rule.Name, Action: r.rule.Action, Message: r.rule.Message, RequireReason: r.rule.RequireReason,
			}
			if err != nil {
				m.Error = err.Error()
			}
			d.Matches = append(d.Matches, m)
			if rank(m.Action) > rank(d.Action) {
				d.Action, d.Message = m.Action, m.explain()
			}
			d.RequireReason = d.RequireReason || m.RequireReason
		}
	}
	return d
}

// explain is the rule's message, or a sentence naming the policy and rule.
// A match's Error is not part of it: it is journaled with the match, and
// every surface shows it after the rule's name (journal.PolicyDecision's
// Cause), whether or not the rule has a message.
func (m *Match) explain() string {
	if m.Message != "" {
		return m.Message
	}
	verb := map[arv1.ToolPolicyAction]string{
		arv1.ToolPolicyDeny:            "denied",
		arv1.ToolPolicyRequireApproval: "needs approval",
		arv1.ToolPolicyAudit:           "audited",
	}[m.Action]
	where := m.Policy
	if m.PolicyNamespace != "" {
		where = m.PolicyNamespace + "/" + m.Policy
	}
	return fmt.Sprintf("this tool call %s under %s %s, rule %s", verb, m.PolicyKind, where, m.Rule)
}

// errArgsNotJSON makes every rule match a call whose arguments do not
// parse: what they would have matched cannot be known.
var errArgsNotJSON = errors.New("the call's arguments are not JSON")

// activation binds the call to the CEL variables, once per call.
func activation(call Call) (cel.Activation, error) {
	var args any = map[string]any{}
	var argsErr error
	if len(call.Args) > 0 {
		if err := json.Unmarshal(call.Args, &args); err != nil {
			argsErr = fmt.Errorf("%w: %v", errArgsNotJSON, err)
		}
	}
	if call.Run.Labels == nil {
		call.Run.Labels = map[string]string{}
	}
	vars, err := cel.NewActivation(map[string]any{"tool": call.Tool, "run": call.Run, "args": args})
	if err != nil {
		// NewActivation refuses only bindings that are not a map.
		panic(err)
	}
	return vars, argsErr
}

// eval says whether the rule matches: its match was true, or it could not
// be decided (the rule does not compile, the arguments do not parse, the
// evaluation failed or ran out of cost), in which case err says why.
func (r *compiledRule) eval(vars cel.Activation, argsErr error) (bool, error) {
	switch {
	case r.err != nil:
		return true, fmt.Errorf("the rule does not compile: %w", r.err)
	case argsErr != nil:
		return true, argsErr
	}
	out, _, err := r.prg.Eval(vars)
	if err != nil {
		return true, err
	}
	if b, ok := out.(types.Bool); ok {
		return bool(b), nil
	}
	return true, fmt.Errorf("the match evaluated to %s, not a bool", out.Type())
}
