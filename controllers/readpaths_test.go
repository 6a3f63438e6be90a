package controllers_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// readingAgent declares three read paths and completes at once.
const readingAgent = `[agent]
name = "reader"
[agent.title]
enabled = false
[read_paths]
allow = ["docs/README.md", "glob:src/**/*.go", "regex:^notes/.*\\.md$"]
[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.work.script]]
complete = true
output = "read nothing"
`

// TestReadPathsAreCounted: status.readPaths records the blueprint's
// declared read paths and the granted ones (none: a run here reads no
// files), as the seeds' read_paths{declared,granted}; a blueprint that
// declares none has no readPaths.
func TestReadPathsAreCounted(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createConfigMap(t, ns, "reader", map[string]string{"agent.toml": readingAgent})
	createConfigMap(t, ns, "plain", map[string]string{"agent.toml": `[agent]
name = "plain"
[agent.title]
enabled = false
[stages.work]
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
`})
	createRun(t, ns, "reads", "reader")
	createRun(t, ns, "plain", "plain")
	ended := func(r *arv1.AgentRun) bool { return r.Status.Phase.IsTerminal() }

	run := waitFor(t, ns, "reads", 30*time.Second, "an end", ended)
	if run.Status.Phase != arv1.PhaseComplete {
		t.Fatalf("phase %s (%s), want Complete", run.Status.Phase, run.Status.Error)
	}
	if got := run.Status.ReadPaths; got == nil || got.Declared != 3 || got.Granted != 0 {
		t.Fatalf("readPaths %+v, want declared 3, granted 0", got)
	}
	// What a client reading the API sees, not only the typed view.
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(arv1.GroupVersion.WithKind("AgentRun"))
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "reads"}, u); err != nil {
		t.Fatal(err)
	}
	if n, ok, _ := unstructured.NestedInt64(u.Object, "status", "readPaths", "declared"); !ok || n != 3 {
		t.Errorf("status.readPaths.declared on the wire: %d (present %v), want 3", n, ok)
	}

	plain := waitFor(t, ns, "plain", 30*time.Second, "an end", ended)
	if plain.Status.Phase != arv1.PhaseComplete {
		t.Fatalf("plain run: phase %s (%s), want Complete", plain.Status.Phase, plain.Status.Error)
	}
	if plain.Status.ReadPaths != nil {
		t.Errorf("readPaths %+v for a blueprint that declares none, want absent", plain.Status.ReadPaths)
	}
}
