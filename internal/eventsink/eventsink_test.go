package eventsink

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/metrics"
)

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := arv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func run(i int) *arv1.AgentRun {
	return &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: fmt.Sprintf("r-%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}}
}

// A burst of Events is sent several at a time: every sender holds a create
// the API server has not answered, and the rest still go out. One sender
// alone would never reach the in-flight count the creates wait for.
func TestSendsSeveralAtOnce(t *testing.T) {
	scheme := testScheme(t)
	var mu sync.Mutex
	inFlight, most := 0, 0
	allIn, release := make(chan struct{}), sync.Once{}
	c := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			if inFlight == senders {
				release.Do(func() { close(allIn) })
			}
			mu.Unlock()
			defer func() {
				mu.Lock()
				inFlight--
				mu.Unlock()
			}()
			select {
			case <-allIn:
			case <-ctx.Done():
				return ctx.Err()
			}
			return cl.Create(ctx, obj, opts...)
		},
	}).Build()
	s := New(c, scheme, "agentrun-operator")
	const n = 3 * senders
	for i := range n {
		s.Eventf(run(i), nil, "Normal", "Succeeded", "Complete", "The run completed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	deadline := time.Now().Add(20 * time.Second)
	var list eventsv1.EventList
	for {
		if err := c.List(context.Background(), &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(list.Items) != n || most != senders {
		t.Fatalf("%d of %d Events sent, at most %d at once; want all, %d at once", len(list.Items), n, most, senders)
	}
	for _, e := range list.Items {
		if e.Regarding.Kind != "AgentRun" || e.Reason != "Succeeded" || e.Note != "The run completed" || e.ReportingController != "agentrun-operator" {
			t.Fatalf("sent %+v", e)
		}
	}
}

// Past the queue's bound, Events are dropped, never waited for, and each
// drop is counted.
func TestDropsAreCounted(t *testing.T) {
	scheme := testScheme(t)
	s := New(fake.NewClientBuilder().WithScheme(scheme).Build(), scheme, "agentrun-operator")
	before := testutil.ToFloat64(metrics.EventsDropped)
	for i := range queueSize + 3 {
		s.Eventf(run(i), nil, "Normal", "Succeeded", "Complete", "The run completed")
	}
	if got := testutil.ToFloat64(metrics.EventsDropped) - before; got != 3 || len(s.queue) != queueSize {
		t.Fatalf("%v dropped, %d queued; want 3 dropped, %d queued", got, len(s.queue), queueSize)
	}
}

// The same Event about the same run within the repeat window is recorded
// once; another run's, or another reason, is not a repeat.
func TestRepeatsAreRecordedOnce(t *testing.T) {
	scheme := testScheme(t)
	s := New(fake.NewClientBuilder().WithScheme(scheme).Build(), scheme, "agentrun-operator")
	s.Eventf(run(1), nil, "Warning", "NeedsSetup", "Park", "Secret %s is missing", "key")
	s.Eventf(run(1), nil, "Warning", "NeedsSetup", "Park", "Secret %s is missing", "key")
	s.Eventf(run(2), nil, "Warning", "NeedsSetup", "Park", "Secret %s is missing", "key")
	s.Eventf(run(1), nil, "Normal", "Resumed", "Resume", "Secret %s is there", "key")
	if len(s.warnings) != 2 || len(s.queue) != 1 {
		t.Fatalf("%d Warnings and %d Normal Events queued, want 2 and 1", len(s.warnings), len(s.queue))
	}
}

// sent lists the Events the client holds.
func sent(t *testing.T, c client.Client) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// waitSent waits until n Events are sent, or fails.
func waitSent(t *testing.T, c client.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for len(sent(t, c)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d Events sent", len(sent(t, c)), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// noneFor looks, for the whole window, for a sent Event beyond want, and
// fails the test at the first: it proves that Events wait, for which there
// is no event to wait on.
func noneFor(t *testing.T, c client.Client, window time.Duration, want func([]eventsv1.Event) bool, what string) {
	t.Helper()
	for end := time.Now().Add(window); ; time.Sleep(10 * time.Millisecond) {
		if got := sent(t, c); !want(got) {
			t.Fatalf("sent %+v: %s", got, what)
		}
		if time.Now().After(end) {
			return
		}
	}
}

// While the manager's own writes are in flight an Event waits, and it goes
// out as soon as none is.
func TestGivesWayToTheRunsWrites(t *testing.T) {
	scheme := testScheme(t)
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	s := New(c, scheme, "agentrun-operator")
	s.giveWayFor = time.Hour
	var busy atomic.Bool
	busy.Store(true)
	s.GiveWay = busy.Load
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Start(ctx) }()
	s.Eventf(run(1), nil, "Normal", "Succeeded", "Complete", "The run completed")
	noneFor(t, c, 300*time.Millisecond, func(got []eventsv1.Event) bool { return len(got) == 0 },
		"Events sent while the run writes were in flight, want 0")
	busy.Store(false)
	waitSent(t, c, 1)
}

// Under writes that never stop, an Event still goes out once it has given
// way for giveWayFor.
func TestGivesWayForABoundedTime(t *testing.T) {
	scheme := testScheme(t)
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	s := New(c, scheme, "agentrun-operator")
	s.giveWayFor = 50 * time.Millisecond
	s.GiveWay = func() bool { return true }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Start(ctx) }()
	for i := range 3 {
		s.Eventf(run(i), nil, "Normal", "Succeeded", "Complete", "The run completed")
	}
	waitSent(t, c, 3)
}

// A Warning may ask a person to act: under writes that never stop it goes
// out after warningGiveWayFor, while Normal Events recorded before it
// (more than there are senders) still wait out giveWayFor.
func TestWarningsGiveWayBriefly(t *testing.T) {
	scheme := testScheme(t)
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	s := New(c, scheme, "agentrun-operator")
	s.giveWayFor = time.Hour
	s.warningGiveWayFor = 50 * time.Millisecond
	s.GiveWay = func() bool { return true }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Start(ctx) }()
	for i := range senders + 1 {
		s.Eventf(run(i), nil, "Normal", "Succeeded", "Complete", "The run completed")
	}
	// Every Normal sender holds one: one is left queued.
	for deadline := time.Now().Add(20 * time.Second); len(s.queue) != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d Normal Events still queued, want 1 with every sender holding one", len(s.queue))
		}
	}
	s.Eventf(run(senders+1), nil, "Warning", "NeedsSetup", "Park", "Secret s is missing")
	waitSent(t, c, 1)
	noneFor(t, c, 300*time.Millisecond, func(got []eventsv1.Event) bool { return len(got) == 1 && got[0].Type == "Warning" },
		"want the Warning alone while the Normal Events give way")
}
