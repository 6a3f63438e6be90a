package controllers

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// IndexSetupRefs indexes AgentRuns by each "Kind/name" in status.setupRefs:
// the objects a parked run waits on.
const IndexSetupRefs = "status.setupRefs"

// SetupIndexes registers the field indexes the controller lists through.
// Exported so tests and other managers share the exact same indexes.
func SetupIndexes(ctx context.Context, idx client.FieldIndexer) error {
	return idx.IndexField(ctx, &arv1.AgentRun{}, IndexSetupRefs, func(o client.Object) []string {
		return o.(*arv1.AgentRun).Status.SetupRefs
	})
}
