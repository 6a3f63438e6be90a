package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// The kinds CountObjects counts. Core v1 Events and events.k8s.io/v1 Events
// are two views of the same stored objects, listed apart so either API's
// count can be read.
const (
	KindConfigMaps  = "ConfigMaps"
	KindEvents      = "Events (events.k8s.io/v1)"
	KindCoreEvents  = "Events (core/v1)"
	KindSecrets     = "Secrets"
	KindLeases      = "Leases"
	KindOtherRuns   = "AgentRuns (not the batch's)"
	agentRunsPlural = "agentruns"
)

// Kinds lists the kinds of ObjectCounts in report order.
var Kinds = []string{KindConfigMaps, KindEvents, KindCoreEvents, KindSecrets, KindLeases, KindOtherRuns}

var countedKinds = map[string]schema.GroupVersionKind{
	KindConfigMaps: {Version: "v1", Kind: "ConfigMapList"},
	KindEvents:     {Group: "events.k8s.io", Version: "v1", Kind: "EventList"},
	KindCoreEvents: {Version: "v1", Kind: "EventList"},
	KindSecrets:    {Version: "v1", Kind: "SecretList"},
	KindLeases:     {Group: "coordination.k8s.io", Version: "v1", Kind: "LeaseList"},
	KindOtherRuns:  arv1.GroupVersion.WithKind("AgentRunList"),
}

// ObjectCounts is how many objects of each kind a namespace holds.
type ObjectCounts map[string]int

// Sub is c minus before, kind by kind.
func (c ObjectCounts) Sub(before ObjectCounts) ObjectCounts {
	out := ObjectCounts{}
	for k, v := range c {
		out[k] = v - before[k]
	}
	return out
}

// String lists the counts in Kinds order.
func (c ObjectCounts) String() string {
	var parts []string
	for _, k := range Kinds {
		parts = append(parts, fmt.Sprintf("%s=%d", k, c[k]))
	}
	return strings.Join(parts, " ")
}

// CountObjects counts ConfigMaps, Events (both APIs), Secrets, Leases and
// AgentRuns in ns (metadata only, paged). AgentRuns whose name is in skip
// (a batch's own runs) are not counted.
func (c *Cluster) CountObjects(ctx context.Context, ns string, skip map[string]bool) (ObjectCounts, error) {
	out := ObjectCounts{}
	for kind, gvk := range countedKinds {
		n, err := c.countKind(ctx, ns, gvk, func(m metav1.PartialObjectMetadata) bool {
			return kind != KindOtherRuns || !skip[m.Name]
		})
		if err != nil {
			return nil, fmt.Errorf("counting %s in %s: %w", kind, ns, err)
		}
		out[kind] = n
	}
	return out, nil
}

func (c *Cluster) countKind(ctx context.Context, ns string, gvk schema.GroupVersionKind, keep func(metav1.PartialObjectMetadata) bool) (int, error) {
	n, cont := 0, ""
	for {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk)
		if err := c.Client.List(ctx, list, client.InNamespace(ns), client.Limit(500), client.Continue(cont)); err != nil {
			return 0, err
		}
		for _, m := range list.Items {
			if keep(m) {
				n++
			}
		}
		if cont = list.Continue; cont == "" {
			return n, nil
		}
	}
}

// RunSize is one AgentRun's size as stored: custom resources are kept in
// etcd as JSON, so its compact JSON encoding is a fair stand-in.
type RunSize struct {
	// JSON is the object's size as served by a GET, managedFields included.
	JSON int
	// WithoutManagedFields is the same with metadata.managedFields removed.
	WithoutManagedFields int
}

// AgentRunSize GETs one AgentRun and measures its JSON with and without
// metadata.managedFields.
func (c *Cluster) AgentRunSize(ctx context.Context, ns, name string) (RunSize, error) {
	u, err := c.Dyn.Resource(arv1.GroupVersion.WithResource(agentRunsPlural)).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return RunSize{}, err
	}
	with, err := json.Marshal(u.Object)
	if err != nil {
		return RunSize{}, err
	}
	u.SetManagedFields(nil)
	without, err := json.Marshal(u.Object)
	if err != nil {
		return RunSize{}, err
	}
	return RunSize{JSON: len(with), WithoutManagedFields: len(without)}, nil
}

// sortedKeys is m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
