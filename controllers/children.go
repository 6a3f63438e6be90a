package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/perrun"
	"github.com/agentrun-dev/agentrun-operator/internal/runqueue"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
	"github.com/agentrun-dev/agentrun-operator/internal/shards"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// defaultMaxChildDepth caps descendants when neither the spec nor the
// blueprint does.
const defaultMaxChildDepth = 4

// listChildren reads the run's children from the cache through the
// controller-owner UID index (never by name, so a recreated parent of the
// same name adopts nothing).
func (r *AgentRunReconciler) listChildren(ctx context.Context, run *arv1.AgentRun) ([]arv1.AgentRun, error) {
	var list arv1.AgentRunList
	if err := r.runsReader.List(ctx, &list, client.InNamespace(run.Namespace), client.MatchingFields{IndexOwnerUID: string(run.UID)}); err != nil {
		return nil, fmt.Errorf("listing children: %w", err)
	}
	return list.Items, nil
}

// childFacts turns children into what Decide reads, counting children this
// manager created that the cache has not shown yet as running (so a stale
// cache never lets a fan-out exceed max_workers).
func (r *AgentRunReconciler) childFacts(run *arv1.AgentRun, children []arv1.AgentRun) []runstate.ChildFact {
	seen := sets.New[string]()
	out := make([]runstate.ChildFact, 0, len(children))
	for i := range children {
		c := &children[i]
		seen.Insert(c.Name)
		out = append(out, factOf(c))
	}
	return append(out, r.expect.pending(run.UID, seen)...)
}

func factOf(c *arv1.AgentRun) runstate.ChildFact {
	idx, _ := strconv.Atoi(c.Labels[arv1.LabelItem])
	att, _ := strconv.Atoi(c.Labels[arv1.LabelAttempt])
	return runstate.ChildFact{
		Name: c.Name, Kind: runstate.ChildKind(c.Labels[arv1.LabelChildKind]),
		Index: idx, Attempt: att, Phase: c.Status.Phase,
	}
}

// createChildren creates the requested children. Names are deterministic,
// so a create retried after a crash finds the child it made before.
func (r *AgentRunReconciler) createChildren(ctx context.Context, run *arv1.AgentRun, f *facts, reqs []runstate.ChildRequest) error {
	for _, req := range reqs {
		child, err := r.childFor(run, f, req)
		if err != nil {
			return err
		}
		r.expect.expect(run.UID, factOf(child))
		if err := r.client.Create(ctx, child); err != nil && !apierrors.IsAlreadyExists(err) {
			r.expect.forget(run.UID, child.Name)
			return fmt.Errorf("creating child %s: %w", child.Name, err)
		}
	}
	return nil
}

func (r *AgentRunReconciler) childFor(run *arv1.AgentRun, f *facts, req runstate.ChildRequest) (*arv1.AgentRun, error) {
	st := f.State
	spec := arv1.AgentRunSpec{
		ProviderConfig: run.Spec.ProviderConfig,
		Model:          run.Spec.Model,
		Depth:          run.Spec.Depth + 1,
		MaxChildDepth:  ptrInt32(f.MaxChildDepth),
		// A child is never less attended than its parent.
		Yolo:        run.Spec.Yolo,
		YoloProfile: run.Spec.YoloProfile,
		Paused:      run.Spec.Paused,
	}
	var name string
	switch req.Kind {
	case runstate.ChildWorker:
		fo := st.FanOut
		stage, _, _ := f.Blueprint.Stage(fo.Stage)
		spec.Task = fo.Items[req.Index]
		if stage.FanOut.WorkerAgent != "" {
			spec.Agent = stage.FanOut.WorkerAgent
		} else {
			// The agent is the parent's; the blueprint it runs from is the
			// parent's snapshot, so the worker runs exactly what its parent
			// runs.
			spec.Agent, spec.BlueprintSnapshot, spec.EntryStage = run.Spec.Agent, run.Status.BlueprintSnapshot, stage.FanOut.WorkerStage
		}
		name = childName(run, fmt.Sprintf("w%d", req.Index), req.Attempt)
	case runstate.ChildSubagent:
		sp := st.Subagents[req.Index]
		spec.Agent, spec.Task = sp.Agent, sp.Task
		name = childName(run, fmt.Sprintf("c%d", req.Index), 1)
	default:
		return nil, fmt.Errorf("unknown child kind %q", req.Kind)
	}
	place := runqueue.PlaceOf(run)
	child := &arv1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: run.Namespace,
			Labels: map[string]string{
				arv1.LabelParent:      labelValue(run.Name),
				arv1.LabelParentUID:   string(run.UID),
				arv1.LabelRootCreated: strconv.FormatInt(place.Root.UnixNano(), 10),
				arv1.LabelRoot:        labelValue(place.RootName),
				arv1.LabelItem:        strconv.Itoa(req.Index),
				arv1.LabelAttempt:     strconv.Itoa(req.Attempt),
				arv1.LabelChildKind:   string(req.Kind),
			},
			OwnerReferences: []metav1.OwnerReference{run.OwnerReference()},
		},
		Spec: spec,
	}
	if s, ok := run.Labels[shards.LabelShard]; ok {
		child.Labels[shards.LabelShard] = s // a run tree stays in one shard
	}
	r.traceChild(run, child, f)
	return child, nil
}

// childName is "<parent>-<suffix>" plus "-a<n>" for retries, shortened with
// a hash when the parent's name is too long for it.
func childName(run *arv1.AgentRun, suffix string, attempt int) string {
	if attempt > 1 {
		suffix = fmt.Sprintf("%s-a%d", suffix, attempt)
	}
	if n := run.Name + "-" + suffix; len(n) <= 253 {
		return n
	}
	h := sha256.Sum256([]byte(run.Name))
	return run.Name[:200] + "-" + hex.EncodeToString(h[:4]) + "-" + suffix
}

// labelValue fits a name into a label value (63 characters).
func labelValue(s string) string {
	if len(s) <= 63 {
		return s
	}
	h := sha256.Sum256([]byte(s))
	return s[:54] + "-" + hex.EncodeToString(h[:4])
}

func ptrInt32(v int32) *int32 { return &v }

// cascade makes non-terminal children follow the parent: cancelled with it,
// paused and resumed with it.
func (r *AgentRunReconciler) cascade(ctx context.Context, run *arv1.AgentRun, children []arv1.AgentRun, cancel bool) error {
	for i := range children {
		c := &children[i]
		if c.Status.Phase.IsTerminal() || !c.DeletionTimestamp.IsZero() {
			continue
		}
		wantCancel := cancel || c.Spec.Cancel
		wantPaused := run.Spec.Paused
		if c.Spec.Cancel == wantCancel && c.Spec.Paused == wantPaused {
			continue
		}
		orig := c.DeepCopy()
		c.Spec.Cancel, c.Spec.Paused = wantCancel, wantPaused
		if err := r.client.Patch(ctx, c, client.MergeFrom(orig)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("cascading to child %s: %w", c.Name, err)
		}
	}
	return nil
}

// mergeInputs reads the final outputs of the last fan-out's successful
// workers, in item order, from their output objects.
func (r *AgentRunReconciler) mergeInputs(ctx context.Context, _ *arv1.AgentRun, children []arv1.AgentRun) ([]string, error) {
	latest := map[int]*arv1.AgentRun{}
	for i := range children {
		c := &children[i]
		if c.Labels[arv1.LabelChildKind] != string(runstate.ChildWorker) {
			continue
		}
		f := factOf(c)
		if cur, ok := latest[f.Index]; !ok || factOf(cur).Attempt < f.Attempt {
			latest[f.Index] = c
		}
	}
	idx := make([]int, 0, len(latest))
	for i := range latest {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var out []string
	for _, i := range idx {
		c := latest[i]
		if c.Status.Phase != arv1.PhaseComplete || c.Status.FinalOutput == nil {
			continue
		}
		text, _, err := r.journals.Output(ctx, store.RefOf(c))
		if err != nil {
			return nil, fmt.Errorf("reading worker %s's output: %w", c.Name, err)
		}
		out = append(out, text)
	}
	return out, nil
}

// treeUsage sums this run's usage and its children's tree usage. Cost is
// unknown if any part is.
func treeUsage(own arv1.Usage, children []arv1.AgentRun) *arv1.Usage {
	if len(children) == 0 {
		return nil
	}
	t := own
	for i := range children {
		c := children[i].Status.Usage
		if tu := children[i].Status.TreeUsage; tu != nil {
			c = *tu
		}
		addUsage(&t, c)
	}
	return &t
}

// expectations remembers children created but not yet seen in the cache,
// the way the ReplicaSet controller does, so a reconcile on a stale cache
// neither forgets them nor over-creates.
// Its Box (Forget, Has, EachRun) holds, per parent, the expected children
// by name; each is changed under the Box's lock.
type expectations struct {
	*perrun.Box[map[string]runstate.ChildFact]
}

func newExpectations() *expectations {
	return &expectations{perrun.New[map[string]runstate.ChildFact]()}
}

func (e *expectations) expect(parent types.UID, c runstate.ChildFact) {
	e.Update(parent, func(m map[string]runstate.ChildFact, _ bool) (map[string]runstate.ChildFact, bool) {
		if m == nil {
			m = map[string]runstate.ChildFact{}
		}
		m[c.Name] = c
		return m, true
	})
}

func (e *expectations) forget(parent types.UID, name string) {
	e.Update(parent, func(m map[string]runstate.ChildFact, ok bool) (map[string]runstate.ChildFact, bool) {
		delete(m, name)
		return m, ok
	})
}

// pending returns the expected children not in seen, dropping those seen.
func (e *expectations) pending(parent types.UID, seen sets.Set[string]) []runstate.ChildFact {
	var out []runstate.ChildFact
	e.Update(parent, func(m map[string]runstate.ChildFact, ok bool) (map[string]runstate.ChildFact, bool) {
		for name, c := range m {
			if seen.Has(name) {
				delete(m, name)
				continue
			}
			out = append(out, c)
		}
		return m, ok
	})
	return out
}
