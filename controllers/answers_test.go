package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
)

// clientAs returns a client authenticated as user (no groups but
// system:authenticated), so RBAC and admission see that user.
func clientAs(t *testing.T, user string) client.Client {
	t.Helper()
	u, err := env.AddUser(envtest.User{Name: user}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(u.Config(), client.Options{Scheme: manager.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCheckpointAnsweredByAnAllowedPerson: a user granted only
// "create agentrunanswers" approves a checkpoint and the run continues, with
// the authenticated user recorded; a user without the grant is refused by
// the API server; nobody can answer in someone else's name; a second answer
// to the same point is rejected, not applied.
func TestCheckpointAnsweredByAnAllowedPerson(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "gated", map[string]string{"agent.toml": withCheckpoint})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	run := createRun(t, ns, "r", "gated")
	waitFor(t, ns, "r", 20*time.Second, "checkpoint", func(r *arv1.AgentRun) bool {
		return r.Status.WaitingOn != nil && r.Status.WaitingOn.Point == "approve-plan"
	})

	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "answerer", Namespace: ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"agentrun.dev"}, Resources: []string{"agentrunanswers"}, Verbs: []string{"create", "get"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-answers", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "answerer"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "alice"}}}
	for _, o := range []client.Object{role, binding} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	alice, bob := clientAs(t, "alice"), clientAs(t, "bob")
	answer := func(name, by string) *arv1.AgentRunAnswer {
		return &arv1.AgentRunAnswer{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: arv1.AgentRunAnswerSpec{Run: "r", Point: "approve-plan", Decision: arv1.DecisionApprove, By: by}}
	}
	if err := bob.Create(ctx, answer("from-bob", "bob")); !apierrors.IsForbidden(err) {
		t.Fatalf("bob, without the grant, answered: %v", err)
	}
	err := alice.Create(ctx, answer("alice-as-carol", "carol"))
	if err == nil || !strings.Contains(err.Error(), "spec.by must be the user creating the answer (alice)") {
		t.Fatalf("alice answered in carol's name: %v", err)
	}
	if err := alice.Update(ctx, &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: ns}}); !apierrors.IsForbidden(err) {
		t.Fatalf("the answerer can edit runs: %v", err)
	}
	if err := alice.Create(ctx, answer("from-alice", "alice")); err != nil {
		t.Fatal(err)
	}
	done := waitFor(t, ns, "r", 20*time.Second, "Complete after the approval", phaseIs(arv1.PhaseComplete))
	if done.Status.Flags.GatesForced {
		t.Error("a person's approval is recorded as forced")
	}
	applied := &arv1.AgentRunAnswer{}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "from-alice"}, applied); err != nil {
			t.Fatal(err)
		}
		if applied.Status.State != "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if applied.Status.State != arv1.AnswerApplied || applied.Status.AppliedAt == nil {
		t.Errorf("answer status = %+v, want Applied", applied.Status)
	}
	var cms = journalEntries(t, ns, string(run.UID))
	found := false
	for _, e := range cms {
		if e.Kind == journal.InteractionAnswered {
			found = e.By == "alice" && e.Approved && !e.Auto && e.Message == "from-alice"
		}
	}
	if !found {
		t.Errorf("the journal does not record alice's approval: %+v", cms)
	}
}
