package loadtest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
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

// bigChunkOps is how many writes of a kind landing on a nearly full
// journal chunk are timed (after 10 untimed ones): each puts up to half a
// megabyte into etcd.
const bigChunkOps = 50

// A long run's last chunk, nearly full: fullChunkEntries entries of
// bigEntryBytes each fill it close to store.DefaultChunkBytes, and
// bigChunkEntries fill the 512 KiB chunks the store wrote before.
const (
	fullChunkEntries = 120
	bigChunkEntries  = 480
	bigEntryBytes    = 1000
)

// BenchmarkWriteCosts: what one write of each kind a run makes costs the
// API server and etcd in CPU, measured alone, one kind after another, on
// one control plane with no manager running: a Ceiling's create and status
// patch (the bare client's writes), an AgentRun's create, status patches
// carrying a finished run's real status and carrying a tiny one, a journal
// ConfigMap's create, its update adding one entry (how the journal store
// appends) and its merge patch adding one (how it appended before), the
// same update and patch on a nearly full chunk (a long run's), and an
// Event's create. It says which of a run's writes are dear, so economy
// work aims at those.
func BenchmarkWriteCosts(b *testing.B) {
	scenario(b, func(b *testing.B, ctx context.Context, r *report) {
		c := startCluster(b)
		if err := c.InstallCeilingCRD(ctx); err != nil {
			b.Fatal(err)
		}
		status := finishedStatus(b, ctx, c)
		status30 := withStages(status, 30)
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
		// Journal chunks as their last write left them, by name, so an
		// update carries the resourceVersion the store would hold.
		var chunksMu sync.Mutex
		chunks := map[string]*corev1.ConfigMap{}
		keep := func(cm *corev1.ConfigMap) {
			chunksMu.Lock()
			chunks[cm.Name] = cm
			chunksMu.Unlock()
		}
		appendByUpdate := func(ctx context.Context, name, key string) error {
			chunksMu.Lock()
			cm := chunks[name].DeepCopy()
			chunksMu.Unlock()
			cm.Data[key] = fmt.Sprintf(`{"seq":%s,"kind":"ModelCallCompleted","text":"a later step of a scripted model"}`, key)
			if err := c.Client.Update(ctx, cm); err != nil {
				return err
			}
			keep(cm)
			return nil
		}
		appendByPatch := func(ctx context.Context, name, key string) error {
			body := fmt.Appendf(nil, `{"data":{%q:"{\"seq\":%s,\"kind\":\"ModelCallCompleted\",\"text\":\"a later step of a scripted model\"}"}}`, key, key)
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
			return c.Client.Patch(ctx, cm, client.RawPatch(types.MergePatchType, body))
		}
		for prefix, entries := range map[string]int{"full": fullChunkEntries, "big": bigChunkEntries} {
			if err := loadtest.Parallel(ctx, bigChunkOps+10, concurrency, func(ctx context.Context, i int) error {
				cm := filledChunk(ns, fmt.Sprintf("%s-%05d", prefix, i), entries)
				if err := c.Client.Create(ctx, cm); err != nil {
					return err
				}
				keep(cm)
				return nil
			}); err != nil {
				b.Fatalf("creating the nearly full chunks: %v", err)
			}
		}
		kinds := []struct {
			label, unit string
			// n is how many are timed (writeCostOps when 0).
			n  int
			op func(ctx context.Context, i int) error
		}{
			{"Ceiling create", "ceiling_create", 0, func(ctx context.Context, i int) error {
				u := &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": loadtest.CeilingGVR.GroupVersion().String(), "kind": "Ceiling",
					"metadata": map[string]any{"name": fmt.Sprintf("c-%05d", i)},
					"spec":     map[string]any{"agent": "triple", "task": "bare-client ceiling run"},
				}}
				_, err := ceilings.Create(ctx, u, metav1.CreateOptions{})
				return err
			}},
			{"Ceiling status patch", "ceiling_status", 0, func(ctx context.Context, i int) error {
				return patchStatus(ctx, ceilings, fmt.Sprintf("c-%05d", i), map[string]any{
					"phase": "Running", "stage": "build 2/3", "stageIndex": 1, "counter": i + 1,
					"conditions": []any{map[string]any{"type": "Ready", "status": "False", "reason": "Running", "message": "The run is Running at stage build", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}},
				})
			}},
			{"AgentRun create", "agentrun_create", 0, func(ctx context.Context, i int) error {
				return c.Client.Create(ctx, &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("r-%05d", i)}, Spec: arv1.AgentRunSpec{Agent: "bench", Task: "load test task"}})
			}},
			{"AgentRun status patch, tiny status", "agentrun_status_tiny", 0, func(ctx context.Context, i int) error {
				return patchStatus(ctx, runs, fmt.Sprintf("r-%05d", i), map[string]any{"phase": "Running", "iteration": i + 1})
			}},
			{"AgentRun status patch, a finished run's status", "agentrun_status_full", 0, func(ctx context.Context, i int) error {
				st := runtime.DeepCopyJSON(status)
				st["iteration"] = int64(i + 2)
				return patchStatus(ctx, runs, fmt.Sprintf("r-%05d", i), st)
			}},
			{"AgentRun status patch, 2 fields of that status", "agentrun_status_small", 0, func(ctx context.Context, i int) error {
				return patchStatus(ctx, runs, fmt.Sprintf("r-%05d", i), map[string]any{"iteration": i + 3, "stage": "review 3/3"})
			}},
			{"AgentRun status patch, that status with 30 stages (the LongRun chain's)", "agentrun_status_30stages", 0, func(ctx context.Context, i int) error {
				st := runtime.DeepCopyJSON(status30)
				st["iteration"] = int64(i + 4)
				return patchStatus(ctx, runs, fmt.Sprintf("r-%05d", i), st)
			}},
			{"AgentRun status patch, that status with no stages list", "agentrun_status_nostages", 0, func(ctx context.Context, i int) error {
				st := runtime.DeepCopyJSON(status30)
				st["stages"] = nil // a merge patch's null removes the list
				st["iteration"] = int64(i + 5)
				return patchStatus(ctx, runs, fmt.Sprintf("r-%05d", i), st)
			}},
			{"journal ConfigMap create", "configmap_create", 0, func(ctx context.Context, i int) error {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("j-%05d", i)},
					Data: map[string]string{"000000": `{"seq":0,"kind":"ModelCallCompleted","text":"step one of a scripted model"}`}}
				if err := c.Client.Create(ctx, cm); err != nil {
					return err
				}
				keep(cm)
				return nil
			}},
			{"journal ConfigMap update (one entry added)", "configmap_update", 0, func(ctx context.Context, i int) error {
				return appendByUpdate(ctx, fmt.Sprintf("j-%05d", i), "000001")
			}},
			{"journal ConfigMap merge patch (one entry)", "configmap_patch", 0, func(ctx context.Context, i int) error {
				return appendByPatch(ctx, fmt.Sprintf("j-%05d", i), "000002")
			}},
			{"journal ConfigMap update (one entry added), a 124 KB chunk", "fullchunk_update", bigChunkOps, func(ctx context.Context, i int) error {
				return appendByUpdate(ctx, fmt.Sprintf("full-%05d", i), key(fullChunkEntries))
			}},
			{"journal ConfigMap update (one entry added), a 494 KB chunk", "bigchunk_update", bigChunkOps, func(ctx context.Context, i int) error {
				return appendByUpdate(ctx, fmt.Sprintf("big-%05d", i), key(bigChunkEntries))
			}},
			{"journal ConfigMap merge patch (one entry), a 494 KB chunk", "bigchunk_patch", bigChunkOps, func(ctx context.Context, i int) error {
				return appendByPatch(ctx, fmt.Sprintf("big-%05d", i), key(bigChunkEntries+1))
			}},
			{"Event create", "event_create", 0, func(ctx context.Context, i int) error {
				return c.Client.Create(ctx, &corev1.Event{
					ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("e-%05d", i)},
					InvolvedObject: corev1.ObjectReference{Kind: "AgentRun", APIVersion: arv1.GroupVersion.String(), Namespace: ns, Name: fmt.Sprintf("r-%05d", i)},
					Reason:         "Succeeded", Message: "The run completed", Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "agentrun-operator"},
				})
			}},
		}
		for _, k := range kinds {
			n, warm := writeCostOps, 20
			if k.n > 0 {
				n, warm = k.n, 10
			}
			// Warm-up writes use names past the timed ones, so each timed
			// patch finds its object created by the timed create.
			if err := loadtest.Parallel(ctx, warm, concurrency, func(ctx context.Context, i int) error { return k.op(ctx, n+i) }); err != nil {
				b.Fatalf("%s (warm-up): %v", k.label, err)
			}
			cpu0, start := loadtest.CPUNow(), time.Now()
			if err := loadtest.Parallel(ctx, n, concurrency, k.op); err != nil {
				b.Fatalf("%s: %v", k.label, err)
			}
			took, cpu := time.Since(start), loadtest.CPUNow().Sub(cpu0)
			api, etcd, harness := perOp(cpu["kube-apiserver"], n), perOp(cpu["etcd"], n), perOp(cpu["harness"], n)
			r.row(k.label, "kube-apiserver %.2f ms, etcd %.2f ms, the writing client %.2f ms CPU per write (%.0f writes/s)", api, etcd, harness, float64(n)/took.Seconds())
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

// withStages is st with its stages list grown to n entries, each a copy
// of its first (renamed), as a finished n-stage chain's status holds.
func withStages(st map[string]any, n int) map[string]any {
	out := runtime.DeepCopyJSON(st)
	stages, _ := out["stages"].([]any)
	if len(stages) == 0 {
		return out
	}
	grown := make([]any, n)
	for i := range grown {
		e := runtime.DeepCopyJSONValue(stages[0]).(map[string]any)
		e["name"] = fmt.Sprintf("s%d", i+1)
		grown[i] = e
	}
	out["stages"], out["numStages"] = grown, int64(n)
	return out
}

func perOp(d time.Duration, n int) float64 { return float64(d.Microseconds()) / 1000 / float64(n) }

// key is a journal entry's data key, as the store names it.
func key(seq int) string { return fmt.Sprintf("%06d", seq) }

// filledChunk is a journal chunk holding entries entries of about
// bigEntryBytes each.
func filledChunk(ns, name string, entries int) *corev1.ConfigMap {
	text := strings.Repeat("a model's long answer. ", bigEntryBytes/23)
	data := make(map[string]string, entries)
	for seq := range entries {
		data[key(seq)] = fmt.Sprintf(`{"seq":%d,"kind":"ModelCallCompleted","text":%q}`, seq, text)
	}
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
}

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
