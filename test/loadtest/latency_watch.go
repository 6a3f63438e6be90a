package loadtest

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// WatchRuns watches the AgentRuns of ns from the current resourceVersion,
// resuming on its own when the API server closes the watch (RunBatch's
// watch). The returned func stops it.
func (c *Cluster) WatchRuns(ctx context.Context, ns string) (<-chan watch.Event, func(), error) {
	return c.watchRuns(ctx, ns)
}

// CreateRunsWith is CreateRuns with each run passed to mutate (with its
// index) before it is created, for instance to set spec.model.
func (c *Cluster) CreateRunsWith(ctx context.Context, ns, agent, prefix string, n, concurrency int, mutate func(i int, r *arv1.AgentRun)) error {
	return Parallel(ctx, n, concurrency, func(ctx context.Context, i int) error {
		name := RunName(prefix, i)
		run := &arv1.AgentRun{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       arv1.AgentRunSpec{Agent: agent, Task: RunTask(name)},
		}
		if mutate != nil {
			mutate(i, run)
		}
		if err := c.Client.Create(ctx, run); err != nil {
			return fmt.Errorf("creating AgentRun %s/%s: %w", ns, name, err)
		}
		return nil
	})
}

// BlockerWatch remembers each wait any run of a batch ever showed
// (status.waitingOn's reason, and its blocker for NeedsSetup), not only the
// last: a run that parked on ProviderFailed for a moment and went on is
// still counted. The batch's own watch feeds it (Batch.Observe =
// w.Observe): a watch of its own would cost the API server and the harness
// as much again per event, charged to the operator's figures.
type BlockerWatch struct {
	mu   sync.Mutex
	seen map[string]map[string]bool // run -> "Reason" or "NeedsSetup/Blocker"
	// storeError is the first waitingOn.storeError seen: why a run found
	// the store unavailable, which a report must say beside the count.
	storeError string
}

// NewBlockerWatch is an empty BlockerWatch.
func NewBlockerWatch() *BlockerWatch {
	return &BlockerWatch{seen: map[string]map[string]bool{}}
}

// Observe records the wait r shows, if any.
func (w *BlockerWatch) Observe(r *arv1.AgentRun) {
	wo := r.Status.WaitingOn
	if wo == nil {
		return
	}
	key := string(wo.Reason)
	if wo.Blocker != "" {
		key += "/" + string(wo.Blocker)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen[r.Name] == nil {
		w.seen[r.Name] = map[string]bool{}
	}
	w.seen[r.Name][key] = true
	if w.storeError == "" && wo.StoreError != "" {
		w.storeError = wo.StoreError
	}
}

// Ever is how many runs ever waited on NeedsSetup with blocker b.
func (w *BlockerWatch) Ever(b arv1.SetupBlocker) int {
	return w.Counts()[string(arv1.WaitNeedsSetup)+"/"+string(b)]
}

// Counts is, for each wait ("Reason" or "NeedsSetup/Blocker"), how many
// runs ever showed it.
func (w *BlockerWatch) Counts() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for _, keys := range w.seen {
		for k := range keys {
			out[k]++
		}
	}
	return out
}

// String lists Counts, sorted, or "none".
func (w *BlockerWatch) String() string {
	counts := w.Counts()
	if len(counts) == 0 {
		return "none"
	}
	s := ""
	for i, k := range sortedKeys(counts) {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %d", k, counts[k])
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.storeError != "" {
		s += fmt.Sprintf(" (the first store error: %s)", w.storeError)
	}
	return s
}

// SecretFixBlueprint is a one-stage blueprint of one scripted model call
// that completes the run, for the scripted providers of
// SecretFixProvidersTOML (a run names its provider with spec.model
// "pN/m1"); titles are off.
const SecretFixBlueprint = `
[agent]
name = "secretfix"
[agent.title]
enabled = false

[stages.only]
allow_complete = true
[stages.only.model]
models = [{provider = "p0", model = "m1"}]
[[stages.only.script]]
text = "done"
complete = true
output = "done"
usage = {prompt = 10, completion = 2}
`

// SecretFixProvidersTOML declares k scripted providers p0..p(k-1), each
// requiring its own Secret sN (key api-key): until sN exists, a run of pN
// waits on NeedsSetup SecretMissing.
func SecretFixProvidersTOML(k int) string {
	s := ""
	for i := range k {
		s += fmt.Sprintf("[providers.p%d]\ntype = \"scripted\"\nmodels = [\"m1\"]\napi_key_secret = {name = \"s%d\", key = \"api-key\"}\n", i, i)
	}
	return s
}
