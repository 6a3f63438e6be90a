package queue

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/quota"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
)

// meanwhile is the database store with something happening between a
// quota's refusal of a start and its return to the gate: what another
// replica or the quota's watch does in that gap.
type meanwhile struct {
	*sqlstore.Store
	once sync.Once
	fn   func()
}

func (m *meanwhile) StartRun(ctx context.Context, run store.RunRef, limits []store.QuotaLimit) error {
	err := m.Store.StartRun(ctx, run, limits)
	var qe *store.QuotaExceededError
	if errors.As(err, &qe) {
		m.once.Do(m.fn)
	}
	return err
}

// slotsGate is a queue whose quota gate counts in a SQLite store, with one
// AgentRunQuota of one activeRuns slot in namespace ns, and the runs it
// wakes.
func slotsGate(t *testing.T) (*Queue, *sqlstore.Store, *arv1.AgentRunQuota, func() []string) {
	t.Helper()
	db, err := sqlstore.Open(sqlstore.Config{DSN: "sqlite:" + filepath.Join(t.TempDir(), "agentrun.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	q := &arv1.AgentRunQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "slots", Generation: 1},
		Spec: arv1.AgentRunQuotaSpec{Hard: arv1.QuotaHard{ActiveRuns: ptr.To[int32](1)}}}
	reader := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(q).Build()
	var mu sync.Mutex
	var woken []string
	qu := New(Options{Cache: reader, Runs: reader, Quotas: db, Wake: func(ks ...types.NamespacedName) {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range ks {
			woken = append(woken, k.Name)
		}
	}})
	return qu, db, q, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(woken)
	}
}

func queuedRun(name string) *arv1.AgentRun {
	return &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Status: arv1.AgentRunStatus{Phase: arv1.PhaseQueued}}
}

// TestSlotFreedBeforeTheWaitWakesTheWaiter: a run refused an activeRuns
// slot whose holder ends on another replica between the refusal and its
// wait (no wake of this process can name it yet, and no other run of the
// quota may ever end) is woken by the gate's own look at the store once
// it waits. It fails when only the cost and tokens waiters are rechecked:
// the run then waits for a slot that is free.
func TestSlotFreedBeforeTheWaitWakesTheWaiter(t *testing.T) {
	qu, db, _, woken := slotsGate(t)
	ctx, now := context.Background(), time.Now()
	first, second := queuedRun("first"), queuedRun("second")
	if h, err := qu.HoldStart(ctx, first, nil, now); err != nil || h != nil {
		t.Fatalf("the first run's start: hold %+v, %v; want it started", h, err)
	}
	qu.quotas.db = &meanwhile{Store: db, fn: func() {
		if _, err := db.EndRun(ctx, first.UID); err != nil {
			t.Error(err)
		}
	}}
	h, err := qu.HoldStart(ctx, second, nil, now)
	if err != nil || h == nil || h.Wait.Resource != arv1.QuotaActiveRuns {
		t.Fatalf("the second run's start: hold %+v, %v; want it held on activeRuns", h, err)
	}
	if got := woken(); !slices.Equal(got, []string{"second"}) {
		t.Errorf("woken %v once the first run's slot was given back before the second waited; want [second]", got)
	}
	if qu.quotas.Has(second.UID) {
		t.Errorf("the second run still waits on the quota: %v", qu.quotas.waiting)
	}
	// It takes the slot when it tries again.
	if h, err := qu.HoldStart(ctx, second, nil, now); err != nil || h != nil {
		t.Errorf("the second run's start once woken: hold %+v, %v; want it started", h, err)
	}
}

// TestRefusalJudgedBeforeARaiseWakesAtOnce: a start refused against a
// quota's old generation, whose raise the watch delivers (and wakes the
// quota's waiters for) before the refused run waits, wakes that run at
// once rather than leave it waiting on a quota with room. It fails when
// the wait is noted without looking at the generation: the raise's wake
// came too early to find it, and nothing else would come.
func TestRefusalJudgedBeforeARaiseWakesAtOnce(t *testing.T) {
	qu, db, q, woken := slotsGate(t)
	ctx, now := context.Background(), time.Now()
	key := quota.Key(arv1.KindAgentRunQuota, "ns", "slots")
	qu.quotas.observe(key, 1) // the watch's first list
	first, second := queuedRun("first"), queuedRun("second")
	if h, err := qu.HoldStart(ctx, first, nil, now); err != nil || h != nil {
		t.Fatalf("the first run's start: hold %+v, %v; want it started", h, err)
	}
	raised := q.DeepCopy()
	raised.Generation, raised.Spec.Hard.ActiveRuns = 2, ptr.To[int32](2)
	qu.quotas.db = &meanwhile{Store: db, fn: func() {
		qu.QuotaHandler().OnUpdate(q, raised)
	}}
	h, err := qu.HoldStart(ctx, second, nil, now)
	if err != nil || h == nil {
		t.Fatalf("the second run's start: hold %+v, %v; want it held by the refusal it was judged by", h, err)
	}
	if got := woken(); !slices.Equal(got, []string{"second"}) {
		t.Errorf("woken %v after the raise was delivered between the refusal and the wait; want [second]", got)
	}
	if qu.quotas.Has(second.UID) {
		t.Errorf("the second run still waits on the quota: %v", qu.quotas.waiting)
	}

	// A refusal judged against the generation the watch delivered last
	// waits (its wake is the quota's next change).
	third := queuedRun("third")
	qu.quotas.await(third, refusal{err: &store.QuotaExceededError{Quota: key, Resource: arv1.QuotaActiveRuns, Used: 2, Hard: 2, Need: 1}, generation: 2})
	if got := woken(); slices.Contains(got, "third") || !qu.quotas.Has(third.UID) {
		t.Errorf("a refusal judged against the current generation: woken %v, waiting %v; want it waiting", got, qu.quotas.waiting)
	}
	// Deleted: a refusal judged against any generation of it wakes at once.
	qu.QuotaHandler().OnDelete(raised)
	fourth := queuedRun("fourth")
	qu.quotas.await(fourth, refusal{err: &store.QuotaExceededError{Quota: key, Resource: arv1.QuotaActiveRuns, Used: 2, Hard: 2, Need: 1}, generation: 2})
	if got := woken(); !slices.Contains(got, "third") || !slices.Contains(got, "fourth") || qu.quotas.Has(fourth.UID) {
		t.Errorf("after the quota's deletion: woken %v, waiting %v; want third (waiting) and fourth (refused after) woken", got, qu.quotas.waiting)
	}
}

// TestSlotFreedBeforeTheWaitWithoutADatabase: without a database store
// the gate counts the slots itself; a run waiting on activeRuns is woken
// by the recheck that follows its wait when a slot is free by that count,
// and stays while every slot is held.
func TestSlotFreedBeforeTheWaitWithoutADatabase(t *testing.T) {
	const key = "AgentRunQuota/ns/slots"
	var woken []string
	g := newQuotaGate(nil, nil, nil, false, nil, func(ks ...types.NamespacedName) {
		for _, k := range ks {
			woken = append(woken, k.Name)
		}
	})
	g.active[key] = map[types.UID]bool{"uid-a": true, "uid-b": true}
	g.await(queuedRun("waiter"), refusal{err: &store.QuotaExceededError{Quota: key, Resource: arv1.QuotaActiveRuns, Used: 2, Hard: 2, Need: 1}, generation: 1})
	g.recheck(context.Background(), key)
	if len(woken) != 0 || !g.Has("uid-waiter") {
		t.Fatalf("with both slots held: woken %v, waiting %v; want the run waiting", woken, g.waiting)
	}
	delete(g.active[key], "uid-a") // ended, its wake gone before the wait
	g.recheck(context.Background(), key)
	if !slices.Equal(woken, []string{"waiter"}) || g.Has("uid-waiter") {
		t.Errorf("with a slot free: woken %v, waiting %v; want the run woken", woken, g.waiting)
	}
}
