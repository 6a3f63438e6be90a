package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
)

// TestRunCreatedAgainWhileTheCollectorIsBehind: a run deleted and created
// again at once under its name runs as a new run, with its own journal and
// its own workers, though the garbage collector has not deleted what its
// predecessor owned (paused here, as a busy cluster's collector is
// behind): the journal and the workers are named after the run, so the
// manager deletes them itself before it drives the successor.
func TestRunCreatedAgainWhileTheCollectorIsBehind(t *testing.T) {
	resume := env.PauseControllerManager()
	t.Cleanup(func() {
		if err := resume(); err != nil {
			t.Errorf("starting kube-controller-manager again: %v", err)
		}
	})
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "three", map[string]string{"agent.toml": stages(3)})
	createConfigMap(t, ns, "fan", map[string]string{"agent.toml": fanOutBlueprint(2, 2, "continue", 1, 0)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})

	for _, agent := range []string{"three", "fan"} {
		name := "again-" + agent
		first := createRun(t, ns, name, agent)
		waitFor(t, ns, name, 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
		if journalCount(t, ns, first.UID) == 0 {
			t.Fatalf("%s has no journal ConfigMap to stand in its successor's way", name)
		}
		if err := k8s.Delete(context.Background(), first); err != nil {
			t.Fatal(err)
		}
		second := createRun(t, ns, name, agent)
		waitFor(t, ns, name, 30*time.Second, "the run created again Complete", func(r *arv1.AgentRun) bool {
			return r.UID == second.UID && r.Status.Phase == arv1.PhaseComplete
		})
		if n := journalCount(t, ns, second.UID); n == 0 {
			t.Errorf("%s created again has no journal of its own", name)
		}
		eventually(t, 10*time.Second, "the first "+name+"'s journal and workers gone", func() (bool, string) {
			cms, workers := journalCount(t, ns, first.UID), len(listChildren(t, ns, first))
			return cms == 0 && workers == 0, fmt.Sprintf("%d journal ConfigMaps, %d workers left", cms, workers)
		})
	}
	// Nothing of the predecessors is left for the collector.
	var cms corev1.ConfigMapList
	if err := k8s.List(context.Background(), &cms, client.InNamespace(ns), client.HasLabels{configmaps.LabelRunUID}); err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms.Items {
		if len(cm.OwnerReferences) == 0 {
			t.Errorf("journal %s has no owner", cm.Name)
			continue
		}
		owner := cm.OwnerReferences[0]
		run := &arv1.AgentRun{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: owner.Name}, run); err != nil || run.UID != owner.UID {
			t.Errorf("journal %s outlived its run %s (%s)", cm.Name, owner.Name, owner.UID)
		}
	}
}
