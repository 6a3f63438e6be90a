package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool/mcptest"
	"github.com/agentrun-dev/agentrun-operator/internal/providers/providertest"
)

// refusedMarker is text an admission policy in these tests forbids in any
// ConfigMap of the test's namespace, the journal's chunks included.
const refusedMarker = "journal-refusal-marker"

// TestRefusedJournalWriteStallsWithoutCallingAgain: an admission policy
// forbids the ConfigMap update that would journal a model's answer. The
// run shows Stalled: ReconcileFailed with the API server's reason and a
// Warning Event, and the provider is not called again (before, the
// completion was tried five times, then the call was issued again, paid
// for and refused again, for ever). With the policy gone and the run
// annotated, the call is issued once more, counted as possibly lost, and
// the run completes.
func TestRefusedJournalWriteStallsWithoutCallingAgain(t *testing.T) {
	h := startManager(t, managerOpts{})
	ns := newNamespace(t)
	oa := providertest.NewOpenAIServer(t)
	oa.Push(
		providertest.Reply{ToolCall: &providertest.ToolCall{Name: "complete", Args: `{"output":"` + refusedMarker + `"}`}},
		providertest.Reply{ToolCall: &providertest.ToolCall{Name: "complete", Args: `{"output":"kept"}`}},
	)
	createConfigMap(t, ns, "one", map[string]string{"agent.toml": oneCall})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": openAIEntry("oa", oa.URL, false)})
	createSecret(t, ns, "oa-key", map[string]string{"api-key": "sk-test"})
	unbind := forbidMarker(t, ns, refusedMarker)

	createRun(t, ns, "r", "one")
	stalled := waitFor(t, ns, "r", 30*time.Second, "Stalled: ReconcileFailed naming the refusal",
		stalledWith("refuses the run's journal write", "no journal marker here", "agentrun.dev/retry"))
	logStalled(t, stalled)
	waitForEvent(t, ns, "r", arv1.ReasonReconcileFailed, "refuses the run's journal write")
	notRetried(t, h, ns, "r")
	if n := oa.Requests(); n != 1 {
		t.Fatalf("the provider was called %d times, want once: a refused completion must not issue the call again", n)
	}
	if got := getRun(t, ns, "r"); got.Status.Phase.IsTerminal() {
		t.Fatalf("a stalled run ended (%s): it must be able to go on once the cause is fixed", got.Status.Phase)
	}

	unbind()
	retry(t, ns, "r", "1")
	done := waitFor(t, ns, "r", 30*time.Second, "Complete once the policy is gone", phaseIs(arv1.PhaseComplete))
	if got := finalOutput(t, done); got != "kept" {
		t.Errorf("final output %q, want the answer of the call issued again", got)
	}
	if n := oa.Requests(); n != 2 {
		t.Errorf("the provider was called %d times, want twice (once refused, once kept)", n)
	}
	intents := entriesOf(t, ns, done, journal.ModelCallRequested)
	if len(intents) != 1 || intents[0].Lost != 1 {
		t.Errorf("intents %+v, want one, counting one dispatch possibly lost", intents)
	}
}

// TestRefusedToolResultStallsWithoutCallingAgain: the same for a tool's
// result. The model asks for a read whose result (not its arguments) the
// policy forbids; the step that made the read cannot journal the result,
// the run stalls, and the tool is not called again until the policy is
// gone and the run annotated; then the read is made once more and the run
// completes.
func TestRefusedToolResultStallsWithoutCallingAgain(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	h := startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "tooling", map[string]string{"agent.toml": toolAgent(srv.URL(), "", "", `read_doc {"id":"`+refusedMarker+`"}`)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	unbind := forbidMarker(t, ns, "doc "+refusedMarker) // read_doc answers "doc <id>"

	createRun(t, ns, "r", "tooling")
	waitFor(t, ns, "r", 30*time.Second, "Stalled: ReconcileFailed naming the refusal",
		stalledWith("refuses the run's journal write", "no journal marker here"))
	notRetried(t, h, ns, "r")
	if n := srv.Calls("read_doc"); n != 1 {
		t.Fatalf("read_doc was called %d times, want once: a refused result must not call the tool again", n)
	}

	unbind()
	retry(t, ns, "r", "1")
	waitFor(t, ns, "r", 30*time.Second, "Complete once the policy is gone", phaseIs(arv1.PhaseComplete))
	if n := srv.Calls("read_doc"); n != 2 {
		t.Errorf("read_doc was called %d times, want twice (once refused, once kept)", n)
	}
}

// forbidMarker binds, to namespace ns only, an admission policy refusing
// any ConfigMap whose data holds marker, waits until the API server
// enforces it, and returns a function that removes the binding and waits
// until it no longer does.
func forbidMarker(t *testing.T, ns, marker string) func() {
	t.Helper()
	ctx := context.Background()
	name := "no-marker-" + ns
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				},
			}}},
			Validations: []admissionv1.Validation{{
				Expression: "!has(object.data) || !object.data.exists(k, object.data[k].contains('" + marker + "'))",
				Message:    "no journal marker here",
			}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns},
			}},
		},
	}
	for _, obj := range []client.Object{policy, binding} {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), obj) })
	}
	awaitMarkerRefused(t, ns, marker, true)
	return func() {
		t.Helper()
		if err := k8s.Delete(ctx, binding); err != nil {
			t.Fatal(err)
		}
		awaitMarkerRefused(t, ns, marker, false)
	}
}

// awaitMarkerRefused waits until a dry-run create of a ConfigMap holding
// the marker is refused (or, with refused false, admitted): policies take
// effect a moment after they are stored.
func awaitMarkerRefused(t *testing.T, ns, marker string, refused bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "marker-probe", Namespace: ns}, Data: map[string]string{"k": marker}}
		err := k8s.Create(context.Background(), probe, client.DryRunAll)
		switch {
		case refused && (apierrors.IsInvalid(err) || apierrors.IsForbidden(err)) && strings.Contains(err.Error(), "no journal marker here"), !refused && err == nil:
			return
		case err != nil && !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err):
			t.Fatalf("probing the marker policy: %v", err)
		case time.Now().After(deadline):
			t.Fatalf("the marker policy is not yet in effect=%v after 30s (last: %v)", refused, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRefusedCancellationStallsThenCancels: the reconcile's own journal
// write refused. A run waits at a checkpoint and is cancelled, and the
// policy forbids the journal entry that records the cancellation. The run
// shows Stalled: ReconcileFailed with the API server's reason, is not
// retried in a loop and does not end; with the policy gone and the run
// annotated, it ends Cancelled.
func TestRefusedCancellationStallsThenCancels(t *testing.T) {
	h := startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "gated", map[string]string{"agent.toml": withCheckpoint})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createRun(t, ns, "r", "gated")
	waitFor(t, ns, "r", 20*time.Second, "waiting at the checkpoint", waitingOn(arv1.WaitInteractionPoint))
	unbind := forbidMarker(t, ns, string(journal.RunCancelled))

	patchSpec(t, ns, "r", func(r *arv1.AgentRun) { r.Spec.Cancel = true })
	waitFor(t, ns, "r", 30*time.Second, "Stalled: ReconcileFailed naming the refusal",
		stalledWith("refuses the run's journal write", "no journal marker here", "agentrun.dev/retry"))
	waitForEvent(t, ns, "r", arv1.ReasonReconcileFailed, "refuses the run's journal write")
	notRetried(t, h, ns, "r")
	if got := getRun(t, ns, "r"); got.Status.Phase.IsTerminal() {
		t.Fatalf("the run ended %s though its cancellation was never recorded", got.Status.Phase)
	}

	unbind()
	retry(t, ns, "r", "1")
	done := waitFor(t, ns, "r", 30*time.Second, "Cancelled once the policy is gone", phaseIs(arv1.PhaseCancelled))
	if c := meta.FindStatusCondition(done.Status.Conditions, arv1.ConditionStalled); c != nil && c.Reason == arv1.ReasonReconcileFailed {
		t.Errorf("the cancelled run still shows the stall: %+v", c)
	}
	if n := len(entriesOf(t, ns, done, journal.RunCancelled)); n != 1 {
		t.Errorf("%d cancellations journaled, want 1", n)
	}
}
