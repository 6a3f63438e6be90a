package controllers

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/controllers/agentrun/children"
)

// IndexSetupRefs indexes AgentRuns by each "Kind/name" in status.setupRefs:
// the objects a parked run waits on.
const IndexSetupRefs = "status.setupRefs"

// IndexOwnerUID indexes AgentRuns by their controller owner's UID, so a
// parent lists its children by identity, never by name (children.List).
const IndexOwnerUID = children.IndexOwnerUID

// SetupIndexes registers the field indexes the controller lists through.
// Exported so tests and other managers share the exact same indexes.
func SetupIndexes(ctx context.Context, idx client.FieldIndexer) error {
	if err := idx.IndexField(ctx, &arv1.AgentRunAnswer{}, IndexAnswerRun, func(o client.Object) []string {
		return []string{o.(*arv1.AgentRunAnswer).Spec.Run}
	}); err != nil {
		return err
	}
	return SetupRunIndexes(ctx, idx)
}

// SetupRunIndexes registers the indexes of AgentRuns (on the manager's
// cache, or on each shard's).
func SetupRunIndexes(ctx context.Context, idx client.FieldIndexer) error {
	if err := idx.IndexField(ctx, &arv1.AgentRun{}, IndexSetupRefs, func(o client.Object) []string {
		return o.(*arv1.AgentRun).Status.SetupRefs
	}); err != nil {
		return err
	}
	return idx.IndexField(ctx, &arv1.AgentRun{}, IndexOwnerUID, func(o client.Object) []string {
		if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "AgentRun" {
			return []string{string(ref.UID)}
		}
		return nil
	})
}
