package controllers

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// A step runs on the executor's context, not the reconcile's, yet logs as
// the reconcile that started it: its context carries that logger.
func TestStepLogsAsTheReconcileThatStartedIt(t *testing.T) {
	var lines []string
	log := funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{}).WithValues("reconcileID", "abc")
	reconcile := ctrl.LoggerInto(context.Background(), log)
	run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", UID: "u"}}
	r := &AgentRunReconciler{}
	r.step(reconcile, run, func(ctx context.Context) { ctrl.LoggerFrom(ctx).Info("in the step") })(context.Background())
	if len(lines) != 1 || !strings.Contains(lines[0], `"reconcileID"="abc"`) {
		t.Fatalf("the step logged %q, want one line with the reconcile's values", lines)
	}
}
