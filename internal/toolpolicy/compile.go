// Package toolpolicy decides what the cluster's tool policies
// (ClusterAgentToolPolicy, AgentToolPolicy) say about one tool call,
// immediately before it is made: each rule's CEL match is evaluated over
// the call (tool, args, run) and the strictest action of the rules that
// match wins (Deny, then RequireApproval, then Audit).
//
// Rules are compiled once per policy generation (Evaluator caches the
// programs) and bounded twice: a static worst-case cost estimate above
// MaxEstimatedCost is refused when the rule is compiled (so at apply time,
// by the admission webhook), and every evaluation stops at MaxRuntimeCost.
//
// Policies fail closed: a match that fails when evaluated (a missing key in
// args, a type mismatch, the runtime cost limit) counts as matched, as does
// a stored rule that does not compile (one admitted before admission
// checked it). A policy that cannot be evaluated thus denies (or asks)
// rather than silently allowing the calls it was written to stop; the
// match's Error says why, and the policy's Ready condition shows the rule.
//
// The package is pure: no API server, no controller-runtime. The
// reconciler lists the policies, calls Evaluate and journals the Decision
// it returns, so a restart replays the journaled decision instead of
// evaluating again against policies that may have changed.
package toolpolicy

import (
	"fmt"
	"reflect"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/ext"
	"k8s.io/apimachinery/pkg/util/validation/field"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// Cost bounds. CEL's cost units count the work of an expression (about one
// per variable access, comparison or list element visited); Kubernetes
// bounds its own CEL validation rules with the same figures.
const (
	// MaxEstimatedCost is the ceiling on a rule's static worst-case cost
	// estimate: a rule whose estimate is higher is refused when compiled.
	// The estimate assumes the sizes below.
	MaxEstimatedCost = 1_000_000
	// MaxRuntimeCost stops one rule's evaluation over one call; a rule
	// stopped by it counts as matched (fail closed).
	MaxRuntimeCost = 1_000_000
	// MaxArgsBytes is the size the estimate assumes for args and for any
	// list, map or string within them: 64 KiB of JSON. Larger arguments
	// are still evaluated, bounded by MaxRuntimeCost.
	MaxArgsBytes = 64 << 10
	// maxNameLength bounds tool.*, run.namespace, run.agent and run.stage
	// in the estimate (a Kubernetes name's length).
	maxNameLength = 253
	// maxLabels and maxLabelLength bound run.labels in the estimate.
	maxLabels      = 256
	maxLabelLength = 317
)

// Tool is the `tool` variable: the tool being called.
type Tool struct {
	// Name is the tool's name as the model calls it ("create_ticket").
	Name string `cel:"name" json:"name"`
	// Effect is the tool's declared effect: read, idempotent or write.
	Effect string `cel:"effect" json:"effect,omitempty"`
	// Server is the MCP server the tool comes from; empty for built-ins.
	Server string `cel:"server" json:"server,omitempty"`
}

// Run is the `run` variable: the AgentRun making the call.
type Run struct {
	Namespace string            `cel:"namespace" json:"namespace"`
	Labels    map[string]string `cel:"labels" json:"labels,omitempty"`
	// Agent is the run's spec.agent (its blueprint).
	Agent string `cel:"agent" json:"agent,omitempty"`
	// Stage is the blueprint stage the call is made from.
	Stage string `cel:"stage" json:"stage,omitempty"`
}

// env is the one CEL environment every rule compiles in: safe for
// concurrent use, built once.
var env = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		ext.NativeTypes(reflect.TypeFor[Tool](), reflect.TypeFor[Run](), ext.ParseStructTags(true)),
		cel.Variable("tool", cel.ObjectType("toolpolicy.Tool")),
		cel.Variable("run", cel.ObjectType("toolpolicy.Run")),
		cel.Variable("args", cel.DynType),
		cel.OptionalTypes(),
		ext.Strings(),
	)
})

// compileMatch compiles one rule's match into a program bounded by
// MaxRuntimeCost, or says why it cannot be: a CEL syntax or type error, a
// result that cannot be a bool, or a worst-case cost above
// MaxEstimatedCost.
func compileMatch(match string) (cel.Program, error) {
	e, err := env()
	if err != nil {
		return nil, fmt.Errorf("building the CEL environment: %w", err)
	}
	ast, iss := e.Compile(match)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
		return nil, fmt.Errorf("a match must be a bool expression, this one is a %s", t)
	}
	est, err := e.EstimateCost(ast, sizes{})
	if err != nil {
		return nil, fmt.Errorf("estimating the cost: %w", err)
	}
	if est.Max > MaxEstimatedCost {
		return nil, fmt.Errorf("the estimated worst-case cost %d exceeds the budget of %d (assuming arguments of %d bytes): bound the lists it iterates, or nest fewer comprehensions",
			est.Max, MaxEstimatedCost, MaxArgsBytes)
	}
	return e.Program(ast, cel.CostLimit(MaxRuntimeCost), cel.EvalOptions(cel.OptOptimize))
}

// sizes tells the cost estimator how large the variables can be, so a
// comprehension over args is estimated against MaxArgsBytes rather than
// an unbounded size.
type sizes struct{}

func (sizes) EstimateCallCost(string, string, *cost.AstNode, []cost.AstNode) *cost.CallEstimate {
	return nil
}

func (sizes) EstimateSize(n cost.AstNode) *cost.SizeEstimate {
	p := n.Path()
	if len(p) == 0 {
		return nil
	}
	switch {
	case p[0] == "args":
		return &cost.SizeEstimate{Min: 0, Max: MaxArgsBytes}
	case p[0] == "run" && len(p) == 2 && p[1] == "labels":
		return &cost.SizeEstimate{Min: 0, Max: maxLabels}
	case p[0] == "run" && len(p) > 2 && p[1] == "labels":
		return &cost.SizeEstimate{Min: 0, Max: maxLabelLength}
	case p[0] == "run" || p[0] == "tool":
		return &cost.SizeEstimate{Min: 0, Max: maxNameLength}
	}
	return nil
}

// CheckMatch compiles one rule's match and says why it would be refused:
// a CEL syntax or type error, a result that cannot be a bool, or a
// worst-case cost estimate above MaxEstimatedCost. Nil: it compiles.
func CheckMatch(match string) error {
	_, err := compileMatch(match)
	return err
}

// Validate compiles every rule of spec and returns one error per rule that
// does not compile or exceeds the cost budget, at the field path of its
// match (spec.rules[i].match) with the CEL error. Admission refuses a
// policy with any; the reconciler may show them in the Ready condition.
func Validate(spec *arv1.AgentToolPolicySpec) field.ErrorList {
	var errs field.ErrorList
	rules := field.NewPath("spec", "rules")
	for i, r := range spec.Rules {
		if err := CheckMatch(r.Match); err != nil {
			errs = append(errs, MatchError(rules.Index(i), r, err))
		}
	}
	return errs
}

// MatchError is the field error Validate reports for rule r, at path (the
// rule's path; the error is on its match).
func MatchError(path *field.Path, r arv1.ToolPolicyRule, err error) *field.Error {
	return field.Invalid(path.Child("match"), r.Match, fmt.Sprintf("rule %q: %v", r.Name, err))
}
