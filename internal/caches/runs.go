// Package caches holds what the reconciler reads through instead of the
// API server: runs, with the copy of each run's last status write kept
// until the informer catches up (so a reconcile never starts from a cache
// that lags its own write), and the ConfigMaps and Secrets runs refer to,
// read live only when their version changes. FinishedRunTransform keeps the
// informer's copy of a finished run down to what is still read of it.
package caches

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// ErrStatusConflict says the run changed since it was read (a spec edit, or a
// write this process has not seen yet); nothing was stored, and the run is
// reconciled again from what the API server holds now.
var ErrStatusConflict = errors.New("the run changed while it was reconciled")

// Runs reads runs and writes their status. A run's status is written
// by one merge patch per reconcile, computed against the copy the
// reconcile started from and carrying its resourceVersion, so a stale copy
// (or a second writer) fails on the conflict instead of overwriting. The
// copy each write returns is kept until the informer cache has caught up
// with it, so the next reconcile starts from what was written, not from a
// cache that lags it.
type Runs struct {
	cached client.Reader // runs, from the informer cache(s)
	writer client.Client
	live   client.Reader

	mu sync.Mutex
	// written holds the copy each run's last status write returned.
	written map[types.NamespacedName]*arv1.AgentRun
	// gone holds the UID of each run the informer saw leave the cache
	// (deleted, or gone to a shard another replica drives) until the
	// reconcile of its name stops its work and forgets it (Gone).
	gone map[types.NamespacedName]types.UID
}

// NewRuns reads runs from cached (the informer cache or caches), writes
// their status with w, and reads a run that changed under a write from live.
func NewRuns(cached client.Reader, w client.Client, live client.Reader) *Runs {
	return &Runs{cached: cached, writer: w, live: live, written: map[types.NamespacedName]*arv1.AgentRun{}, gone: map[types.NamespacedName]types.UID{}}
}

// Get returns the newest copy of the run known here, or nil when it is gone.
func (c *Runs) Get(ctx context.Context, key types.NamespacedName) (*arv1.AgentRun, error) {
	run := &arv1.AgentRun{}
	if err := c.cached.Get(ctx, key, run); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if mine, ok := c.written[key]; ok {
		if mine.UID == run.UID && newer(mine.ResourceVersion, run.ResourceVersion) {
			return mine.DeepCopy(), nil
		}
		delete(c.written, key)
	}
	return run, nil
}

// newer reports whether resourceVersion a is later than b.
func newer(a, b string) bool {
	cmp, err := resourceversion.CompareResourceVersion(a, b)
	return err == nil && cmp > 0
}

// Observed drops the kept copy of a run once the cache has caught up with
// it (an informer event at or past it).
func (c *Runs) Observed(run *arv1.AgentRun) {
	key := types.NamespacedName{Namespace: run.Namespace, Name: run.Name}
	c.mu.Lock()
	defer c.mu.Unlock()
	if mine, ok := c.written[key]; ok && (mine.UID != run.UID || !newer(mine.ResourceVersion, run.ResourceVersion)) {
		delete(c.written, key)
	}
}

// left notes a run the informer no longer holds: its UID waits for the
// reconcile of its name (Gone).
func (c *Runs) left(run *arv1.AgentRun) {
	key := types.NamespacedName{Namespace: run.Namespace, Name: run.Name}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gone[key] = run.UID
	if mine, ok := c.written[key]; ok && mine.UID == run.UID {
		delete(c.written, key)
	}
}

// Gone returns the UID of a run of that name the informer saw leave, unless
// it is the run the cache holds now (cur, nil when none), which came back;
// either way it is no longer kept. A run deleted and created again under
// its name is found here while its successor is in the cache.
func (c *Runs) Gone(key types.NamespacedName, cur *arv1.AgentRun) (types.UID, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	uid, ok := c.gone[key]
	if !ok {
		return "", false
	}
	delete(c.gone, key)
	if cur != nil && cur.UID == uid {
		return "", false
	}
	if mine, kept := c.written[key]; kept && mine.UID == uid {
		delete(c.written, key)
	}
	return uid, true
}

// GoneAgain puts back a gone run whose forgetting failed, unless another
// left under its name meanwhile.
func (c *Runs) GoneAgain(key types.NamespacedName, uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, newer := c.gone[key]; !newer {
		c.gone[key] = uid
	}
}

// Drop forgets what is kept of a run no longer driven here (its shard
// went to another replica).
func (c *Runs) Drop(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.gone, key)
	delete(c.written, key)
}

// Forget drops the copy kept of the run's last status write, unless it
// records the run's end and the informer has not caught up with it yet:
// until then it fences a reconcile off the stale copy in the cache, which
// would drive the finished run again (Observed drops it, or Gone once the
// run is deleted). A gone run's UID stays for its reconcile (Gone).
func (c *Runs) Forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, mine := range c.written {
		if mine.UID == uid && !mine.Status.Phase.IsTerminal() {
			delete(c.written, key)
		}
	}
}

// Has reports whether a written copy of the run, or its UID as gone, is
// kept.
func (c *Runs) Has(uid types.UID) bool {
	found := false
	c.EachRun(func(u types.UID) { found = found || u == uid })
	return found
}

// EachRun calls fn with every run a written copy of is kept, and every
// gone run not forgotten yet.
func (c *Runs) EachRun(fn func(types.UID)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, mine := range c.written {
		fn(mine.UID)
	}
	for _, uid := range c.gone {
		fn(uid)
	}
}

// PatchStatus writes after's status under before's resourceVersion and
// says whether a write was stored; nothing is sent when the status is
// unchanged. On success after holds what the API server stored. On a
// conflict (ErrStatusConflict) the run is read live, so the next reconcile
// starts from the stored version.
func (c *Runs) PatchStatus(ctx context.Context, before, after *arv1.AgentRun) (bool, error) {
	if SameStatus(&before.Status, &after.Status) {
		return false, nil
	}
	err := c.writeStatus(ctx, before, after)
	key := types.NamespacedName{Namespace: after.Namespace, Name: after.Name}
	switch {
	case err == nil:
		kept := after.DeepCopy()
		kept.ManagedFields = nil // never read; they would double the copy
		c.mu.Lock()
		c.written[key] = kept
		c.mu.Unlock()
		c.dropIfCached(ctx, key, kept)
		return true, nil
	case apierrors.IsConflict(err):
		c.refresh(ctx, key)
		return false, ErrStatusConflict
	case apierrors.IsNotFound(err):
		return false, nil // deleted meanwhile; its deletion is handled on its own
	}
	return false, fmt.Errorf("writing status: %w", err)
}

// writeStatus stores after's status under before's resourceVersion. A
// run in progress is written whole, with a PUT of the status subresource:
// the API server keeps everything but status either way, and the version
// fences both alike, but a merge patch makes it encode the stored run,
// merge and decode again before it validates, about a third of the
// write's cost to it (and costs this process two encodings and a diff). A
// finished run's cached copy holds only part of its status
// (FinishedRunTransform), so only what changed is sent, as a merge patch.
func (c *Runs) writeStatus(ctx context.Context, before, after *arv1.AgentRun) error {
	if before.Status.Phase.IsTerminal() {
		return c.writer.Status().Patch(ctx, after, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	}
	after.ResourceVersion = before.ResourceVersion
	return c.writer.Status().Update(ctx, after)
}

// dropIfCached drops the copy just kept when the informer already holds
// the write: its watch event can arrive before the write's response, and
// then no later event would drop the copy (a finished run's never comes),
// so every such run would be held twice.
func (c *Runs) dropIfCached(ctx context.Context, key types.NamespacedName, kept *arv1.AgentRun) {
	cached := &arv1.AgentRun{}
	if err := c.cached.Get(ctx, key, cached); err != nil || cached.UID != kept.UID || newer(kept.ResourceVersion, cached.ResourceVersion) {
		return
	}
	c.mu.Lock()
	if c.written[key] == kept {
		delete(c.written, key)
	}
	c.mu.Unlock()
}

// SameStatus compares statuses as they are stored: two that serialise
// alike (an empty list and none, a time with and without its nanoseconds)
// are the same, so no write is made for a difference nobody can see.
//
// A status is compared on every step between two model calls, and a
// scalar that differs always serialises differently, so those are checked
// first and the encoding is left for statuses that may be the same.
func SameStatus(a, b *arv1.AgentRunStatus) bool {
	if a != nil && b != nil && scalarsDiffer(a, b) {
		return false
	}
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// scalarsDiffer says a and b differ in a field that is a plain value (or
// a struct of plain values): such a difference is never invisible in JSON.
func scalarsDiffer(a, b *arv1.AgentRunStatus) bool {
	return a.Phase != b.Phase || a.Usage != b.Usage || a.Iteration != b.Iteration ||
		a.CurrentStage != b.CurrentStage || a.Stage != b.Stage || a.StageIndex != b.StageIndex ||
		a.NumStages != b.NumStages || a.Model != b.Model || a.Error != b.Error ||
		a.ObservedGeneration != b.ObservedGeneration || a.Driver != b.Driver
}

// refresh keeps the run as the API server holds it now.
func (c *Runs) refresh(ctx context.Context, key types.NamespacedName) {
	fresh := &arv1.AgentRun{}
	c.mu.Lock()
	delete(c.written, key)
	c.mu.Unlock()
	if err := c.live.Get(ctx, key, fresh); err != nil {
		return
	}
	c.mu.Lock()
	c.written[key] = fresh
	c.mu.Unlock()
}

// WaitingOn lists the runs of namespace whose written status (not in the
// informer cache yet) waits on ref ("Kind/name"): a Secret or ConfigMap
// created just after a run parked on it must wake it even when its event
// reaches this process before the run's own.
func (c *Runs) WaitingOn(namespace, ref string) []types.NamespacedName {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []types.NamespacedName
	for key, run := range c.written {
		if key.Namespace == namespace && slices.Contains(run.Status.SetupRefs, ref) {
			out = append(out, key)
		}
	}
	return out
}

// Kept reports how many written copies are held (tests and metrics).
func (c *Runs) Kept() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.written)
}

// Handler is the informer event handler that tells the cache what the
// informer has seen, and wakes a run that left it (with wake) so that its
// reconcile forgets it (the controller's own delete event may be handled
// before this handler's).
func (c *Runs) Handler(wake func(...types.NamespacedName)) toolscache.ResourceEventHandler {
	return cacheHandler{runs: c, wake: wake}
}

// cacheHandler is Handler.
type cacheHandler struct {
	runs *Runs
	wake func(...types.NamespacedName)
}

func (h cacheHandler) OnAdd(obj any, _ bool) { h.seen(obj) }
func (h cacheHandler) OnUpdate(_, obj any)   { h.seen(obj) }

func (h cacheHandler) OnDelete(obj any) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	run, ok := obj.(*arv1.AgentRun)
	if !ok {
		return
	}
	h.runs.left(run)
	h.wake(types.NamespacedName{Namespace: run.Namespace, Name: run.Name})
}

func (h cacheHandler) seen(obj any) {
	if run, ok := obj.(*arv1.AgentRun); ok {
		h.runs.Observed(run)
	}
}
