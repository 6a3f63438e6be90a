// Package prioritypolicy keeps the priority-class admission policy's table
// of classes equal to the classes the manager has in force.
//
// The policy could read the classes ConfigMap as its parameter, but the
// API server resolves a policy's parameters from an informer of the
// parameter's whole kind: a ConfigMap parameter made every kube-apiserver
// hold a second copy of every ConfigMap of the cluster, each run's journal
// included (BenchmarkConfigMapsHeldByAdmission measured about twice their
// data). Written into the policy's own CEL variables, the table costs the
// API server nothing per ConfigMap, and admission checks exactly the
// classes that order the runs (an edit that does not parse is refused by
// both alike).
package prioritypolicy

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	admissionclient "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"

	"github.com/agentrun-dev/agentrun-operator/internal/policysync"
	"github.com/agentrun-dev/agentrun-operator/internal/priority"
)

// DefaultPolicyName is the policy's name as config/default installs it
// (kustomize prefixes the config/admission name priority-class).
const DefaultPolicyName = "agentrun-priority-class"

// The policy's variables the manager writes. The install ships them empty
// (no classes: nothing is checked, as with no ConfigMap).
const (
	// VarClasses is a CEL map from class name to its integer value.
	VarClasses = "classes"
	// VarClassNames is the class names, sorted and comma-separated, for
	// the message refusing an unknown class.
	VarClassNames = "classNames"
	// VarSource names the ConfigMap the classes come from, for messages.
	VarSource = "source"
)

// Expressions renders classes, read from the ConfigMap named source
// (namespace/name), as the CEL expressions of the policy's variables.
func Expressions(c priority.Classes, source string) map[string]string {
	names := c.Names()
	entries := make([]string, 0, len(names))
	for _, n := range names {
		v, _ := c.Value(n)
		entries = append(entries, fmt.Sprintf("%s: %d", strconv.Quote(n), v))
	}
	return map[string]string{
		VarClasses:    "{" + strings.Join(entries, ", ") + "}",
		VarClassNames: strconv.Quote(strings.Join(names, ", ")),
		VarSource:     strconv.Quote(source),
	}
}

// Apply sets p's variables to exprs and reports whether any changed. A
// policy lacking one of them is not the one this manager knows how to
// write, and is left alone with an error.
func Apply(p *admissionv1.ValidatingAdmissionPolicy, exprs map[string]string) (bool, error) {
	changed, seen := false, 0
	for i := range p.Spec.Variables {
		v := &p.Spec.Variables[i]
		want, ok := exprs[v.Name]
		if !ok {
			continue
		}
		seen++
		if v.Expression != want {
			v.Expression, changed = want, true
		}
	}
	if seen != len(exprs) {
		return false, fmt.Errorf("the ValidatingAdmissionPolicy %s does not declare the variables %s, %s and %s the manager writes the priority classes into: re-apply it from the install", p.Name, VarClasses, VarClassNames, VarSource)
	}
	return changed, nil
}

// Sync writes exprs into the policy named name unless it holds them
// already, re-reading it on a conflict. It reports whether it wrote.
func Sync(ctx context.Context, policies admissionclient.ValidatingAdmissionPolicyInterface, name string, exprs map[string]string) (bool, error) {
	return policysync.Sync(ctx, policies, name, func(p *admissionv1.ValidatingAdmissionPolicy) (bool, error) { return Apply(p, exprs) })
}
