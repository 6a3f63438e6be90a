package caches

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// FinishedRunTransform keeps a finished run in the informer cache as a
// stub: what the controller still reads of it (its identity and labels,
// phase, webhook, retention, output descriptor and usage for its parent's
// roll-up) and nothing else; the rare reconcile that needs more (a spec
// edited after the end) reads the run from the API server. The manager's memory then
// follows the runs in flight, not history: a finished run's task, record
// and flags are never read from the cache again (the kubectl plugin and
// webhook bodies read the API server). Managed fields go from every run.
// Of a finished run's annotations only those named in keep stay (the
// GitOps marks retention reads).
func FinishedRunTransform(keep []string) toolscache.TransformFunc {
	return func(in any) (any, error) {
		run, ok := in.(*arv1.AgentRun)
		if !ok {
			return in, nil
		}
		run.ManagedFields = nil
		if !run.Status.Phase.IsTerminal() || !run.DeletionTimestamp.IsZero() {
			return run, nil
		}
		st := run.Status
		run.Spec = arv1.AgentRunSpec{
			Agent: run.Spec.Agent, BlueprintSnapshot: run.Spec.BlueprintSnapshot, Callback: run.Spec.Callback,
			TTLSecondsAfterFinished: run.Spec.TTLSecondsAfterFinished, Depth: run.Spec.Depth,
		}
		run.Status = arv1.AgentRunStatus{
			ObservedGeneration: st.ObservedGeneration, Phase: st.Phase, BlueprintSnapshot: st.BlueprintSnapshot,
			FinishedAt: st.FinishedAt, Callback: st.Callback, SetupRefs: st.SetupRefs, JournalStore: st.JournalStore,
			Conditions: archivedCondition(st.Conditions),
		}
		if metav1.GetControllerOf(run) != nil {
			// A child: its parent's roll-up, merge and wait_for_agent read these.
			run.Status.Usage, run.Status.TreeUsage, run.Status.FinalOutput, run.Status.Error = st.Usage, st.TreeUsage, st.FinalOutput, st.Error
		}
		if len(run.Annotations) > 0 {
			kept := map[string]string{}
			for _, m := range keep {
				if v, ok := run.Annotations[m]; ok {
					kept[m] = v
				}
			}
			run.Annotations = kept
		}
		return run, nil
	}
}

// Namespaces restricts a cache to the namespaces of a namespace-scoped
// install (nil: every namespace). The manager's cache and the shard caches
// use it alike.
func Namespaces(namespaces []string) map[string]cache.Config {
	if len(namespaces) == 0 {
		return nil
	}
	only := make(map[string]cache.Config, len(namespaces))
	for _, ns := range namespaces {
		only[ns] = cache.Config{}
	}
	return only
}

// archivedCondition keeps a finished run's Archived condition, which its
// deletion waits on.
func archivedCondition(cs []metav1.Condition) []metav1.Condition {
	if c := meta.FindStatusCondition(cs, arv1.ConditionArchived); c != nil {
		return []metav1.Condition{*c}
	}
	return nil
}
