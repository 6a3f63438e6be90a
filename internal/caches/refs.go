package caches

import (
	"context"
	"sync"

	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Refs reads the ConfigMaps and Secrets runs refer to (provider
// configs, blueprints, API keys, tool tokens) without a GET per step: the
// metadata-only informer says which resourceVersion is current, and the
// data is read live only when that version is not held already. Secret
// data lives only here, never in an informer cache.
type Refs struct {
	cached client.Reader // metadata, from the informer cache
	live   client.Reader

	mu sync.Mutex
	m  map[refKey]refData
	// reads shares one live read of an object among the reconciles that
	// want it at once: a burst of runs of one blueprint and one provider
	// would each read the same ConfigMap and Secret.
	reads singleflight.Group
}

type refKey struct{ kind, namespace, name string }

type refData struct {
	rv         string
	configData map[string]string
	secretData map[string][]byte
	// parsed memoises what a caller made of the data at rv.
	parsed any
}

// NewRefs reads metadata from cached (a metadata-only informer cache) and
// data from live.
func NewRefs(cached, live client.Reader) *Refs {
	return &Refs{cached: cached, live: live, m: map[refKey]refData{}}
}

// ConfigMap returns a ConfigMap's data and resourceVersion; found is false
// when it does not exist.
func (c *Refs) ConfigMap(ctx context.Context, ns, name string) (data map[string]string, rv string, found bool, err error) {
	d, found, err := c.get(ctx, refKey{"ConfigMap", ns, name})
	return d.configData, d.rv, found, err
}

// Secret returns a Secret's data and resourceVersion; found is false when
// it does not exist.
func (c *Refs) Secret(ctx context.Context, ns, name string) (data map[string][]byte, rv string, found bool, err error) {
	d, found, err := c.get(ctx, refKey{"Secret", ns, name})
	return d.secretData, d.rv, found, err
}

// Parsed returns what remember stored for the object at version rv.
func (c *Refs) Parsed(kind, ns, name, rv string) (any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.m[refKey{kind, ns, name}]
	if !ok || d.rv != rv || d.parsed == nil {
		return nil, false
	}
	return d.parsed, true
}

// Remember memoises a parse of the object at version rv.
func (c *Refs) Remember(kind, ns, name, rv string, parsed any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := refKey{kind, ns, name}
	if d, ok := c.m[k]; ok && d.rv == rv {
		d.parsed = parsed
		c.m[k] = d
	}
}

func (c *Refs) get(ctx context.Context, k refKey) (refData, bool, error) {
	meta := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: k.kind}}
	err := c.cached.Get(ctx, client.ObjectKey{Namespace: k.namespace, Name: k.name}, meta)
	switch {
	case err == nil:
		c.mu.Lock()
		d, ok := c.m[k]
		c.mu.Unlock()
		if ok && d.rv == meta.ResourceVersion {
			return d, true, nil
		}
	case !apierrors.IsNotFound(err):
		return refData{}, false, err
	}
	// Not held at this version, or not in the cache yet (it may lag an
	// object created a moment ago): read it.
	return c.read(ctx, k)
}

// read reads the object live, once for all who ask at once.
func (c *Refs) read(ctx context.Context, k refKey) (refData, bool, error) {
	v, err, _ := c.reads.Do(k.kind+"/"+k.namespace+"/"+k.name, func() (any, error) {
		d, found, err := c.readLive(ctx, k)
		return readResult{d, found}, err
	})
	if err != nil {
		return refData{}, false, err
	}
	r := v.(readResult)
	return r.data, r.found, nil
}

type readResult struct {
	data  refData
	found bool
}

func (c *Refs) readLive(ctx context.Context, k refKey) (refData, bool, error) {
	key := client.ObjectKey{Namespace: k.namespace, Name: k.name}
	var d refData
	var err error
	if k.kind == "Secret" {
		s := &corev1.Secret{}
		if err = c.live.Get(ctx, key, s); err == nil {
			d = refData{rv: s.ResourceVersion, secretData: s.Data}
		}
	} else {
		cm := &corev1.ConfigMap{}
		if err = c.live.Get(ctx, key, cm); err == nil {
			d = refData{rv: cm.ResourceVersion, configData: cm.Data}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case apierrors.IsNotFound(err):
		delete(c.m, k)
		return refData{}, false, nil
	case err != nil:
		return refData{}, false, err
	}
	if old, ok := c.m[k]; ok && old.rv == d.rv {
		d.parsed = old.parsed
	}
	c.m[k] = d
	return d, true, nil
}

// Forget drops an object (it was deleted).
func (c *Refs) Forget(kind, ns, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, refKey{kind, ns, name})
}
