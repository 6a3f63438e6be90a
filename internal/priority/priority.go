// Package priority resolves an AgentRun's admission priority: its own
// spec.priority, or the value of its spec.priorityClassName in the cluster
// admin's classes ConfigMap, or that ConfigMap's default class, or 0.
// The ConfigMap is flat so that the admission policies that cap priority
// per namespace can read it too (CEL over params.data): each key is a
// class name and its value an integer; the reserved key DefaultKey names
// the class of runs that name none.
package priority

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// DefaultConfigMapName is the classes ConfigMap's name, in the manager's
// namespace (the admission policy binding names the same one).
const DefaultConfigMapName = "agentrun-priority-classes"

// DefaultKey names the default class. It cannot be a class name: class
// names are DNS labels, which never start with an underscore.
const DefaultKey = "_default"

// Classes are the priority classes in force. The zero value has none.
type Classes struct {
	values map[string]int32
	// def is the default class's name ("" none).
	def string
}

// Parse reads a classes ConfigMap's data. Every value must be an integer
// within int32 and the default must name a class; a ConfigMap that breaks
// either is refused whole, naming the keys at fault.
func Parse(data map[string]string) (Classes, error) {
	c := Classes{values: map[string]int32{}}
	var bad []string
	for k, v := range data {
		if k == DefaultKey {
			c.def = strings.TrimSpace(v)
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: %q is not an integer between -2147483648 and 2147483647", k, v))
			continue
		}
		c.values[k] = int32(n)
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		return Classes{}, fmt.Errorf("priority classes: %s", strings.Join(bad, "; "))
	}
	if _, ok := c.values[c.def]; c.def != "" && !ok {
		return Classes{}, fmt.Errorf("priority classes: %s names %q, which is not a class", DefaultKey, c.def)
	}
	return c, nil
}

// Value is a class's value and whether the class exists.
func (c Classes) Value(class string) (int32, bool) {
	v, ok := c.values[class]
	return v, ok
}

// Names are the class names, sorted.
func (c Classes) Names() []string { return slices.Sorted(maps.Keys(c.values)) }

// Default is the default class's value (0 without one).
func (c Classes) Default() int32 { return c.values[c.def] }

// Of is the priority a run's spec asks for: spec.priority; else its
// class's value; else the default class's. A class the ConfigMap no longer
// holds (it was refused at apply otherwise) counts as the default.
func (c Classes) Of(spec *arv1.AgentRunSpec) int32 {
	if spec.Priority != nil {
		return *spec.Priority
	}
	if v, ok := c.values[spec.PriorityClassName]; ok && spec.PriorityClassName != "" {
		return v
	}
	return c.Default()
}

// Store holds the classes in force, swapped whole when the ConfigMap
// changes. Safe for concurrent use; the zero value holds none.
type Store struct {
	cur atomic.Pointer[Classes]
}

// Load is the classes in force.
func (s *Store) Load() Classes {
	if s == nil {
		return Classes{}
	}
	if c := s.cur.Load(); c != nil {
		return *c
	}
	return Classes{}
}

// Set puts c in force.
func (s *Store) Set(c Classes) { s.cur.Store(&c) }
