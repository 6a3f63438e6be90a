package configmaps

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// TestAppendsAreFencedUpdates: against a real API server, appends after
// the first are updates of the whole chunk under its resourceVersion. A
// second writer's appends make the first one's stale: its append of other
// content is store.ErrSeqTaken and writes nothing, its retried append of what is
// stored succeeds; a reload then sees every entry. What others put on the
// chunk (a label) and the field managers' records are kept.
func TestAppendsAreFencedUpdates(t *testing.T) {
	c, run := apiServerRun(t)
	ctx := context.Background()
	first := New(c, c)
	if _, err := first.Load(ctx, run, true); err != nil {
		t.Fatal(err)
	}
	if err := first.Append(ctx, run, testEntry(0, "s")); err != nil {
		t.Fatal(err)
	}
	if err := first.Append(ctx, run, testEntry(1, "s"), testEntry(2, "s")); err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	key := client.ObjectKey{Namespace: "journal", Name: ChunkName(run, 0)}
	if err := c.Get(ctx, key, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Labels["team"] = "a" // someone else's label, before the next append
	if err := c.Update(ctx, &cm); err != nil {
		t.Fatal(err)
	}

	// The second writer reads the journal (with the label) and appends.
	second := New(c, c)
	if _, err := second.Load(ctx, run, false); err != nil {
		t.Fatal(err)
	}
	if err := second.Append(ctx, run, testEntry(3, "s"), testEntry(4, "s")); err != nil {
		t.Fatal(err)
	}
	// The first writer's view is stale: other content at seq 3 is refused.
	if err := first.Append(ctx, run, testEntry(3, "other")); !errors.Is(err, store.ErrSeqTaken) {
		t.Fatalf("a stale writer's append: %v, want store.ErrSeqTaken", err)
	}
	// Reloaded, it appends after the second writer's entries.
	if err := first.Append(ctx, run, testEntry(5, "s")); err != nil {
		t.Fatalf("the append after a reload: %v", err)
	}
	// The second writer is stale now; its retry of what is stored (seq 5,
	// as if its own write's answer was lost) is recognised.
	if err := second.Append(ctx, run, testEntry(5, "s")); err != nil {
		t.Fatalf("a retried append of stored content: %v", err)
	}

	got, err := Read(ctx, c, "journal", run.UID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 6 {
		t.Fatalf("%d entries stored, want 6: %+v", len(got), got)
	}
	for i, e := range got {
		if e.Seq != int64(i) || e.Stage != "s" {
			t.Errorf("entry %d: seq %d stage %q, want seq %d stage s", i, e.Seq, e.Stage, i)
		}
	}
	if err := c.Get(ctx, key, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Labels["team"] != "a" || cm.Labels[LabelRunUID] != string(run.UID) {
		t.Errorf("labels after the appends: %v, want team=a and the run's UID kept", cm.Labels)
	}
	if len(cm.ManagedFields) == 0 {
		t.Error("the chunk lost its managed fields")
	}
}

// TestALongJournalGoesOnInChunks: against a real API server, a long run's
// entries fill chunks of at most DefaultChunkBytes (so no append rewrites
// more than that), an entry larger than a chunk gets one of its own, and a
// restarted manager reads every entry back in order.
func TestALongJournalGoesOnInChunks(t *testing.T) {
	c, run := apiServerRun(t)
	ctx := context.Background()
	s := New(c, c)
	if _, err := s.Load(ctx, run, true); err != nil {
		t.Fatal(err)
	}
	const steps = 60
	var want []journal.Entry
	for seq := int64(0); seq < steps; seq++ {
		e := testEntry(seq, "s")
		if e.Kind == journal.ModelCallCompleted {
			e.Text = longAnswer
		}
		if seq == steps-1 {
			e.Text = strings.Repeat("x", DefaultChunkBytes+(64<<10)) // larger than a chunk
		}
		if err := s.Append(ctx, run, e); err != nil {
			t.Fatalf("appending #%d: %v", seq, err)
		}
		want = append(want, e)
	}

	var chunks corev1.ConfigMapList
	if err := c.List(ctx, &chunks, client.InNamespace(run.Namespace), client.MatchingLabels{LabelRunUID: string(run.UID)}); err != nil {
		t.Fatal(err)
	}
	// About 150 KB of entries fill two chunks; the large entry is a third.
	if len(chunks.Items) != 3 {
		t.Fatalf("%d chunks, want 3", len(chunks.Items))
	}
	for _, cm := range chunks.Items {
		n, bytes := 0, 0
		for _, v := range cm.Data {
			n, bytes = n+1, bytes+len(v)
		}
		if n > 1 && bytes > DefaultChunkBytes {
			t.Errorf("chunk %s holds %d entries, %d bytes: more than a chunk's %d", cm.Name, n, bytes, DefaultChunkBytes)
		}
	}
	var large corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: ChunkName(run, 2)}, &large); err != nil || len(large.Data) != 1 {
		t.Fatalf("the large entry's chunk: %d entries, %v; want it alone", len(large.Data), err)
	}

	got, err := New(c, c).Load(ctx, run, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("reloaded %d entries, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Seq != want[i].Seq || got[i].Kind != want[i].Kind || got[i].Text != want[i].Text {
			t.Fatalf("reloaded entry %d is #%d %s (%d bytes of text), want #%d %s (%d)", i, got[i].Seq, got[i].Kind, len(got[i].Text), want[i].Seq, want[i].Kind, len(want[i].Text))
		}
	}
}

// longAnswer is a model's answer of about 5 KB: a few of them fill a
// small chunk.
var longAnswer = strings.Repeat("a long answer of a model. ", 200)

// apiServerRun starts a control plane and creates one AgentRun in it,
// returning a client and the run.
func apiServerRun(t *testing.T) (client.Client, *arv1.AgentRun) {
	t.Helper()
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := arv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "journal"}}); err != nil {
		t.Fatal(err)
	}
	run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "journal", Name: "r"}, Spec: arv1.AgentRunSpec{Agent: "a", Task: "t"}}
	if err := c.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	return c, run
}

// TestANewChunkIsFencedToo: against a real API server, the append that
// opens a run's next chunk (a create, not an update) keeps exactly-once.
// A create stored whose answer was lost is retried and recognised as
// ours; a stale writer whose append would open a chunk another writer
// already opened with other entries gets store.ErrSeqTaken and writes nothing,
// and after a reload appends after them.
func TestANewChunkIsFencedToo(t *testing.T) {
	c, run := apiServerRun(t)
	ctx := context.Background()
	entry := func(seq int64, stage string) journal.Entry {
		e := testEntry(seq, stage)
		e.Text = longAnswer
		return e
	}
	// Fill chunk 0 of a 16 KiB store with three entries: the fourth opens
	// chunk 1.
	lossy := &losesCreateAnswers{Client: c}
	first := New(lossy, c)
	first.ChunkBytes = MinChunkBytes
	if _, err := first.Load(ctx, run, true); err != nil {
		t.Fatal(err)
	}
	for seq := range int64(3) {
		if err := first.Append(ctx, run, entry(seq, "s")); err != nil {
			t.Fatal(err)
		}
	}
	second := New(c, c)
	second.ChunkBytes = MinChunkBytes
	if _, err := second.Load(ctx, run, false); err != nil {
		t.Fatal(err)
	}

	// The create of chunk 1 is stored but its answer lost: the retry
	// finds it holding exactly this entry.
	lossy.loseNext = true
	if err := first.Append(ctx, run, entry(3, "s")); err == nil {
		t.Fatal("the append whose create answer was lost reported success")
	}
	if err := first.Append(ctx, run, entry(3, "s")); err != nil {
		t.Fatalf("retrying the append whose create was stored: %v", err)
	}
	// The second writer still sees three entries: its append of other
	// content at seq 3 would open chunk 1 too, which is taken.
	if err := second.Append(ctx, run, entry(3, "other")); !errors.Is(err, store.ErrSeqTaken) {
		t.Fatalf("a stale writer opening a taken chunk: %v, want store.ErrSeqTaken", err)
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: ChunkName(run, 1)}, &cm); err != nil {
		t.Fatal(err)
	}
	if len(cm.Data) != 1 || !strings.Contains(cm.Data[key(3)], `"stage":"s"`) {
		t.Fatalf("chunk 1 holds %v; want the first writer's entry 3 alone", cm.Data)
	}
	// Reloaded, the second writer appends after the first one's entries.
	if _, err := second.Load(ctx, run, false); err != nil {
		t.Fatal(err)
	}
	if err := second.Append(ctx, run, entry(4, "s")); err != nil {
		t.Fatalf("appending after a reload: %v", err)
	}
	got, err := New(c, c).Load(ctx, run, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 {
		t.Fatalf("reloaded %d entries, want 5", len(got))
	}
	for i, e := range got {
		if e.Seq != int64(i) || e.Stage != "s" {
			t.Fatalf("entry %d is #%d of stage %q, want #%d of s", i, e.Seq, e.Stage, i)
		}
	}
}

// losesCreateAnswers is a client whose next create, once loseNext is set,
// is stored and then reported failed, as when the answer is lost on the
// way back.
type losesCreateAnswers struct {
	client.Client
	loseNext bool
}

func (l *losesCreateAnswers) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if err := l.Client.Create(ctx, obj, opts...); err != nil {
		return err
	}
	if l.loseNext {
		l.loseNext = false
		return context.DeadlineExceeded
	}
	return nil
}
