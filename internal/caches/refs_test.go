package caches

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// gatedReader counts its Gets and holds each until released.
type gatedReader struct {
	client.Reader
	gets    atomic.Int32
	release chan struct{}
}

func (g *gatedReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	g.gets.Add(1)
	<-g.release
	return g.Reader.Get(ctx, key, obj, opts...)
}

// TestRefsReadOnceForABurst: the reconciles of a burst of runs that need
// the same Secret before the informer has it read it live once between
// them, and each gets its data.
func TestRefsReadOnceForABurst(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "key"}, Data: map[string][]byte{"apiKey": []byte("k")}}
	live := &gatedReader{Reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(secret).Build(), release: make(chan struct{})}
	// The informer has not seen the Secret yet: every caller reads live.
	empty := fake.NewClientBuilder().WithScheme(scheme).Build()
	refs := NewRefs(empty, live)

	const burst = 20
	var started, done sync.WaitGroup
	started.Add(burst)
	done.Add(burst)
	got := make([]string, burst)
	for i := range burst {
		go func() {
			defer done.Done()
			started.Done()
			data, _, found, err := refs.Secret(context.Background(), "ns", "key")
			if err == nil && found {
				got[i] = string(data["apiKey"])
			}
		}()
	}
	started.Wait()
	// Every caller is at the read (or about to be) before the one in
	// flight answers.
	time.Sleep(200 * time.Millisecond)
	close(live.release)
	done.Wait()
	if n := live.gets.Load(); n != 1 {
		t.Errorf("%d live reads for a burst of %d, want 1", n, burst)
	}
	for i, v := range got {
		if v != "k" {
			t.Fatalf("caller %d got %q, want the Secret's data", i, v)
		}
	}
}
