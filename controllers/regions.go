package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
)

// Regions are a run's named documents. spec.regions seeds them: the content
// is read when the run starts and journaled (one RegionWritten per region,
// before the first step), so the AgentRun stays small and later edits of a
// ConfigMap or Secret never change a run in flight. After that the journal
// alone holds them: the model's write_region calls, a fan-out's merged
// results and a person's edit at a checkpoint are journaled the same way.

// regionFacts finds what the run's regions hold it on. Before spawn every
// source must be readable, else the run waits on NeedsSetup, on the
// object, and its creation wakes the run (status.setupRefs); after spawn
// the next region the journal lacks is read for seeding.
func (r *AgentRunReconciler) regionFacts(ctx context.Context, run *arv1.AgentRun, f *facts) error {
	if len(run.Spec.Regions) == 0 || f.Blueprint == nil || f.State.Outcome != journal.OutcomeNone {
		return nil
	}
	for _, src := range run.Spec.Regions {
		if f.Spawned && f.State.Seeded(src.Name) {
			continue
		}
		content, block, err := r.readRegion(ctx, run, src)
		switch {
		case err != nil:
			return err
		case block != nil && f.Spawned:
			f.SeedBlock = block
			return nil
		case block != nil:
			if f.Setup == nil {
				f.Setup = block
			}
			return nil
		case f.Spawned:
			f.SeedRegion = &journal.Entry{Kind: journal.RegionWritten, Region: src.Name, Content: content, By: journal.BySpec, Seeded: true}
			return nil
		}
	}
	return nil
}

// readRegion reads one region's seed content.
func (r *AgentRunReconciler) readRegion(ctx context.Context, run *arv1.AgentRun, src arv1.RegionSource) (string, *runstate.SetupBlock, error) {
	ns := run.Namespace
	switch {
	case src.Text != nil:
		return *src.Text, nil, nil
	case src.ConfigMapKeyRef != nil:
		return r.regionFromKey(ctx, regionSource{"ConfigMap", "configmap", ns, src.ConfigMapKeyRef.Name, src.ConfigMapKeyRef.Key, src.Name})
	case src.SecretKeyRef != nil:
		return r.regionFromKey(ctx, regionSource{"Secret", "secret generic", ns, src.SecretKeyRef.Name, src.SecretKeyRef.Key, src.Name})
	}
	return "", nil, nil // admission requires one source
}

// regionFromKey reads a region's seed from a ConfigMap or Secret key, with
// the setup problem that holds the run when the object, the key or the
// size is wrong.
func (r *AgentRunReconciler) regionFromKey(ctx context.Context, s regionSource) (string, *runstate.SetupBlock, error) {
	var (
		v          string
		found, has bool
		err        error
	)
	if s.kind == "ConfigMap" {
		var data map[string]string
		data, _, found, err = r.refs.ConfigMap(ctx, s.ns, s.name)
		v, has = data[s.key]
	} else {
		var data map[string][]byte
		data, _, found, err = r.refs.Secret(ctx, s.ns, s.name)
		var b []byte
		b, has = data[s.key]
		v = string(b)
	}
	if err != nil {
		return "", nil, fmt.Errorf("reading region %q from %s %s/%s: %w", s.region, s.kind, s.ns, s.name, err)
	}
	return v, regionBlock(s, found, has, len(v)), nil
}

// regionSource names an object key a region is read from, with the
// kubectl create noun that makes one.
type regionSource struct {
	kind, create, ns, name, key, region string
}

// regionBlock is the setup problem of a region source, or nil: the object
// or key is missing, or the content is over what a region may hold.
func regionBlock(s regionSource, found, hasKey bool, size int) *runstate.SetupBlock {
	refs := []string{s.kind + "/" + s.name}
	fix := fmt.Sprintf("kubectl create %s %s -n %s --from-file=%s=<file>", s.create, s.name, s.ns, s.key)
	switch {
	case !found:
		return &runstate.SetupBlock{Blocker: arv1.BlockerRegionMissing, Refs: refs, Remedy: fmt.Sprintf(
			"Create the %s %s/%s with key %q holding region %q: %s", s.kind, s.ns, s.name, s.key, s.region, fix)}
	case !hasKey:
		return &runstate.SetupBlock{Blocker: arv1.BlockerRegionMissing, Refs: refs, Remedy: fmt.Sprintf(
			"The %s %s/%s has no key %q for region %q: add it (%s --dry-run=client -o yaml | kubectl apply -f -)", s.kind, s.ns, s.name, s.key, s.region, fix)}
	case size > journal.MaxRegionBytes:
		return &runstate.SetupBlock{Blocker: arv1.BlockerRegionTooLarge, Refs: refs, Remedy: fmt.Sprintf(
			"Region %q (%s %s/%s key %q) holds %d bytes, over the %d a region may hold: shorten it, and the run starts.", s.region, s.kind, s.ns, s.name, s.key, size, journal.MaxRegionBytes)}
	}
	return nil
}

// runRegions are the regions a run has: those its spec seeds and those
// its blueprint names.
func runRegions(run *arv1.AgentRun, f *facts) []string {
	names := f.Blueprint.RegionNames()
	for _, src := range run.Spec.Regions {
		if !slices.Contains(names, src.Name) {
			names = append(names, src.Name)
		}
	}
	return names
}

// writeRegionEntries are what a write_region call journals: the region's
// new content, then the call's result. A call naming no region of the run,
// or writing more than a region holds, is refused and the model told.
func writeRegionEntries(run *arv1.AgentRun, f *facts, index int, args string) []journal.Entry {
	var a struct {
		Region  string  `json:"region"`
		Content *string `json:"content"`
	}
	refuse := func(why string) []journal.Entry {
		return []journal.Entry{{Kind: journal.ToolCallCompleted, Index: index, Tool: "write_region", Result: why, IsError: true}}
	}
	names := runRegions(run, f)
	switch err := json.Unmarshal([]byte(args), &a); {
	case err != nil || a.Content == nil:
		return refuse(`write_region needs {"region": "<name>", "content": "<text>"}`)
	case !slices.Contains(names, a.Region):
		return refuse(fmt.Sprintf("%q is not a region of this run; its regions are %s", a.Region, strings.Join(names, ", ")))
	case len(*a.Content) > journal.MaxRegionBytes:
		return refuse(fmt.Sprintf("the content is %d bytes; a region holds at most %d", len(*a.Content), journal.MaxRegionBytes))
	}
	return []journal.Entry{
		{Kind: journal.RegionWritten, Region: a.Region, Content: *a.Content, By: journal.ByModel},
		{Kind: journal.ToolCallCompleted, Index: index, Tool: "write_region", Result: fmt.Sprintf("Region %q now holds %d bytes.", a.Region, len(*a.Content))},
	}
}

// regionEntriesFor are the region writes an action journals before its own
// entry: a resolved fan-out's merged outputs in its results_region, and a
// person's edit of the draft a checkpoint showed.
func (r *AgentRunReconciler) regionEntriesFor(ctx context.Context, s *scope) ([]journal.Entry, error) {
	f, a := s.facts, s.action
	switch a.Kind {
	case runstate.ActResolveFanOut:
		stage, _, ok := f.Blueprint.Stage(f.State.FanOut.Stage)
		if !ok || stage.FanOut == nil || stage.FanOut.ResultsRegion == "" || a.FanOut.FailAll {
			return nil, nil
		}
		outputs, err := r.children.MergeInputs(ctx, f.children)
		if err != nil {
			return nil, err
		}
		content := clipTo(strings.Join(outputs, "\n\n"), journal.MaxRegionBytes)
		return []journal.Entry{{Kind: journal.RegionWritten, Region: stage.FanOut.ResultsRegion, Content: content, By: journal.ByFanOut + stage.Name}}, nil
	case runstate.ActAnswerInteraction:
		if ans := a.Answer; ans != nil && ans.Edit != nil {
			return []journal.Entry{{Kind: journal.RegionWritten, Region: pointDocument(f), Content: *ans.Edit, By: ans.By}}, nil
		}
	}
	return nil, nil
}

// pointDocument is the region the pending checkpoint shows.
func pointDocument(f *facts) string {
	in := f.State.Interaction
	if in == nil {
		return ""
	}
	if stage, _, ok := f.Blueprint.Stage(in.Stage); ok {
		return stage.PointDocument(in.Point)
	}
	return in.Point.DocumentRegion
}
