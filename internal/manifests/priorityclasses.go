package manifests

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/priority"
)

// CreatePriorityClasses creates what an install ships beside the admission
// policies when a manager runs outside one (the test control plane, and
// hack/run-local against a reachable cluster): the manager's namespace and
// its priority classes ConfigMap with no classes
// (config/manager/priority_classes.yaml), so the cluster admin edits it
// as the docs say instead of creating it. Objects that exist are left
// alone: an admin's classes are never replaced.
func CreatePriorityClasses(ctx context.Context, cfg *rest.Config) error {
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: arv1.DefaultSystemNamespace}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: arv1.DefaultSystemNamespace, Name: priority.DefaultConfigMapName}},
	} {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return nil
}
