package controllers

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sync/singleflight"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/controllers/agentrun/children"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
)

// facts are the observed inputs of one reconcile: what Decide reads, plus
// what acting on its answer needs.
type facts struct {
	runstate.Facts
	// spawnFiles is the blueprint to snapshot, spawnParsed its parse (not
	// narrowed to the run's entry stage) and snapshot its name (before
	// spawn only).
	spawnFiles  map[string]string
	spawnParsed *blueprint.Blueprint
	snapshot    string
	// resolved is the provider for the next call, when one is due and ready.
	resolved *resolved
	// children are the run's child runs, from the cache.
	children []arv1.AgentRun
	// answerUpdates are answers whose fate must be written on them.
	answerUpdates []answerUpdate
	// tool is the next MCP tool call's server, when one is due and ready.
	tool *resolvedTool
	// listings are tool servers whose catalog must be (re)listed now.
	listings []serverConn
	// offer is what the model is offered, when a call to a model that
	// chooses tools is due.
	offer *offer
	// statusIntent is the intent status holds that the journal has not
	// recorded yet (it is journaled with its outcome).
	statusIntent *journal.Entry
	// fork is what a fork inherits from its source (fork.go), before spawn
	// only.
	fork *forkSeed
}

// deriveWith gathers the facts: the blueprint (its snapshot, or the source
// ConfigMap before spawn), the journal folded over it with the intent
// status holds, and, only when a call is due, the provider and its
// credentials. Nothing here waits on anything but the API server, and most
// of it is read from memory. For the step that has just finished a call
// and holds its outcome (ahead: the call's intent and completion, not
// journaled yet) the journal is folded with them, and the step's own call
// does not count as in flight, so Decide answers what comes next.
func (r *AgentRunReconciler) deriveWith(ctx context.Context, run *arv1.AgentRun, now time.Time, fresh bool, ahead []journal.Entry) (*facts, error) {
	f := &facts{Facts: runstate.Facts{
		Cancel: run.Spec.Cancel, Paused: run.Spec.Paused, Yolo: run.Spec.Yolo, YoloProfile: run.Spec.YoloProfile, Now: now,
		Budgets: run.Spec.Budgets, RunName: run.Name, Messages: pendingMessages(run),
	}}
	if c := run.Status.Active; c != nil {
		f.Working = time.Duration(c.TotalSeconds(now)) * time.Second
	}
	// Which steps run now is read before the journal: a step finishing in
	// between then shows either as still running or as completed in the
	// journal, never as neither (which would look like an interrupted call).
	inFlight := ahead == nil && r.pool.CallInFlight(run.UID)
	entries, err := r.journals.Load(ctx, run, fresh)
	if err != nil {
		return nil, err
	}
	if err := r.loadBlueprint(ctx, run, f, journal.StartedFrom(entries)); err != nil {
		return nil, err
	}
	if !f.Spawned {
		// A run that never spawned may have journaled only its
		// cancellation.
		if len(entries) > 0 {
			f.State = journal.Fold(&blueprint.Blueprint{}, entries)
		}
		if run.Spec.ForkOf != nil && len(entries) == 0 && f.Blueprint != nil && f.BlueprintError == "" && f.Setup == nil {
			if err := r.childCalls.forkFacts(ctx, run, f); err != nil {
				return nil, err
			}
		}
		return f, r.regionFacts(ctx, run, f)
	}
	if ahead != nil {
		entries = withAhead(entries, ahead)
	} else {
		entries, f.statusIntent = withPendingIntent(entries, run.Status.PendingCall, now)
		if e, ok := r.unjournaled.Get(run.UID); ok && f.statusIntent == nil {
			entries, f.statusIntent = withUnjournaled(entries, e)
		}
	}
	f.State = journal.Fold(f.Blueprint, entries)
	f.TitleWanted = f.Blueprint.Agent.Title.Enabled && run.Spec.Depth == 0
	if err := r.regionFacts(ctx, run, f); err != nil {
		return nil, err
	}
	if err := r.childrenFacts(ctx, run, f); err != nil {
		return nil, err
	}
	if f.State.Pending != nil {
		f.InFlight = inFlight
		if inFlight {
			f.RateLimited = r.rateHolds.shown(run.UID)
		}
	}
	if err := r.tools.toolFacts(ctx, run, f, inFlight); err != nil {
		return nil, err
	}
	if err := r.tools.policyFacts(ctx, run, f); err != nil {
		return nil, err
	}
	// After the tool facts: which question the run asks depends on them.
	if err := r.answerFacts(ctx, run, f); err != nil {
		return nil, err
	}
	if err := r.providerFacts(ctx, run, f, now); err != nil {
		return nil, err
	}
	if runstate.NeedsProvider(f.Facts) {
		if hit := r.queue.Refused(ctx, run, now); hit != nil {
			f.Quota = hit
		}
	}
	return f, nil
}

// neverDriven says the run's status records nothing it did: no snapshot,
// no intent, no end. Whether its journal is then empty too is
// r.fresh's question.
func neverDriven(run *arv1.AgentRun) bool {
	return run.Status.BlueprintSnapshot == "" && run.Status.PendingCall == nil && !run.Status.Phase.IsTerminal()
}

// withPendingIntent adds the intent status records, when the journal has
// not recorded it (with its outcome) yet: it was written ahead of its call,
// in status, and is journaled only with the call's outcome.
func withPendingIntent(entries []journal.Entry, p *arv1.PendingCall, now time.Time) ([]journal.Entry, *journal.Entry) {
	next := int64(0)
	if n := len(entries); n > 0 {
		next = entries[n-1].Seq + 1
	}
	if p == nil || p.Seq < next {
		return entries, nil
	}
	e := journal.Entry{Seq: p.Seq, At: now, Stage: p.Stage, Iteration: int(p.Iteration)}
	if p.Kind == arv1.CallKindModel {
		e.Kind, e.Provider, e.Model, e.RequestHash, e.Purpose, e.Lost = journal.ModelCallRequested, p.Provider, p.Model, p.RequestHash, p.Purpose, int(p.Lost)
	} else {
		e.Kind, e.Index, e.Tool, e.Input, e.Effect, e.Server, e.IdempotencyKey = journal.ToolCallRequested, int(p.Index), p.Tool, p.Input, string(p.Effect), p.Server, p.IdempotencyKey
	}
	return append(entries[:len(entries):len(entries)], e), &e
}

// withUnjournaled adds the intent a step is about to journal (dispatch
// kept it here), when the journal does not hold it yet: after it, or over
// the unanswered intent it issues again.
func withUnjournaled(entries []journal.Entry, e journal.Entry) ([]journal.Entry, *journal.Entry) {
	n := len(entries)
	switch {
	case n == 0 || e.Seq > entries[n-1].Seq:
		return append(entries[:n:n], e), &e
	case e.Seq == entries[n-1].Seq && entries[n-1].Kind == journal.ModelCallRequested:
		return append(entries[:n-1:n-1], e), &e
	}
	return entries, nil
}

// withAhead adds the entries a step holds that the journal does not have
// yet (its intent may already be there; its completion is not).
func withAhead(entries []journal.Entry, ahead []journal.Entry) []journal.Entry {
	out := entries[:len(entries):len(entries)]
	for _, e := range ahead {
		if n := len(out); n == 0 || e.Seq > out[n-1].Seq {
			out = append(out, e)
		}
	}
	return out
}

// childrenFacts reads the run's children and its depth limits.
func (r *AgentRunReconciler) childrenFacts(ctx context.Context, run *arv1.AgentRun, f *facts) error {
	var err error
	if f.children, err = r.children.List(ctx, run); err != nil {
		return err
	}
	f.Children = r.children.Facts(run, f.children)
	f.Depth, f.MaxChildDepth = run.Spec.Depth, children.DefaultMaxDepth
	if d := f.Blueprint.Agent.MaxChildDepth; d != nil {
		f.MaxChildDepth = *d
	}
	if d := run.Spec.MaxChildDepth; d != nil {
		f.MaxChildDepth = *d
	}
	return nil
}

// providerFacts resolves the provider and its credentials, only when a
// model call is due.
func (r *AgentRunReconciler) providerFacts(ctx context.Context, run *arv1.AgentRun, f *facts, now time.Time) error {
	if !runstate.NeedsProvider(f.Facts) {
		return nil
	}
	stage, _, _ := f.Blueprint.Stage(f.State.Stage)
	var refs []string
	if f.TitleWanted && !f.State.Titled && f.Blueprint.Agent.Title.Model != "" {
		refs = []string{f.Blueprint.Agent.Title.Model}
	}
	// A half-open circuit admits one probe: a probe this run claimed and
	// did not make is given back first, and one another run holds makes
	// the provider read as open when resolved again (failover, or park).
	owner := string(run.UID)
	r.breakers.Release(owner)
	res, block, retryAt, err := r.resolveProvider(ctx, run, stage, refs, f.State, now)
	for err == nil && res != nil && !r.breakers.Admit(breakerKey(run.Namespace, res.provider.Name), owner, now) {
		res, block, retryAt, err = r.resolveProvider(ctx, run, stage, refs, f.State, now)
	}
	if err != nil {
		return err
	}
	f.Setup, f.SetupRetryAt, f.resolved = block, retryAt, res
	if block == nil {
		if err := r.tools.requiredTools(ctx, run, f, stage); err != nil {
			return err
		}
	}
	if res != nil && f.Setup == nil {
		r.tools.offerFacts(ctx, run, f, stage)
	}
	return nil
}

// loadBlueprint reads the run's snapshot, or before spawn the blueprint
// it is to start from: the snapshot its spec names (a fan-out worker runs
// its parent's), else the ConfigMap spec.agent names. A missing blueprint
// ConfigMap is a setup wait (GitOps applies objects in any order); a
// blueprint that does not parse is an error.
//
// A run whose journal names the snapshot it started from (journaled
// before its first status write) uses that one, and status records it.
func (r *AgentRunReconciler) loadBlueprint(ctx context.Context, run *arv1.AgentRun, f *facts, started string) error {
	if started != "" && run.Status.BlueprintSnapshot == "" {
		run.Status.BlueprintSnapshot = started
	}
	switch {
	case run.Status.BlueprintSnapshot != "":
		return r.loadSnapshot(ctx, run, f, run.Status.BlueprintSnapshot, true)
	case run.Spec.BlueprintSnapshot != "":
		return r.loadSnapshot(ctx, run, f, run.Spec.BlueprintSnapshot, false)
	}
	return r.loadSource(ctx, run, f)
}

// loadSnapshot reads a snapshot: the run's own (spawned), or the one its
// spec names, which spawning records as its own.
func (r *AgentRunReconciler) loadSnapshot(ctx context.Context, run *arv1.AgentRun, f *facts, name string, spawned bool) error {
	bp, perr, err := r.blueprints.snapshot(ctx, run.Namespace, name)
	if err != nil {
		return err
	}
	if perr != nil && spawned {
		return &snapshotError{name: name, err: perr} // the run's own record: terminal.go
	}
	if perr == nil {
		bp, perr = withEntryStage(bp, run.Spec.EntryStage)
	}
	if perr == nil && !spawned {
		perr = workerRefused(run, bp)
	}
	if perr != nil {
		f.BlueprintError = fmt.Sprintf("blueprint snapshot %s: %v", name, perr)
		return nil
	}
	f.Blueprint, f.Spawned = bp, spawned
	if !spawned {
		f.snapshot = name
	}
	return nil
}

// loadSource reads and parses the blueprint ConfigMap spec.agent names.
func (r *AgentRunReconciler) loadSource(ctx context.Context, run *arv1.AgentRun, f *facts) error {
	data, rv, found, err := r.refs.ConfigMap(ctx, run.Namespace, run.Spec.Agent)
	switch {
	case err != nil:
		return fmt.Errorf("reading blueprint ConfigMap %s/%s: %w", run.Namespace, run.Spec.Agent, err)
	case !found:
		f.Setup = &runstate.SetupBlock{
			Blocker: arv1.BlockerBlueprintMissing,
			Refs:    []string{"ConfigMap/" + run.Spec.Agent},
			Remedy: fmt.Sprintf("Create the blueprint ConfigMap %s/%s from the agent's directory (agent.toml and prompt files): kubectl create configmap %s -n %s --from-file=<agent dir>",
				run.Namespace, run.Spec.Agent, run.Spec.Agent, run.Namespace),
		}
		return nil
	}
	src := r.blueprints.parseSource(run.Namespace, run.Spec.Agent, rv, data)
	bp, err := src.bp, src.err
	if err == nil {
		bp, err = withEntryStage(bp, run.Spec.EntryStage)
	}
	if err == nil {
		err = workerRefused(run, bp)
	}
	if err != nil {
		f.BlueprintError = fmt.Sprintf("blueprint ConfigMap %s/%s: %v", run.Namespace, run.Spec.Agent, err)
		return nil
	}
	f.Blueprint, f.spawnFiles, f.spawnParsed, f.snapshot = bp, data, src.bp, src.snapshot
	return nil
}

// withEntryStage makes spec.entryStage the blueprint's entry stage for this
// run (fan-out workers running one of their parent's stages), on a copy:
// a parsed snapshot is shared by every run of it.
func withEntryStage(bp *blueprint.Blueprint, stage string) (*blueprint.Blueprint, error) {
	if stage == "" {
		return bp, nil
	}
	if _, _, ok := bp.Stage(stage); !ok {
		return nil, fmt.Errorf("spec.entryStage %q is not a stage of the blueprint", stage)
	}
	c := *bp
	c.Agent.EntryStage = stage
	return &c, nil
}

// blueprintCache keeps parsed snapshots by name. A snapshot never changes
// (its name is its content's hash, and it is immutable), so the cache
// never goes stale; it is bounded so a stream of distinct blueprints
// cannot grow it without end.
type blueprintCache struct {
	mu    sync.Mutex
	m     map[string]*blueprint.Blueprint
	order []string
	// flight shares one read or create of a snapshot among the runs that
	// need it at once (snapshot.go).
	flight singleflight.Group
}

const blueprintCacheSize = 256

func newBlueprintCache() *blueprintCache {
	return &blueprintCache{m: map[string]*blueprint.Blueprint{}}
}

func (c *blueprintCache) Get(name string) (*blueprint.Blueprint, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	bp, ok := c.m[name]
	return bp, ok
}

func (c *blueprintCache) Put(name string, bp *blueprint.Blueprint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[name]; ok {
		return
	}
	if len(c.order) >= blueprintCacheSize {
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
	c.m[name] = bp
	c.order = append(c.order, name)
}
