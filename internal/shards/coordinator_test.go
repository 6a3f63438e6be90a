package shards

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	if env, err = testenv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// Short Lease timings, so takeovers happen within seconds.
const (
	testDuration = 3 * time.Second
	testRenew    = 2 * time.Second
	testRetry    = 500 * time.Millisecond
)

// driving records which replica drove which shard when.
type driving struct {
	mu      sync.Mutex
	current map[int]string // shard -> replica driving it now
	doubled []string       // a shard driven by two replicas at once
	started map[int][]time.Time
	stopped map[string]time.Time // replica/shard -> when its Drive ended
}

func newDriving() *driving {
	return &driving{current: map[int]string{}, started: map[int][]time.Time{}, stopped: map[string]time.Time{}}
}

func (d *driving) drive(id string, owns func() *Coordinator) func(context.Context, int) {
	return func(ctx context.Context, shard int) {
		d.mu.Lock()
		if other, ok := d.current[shard]; ok {
			d.doubled = append(d.doubled, fmt.Sprintf("shard %d: %s started while %s drove it", shard, id, other))
		}
		d.current[shard] = id
		d.started[shard] = append(d.started[shard], time.Now())
		d.mu.Unlock()
		<-ctx.Done()
		d.mu.Lock()
		// The fence holds at once: the replica no longer owns the shard
		// when its Drive context has ended.
		if owns().Owns(shard) {
			d.doubled = append(d.doubled, fmt.Sprintf("shard %d: %s still owns it after its Drive ended", shard, id))
		}
		delete(d.current, shard)
		d.stopped[fmt.Sprintf("%s/%d", id, shard)] = time.Now()
		d.mu.Unlock()
	}
}

func (d *driving) byReplica() map[string][]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string][]int{}
	for s, id := range d.current {
		out[id] = append(out[id], s)
	}
	return out
}

func newNamespace(t *testing.T, kube kubernetes.Interface) string {
	t.Helper()
	ns, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1Namespace, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// replica is one coordinator running until stop.
type replica struct {
	c    *Coordinator
	stop context.CancelFunc
	done chan struct{}
}

func startReplica(t *testing.T, cfg *rest.Config, ns, id string, shards int, d *driving) *replica {
	t.Helper()
	kube := kubernetes.NewForConfigOrDie(cfg)
	r := &replica{done: make(chan struct{})}
	c, err := New(Config{Shards: shards, Namespace: ns, Identity: id, LeaseDuration: testDuration, RenewDeadline: testRenew,
		RetryPeriod: testRetry, Kube: kube, Drive: d.drive(id, func() *Coordinator { return r.c })})
	if err != nil {
		t.Fatal(err)
	}
	r.c = c
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() { defer close(r.done); _ = c.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

func waitUntil(t *testing.T, within time.Duration, what string, ok func() bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Now()
}

func evenly(d *driving, shards int, ids ...string) func() bool {
	return func() bool {
		by := d.byReplica()
		total := 0
		for _, id := range ids {
			n := len(by[id])
			if n < shards/len(ids) || n > (shards+len(ids)-1)/len(ids) {
				return false
			}
			total += n
		}
		return total == shards
	}
}

// Three replicas split six shards two each; one leaving hands its shards
// over at once (it releases them), one joining takes its share, and no
// shard is ever driven by two replicas.
func TestReplicasShareShardsEvenly(t *testing.T) {
	kube := kubernetes.NewForConfigOrDie(env.Config)
	ns := newNamespace(t, kube)
	d := newDriving()
	a := startReplica(t, env.Config, ns, "a", 6, d)
	startReplica(t, env.Config, ns, "b", 6, d)
	waitUntil(t, 20*time.Second, "a and b drive three shards each", evenly(d, 6, "a", "b"))
	startReplica(t, env.Config, ns, "c", 6, d)
	waitUntil(t, 20*time.Second, "a, b and c drive two shards each", evenly(d, 6, "a", "b", "c"))

	left := time.Now()
	a.stop()
	<-a.done
	at := waitUntil(t, 20*time.Second, "b and c drive three shards each once a leaves", evenly(d, 6, "b", "c"))
	if took := at.Sub(left); took > testDuration {
		// A replica that leaves releases its Leases: nobody waits for them
		// to expire.
		t.Errorf("a's shards moved %s after it left; a release should not wait out the %s Lease", took, testDuration)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, msg := range d.doubled {
		t.Error(msg)
	}
}

// A replica cut off from the API server stops driving its shards within
// the renew deadline, and only then, once their Leases expire, do the
// others take them: there is no moment two replicas drive one shard.
func TestCutOffReplicaStopsBeforeOthersTakeOver(t *testing.T) {
	kube := kubernetes.NewForConfigOrDie(env.Config)
	ns := newNamespace(t, kube)
	proxy, err := env.StartProxy()
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	d := newDriving()
	cut := startReplica(t, proxy.Config(env.Config), ns, "cut", 4, d)
	startReplica(t, env.Config, ns, "live", 4, d)
	waitUntil(t, 20*time.Second, "two shards each", evenly(d, 4, "cut", "live"))
	mine := d.byReplica()["cut"]

	cutAt := time.Now()
	proxy.Cut()
	fenced := waitUntil(t, 10*time.Second, "the cut-off replica to stop driving", func() bool { return len(cut.c.Owned()) == 0 })
	took := waitUntil(t, 20*time.Second, "the live replica to drive every shard", evenly(d, 4, "live"))

	d.mu.Lock()
	defer d.mu.Unlock()
	for _, msg := range d.doubled {
		t.Error(msg)
	}
	for _, s := range mine {
		stopped := d.stopped[fmt.Sprintf("cut/%d", s)]
		starts := d.started[s]
		taken := starts[len(starts)-1]
		if stopped.IsZero() || !stopped.Before(taken) {
			t.Errorf("shard %d: the cut-off replica stopped at %v, the live one started at %v; it must stop first", s, stopped, taken)
		}
		if limit := cutAt.Add(testRenew + time.Second); stopped.After(limit) {
			t.Errorf("shard %d: the cut-off replica drove it until %s after the cut; the renew deadline is %s", s, stopped.Sub(cutAt), testRenew)
		}
	}
	t.Logf("cut-off replica fenced %s after the cut, shards taken over %s after it (lease %s, renew deadline %s)",
		fenced.Sub(cutAt).Round(10*time.Millisecond), took.Sub(cutAt).Round(10*time.Millisecond), testDuration, testRenew)
}

func TestCheckTimingsRefusesUnsafeOnes(t *testing.T) {
	for _, c := range []struct {
		d, r, p time.Duration
		ok      bool
	}{
		{15 * time.Second, 10 * time.Second, 2 * time.Second, true},
		{10 * time.Second, 10 * time.Second, 2 * time.Second, false}, // renew deadline not shorter
		{15 * time.Second, 3 * time.Second, 2 * time.Second, false},  // one failed renewal loses the shard
		{500 * time.Millisecond, 200 * time.Millisecond, 50 * time.Millisecond, false},
	} {
		if err := CheckTimings(c.d, c.r, c.p); (err == nil) != c.ok {
			t.Errorf("CheckTimings(%s, %s, %s) = %v, want ok=%v", c.d, c.r, c.p, err, c.ok)
		}
	}
}

var corev1Namespace = corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "shards-"}}
