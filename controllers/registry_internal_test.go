package controllers

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/circuit"
	"github.com/agentrun-dev/agentrun-operator/internal/executor"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/perrun"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
	"github.com/agentrun-dev/agentrun-operator/internal/shards"
	"github.com/agentrun-dev/agentrun-operator/internal/steps"
)

// testReconciler is a reconciler on a fake client, with one executor slot
// and runs divided into two shards of which this replica drives owned.
func testReconciler(t *testing.T, owned func(int) bool) *AgentRunReconciler {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := arv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&arv1.AgentRun{}).Build()
	r, err := NewAgentRunReconciler(Deps{
		Client: c, APIReader: c, Recorder: events.NewFakeRecorder(16), Pool: executor.New(1, 1),
		Breakers: circuit.New(), Identity: "me",
		Sharding: Sharding{Shards: 2, Owns: owned}, RestConfig: &rest.Config{},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// hold puts something of run in every holder of per-run state, through
// each one's own API.
func hold(t *testing.T, r *AgentRunReconciler, run *arv1.AgentRun, now time.Time) {
	t.Helper()
	uid := run.UID
	if _, err := r.journals.Load(context.Background(), run, true); err != nil {
		t.Fatal(err)
	}
	r.expect.expect(uid, runstate.ChildFact{Name: run.Name + "-child"})
	r.unstarted.mark(executor.Key{Run: uid, Seq: 1})
	r.failures.put(uid, errors.New("a failed write"))
	r.pressure.lasted(uid, true, now)
	r.admission.Admit(admissionRun(run, r.priorities.Load(), func(string, string) *arv1.AgentRun { return nil }), now)
	r.statusWrites.Put(uid, now)
	r.unjournaled.Put(uid, journal.Entry{Seq: 1})
	var call steps.ModelCall
	r.track(run, &call)
	call.Held(now.Add(time.Minute))
	r.statusTimers.arm(uid, time.Hour, func() {})
	r.first.born.Put(uid, struct{}{})
	r.first.held.Put(uid, &arv1.AgentRunStatus{})
	r.steps.Deliveries.Put(uid, steps.DeliveryReport{})
	r.steps.Refusals.Put(uid, errors.New("a refused journal write"))
	r.steps.Unrecorded.Put(uid, steps.Unrecorded{})
	r.store.park(run)
	if _, ok := r.pool.Reserve(r.stepOf(run, 1, "")); ok {
		t.Fatal("the executor had room: the run does not wait for it")
	}
	key := "ns/provider-of-" + run.Name
	for range r.breakers.Threshold {
		r.breakers.Failure(key, "ProviderFailed", now)
	}
	if !r.breakers.Admit(key, string(uid), now.Add(r.breakers.Cooldown+time.Second)) {
		t.Fatal("the half-open circuit refused the run's probe")
	}
	// The run cache keeps the copy a status write returned (no shard cache
	// holds the run, so the informer has not caught up with it).
	if err := r.client.Create(context.Background(), run.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	before := &arv1.AgentRun{}
	if err := r.client.Get(context.Background(), client.ObjectKeyFromObject(run), before); err != nil {
		t.Fatal(err)
	}
	after := before.DeepCopy()
	after.Status.Driver = "me"
	if written, err := r.runs.PatchStatus(context.Background(), before, after); err != nil || !written {
		t.Fatalf("writing the status of %s: written %v, %v", run.Name, written, err)
	}
}

func shardRun(name string, shard int) *arv1.AgentRun {
	return &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.Now(),
		Labels: map[string]string{shards.LabelShard: fmt.Sprint(shard)},
	}, Status: arv1.AgentRunStatus{Phase: arv1.PhaseRunning}}
}

// listCache is a shard's cache as dropShard reads it: a list of its runs.
type listCache struct {
	cache.Cache
	runs []arv1.AgentRun
}

func (c listCache) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	list.(*arv1.AgentRunList).Items = c.runs
	return nil
}

// TestShardHandedOverLeavesNoRunState: when this replica's Lease on a
// shard ends (another replica takes it over), every piece of state it kept
// of the shard's runs goes, in every registered holder; the runs of the
// shard it still drives keep theirs.
func TestShardHandedOverLeavesNoRunState(t *testing.T) {
	lost := false
	r := testReconciler(t, func(s int) bool { return s == 0 || !lost })
	if _, ok := r.pool.Reserve(executor.Step{Key: executor.Key{Run: "someone-else", Seq: 1}}); !ok {
		t.Fatal("no room for the step that fills the executor")
	}
	now := time.Now()
	var handed []arv1.AgentRun
	for i := range 3 {
		run := shardRun(fmt.Sprintf("h%d", i), 1)
		hold(t, r, run, now)
		handed = append(handed, *run)
	}
	kept := shardRun("k", 0)
	hold(t, r, kept, now)

	r.runState.Each(func(name string, h perrun.Holder) {
		for _, run := range append(slices.Clone(handed), *kept) {
			if !h.Has(run.UID) {
				t.Errorf("holder %q keeps nothing of %s: hold() must put something in every registered holder", name, run.Name)
			}
		}
	})
	if n := r.RunsInMemory(); n != 5 {
		t.Errorf("RunsInMemory = %d before the hand-over, want 5 (4 runs and the step filling the executor)", n)
	}

	lost = true
	r.dropShard(listCache{runs: handed})
	for _, run := range handed {
		if held := r.HeldFor(run.UID); len(held) != 0 {
			t.Errorf("%s was handed over, but this replica still keeps its %s", run.Name, strings.Join(held, ", "))
		}
	}
	if held := r.HeldFor(kept.UID); len(held) != r.countHolders() {
		t.Errorf("the run of the shard still driven here lost state: held by %v", held)
	}
	if n := r.RunsInMemory(); n != 2 {
		t.Errorf("RunsInMemory = %d after the hand-over, want 2", n)
	}
}

func (r *AgentRunReconciler) countHolders() int {
	n := 0
	r.runState.Each(func(string, perrun.Holder) { n++ })
	return n
}

// TestEveryPerRunMapIsRegistered walks everything the reconciler holds
// (its own packages' types) and fails for a map or slice keyed by, or made
// of, runs (a UID, a name, or a struct holding one) that no registered
// holder contains: forget would leave it behind.
func TestEveryPerRunMapIsRegistered(t *testing.T) {
	r := testReconciler(t, func(int) bool { return true })
	covered := map[uintptr]bool{}
	r.runState.Each(func(_ string, h perrun.Holder) {
		v := reflect.ValueOf(h)
		if v.Kind() == reflect.Struct { // an adapter: what it points to
			for i := range v.NumField() {
				if f := v.Field(i); f.Kind() == reflect.Pointer {
					covered[f.Pointer()] = true
				}
			}
			return
		}
		covered[v.Pointer()] = true
	})
	// Per-run, but not kept past the run: each entry goes with the work
	// that made it, which Forget cannot hurry.
	exempt := map[string]string{
		"toolpolicy.Evaluator.cache":  "compiled programs per tool policy (keyed by the policy's UID and generation, not by run), dropped when the policy is deleted and bounded by maxCached",
		"toolcatalog.Catalog.waiters": "runs waiting for an MCP server's tool listing, woken and dropped when the listing ends (within its timeout)",
		"controllers.wakeTimes.m":     "when each run the manager woke was first woken, keyed by name: every wake queues a reconcile, which takes the entry as it starts",
	}
	w := &mapWalker{covered: covered, seen: map[uintptr]bool{}, found: map[string]string{}}
	w.walk(reflect.ValueOf(r), "r", "")
	for field, path := range w.found {
		if _, ok := exempt[field]; !ok {
			t.Errorf("%s (%s) keeps state per run but no registered holder contains it: register it in registerRunState", field, path)
		}
	}
	for field := range exempt {
		if _, ok := w.found[field]; !ok {
			t.Errorf("exempt %s is gone: drop it from the list", field)
		}
	}
}

const modulePath = "github.com/agentrun-dev/agentrun-operator"

type mapWalker struct {
	covered map[uintptr]bool
	seen    map[uintptr]bool
	// found maps each per-run field found (type.field) to the path it was
	// reached by.
	found map[string]string
}

// walk looks at v, reached by path; field names it as its struct's field.
func (w *mapWalker) walk(v reflect.Value, path, field string) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() || w.covered[v.Pointer()] || w.seen[v.Pointer()] || !ours(v.Type().Elem()) {
			return
		}
		w.seen[v.Pointer()] = true
		w.walk(v.Elem(), path, field)
	case reflect.Interface:
		if !v.IsNil() {
			w.walk(v.Elem(), path, field)
		}
	case reflect.Struct:
		if !ours(v.Type()) {
			return
		}
		for i := range v.NumField() {
			name := v.Type().Field(i).Name
			w.walk(v.Field(i), path+"."+name, v.Type().String()+"."+name)
		}
	case reflect.Map, reflect.Slice:
		if perRun(v.Type()) {
			w.found[field] = path
		}
	}
}

// ours: a type of this module, whose fields are walked.
func ours(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return strings.HasPrefix(t.PkgPath(), modulePath)
}

// perRun: a map keyed by runs, or a map or slice whose elements are runs
// or such maps.
func perRun(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Map:
		return isRun(t.Key()) || perRun(t.Elem()) || isRun(t.Elem())
	case reflect.Slice:
		return isRun(t.Elem()) || perRun(t.Elem())
	}
	return false
}

// isRun: a run's UID or name, or a struct holding one.
func isRun(t reflect.Type) bool {
	if t == reflect.TypeFor[types.UID]() || t == reflect.TypeFor[types.NamespacedName]() {
		return true
	}
	if t.Kind() != reflect.Struct || !ours(t) {
		return false
	}
	for i := range t.NumField() {
		if isRun(t.Field(i).Type) {
			return true
		}
	}
	return false
}
