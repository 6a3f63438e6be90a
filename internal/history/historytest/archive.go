package historytest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/money"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// Run is a finished run to archive.
type Run struct {
	Namespace, Name, Agent string
	Phase                  arv1.Phase
	Labels                 map[string]string
	// Calls are its model calls' costs in nano-USD, one per call; nil is
	// a call that could not be priced. Each call used 100 prompt and 20
	// completion tokens and answered "answer N".
	Calls []*int64
	// Model answered every call ("gpt-test" when empty).
	Model    string
	Output   *string
	Children []store.ChildRecord
	// Finished is when it finished; when zero, the Archiver's clock less
	// one second per run it archived before (so later runs finished
	// earlier).
	Finished time.Time
}

// Archiver archives finished runs with their journals (and so the
// ledger rows of their model calls) through the store's archive path,
// as the manager's archive does once a run is done.
type Archiver struct {
	// Store is the archive written to (a *sqlstore.Store).
	Store interface {
		Archive(ctx context.Context, rec *store.Record) error
	}
	// Clock dates runs whose Finished is zero.
	Clock clock.PassiveClock

	mu  sync.Mutex
	seq int
}

// Archive archives r and returns the run as its custom resource showed it
// when it finished: phase, model, times and usage, with its cost
// "unknown" when a call was unpriced.
func (a *Archiver) Archive(ctx context.Context, r Run) (*arv1.AgentRun, error) {
	a.mu.Lock()
	a.seq++
	seq := a.seq
	a.mu.Unlock()
	if r.Model == "" {
		r.Model = "gpt-test"
	}
	if r.Finished.IsZero() {
		r.Finished = a.Clock.Now().Add(-time.Duration(seq) * time.Second)
	}
	run := &arv1.AgentRun{
		TypeMeta: metav1.TypeMeta{APIVersion: arv1.GroupVersion.String(), Kind: "AgentRun"},
		ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Name, UID: types.UID(fmt.Sprintf("uid-%s-%06d", r.Name, seq)),
			Labels: r.Labels, CreationTimestamp: metav1.NewTime(r.Finished.Add(-time.Minute).Truncate(time.Second))},
		Spec: arv1.AgentRunSpec{Agent: r.Agent},
	}
	entries := []journal.Entry{}
	var priced, unpriced, tokens int64
	for i, cost := range r.Calls {
		at := r.Finished.Add(-time.Duration(len(r.Calls)-i) * time.Second)
		entries = append(entries,
			journal.Entry{Seq: int64(2 * i), Kind: journal.ModelCallRequested, At: at, Stage: "work", Iteration: i, Provider: "test", Model: r.Model},
			journal.Entry{Seq: int64(2*i + 1), Kind: journal.ModelCallCompleted, At: at, Call: int64(2 * i), Provider: "test", Model: r.Model,
				Usage: &journal.Usage{Prompt: 100, Completion: 20}, CostNanoUSD: cost, Response: &journal.Response{Text: "answer " + strconv.Itoa(i)}})
		tokens += 120
		if cost == nil {
			unpriced++
		} else {
			priced += *cost
		}
	}
	st := &run.Status
	st.Phase, st.Model = r.Phase, r.Model
	st.StartedAt = ptr.To(metav1.NewTime(run.CreationTimestamp.Add(time.Second)))
	st.FinishedAt = ptr.To(metav1.NewTime(r.Finished.Truncate(time.Second)))
	st.Usage = arv1.Usage{PromptTokens: 100 * int64(len(r.Calls)), CompletionTokens: 20 * int64(len(r.Calls)), TotalTokens: tokens,
		ModelCalls: int64(len(r.Calls)), UnpricedCalls: unpriced, CostPricedUSD: money.NanoUSD(priced).String(), CostUSD: money.NanoUSD(priced).String()}
	if unpriced > 0 {
		st.Usage.CostUSD = "unknown"
	}
	if err := a.Store.Archive(ctx, &store.Record{Run: run, Output: r.Output, Entries: entries, Children: r.Children}); err != nil {
		return nil, err
	}
	return run, nil
}
