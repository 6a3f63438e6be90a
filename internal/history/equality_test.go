package history_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	hv1 "github.com/agentrun-dev/agentrun-operator/api/history/v1alpha1"
	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/history/historyclient"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// mixedRuns is how many runs TestRecordsEqualTheRunsAsTheyFinished archives.
const mixedRuns = 1000

// mixedRun is the i-th run of mixed outcomes: phases, priced, unpriced and
// no calls, an output or none, children or none, labels or none.
func mixedRun(i int) runSpec {
	phases := []arv1.Phase{arv1.PhaseComplete, arv1.PhaseError, arv1.PhaseCancelled}
	s := runSpec{ns: "equality", name: fmt.Sprintf("run-%04d", i), agent: fmt.Sprintf("agent-%d", i%4), phase: phases[i%3],
		model: fmt.Sprintf("model-%d", i%5)}
	switch i % 4 {
	case 0: // priced calls
		s.calls = []*int64{ptr.To(int64(1000 + i)), ptr.To(int64(7))}
	case 1: // one call could not be priced: unknown cost
		s.calls = []*int64{ptr.To(int64(i)), nil}
	case 2: // nothing could be priced
		s.calls = []*int64{nil}
	}
	if i%2 == 0 {
		out := fmt.Sprintf("output of run %d\n\x00with a NUL and ünïcode", i)
		s.output = &out
	}
	if i%7 == 0 {
		s.children = []store.ChildRecord{{Name: s.name + "-child-a", UID: types.UID(fmt.Sprintf("child-a-%d", i)), Phase: arv1.PhaseComplete},
			{Name: s.name + "-child-b", UID: types.UID(fmt.Sprintf("child-b-%d", i)), Phase: arv1.PhaseError}}
	}
	if i%3 != 0 {
		s.labels = map[string]string{"team": fmt.Sprintf("t%d", i%3), "run": fmt.Sprint(i)}
	}
	return s
}

// TestRecordsEqualTheRunsAsTheyFinished: across 1,000 runs of mixed
// outcomes, each record read through the API server (paged) has the
// metadata, spec and status its run had when it finished (phase, usage,
// cost, unknown cost), its children, and its output byte for byte.
func TestRecordsEqualTheRunsAsTheyFinished(t *testing.T) {
	want := map[string]*arv1.AgentRun{}
	specs := map[string]runSpec{}
	for i := range mixedRuns {
		s := mixedRun(i)
		run := archiveRun(t, s)
		want[string(run.UID)], specs[string(run.UID)] = run, s
	}
	c, err := historyclient.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var got []hv1.AgentRunRecord
	opts := metav1.ListOptions{Limit: 300}
	for {
		page, err := c.ListRecords(ctx, "equality", opts)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page.Items...)
		if opts.Continue = page.Continue; opts.Continue == "" {
			break
		}
	}
	if len(got) != mixedRuns {
		t.Fatalf("listed %d records, archived %d", len(got), mixedRuns)
	}
	for i := range got {
		rec := &got[i]
		run, s := want[string(rec.UID)], specs[string(rec.UID)]
		if run == nil {
			t.Fatalf("record %s/%s (uid %s) was not archived", rec.Namespace, rec.Name, rec.UID)
		}
		checkRecord(t, rec, run, s)
	}
	checkOutputs(t, c, specs)
}

// checkRecord compares one record with its run as it finished.
func checkRecord(t *testing.T, rec *hv1.AgentRunRecord, run *arv1.AgentRun, s runSpec) {
	t.Helper()
	if rec.Name != run.Name || !equality.Semantic.DeepEqual(rec.Labels, run.Labels) ||
		!rec.CreationTimestamp.Equal(&run.CreationTimestamp) {
		t.Errorf("%s: metadata %+v, the run's %+v", run.Name, rec.ObjectMeta, run.ObjectMeta)
	}
	if !equality.Semantic.DeepEqual(rec.Spec, run.Spec) {
		t.Errorf("%s: spec %+v, the run's %+v", run.Name, rec.Spec, run.Spec)
	}
	if !equality.Semantic.DeepEqual(rec.Status, run.Status) {
		t.Errorf("%s: status %+v, the run's %+v", run.Name, rec.Status, run.Status)
	}
	if rec.Status.Usage.UnpricedCalls > 0 && rec.Status.Usage.CostUSD != "unknown" {
		t.Errorf("%s: unpriced calls with cost %q", run.Name, rec.Status.Usage.CostUSD)
	}
	if !rec.Archive.FinishedAt.Equal(run.Status.FinishedAt) || rec.Archive.HasOutput != (s.output != nil) {
		t.Errorf("%s: archive %+v", run.Name, rec.Archive)
	}
	var children []store.ChildRecord
	for _, ch := range rec.Archive.Children {
		children = append(children, store.ChildRecord{Name: ch.Name, UID: types.UID(ch.UID), Phase: ch.Phase})
	}
	if !equality.Semantic.DeepEqual(children, s.children) {
		t.Errorf("%s: children %+v, want %+v", run.Name, children, s.children)
	}
}

// checkOutputs reads every record's output subresource, eight at a time.
func checkOutputs(t *testing.T, c *historyclient.Client, specs map[string]runSpec) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	work := make(chan runSpec)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for s := range work {
				o, err := c.Output(ctx, s.ns, s.name)
				switch {
				case err != nil:
					t.Errorf("%s: output: %v", s.name, err)
				case o.Stored != (s.output != nil) || s.output != nil && o.Output != *s.output:
					t.Errorf("%s: output stored=%v %q, want %v", s.name, o.Stored, o.Output, s.output)
				}
			}
		})
	}
	for _, s := range specs {
		work <- s
	}
	close(work)
	wg.Wait()
}
