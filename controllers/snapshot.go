package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/caches"
	"github.com/agentrun-dev/agentrun-operator/internal/snapshotgc"
)

const (
	// annotationBlueprintHash is a snapshot's content hash.
	annotationBlueprintHash = "agentrun.dev/blueprint-hash"
	// snapshotPrefix starts every content-addressed snapshot's name.
	snapshotPrefix = "agentrun-blueprint-"
)

// snapshotName is the content-addressed name of a blueprint's snapshot:
// every run of the same blueprint text shares one.
func snapshotName(hash string) string { return snapshotPrefix + hash[:20] }

// blueprints reads the blueprints runs start from and run: the snapshots
// (parsed once, kept by name) and the source ConfigMaps (parsed once per
// version), and writes a run's snapshot when it spawns.
type blueprints struct {
	// client creates snapshots.
	client client.Client
	// reader reads a snapshot the cache does not hold.
	reader client.Reader
	refs   *caches.Refs
	parsed *blueprintCache
}

// snapshot returns the parsed snapshot. perr is a snapshot that is
// missing or does not parse: the run cannot go on from it.
func (b *blueprints) snapshot(ctx context.Context, ns, name string) (bp *blueprint.Blueprint, perr, err error) {
	key := ns + "/" + name
	if bp, ok := b.parsed.Get(key); ok {
		return bp, nil, nil
	}
	// One read for the runs of a burst that start from it at once.
	v, err, _ := b.parsed.flight.Do("read "+key, func() (any, error) {
		bp, perr, err := b.readSnapshot(ctx, ns, name)
		return parsedSnapshot{bp, perr}, err
	})
	if err != nil {
		return nil, nil, err
	}
	p := v.(parsedSnapshot)
	return p.bp, p.perr, nil
}

type parsedSnapshot struct {
	bp   *blueprint.Blueprint
	perr error
}

// readSnapshot reads and parses a snapshot, and keeps what parses.
func (b *blueprints) readSnapshot(ctx context.Context, ns, name string) (bp *blueprint.Blueprint, perr, err error) {
	key := ns + "/" + name
	cm := &corev1.ConfigMap{}
	if err := b.reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("the snapshot ConfigMap is missing"), nil
		}
		return nil, nil, fmt.Errorf("reading the blueprint snapshot %s: %w", name, err)
	}
	bp, perr = blueprint.Parse(cm.Data)
	if perr != nil {
		return nil, perr, nil
	}
	b.parsed.Put(key, bp)
	return bp, nil, nil
}

// parsedSource is a blueprint ConfigMap as parsed at one resourceVersion.
type parsedSource struct {
	bp       *blueprint.Blueprint
	err      error
	snapshot string
}

// parseSource parses a blueprint ConfigMap once per version: every run
// of it starting meanwhile shares the parse.
func (b *blueprints) parseSource(ns, name, rv string, data map[string]string) parsedSource {
	if p, ok := b.refs.Parsed("ConfigMap", ns, name, rv); ok {
		if src, ok := p.(parsedSource); ok {
			return src
		}
	}
	bp, err := blueprint.Parse(data)
	src := parsedSource{bp: bp, err: err, snapshot: snapshotName(blueprint.Hash(data))}
	b.refs.Remember("ConfigMap", ns, name, rv, src)
	return src
}

// ensureSnapshot makes sure the run's blueprint snapshot exists: an
// immutable ConfigMap named by its content, shared by every run of the
// same blueprint text, so later edits of the source cannot change a run in
// flight and a thousand runs of one blueprint cost one object.
func (b *blueprints) ensureSnapshot(ctx context.Context, run *arv1.AgentRun, f *facts) error {
	key := run.Namespace + "/" + f.snapshot
	if _, ok := b.parsed.Get(key); ok {
		return nil
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: f.snapshot, Namespace: run.Namespace,
			Labels:      map[string]string{arv1.LabelComponent: snapshotgc.Component},
			Annotations: map[string]string{annotationBlueprintHash: blueprint.Hash(f.spawnFiles)},
		},
		Immutable: ptr.To(true),
		Data:      f.spawnFiles,
	}
	// One create for the runs of a burst that start from it at once.
	_, err, _ := b.parsed.flight.Do("create "+key, func() (any, error) {
		if err := b.client.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("snapshotting the blueprint: %w", err)
		}
		// The name is the content's hash: an existing snapshot holds this text.
		b.parsed.Put(key, f.spawnParsed)
		return nil, nil
	})
	return err
}
