package controllers

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

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
func FinishedRunTransform() toolscache.TransformFunc {
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
			FinishedAt: st.FinishedAt, Callback: st.Callback, SetupRefs: st.SetupRefs,
		}
		if metav1.GetControllerOf(run) != nil {
			// A child: its parent's roll-up, merge and wait_for_agent read these.
			run.Status.Usage, run.Status.TreeUsage, run.Status.FinalOutput, run.Status.Error = st.Usage, st.TreeUsage, st.FinalOutput, st.Error
		}
		// Annotations only matter for the GitOps marks retention reads.
		if len(run.Annotations) > 0 {
			kept := map[string]string{}
			for _, m := range gitOpsMarks {
				if v, ok := run.Annotations[m]; ok {
					kept[m] = v
				}
			}
			run.Annotations = kept
		}
		return run, nil
	}
}
