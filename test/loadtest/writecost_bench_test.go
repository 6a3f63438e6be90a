package loadtest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/test/loadtest"
)

// writeCostOps is how many writes of each kind BenchmarkWriteCosts times
// (after 20 untimed ones), 32 at a time.
const writeCostOps = 300

// BenchmarkWriteCosts: what one write of each kind a run makes costs the
// API server and etcd in CPU, measured alone, one kind after another, on
// one control plane with no manager running: a Ceiling's create and status
// patch (the bare client's writes), an AgentRun's create, status patches
// carrying a finished run's real status and carrying a tiny one, a journal
// ConfigMap's create and patch, and an Event's create. It says which of a
// run's writes are dear, so economy work aims at those.
func BenchmarkWriteCosts(b *testing.B) {
	scenario(b, func(b *testing.B, ctx context.Context, r *report) {
		c := startCluster(b)
		if err := c.InstallCeilingCRD(ctx); err != nil {
			b.Fatal(err)
		}
		status := finishedStatus(b, ctx, c)
		ns, err := c.NewNamespace(ctx, "writecost")
		if err != nil {
			b.Fatal(err)
		}
		runs := c.Dyn.Resource(arv1.GroupVersion.WithResource("agentruns")).Namespace(ns)
		ceilings := c.Dyn.Resource(loadtest.CeilingGVR).Namespace(ns)
		patchStatus := func(ctx context.Context, rc dynamic.ResourceInterface, name string, st map[string]any) error {
			body, err := json.Marshal(map[string]any{"status": st})
			if err != nil {
				return err
			}
			_, err = rc.Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{}, "status")
			return err
		}
		kinds := []struct {
			label, unit string
			op          func(ctx context.Context, i int) error
		}{
			{"Ceiling create", "ceiling_create", func(ctx context.Context, i int) error {
				u := &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": loadtest.CeilingGVR.GroupVersion().String(), "kind": "Ceiling",
					"metadata": map[string]any{"name": fmt.Sprintf("c-%05d", i)},
					"spec":     map[string]any{"agent": "triple", "task": "bare-client ceiling run"},
				}}
				_, err := ceilings.Create(ctx, u, metav1.CreateOptions{})
				return err
			}},
			{"Ceiling status patch", "ceiling_status", func(ctx context.Context, i int) error {
				return patchStatus(ctx, ceilings, fmt.Sprintf("c-%05d", i), map[string]any{
					"phase": "Running", "stage": "build 2/3", "stageIndex": 1, "counter": i + 1,
					"conditions": []any{map[string]any{"type": "Ready", "status": "False", "reason": "Running", "message": "The run is Running at stage build", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}},
				})
			}},
			{"AgentRun create", "agentrun_create", func(ctx context.Context, i int) error {
				return c.Client.Create(ctx, &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("r-%05d", i)}, Spec: arv1.AgentRunSpec{Agent: "bench", Task: "load test task"}})
			}},
			{"AgentRun status patch, tiny status", "agentrun_status_tiny", func(ctx context.Context, i int) error {
				return patchStatus(ctx, runs, fmt.Sprintf("r-%05d", i), map[string]any{"phase": "Running", "iteration": i + 1})
			}},
			{"AgentRun status patch, a finished run's status", "agentrun_status_full", func(ctx context.Context, i int) error {
				st := runtime.DeepCopyJSON(status)
				st["iteration"] = int64(i + 2)
				return patchStatus(ctx, runs, fmt.Sprintf("r-%05d", i), st)
			}},
			{"AgentRun status patch, 2 fields of that status", "agentrun_status_small", func(ctx context.Context, i int) error {
				return patchStatus(ctx, runs, fmt.Sprintf("r-%05d", i), map[string]any{"iteration": i + 3, "stage": "review 3/3"})
			}},
			{"journal ConfigMap create", "configmap_create", func(ctx context.Context, i int) error {
				return c.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("j-%05d", i)},
					Data: map[string]string{"000000": `{"seq":0,"kind":"ModelCallCompleted","text":"step one of a scripted model"}`}})
			}},
			{"journal ConfigMap patch (one entry)", "configmap_patch", func(ctx context.Context, i int) error {
				body := []byte(`{"data":{"000001":"{\"seq\":1,\"kind\":\"ModelCallCompleted\",\"text\":\"step two of a scripted model\"}"}}`)
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("j-%05d", i)}}
				return c.Client.Patch(ctx, cm, client.RawPatch(types.MergePatchType, body))
			}},
			{"Event create", "event_create", func(ctx context.Context, i int) error {
				return c.Client.Create(ctx, &corev1.Event{
					ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("e-%05d", i)},
					InvolvedObject: corev1.ObjectReference{Kind: "AgentRun", APIVersion: arv1.GroupVersion.String(), Namespace: ns, Name: fmt.Sprintf("r-%05d", i)},
					Reason:         "Succeeded", Message: "The run completed", Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "agentrun-operator"},
				})
			}},
		}
		for _, k := range kinds {
			// Warm-up writes use names past the timed ones, so each timed
			// patch finds its object created by the timed create.
			if err := loadtest.Parallel(ctx, 20, concurrency, func(ctx context.Context, i int) error { return k.op(ctx, writeCostOps+i) }); err != nil {
				b.Fatalf("%s (warm-up): %v", k.label, err)
			}
			cpu0, start := loadtest.CPUNow(), time.Now()
			if err := loadtest.Parallel(ctx, writeCostOps, concurrency, k.op); err != nil {
				b.Fatalf("%s: %v", k.label, err)
			}
			took, cpu := time.Since(start), loadtest.CPUNow().Sub(cpu0)
			api, etcd := perOp(cpu["kube-apiserver"]), perOp(cpu["etcd"])
			r.row(k.label, "kube-apiserver %.2f ms, etcd %.2f ms CPU per write (%.0f writes/s)", api, etcd, writeCostOps/took.Seconds())
			r.metric(api, k.unit+"_api_ms")
		}
		r.row("the finished status", "%d bytes of JSON, %d fields", len(mustJSON(status)), leaves(status))
	})
}

// finishedStatus runs one ThreeStage run to Complete on a manager it then
// stops, and returns that run's status.
func finishedStatus(b *testing.B, ctx context.Context, c *loadtest.Cluster) map[string]any {
	b.Helper()
	m := startManager(b, ctx, c)
	res := batch(b, ctx, c, m, "sample", loadtest.ThreeStage, 1, 5*time.Minute)
	if err := m.Stop(30 * time.Second); err != nil {
		b.Logf("sample manager: %v", err)
	}
	u, err := c.Dyn.Resource(arv1.GroupVersion.WithResource("agentruns")).Namespace(res.Namespace).Get(ctx, loadtest.RunName(res.Prefix, 0), metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	st, ok := u.Object["status"].(map[string]any)
	if !ok || st["phase"] != string(arv1.PhaseComplete) {
		b.Fatalf("the sample run's status is %v, want a Complete run's", u.Object["status"])
	}
	return st
}

func perOp(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / writeCostOps }

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// leaves counts the scalar fields of a JSON value.
func leaves(v any) int {
	switch t := v.(type) {
	case map[string]any:
		n := 0
		for _, x := range t {
			n += leaves(x)
		}
		return n
	case []any:
		n := 0
		for _, x := range t {
			n += leaves(x)
		}
		return n
	default:
		return 1
	}
}
