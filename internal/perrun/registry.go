package perrun

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Holder is anything that keeps state in memory per run. A Box is one;
// so is every map of a run's state the controller keeps.
type Holder interface {
	// Forget drops everything the holder keeps of the run.
	Forget(uid types.UID)
	// Has reports whether the holder keeps anything of the run.
	Has(uid types.UID) bool
	// EachRun calls fn with every run the holder keeps something of. It
	// may hold the holder's lock: fn must not call back into it.
	EachRun(fn func(types.UID))
}

// Registry is every holder of per-run state in one process, by name. Its
// Forget is the one call that drops all a run left in memory: a holder
// that registers cannot be left off the list.
type Registry struct {
	mu      sync.RWMutex
	names   []string
	holders []Holder
}

// NewRegistry makes an empty registry.
func NewRegistry() *Registry { return &Registry{} }

// Register adds a holder under a name (the name shows in HeldBy).
func (g *Registry) Register(name string, h Holder) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.names = append(g.names, name)
	g.holders = append(g.holders, h)
}

// Forget drops the run from every holder.
func (g *Registry) Forget(uid types.UID) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	for _, h := range g.holders {
		h.Forget(uid)
	}
}

// HeldBy names the holders that keep something of the run (none: nothing
// of it is left in memory).
func (g *Registry) HeldBy(uid types.UID) []string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out []string
	for i, h := range g.holders {
		if h.Has(uid) {
			out = append(out, g.names[i])
		}
	}
	return out
}

// Runs counts the runs that any holder keeps something of.
func (g *Registry) Runs() int {
	g.mu.RLock()
	defer g.mu.RUnlock()
	seen := map[types.UID]struct{}{}
	for _, h := range g.holders {
		h.EachRun(func(uid types.UID) { seen[uid] = struct{}{} })
	}
	return len(seen)
}

// Each calls fn with every registered holder and its name.
func (g *Registry) Each(fn func(name string, h Holder)) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	for i, h := range g.holders {
		fn(g.names[i], h)
	}
}
