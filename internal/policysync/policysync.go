// Package policysync writes values the manager computes (priority classes,
// whether it has a database store) into ValidatingAdmissionPolicies of the
// install, so the API server's admission enforces what the manager knows.
package policysync

import (
	"context"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	admissionclient "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	"k8s.io/client-go/util/retry"
)

// Sync applies apply to the policy named name and writes it when apply
// changed it, re-reading it on a conflict. It reports whether it wrote.
func Sync(ctx context.Context, policies admissionclient.ValidatingAdmissionPolicyInterface, name string, apply func(*admissionv1.ValidatingAdmissionPolicy) (bool, error)) (bool, error) {
	wrote := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := policies.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		changed, err := apply(p)
		if err != nil || !changed {
			return err
		}
		if _, err := policies.Update(ctx, p, metav1.UpdateOptions{FieldManager: "agentrun-operator"}); err != nil {
			return err
		}
		wrote = true
		return nil
	})
	return wrote, err
}
