package queue

import (
	"strconv"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// namespaceCaps is each namespace's bound on its active runs: the
// Namespace's agentrun.dev/max-active-runs annotation when it has a valid
// one, else the manager's default (--max-active-runs-per-namespace). The
// annotations come from a metadata-only watch of Namespaces, kept in a
// map, so admission (which asks under its lock, once per waiting namespace
// per free slot) never calls the API server.
type namespaceCaps struct {
	def int

	mu  sync.RWMutex
	set map[string]int // namespaces with a valid annotation
}

func newNamespaceCaps(def int) *namespaceCaps {
	return &namespaceCaps{def: max(def, 0), set: map[string]int{}}
}

// limit is admission's nsLimit: 0 means no bound of the namespace's own.
func (c *namespaceCaps) limit(ns string) int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if n, ok := c.set[ns]; ok {
		return n
	}
	return c.def
}

// observe records a Namespace's annotation (or its absence) and reports
// whether the bound changed.
func (c *namespaceCaps) observe(name string, annotations map[string]string, gone bool) bool {
	n, err := strconv.Atoi(strings.TrimSpace(annotations[arv1.AnnotationMaxActiveRuns]))
	valid := !gone && err == nil && n >= 0
	c.mu.Lock()
	defer c.mu.Unlock()
	old, had := c.set[name]
	switch {
	case valid:
		c.set[name] = n
		return !had || old != n
	case had:
		delete(c.set, name)
		return true
	}
	return false
}

// NamespaceHandler feeds the per-namespace bounds from the manager's
// cache of Namespaces (metadata only) and refills the line when a bound
// changes, so a raised bound admits waiting runs at once.
func (q *Queue) NamespaceHandler() toolscache.ResourceEventHandler {
	seen := func(obj any, gone bool) {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		m, ok := obj.(metav1.Object)
		if ok && q.caps.observe(m.GetName(), m.GetAnnotations(), gone) {
			q.line.Refill()
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { seen(obj, false) },
		UpdateFunc: func(_, obj any) { seen(obj, false) },
		DeleteFunc: func(obj any) { seen(obj, true) },
	}
}
