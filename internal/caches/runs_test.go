package caches

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// TestWrittenCopyGoesWhenTheCacheAlreadyHasIt: a status write whose watch
// event beat its response leaves no copy behind (no later event would drop
// it), while a write the cache has not seen yet is kept for the next
// reconcile.
func TestWrittenCopyGoesWhenTheCacheAlreadyHasIt(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := arv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", UID: "u1"}, Spec: arv1.AgentRunSpec{Agent: "a", Task: "t"}}
	build := func() client.Client {
		return fake.NewClientBuilder().WithScheme(scheme).WithObjects(run.DeepCopy()).WithStatusSubresource(&arv1.AgentRun{}).Build()
	}
	write := func(c *Runs, live client.Client) {
		before := &arv1.AgentRun{}
		if err := live.Get(context.Background(), client.ObjectKeyFromObject(run), before); err != nil {
			t.Fatal(err)
		}
		after := before.DeepCopy()
		after.Status.Phase = arv1.PhaseComplete
		if written, err := c.PatchStatus(context.Background(), before, after); err != nil || !written {
			t.Fatalf("PatchStatus: written %v, %v", written, err)
		}
	}

	// The cache is the API server itself: it holds the write at once.
	live := build()
	c := NewRuns(live, live, live)
	write(c, live)
	if n := c.Kept(); n != 0 {
		t.Errorf("%d copies kept of a write the cache already held, want 0", n)
	}

	// A cache that lags (a copy of the run as it was before the write).
	live, stale := build(), build()
	c = NewRuns(stale, live, live)
	write(c, live)
	if n := c.Kept(); n != 1 {
		t.Errorf("%d copies kept of a write the cache has not seen, want 1", n)
	}
}
