package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// A fork (spec.forkOf) starts with a copy of its source's journal up to a
// cut: the start of a stage, or an entry. The copy is made once, when the
// fork spawns, in the fork's own journal, marked inherited, so the calls
// before the cut are neither made nor billed again and their usage shows
// apart (status.inheritedUsage). The source is only read: its status and
// journal objects are never written. A source still running may be forked
// from any point its journal already holds (the journal is append-only, so
// that prefix cannot change); a stage it has not entered yet is refused.

// forkSeed is what spawning a fork writes: the inherited entries and the
// origin status records.
type forkSeed struct {
	entries []journal.Entry
	origin  arv1.Origin
}

// forkFacts reads the source of a fork that has not spawned yet and cuts
// its journal. A missing source is a setup wait (creating it wakes the
// fork); a cut that cannot be made is the fork's error, said in full.
func (cc *childCalls) forkFacts(ctx context.Context, run *arv1.AgentRun, f *facts) error {
	fo := run.Spec.ForkOf
	src := &arv1.AgentRun{}
	err := cc.reader.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: fo.Run}, src)
	switch {
	case apierrors.IsNotFound(err):
		f.Setup = &runstate.SetupBlock{
			Blocker: arv1.BlockerForkSourceMissing,
			Refs:    []string{"AgentRun/" + fo.Run},
			Remedy: fmt.Sprintf("spec.forkOf names the AgentRun %s/%s, which does not exist: create it, or delete this run and fork an existing one (kubectl agentrun fork RUN --from-stage STAGE -n %s)",
				run.Namespace, fo.Run, run.Namespace),
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading the fork's source %s/%s: %w", run.Namespace, fo.Run, err)
	case src.UID == run.UID:
		f.BlueprintError = "spec.forkOf: a run cannot fork itself"
		return nil
	}
	entries, err := cc.journals.Entries(ctx, store.RefOf(src))
	switch {
	case errors.Is(err, store.ErrCorrupt):
		f.BlueprintError = fmt.Sprintf("spec.forkOf: the journal of %s cannot be read: %v", src.Name, err)
		return nil
	case err != nil:
		return fmt.Errorf("reading the journal of the fork's source %s/%s: %w", run.Namespace, src.Name, err)
	}
	n, msg, err := cc.forkCut(ctx, src, entries, fo)
	if err != nil {
		return err
	}
	if msg == "" {
		msg = forkLandsIn(f.Blueprint, entries[:n], fo.Stage)
	}
	if msg != "" {
		f.BlueprintError = "spec.forkOf: " + msg
		return nil
	}
	f.fork = &forkSeed{
		entries: journal.Inherit(entries, n),
		origin:  arv1.Origin{Kind: arv1.OriginFork, Run: src.Name, UID: string(src.UID), Stage: fo.Stage, Entries: int64(n)},
	}
	return nil
}

// forkCut is how many of the source's entries the fork inherits, or
// why it cannot be cut there.
func (cc *childCalls) forkCut(ctx context.Context, src *arv1.AgentRun, entries []journal.Entry, fo *arv1.ForkSource) (int, string, error) {
	if fo.Entry != nil {
		if n := *fo.Entry; n > int64(len(entries)) {
			return 0, fmt.Sprintf("entry %d is out of range: the journal of %s holds %d entries", n, src.Name, len(entries)), nil
		}
		return int(*fo.Entry), "", nil
	}
	name := src.Status.BlueprintSnapshot
	if name == "" {
		name = journal.StartedFrom(entries)
	}
	if name == "" {
		return 0, fmt.Sprintf("%s has not started, so it has no stage %q to fork from", src.Name, fo.Stage), nil
	}
	bp, perr, err := cc.blueprints.snapshot(ctx, src.Namespace, name)
	if err != nil {
		return 0, "", err
	}
	if perr == nil {
		bp, perr = withEntryStage(bp, src.Spec.EntryStage)
	}
	if perr != nil {
		return 0, fmt.Sprintf("the blueprint snapshot %s of %s: %v", name, src.Name, perr), nil
	}
	n, cerr := journal.StageStart(bp, entries, fo.Stage)
	if cerr != nil {
		return 0, fmt.Sprintf("%v (%s)", cerr, src.Name), nil
	}
	return n, "", nil
}

// forkLandsIn checks the fork's own blueprint takes the inherited entries
// to the stage the fork starts at: a changed blueprint whose earlier
// stages lead elsewhere would resume the run somewhere nobody asked for.
func forkLandsIn(bp *blueprint.Blueprint, inherited []journal.Entry, stage string) string {
	if stage == "" {
		return ""
	}
	if _, _, ok := bp.Stage(stage); !ok {
		return fmt.Sprintf("stage %q is not a stage of this run's blueprint", stage)
	}
	if st := journal.Fold(bp, inherited); st.Stage != stage || st.Outcome != journal.OutcomeNone {
		return fmt.Sprintf("this run's blueprint takes the inherited entries to stage %q, not %q", st.Stage, stage)
	}
	return ""
}

// spawnOrigin records where a new run came from, as it spawns: a fork
// journals what it inherits (bound to the fork's own snapshot, which its
// first entry names), a rerun is named by its label.
func (cc *childCalls) spawnOrigin(ctx context.Context, s *scope) error {
	run, f := s.run, s.facts
	if name := cmp.Or(run.Annotations[arv1.LabelRerunOf], run.Labels[arv1.LabelRerunOf]); name != "" && run.Status.Origin == nil {
		run.Status.Origin = &arv1.Origin{Kind: arv1.OriginRerun, Run: name, UID: run.Annotations[arv1.AnnotationRerunOfUID]}
	}
	if f.fork == nil {
		return nil
	}
	origin := f.fork.origin
	run.Status.Origin = &origin
	if len(f.fork.entries) == 0 {
		return nil
	}
	f.fork.entries[0].Snapshot = f.snapshot
	return cc.journals.Append(ctx, run, f.fork.entries...)
}
