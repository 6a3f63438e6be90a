// Package snapshotgc deletes the blueprint snapshots no run refers to any
// more. A content-addressed blueprint snapshot (an immutable ConfigMap
// labelled Component) is shared by every run of its text, so no run owns
// it and the garbage collector cannot take it; the Sweeper does.
package snapshotgc

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// Component is the agentrun.dev/component label of blueprint snapshots:
// the ConfigMaps the Sweeper looks at.
const Component = "blueprint-snapshot"

// Snapshot sweeping: a content-addressed blueprint snapshot is shared by
// every run of its text, so no run owns it; once no run refers to it any
// more (they finished and were deleted, or moved to an edited blueprint),
// the sweeper deletes it. A snapshot younger than snapshotGrace is kept:
// a run may have created it and not yet recorded it in its status.
const (
	sweepEvery    = 10 * time.Minute
	snapshotGrace = 10 * time.Minute
)

// Sweep says how often snapshots are swept and how old an unused one must
// be to go (zero: sweepEvery, snapshotGrace).
type Sweep struct {
	Every, Grace time.Duration
}

// withDefaults fills in the zero durations.
func (s Sweep) withDefaults() Sweep {
	if s.Every <= 0 {
		s.Every = sweepEvery
	}
	if s.Grace <= 0 {
		s.Grace = snapshotGrace
	}
	return s
}

// Sweeper deletes blueprint snapshots no run refers to: a manager
// Runnable, on the leader only.
type Sweeper struct {
	// Runs are read from the informer cache, or, when runs are divided
	// among replicas and no cache holds them all, from the API server in
	// pages of PageSize.
	Runs     client.Reader
	PageSize int64
	// Snapshots lists the snapshots (metadata only) on the API server;
	// Writer deletes them.
	Snapshots client.Reader
	Writer    client.Writer
	Clock     clock.PassiveClock
	// Sweep is how often, and past what age (zero: the defaults).
	Sweep Sweep
	// Namespaces, when set, are the only namespaces the manager may read
	// (a namespace-scoped install): runs and snapshots are listed in each.
	Namespaces []string
}

// NeedLeaderElection is true: one replica sweeps.
func (s *Sweeper) NeedLeaderElection() bool { return true }

// Start sweeps every Sweep.Every until ctx ends.
func (s *Sweeper) Start(ctx context.Context) error {
	t := time.NewTicker(s.Sweep.withDefaults().Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if n, err := s.sweep(ctx); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "Sweeping unused blueprint snapshots")
			} else if n > 0 {
				ctrl.LoggerFrom(ctx).Info("Deleted unused blueprint snapshots", "count", n)
			}
		}
	}
}

// scopes are the namespaces to list in: all, or each of s.Namespaces.
func (s *Sweeper) scopes() []client.ListOption {
	if len(s.Namespaces) == 0 {
		return []client.ListOption{client.InNamespace("")}
	}
	scopes := make([]client.ListOption, 0, len(s.Namespaces))
	for _, ns := range s.Namespaces {
		scopes = append(scopes, client.InNamespace(ns))
	}
	return scopes
}

// snapshots lists the blueprint snapshots (metadata only), in every
// namespace or in each of s.Namespaces.
func (s *Sweeper) snapshots(ctx context.Context) ([]metav1.PartialObjectMetadata, error) {
	var out []metav1.PartialObjectMetadata
	for _, in := range s.scopes() {
		list := &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMapList"}}
		if err := s.Snapshots.List(ctx, list, in, client.MatchingLabels{arv1.LabelComponent: Component}); err != nil {
			return nil, err
		}
		out = append(out, list.Items...)
	}
	return out, nil
}

// sweep deletes the snapshots no run refers to and returns how many.
func (s *Sweeper) sweep(ctx context.Context) (int, error) {
	used, err := s.usedSnapshots(ctx)
	if err != nil {
		return 0, err
	}
	snaps, err := s.snapshots(ctx)
	if err != nil {
		return 0, err
	}
	grace := s.Sweep.withDefaults().Grace
	deleted := 0
	for i := range snaps {
		m := &snaps[i]
		if used[m.Namespace+"/"+m.Name] || s.Clock.Since(m.CreationTimestamp.Time) < grace {
			continue
		}
		rv, uid := m.ResourceVersion, m.UID
		if err := s.Writer.Delete(ctx, m, client.Preconditions{ResourceVersion: &rv, UID: &uid}); client.IgnoreNotFound(err) == nil {
			deleted++
		}
	}
	return deleted, nil
}

// usedSnapshots are the snapshots some run refers to, by namespace/name.
func (s *Sweeper) usedSnapshots(ctx context.Context) (map[string]bool, error) {
	used := map[string]bool{}
	opts := []client.ListOption{client.UnsafeDisableDeepCopy}
	if s.PageSize > 0 {
		opts = append(opts, client.Limit(s.PageSize))
	}
	for _, in := range s.scopes() {
		for cont := ""; ; {
			var runs arv1.AgentRunList
			if err := s.Runs.List(ctx, &runs, append(opts, in, client.Continue(cont))...); err != nil {
				return nil, err
			}
			for i := range runs.Items {
				r := &runs.Items[i]
				used[r.Namespace+"/"+r.Status.BlueprintSnapshot] = true
				used[r.Namespace+"/"+r.Spec.BlueprintSnapshot] = true // a worker runs from its parent's
			}
			if cont = runs.Continue; cont == "" || s.PageSize == 0 {
				break
			}
		}
	}
	return used, nil
}
