package steps

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// A step logs through the logger its context carries (the reconcile that
// started it: the run and the reconcile's id), and through the runtime's,
// naming the run, only when its context carries none.
func TestStepsLogAsTheirRun(t *testing.T) {
	var lines []string
	sink := func(prefix string) logr.Logger {
		return funcr.New(func(p, args string) { lines = append(lines, prefix+" "+p+" "+args) }, funcr.Options{})
	}
	rt := &Runtime{Options: Options{Log: sink("global")}}
	run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r"}}

	ctx := logr.NewContext(context.Background(), sink("run").WithValues("reconcileID", "abc"))
	rt.logFor(ctx, "step", run, "seq", 3).Info("made")
	rt.logFor(context.Background(), "step", run, "seq", 4).Info("made")

	if len(lines) != 2 {
		t.Fatalf("lines = %q, want two", lines)
	}
	if l := lines[0]; !strings.HasPrefix(l, "run step") || !strings.Contains(l, `"reconcileID"="abc"`) || !strings.Contains(l, `"seq"=3`) {
		t.Errorf("with a logger in the context: %s", l)
	}
	if l := lines[1]; !strings.HasPrefix(l, "global step") || !strings.Contains(l, `"AgentRun"="ns/r"`) || !strings.Contains(l, `"seq"=4`) {
		t.Errorf("without one: %s", l)
	}
}
