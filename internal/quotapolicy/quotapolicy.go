// Package quotapolicy keeps the quota admission policy's word on whether
// the manager has a database store equal to the manager's configuration.
// Spend quotas (cost, tokens, runs, a period) are counted in the database
// store's ledger; without one the policy refuses them at apply, naming the
// fields, and only activeRuns quotas are accepted. The API server cannot
// know the manager's --store, so the manager writes it into the policy's
// variable database at start, and again whenever the policy is re-applied
// with the install's default (false).
package quotapolicy

import (
	"context"
	"fmt"
	"strconv"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	admissionclient "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"

	"github.com/agentrun-dev/agentrun-operator/internal/policysync"
)

// DefaultPolicyName is the policy's name as config/default installs it
// (kustomize prefixes config/admission's quota-store).
const DefaultPolicyName = "agentrun-quota-store"

// VarDatabase is the policy's variable the manager writes: "true" when
// it has a database store. The install ships it "false".
const VarDatabase = "database"

// Expression is the variable's CEL for database.
func Expression(database bool) string { return strconv.FormatBool(database) }

// Apply sets p's database variable and reports whether it changed. A
// policy without the variable is not the one this manager knows how to
// write, and is left alone with an error.
func Apply(p *admissionv1.ValidatingAdmissionPolicy, database bool) (bool, error) {
	want := Expression(database)
	for i := range p.Spec.Variables {
		v := &p.Spec.Variables[i]
		if v.Name != VarDatabase {
			continue
		}
		if v.Expression == want {
			return false, nil
		}
		v.Expression = want
		return true, nil
	}
	return false, fmt.Errorf("the ValidatingAdmissionPolicy %s does not declare the variable %s the manager writes whether it has a database store into: re-apply it from the install", p.Name, VarDatabase)
}

// Sync writes database into the policy named name unless it holds it
// already, re-reading it on a conflict. It reports whether it wrote.
func Sync(ctx context.Context, policies admissionclient.ValidatingAdmissionPolicyInterface, name string, database bool) (bool, error) {
	return policysync.Sync(ctx, policies, name, func(p *admissionv1.ValidatingAdmissionPolicy) (bool, error) { return Apply(p, database) })
}
