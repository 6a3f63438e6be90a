package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
)

// facts are the observed inputs of one reconcile: what Decide reads, plus
// what acting on its answer needs.
type facts struct {
	runstate.Facts
	// spawnFiles is the blueprint to snapshot (before spawn only).
	spawnFiles map[string]string
	// resolved is the provider for the next call, when one is due and ready.
	resolved *resolved
	// children are the run's child runs, from the cache.
	children []arv1.AgentRun
	// answerUpdates are answers whose fate must be written on them.
	answerUpdates []answerUpdate
	// tool is the next MCP tool call's server, when one is due and ready.
	tool *resolvedTool
}

// derive gathers the facts: the blueprint (snapshot, or the ConfigMap
// before spawn), the journal folded over it, and, only when a call is due,
// the provider config and credentials.
func (r *AgentRunReconciler) derive(ctx context.Context, run *arv1.AgentRun, now time.Time) (*facts, error) {
	f := &facts{Facts: runstate.Facts{
		Cancel: run.Spec.Cancel, Paused: run.Spec.Paused, Yolo: run.Spec.Yolo, YoloProfile: run.Spec.YoloProfile, Now: now,
		Budgets: run.Spec.Budgets,
	}}
	if c := run.Status.Active; c != nil {
		f.Working = time.Duration(c.TotalSeconds(now)) * time.Second
	}
	if err := r.loadBlueprint(ctx, run, f); err != nil {
		return nil, err
	}
	if !f.Spawned {
		return f, nil
	}
	// Which steps run now is read before the journal: a step finishing in
	// between then shows either as still running or as completed in the
	// journal, never as neither (which would look like an interrupted call).
	inFlight := r.Pool.InFlightSeqs(run.UID)
	entries, err := r.journals.Load(ctx, run)
	if err != nil {
		return nil, err
	}
	f.State = journal.Fold(f.Blueprint, entries)
	f.TitleWanted = f.Blueprint.Agent.Title.Enabled && run.Spec.Depth == 0
	if f.children, err = r.listChildren(ctx, run); err != nil {
		return nil, err
	}
	f.Children = r.childFacts(run, f.children)
	f.Depth, f.MaxChildDepth = run.Spec.Depth, defaultMaxChildDepth
	if d := f.Blueprint.Agent.MaxChildDepth; d != nil {
		f.MaxChildDepth = *d
	}
	if d := run.Spec.MaxChildDepth; d != nil {
		f.MaxChildDepth = *d
	}
	if p := f.State.Pending; p != nil {
		f.InFlight = inFlight[p.Seq]
	}
	if err := r.toolFacts(ctx, run, f, inFlight); err != nil {
		return nil, err
	}
	// After the tool facts: which question the run asks depends on them.
	if err := r.answerFacts(ctx, run, f); err != nil {
		return nil, err
	}
	if runstate.NeedsProvider(f.Facts) {
		stage, _, _ := f.Blueprint.Stage(f.State.Stage)
		var refs []string
		if f.TitleWanted && !f.State.Titled && f.Blueprint.Agent.Title.Model != "" {
			refs = []string{f.Blueprint.Agent.Title.Model}
		}
		res, block, retryAt, err := r.resolveProvider(ctx, run, stage, refs, f.State, now)
		if err != nil {
			return nil, err
		}
		f.Setup, f.SetupRetryAt, f.resolved = block, retryAt, res
	}
	return f, nil
}

// loadBlueprint finds the run's snapshot, or before spawn reads the
// blueprint ConfigMap the spec names. A missing blueprint is a setup wait
// (GitOps applies objects in any order); one that does not parse is an error.
func (r *AgentRunReconciler) loadBlueprint(ctx context.Context, run *arv1.AgentRun, f *facts) error {
	if bp, ok := r.blueprints.Get(run.UID); ok {
		f.Spawned, f.Blueprint = true, bp
		return nil
	}
	snap := &corev1.ConfigMap{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: ownedName(run, "blueprint")}, snap)
	switch {
	case err == nil && ownedBy(snap, run):
		bp, perr := blueprint.Parse(snap.Data)
		if perr == nil {
			perr = withEntryStage(bp, run.Spec.EntryStage)
		}
		if perr != nil {
			f.BlueprintError = fmt.Sprintf("blueprint snapshot %s: %v", snap.Name, perr)
			return nil
		}
		r.blueprints.Put(run.UID, bp)
		f.Spawned, f.Blueprint = true, bp
		return nil
	case err == nil:
		f.BlueprintError = fmt.Sprintf("ConfigMap %s/%s exists and is not this run's blueprint snapshot; delete or rename it", snap.Namespace, snap.Name)
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading the blueprint snapshot: %w", err)
	}

	src := &corev1.ConfigMap{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: run.Spec.Agent}, src); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading blueprint ConfigMap %s/%s: %w", run.Namespace, run.Spec.Agent, err)
		}
		f.Setup = &runstate.SetupBlock{
			Blocker: arv1.BlockerBlueprintMissing,
			Refs:    []string{"ConfigMap/" + run.Spec.Agent},
			Remedy: fmt.Sprintf("Create the blueprint ConfigMap %s/%s from the agent's directory (agent.toml and prompt files): kubectl create configmap %s -n %s --from-file=<agent dir>",
				run.Namespace, run.Spec.Agent, run.Spec.Agent, run.Namespace),
		}
		return nil
	}
	bp, err := blueprint.Parse(src.Data)
	if err == nil {
		err = withEntryStage(bp, run.Spec.EntryStage)
	}
	if err != nil {
		f.BlueprintError = fmt.Sprintf("blueprint ConfigMap %s/%s: %v", run.Namespace, run.Spec.Agent, err)
		return nil
	}
	f.Blueprint, f.spawnFiles = bp, src.Data
	return nil
}

// withEntryStage makes spec.entryStage the blueprint's entry stage for this
// run (fan-out workers running one of their parent's stages).
func withEntryStage(bp *blueprint.Blueprint, stage string) error {
	if stage == "" {
		return nil
	}
	if _, _, ok := bp.Stage(stage); !ok {
		return fmt.Errorf("spec.entryStage %q is not a stage of the blueprint", stage)
	}
	bp.Agent.EntryStage = stage
	return nil
}

// blueprintCache keeps parsed snapshots by run UID. A snapshot never
// changes, so the cache never goes stale.
type blueprintCache struct {
	mu sync.Mutex
	m  map[types.UID]*blueprint.Blueprint
}

func newBlueprintCache() *blueprintCache {
	return &blueprintCache{m: map[types.UID]*blueprint.Blueprint{}}
}

func (c *blueprintCache) Get(uid types.UID) (*blueprint.Blueprint, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	bp, ok := c.m[uid]
	return bp, ok
}

func (c *blueprintCache) Put(uid types.UID, bp *blueprint.Blueprint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[uid] = bp
}

func (c *blueprintCache) Forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, uid)
}
