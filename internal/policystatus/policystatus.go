// Package policystatus keeps the Ready condition of every tool policy
// (ClusterAgentToolPolicy, AgentToolPolicy): True (RulesCompiled, the
// rules counted by action) or False (InvalidRule, the CEL errors). The
// admission webhook refuses rules that do not compile, so False shows a
// policy stored without it (the webhook off or down) or one a newer
// operator's CEL environment refuses; such a rule still applies, failing
// closed, and this condition is how a person finds it.
//
// The condition is computed from the spec alone (toolpolicy.ReadyCondition)
// and written only when it differs from the stored one, so a policy costs
// one status write per change of its rules (or of what the manager's CEL
// environment says about them), never one per reconcile.
package policystatus

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/toolpolicy"
)

// Add registers the status reconciler of AgentToolPolicies and, when
// cluster is set, the one of ClusterAgentToolPolicies. A namespace-scoped
// install passes false: its Roles cannot list cluster policies, which do
// not apply to its runs (docs/tool-policy.md), so it neither watches nor
// writes them.
func Add(mgr ctrl.Manager, cluster bool, o controller.Options) error {
	kinds := []bool{false}
	if cluster {
		kinds = append(kinds, true)
	}
	for _, c := range kinds {
		r := &Reconciler{Client: mgr.GetClient(), Cluster: c}
		// Only a new generation (a spec change) can change the condition,
		// so the reconciler's own status write and edits of labels or
		// annotations are not reconciled. Every policy is reconciled when
		// the manager starts, which is when a newer CEL environment is
		// first applied to policies stored before it.
		err := ctrl.NewControllerManagedBy(mgr).
			For(r.object(), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
			WithOptions(o).
			Named(r.name()).
			Complete(r)
		if err != nil {
			return fmt.Errorf("setting up the %s controller: %w", r.name(), err)
		}
	}
	return nil
}

// Reconciler writes one tool policy kind's Ready condition.
type Reconciler struct {
	Client client.Client
	// Cluster: it reconciles ClusterAgentToolPolicies, else
	// AgentToolPolicies.
	Cluster bool
}

func (r *Reconciler) object() client.Object {
	if r.Cluster {
		return &arv1.ClusterAgentToolPolicy{}
	}
	return &arv1.AgentToolPolicy{}
}

func (r *Reconciler) name() string {
	if r.Cluster {
		return "clusteragenttoolpolicy-status"
	}
	return "agenttoolpolicy-status"
}

// Reconcile compiles the policy's rules and writes its Ready condition if
// the stored one says anything else (status, reason, message or the
// generation it was computed for).
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	obj := r.object()
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	spec, conds := parts(obj)
	want := toolpolicy.ReadyCondition(spec, obj.GetGeneration())
	if Current(*conds, want) {
		return reconcile.Result{}, nil
	}
	base := obj.DeepCopyObject().(client.Object)
	meta.SetStatusCondition(conds, want)
	err := r.Client.Status().Patch(ctx, obj, client.MergeFrom(base))
	if err != nil && !apierrors.IsNotFound(err) { // deleted since: nothing to show
		return reconcile.Result{}, fmt.Errorf("writing the Ready condition of %s: %w", req.NamespacedName, err)
	}
	return reconcile.Result{}, nil
}

// Current says whether conds already hold want as the Ready condition:
// same status, reason, message and observed generation (the transition
// time is the stored one's).
func Current(conds []metav1.Condition, want metav1.Condition) bool {
	c := meta.FindStatusCondition(conds, want.Type)
	return c != nil && c.Status == want.Status && c.Reason == want.Reason && c.Message == want.Message &&
		c.ObservedGeneration == want.ObservedGeneration
}

// parts are the spec and conditions of either policy kind.
func parts(obj client.Object) (*arv1.AgentToolPolicySpec, *[]metav1.Condition) {
	switch p := obj.(type) {
	case *arv1.ClusterAgentToolPolicy:
		return &p.Spec, &p.Status.Conditions
	case *arv1.AgentToolPolicy:
		return &p.Spec, &p.Status.Conditions
	}
	panic(fmt.Sprintf("policystatus: %T is not a tool policy", obj))
}
