package children

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
	"github.com/agentrun-dev/agentrun-operator/internal/tracing"
)

// DefaultMaxDepth caps descendants when neither the spec nor the
// blueprint does.
const DefaultMaxDepth = 4

// IndexOwnerUID indexes AgentRuns by their controller owner's UID, so a
// run's children are listed by it (never by name, so a recreated parent
// of the same name adopts nothing).
const IndexOwnerUID = "metadata.controllerOwnerUID"

// Outputs reads a finished run's output (the runs' store).
type Outputs interface {
	Output(ctx context.Context, run store.RunRef) (string, bool, error)
}

// Children creates, lists, cascades to and deletes a run's child runs
// (fan-out workers and sub-agents), and remembers the ones it created that
// the cache has not shown yet.
type Children struct {
	// client creates, patches and deletes children.
	client client.Client
	// runs lists them through IndexOwnerUID: the manager's cache, or the
	// shards'.
	runs    client.Reader
	outputs Outputs
	tracer  *tracing.Tracer
	expect  *expectations
}

// New builds Children.
func New(c client.Client, runs client.Reader, outputs Outputs, tracer *tracing.Tracer) *Children {
	return &Children{client: c, runs: runs, outputs: outputs, tracer: tracer, expect: newExpectations()}
}

// Expected holds the children created and not seen yet, by parent (for the
// registry of per-run state).
func (c *Children) Expected() perrun.Holder { return c.expect }

// List reads the run's children from the cache through the controller-owner
// UID index.
func (c *Children) List(ctx context.Context, run *arv1.AgentRun) ([]arv1.AgentRun, error) {
	var list arv1.AgentRunList
	if err := c.runs.List(ctx, &list, client.InNamespace(run.Namespace), client.MatchingFields{IndexOwnerUID: string(run.UID)}); err != nil {
		return nil, fmt.Errorf("listing children: %w", err)
	}
	return list.Items, nil
}

// Facts turns children into what Decide reads, counting children this
// manager created that the cache has not shown yet as running (so a stale
// cache never lets a fan-out exceed max_workers).
func (c *Children) Facts(run *arv1.AgentRun, children []arv1.AgentRun) []runstate.ChildFact {
	seen := sets.New[string]()
	out := make([]runstate.ChildFact, 0, len(children))
	for i := range children {
		ch := &children[i]
		seen.Insert(ch.Name)
		out = append(out, factOf(ch))
	}
	return append(out, c.expect.pending(run.UID, seen)...)
}

func factOf(c *arv1.AgentRun) runstate.ChildFact {
	idx, _ := strconv.Atoi(c.Labels[arv1.LabelItem])
	att, _ := strconv.Atoi(c.Labels[arv1.LabelAttempt])
	return runstate.ChildFact{
		Name: c.Name, Kind: runstate.ChildKind(c.Labels[arv1.LabelChildKind]),
		Index: idx, Attempt: att, Phase: c.Status.Phase,
	}
}

// Create creates the requested children (f: the parent's facts). Names
// are deterministic, so a create retried after a crash finds the child it
// made before.
func (c *Children) Create(ctx context.Context, run *arv1.AgentRun, f *runstate.Facts, reqs []runstate.ChildRequest) error {
	for _, req := range reqs {
		child, err := c.childFor(run, f, req)
		if err != nil {
			return err
		}
		c.expect.expect(run.UID, factOf(child))
		if err := c.client.Create(ctx, child); err != nil && !apierrors.IsAlreadyExists(err) {
			c.expect.forget(run.UID, child.Name)
			return fmt.Errorf("creating child %s: %w", child.Name, err)
		}
	}
	return nil
}

func (c *Children) childFor(run *arv1.AgentRun, f *runstate.Facts, req runstate.ChildRequest) (*arv1.AgentRun, error) {
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
	c.traceChild(run, child, f)
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

// Cascade makes non-terminal children follow the parent: cancelled with it,
// paused and resumed with it.
func (c *Children) Cascade(ctx context.Context, run *arv1.AgentRun, children []arv1.AgentRun, cancel bool) error {
	for i := range children {
		ch := &children[i]
		if ch.Status.Phase.IsTerminal() || !ch.DeletionTimestamp.IsZero() {
			continue
		}
		wantCancel := cancel || ch.Spec.Cancel
		wantPaused := run.Spec.Paused
		if ch.Spec.Cancel == wantCancel && ch.Spec.Paused == wantPaused {
			continue
		}
		orig := ch.DeepCopy()
		ch.Spec.Cancel, ch.Spec.Paused = wantCancel, wantPaused
		if err := c.client.Patch(ctx, ch, client.MergeFrom(orig)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("cascading to child %s: %w", ch.Name, err)
		}
	}
	return nil
}

// DeleteOf deletes the children of a deleted run (by its UID). The garbage
// collector would too, in its own time.
func (c *Children) DeleteOf(ctx context.Context, ns string, uid types.UID) error {
	var list arv1.AgentRunList
	if err := c.runs.List(ctx, &list, client.InNamespace(ns), client.MatchingFields{IndexOwnerUID: string(uid)}); err != nil {
		return err
	}
	for i := range list.Items {
		if err := c.client.Delete(ctx, &list.Items[i], client.PropagationPolicy("Background")); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

// MergeInputs reads the final outputs of the last fan-out's successful
// workers, in item order, from their output objects.
func (c *Children) MergeInputs(ctx context.Context, children []arv1.AgentRun) ([]string, error) {
	latest := map[int]*arv1.AgentRun{}
	for i := range children {
		ch := &children[i]
		if ch.Labels[arv1.LabelChildKind] != string(runstate.ChildWorker) {
			continue
		}
		f := factOf(ch)
		if cur, ok := latest[f.Index]; !ok || factOf(cur).Attempt < f.Attempt {
			latest[f.Index] = ch
		}
	}
	idx := make([]int, 0, len(latest))
	for i := range latest {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var out []string
	for _, i := range idx {
		w := latest[i]
		if w.Status.Phase != arv1.PhaseComplete || w.Status.FinalOutput == nil {
			continue
		}
		text, _, err := c.outputs.Output(ctx, store.RefOf(w))
		if err != nil {
			return nil, fmt.Errorf("reading worker %s's output: %w", w.Name, err)
		}
		out = append(out, text)
	}
	return out, nil
}

// traceChild carries the trace to a child in its traceparent annotation:
// its span is a child of the stage visit that created it, whichever
// replica drives it.
func (c *Children) traceChild(run, child *arv1.AgentRun, f *runstate.Facts) {
	if !c.tracer.On() {
		return
	}
	t := tracing.RunOfObject(run)
	child.Annotations = map[string]string{tracing.AnnotationTraceparent: t.Traceparent(t.VisitOrRun(len(f.State.Visits) - 1))}
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
