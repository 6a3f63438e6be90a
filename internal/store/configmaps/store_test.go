package configmaps

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

const secretish = "sk-canary-0d1e2f"

func testRun() *arv1.AgentRun {
	return &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns", UID: "uid-1"}}
}

func newClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	return fakeBuilder(t).WithObjects(objs...).Build()
}

// fakeBuilder is a fake client builder that knows ConfigMaps.
func fakeBuilder(t *testing.T) *fake.ClientBuilder {
	t.Helper()
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s)
}

// entries are the stored values of model-call intents and completions
// seq from..to-1.
func entries(t *testing.T, from, to int64) map[string]string {
	t.Helper()
	out := map[string]string{}
	for seq := from; seq < to; seq++ {
		b, err := json.Marshal(testEntry(seq, "s"))
		if err != nil {
			t.Fatal(err)
		}
		out[key(seq)] = string(b)
	}
	return out
}

// testEntry is seq of a run alternating model-call intents (even seq) and
// their completions (odd), in stage.
func testEntry(seq int64, stage string) journal.Entry {
	e := journal.Entry{Seq: seq, Kind: journal.ModelCallRequested, At: time.Unix(1000, 0).UTC(), Stage: stage}
	if seq%2 == 1 {
		e.Kind, e.Call = journal.ModelCallCompleted, seq-1
	}
	return e
}

func chunkOf(run *arv1.AgentRun, i int, data map[string]string) *corev1.ConfigMap {
	return chunkObject(run, i, data)
}

// load loads the run's journal with a new store, as a restarted manager
// would.
func load(t *testing.T, c client.Client, run *arv1.AgentRun) ([]journal.Entry, error) {
	t.Helper()
	return New(c, c).Load(context.Background(), run, false)
}

func TestLoadReadsAHealthyJournal(t *testing.T) {
	run := testRun()
	c := newClient(t, chunkOf(run, 0, entries(t, 0, 4)), chunkOf(run, 1, entries(t, 4, 6)))
	run.Status.PendingCall = &arv1.PendingCall{Kind: arv1.CallKindModel, Seq: 6}
	run.Status.Usage.ModelCalls = 3
	got, err := load(t, c, run)
	if err != nil || len(got) != 6 {
		t.Fatalf("Load = %d entries, %v; want 6, no error", len(got), err)
	}
}

// TestCorruptJournalIsTerminal: every way a stored journal can be other
// than what was written comes back as a CorruptError (errors.Is
// store.ErrCorrupt) naming the object and key, never the stored text; and once
// the journal is put right the same store reads it.
func TestCorruptJournalIsTerminal(t *testing.T) {
	cases := []struct {
		name    string
		chunks  func(run *arv1.AgentRun) []*corev1.ConfigMap
		status  func(st *arv1.AgentRunStatus)
		object  string
		key     string
		problem string
	}{
		{
			name: "an entry that is not JSON",
			chunks: func(run *arv1.AgentRun) []*corev1.ConfigMap {
				d := entries(t, 0, 4)
				d[key(2)] = "not json " + secretish
				return []*corev1.ConfigMap{chunkOf(run, 0, d)}
			},
			object: "r-journal", key: "000002", problem: "not valid JSON",
		},
		{
			name: "an entry whose fields do not decode",
			chunks: func(run *arv1.AgentRun) []*corev1.ConfigMap {
				d := entries(t, 0, 4)
				d[key(1)] = `{"seq":1,"kind":"ModelCallCompleted","at":"` + secretish + `"}`
				return []*corev1.ConfigMap{chunkOf(run, 0, d)}
			},
			object: "r-journal", key: "000001", problem: "does not decode",
		},
		{
			name: "an entry stored under another seq's key",
			chunks: func(run *arv1.AgentRun) []*corev1.ConfigMap {
				d := entries(t, 0, 4)
				d[key(3)] = d[key(1)]
				return []*corev1.ConfigMap{chunkOf(run, 0, d)}
			},
			object: "r-journal", key: "000003", problem: "says it is seq 1",
		},
		{
			name: "a chunk missing while a later one exists",
			chunks: func(run *arv1.AgentRun) []*corev1.ConfigMap {
				return []*corev1.ConfigMap{chunkOf(run, 1, entries(t, 4, 6)), chunkOf(run, 2, entries(t, 6, 8))}
			},
			object: "r-journal", problem: "chunk 0 is missing while chunk 2 (r-journal-2) exists",
		},
		{
			name: "a middle chunk missing",
			chunks: func(run *arv1.AgentRun) []*corev1.ConfigMap {
				return []*corev1.ConfigMap{chunkOf(run, 0, entries(t, 0, 4)), chunkOf(run, 2, entries(t, 6, 8))}
			},
			object: "r-journal-1", problem: "chunk 1 is missing",
		},
		{
			name: "a gap in the sequence",
			chunks: func(run *arv1.AgentRun) []*corev1.ConfigMap {
				d := entries(t, 0, 6)
				delete(d, key(3))
				return []*corev1.ConfigMap{chunkOf(run, 0, d)}
			},
			object: "r-journal", key: "000003", problem: "entry 3 is missing (the next stored is 4)",
		},
		{
			name: "the first entries gone",
			chunks: func(run *arv1.AgentRun) []*corev1.ConfigMap {
				return []*corev1.ConfigMap{chunkOf(run, 0, entries(t, 2, 4))}
			},
			object: "r-journal", key: "000000", problem: "entry 0 is missing",
		},
		{
			name:   "no journal while status records a pending call after entries",
			chunks: func(*arv1.AgentRun) []*corev1.ConfigMap { return nil },
			status: func(st *arv1.AgentRunStatus) {
				st.BlueprintSnapshot = "snap"
				st.PendingCall = &arv1.PendingCall{Kind: arv1.CallKindModel, Seq: 4}
			},
			object: "r-journal", problem: "holds 0 entries but the run's status records a pending call at seq 4",
		},
		{
			name: "the last chunk gone while status records completed calls",
			chunks: func(run *arv1.AgentRun) []*corev1.ConfigMap {
				return []*corev1.ConfigMap{chunkOf(run, 0, entries(t, 0, 2))}
			},
			status: func(st *arv1.AgentRunStatus) {
				st.PendingCall = &arv1.PendingCall{Kind: arv1.CallKindModel, Seq: 6}
				st.Usage.ModelCalls = 3
			},
			object: "r-journal", problem: "holds 2 entries but the run's status records a pending call at seq 6",
		},
		{
			name:   "no journal while status records completed calls",
			chunks: func(*arv1.AgentRun) []*corev1.ConfigMap { return nil },
			status: func(st *arv1.AgentRunStatus) {
				st.Usage.ModelCalls = 1
			},
			object: "r-journal", problem: "records 1 completed model calls",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := testRun()
			if tc.status != nil {
				tc.status(&run.Status)
			}
			var objs []client.Object
			for _, cm := range tc.chunks(run) {
				objs = append(objs, cm)
			}
			c := newClient(t, objs...)
			s := New(c, c)
			_, err := s.Load(context.Background(), run, false)
			var ce *store.CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("Load error = %v, want a CorruptError", err)
			}
			if ce.Object != tc.object || ce.Key != tc.key || !strings.Contains(ce.Problem, tc.problem) {
				t.Errorf("CorruptError = {%q %q %q}, want object %q key %q and a problem saying %q", ce.Object, ce.Key, ce.Problem, tc.object, tc.key, tc.problem)
			}
			if strings.Contains(err.Error(), secretish) {
				t.Errorf("the error repeats the stored text: %v", err)
			}
			// Appending reads the journal first: it refuses too.
			if err := s.Append(context.Background(), run, journal.Entry{Seq: 99, Kind: journal.RunCancelled}); !errors.Is(err, store.ErrCorrupt) {
				t.Errorf("Append on a corrupt journal = %v, want store.ErrCorrupt", err)
			}
			// Put right, the same store reads it: nothing was kept of the
			// failed read.
			restore(t, c, run)
			if got, err := s.Load(context.Background(), run, false); err != nil || len(got) == 0 {
				t.Errorf("Load after the journal was restored = %d entries, %v", len(got), err)
			}
		})
	}
}

// restore replaces the run's journal with a healthy one of the length its
// status implies (at least 2 entries).
func restore(t *testing.T, c client.Client, run *arv1.AgentRun) {
	t.Helper()
	ctx := context.Background()
	if err := c.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(run.Namespace)); err != nil {
		t.Fatal(err)
	}
	n := int64(2)
	if p := run.Status.PendingCall; p != nil && p.Seq > n {
		n = p.Seq
	}
	if err := c.Create(ctx, chunkOf(run, 0, entries(t, 0, n))); err != nil {
		t.Fatal(err)
	}
}

// TestFreshRunReadsNothing: a run whose status says it never started has
// no journal to check, and a started one with no entries yet is fine.
func TestFreshRunReadsNothing(t *testing.T) {
	run := testRun()
	c := newClient(t)
	if got, err := New(c, c).Load(context.Background(), run, true); err != nil || len(got) != 0 {
		t.Fatalf("Load of a fresh run = %v, %v", got, err)
	}
	run.Status.BlueprintSnapshot = "snap"
	run.Status.PendingCall = &arv1.PendingCall{Kind: arv1.CallKindModel, Seq: 0}
	if got, err := New(c, c).Load(context.Background(), run, false); err != nil || len(got) != 0 {
		t.Fatalf("Load of a spawned run before its first call = %v, %v", got, err)
	}
}

// TestReissuedIntentInALaterChunk: an intent issued again under its seq
// may land in a later chunk than the first issue; that is no gap.
func TestReissuedIntentInALaterChunk(t *testing.T) {
	run := testRun()
	again := entries(t, 2, 3)
	c := newClient(t, chunkOf(run, 0, entries(t, 0, 3)), chunkOf(run, 1, again))
	if got, err := load(t, c, run); err != nil || len(got) != 4 {
		t.Fatalf("Load = %d entries, %v; want 4 (one seq twice), no error", len(got), err)
	}
}

// TestReadLenientReportsCorruptEntries: people's reader still lists what
// it can.
func TestReadLenientReportsCorruptEntries(t *testing.T) {
	run := testRun()
	d := entries(t, 0, 4)
	d[key(2)] = "{"
	c := newClient(t, chunkOf(run, 0, d))
	got, bad, err := ReadLenient(context.Background(), c, run.Namespace, run.UID)
	if err != nil || len(got) != 3 || len(bad) != 1 {
		t.Fatalf("ReadLenient = %d entries, %v bad, %v; want 3 and 1", len(got), bad, err)
	}
}
