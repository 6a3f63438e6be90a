// Package steps is the step runtime: the bodies of the work a reconcile
// hands to the executor (a model call, a tool call, a webhook delivery, a
// tool-catalog listing). A step makes its network call with the shared
// retry helper, records what happened (the journal for calls, the catalog
// for listings, a report for deliveries) and returns; the executor then
// wakes the run. Steps never write an AgentRun: its reconcile is the only
// writer of status.
package steps

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/callbacks"
	"github.com/agentrun-dev/agentrun-operator/internal/circuit"
	"github.com/agentrun-dev/agentrun-operator/internal/egress"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/perrun"
	"github.com/agentrun-dev/agentrun-operator/internal/providerconfig"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/ratelimit"
	"github.com/agentrun-dev/agentrun-operator/internal/retry"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/toolcatalog"
	"github.com/agentrun-dev/agentrun-operator/internal/tracing"
)

// DefaultStepTimeout bounds one attempt of a model or tool call.
const DefaultStepTimeout = 5 * time.Minute

// Runtime holds what steps share. Build it with New.
type Runtime struct {
	Options
	// Deliveries hold webhook outcomes for the reconcile to record.
	Deliveries *Deliveries
	// Refusals hold, by run, a journal write of a step that the API server
	// refused for good (store.ErrRefused): the reconcile takes it instead of
	// issuing the call again, which would only be refused again after a
	// paid call.
	Refusals *perrun.Box[error]
	// Unrecorded hold, by run, a call and its answer (paid for) that the
	// store could not journal because it was unavailable
	// (store.ErrUnavailable): the run's next reconcile journals them
	// first, once the store is back, instead of making the call again.
	Unrecorded *perrun.Box[Unrecorded]
	// ListTimeout bounds one listing of a tool server.
	ListTimeout time.Duration
}

// Options are the runtime's dependencies; New fills in what is left zero.
type Options struct {
	// Journal records calls' intents and completions.
	Journal store.Journal
	// Catalog records tool-server listings.
	Catalog *toolcatalog.Catalog
	// Breakers are the providers' circuit breakers.
	Breakers *circuit.Breakers
	// Providers are provider clients by type (the scripted one, a test's);
	// other types get an SDK client for their base URL.
	Providers map[string]providers.Provider
	// HTTP returns the client for calls made on behalf of runs in a
	// namespace (providers, MCP servers, webhooks).
	HTTP func(namespace string) *http.Client
	// Reader reads Secrets a step needs (a webhook's signing key) uncached.
	Reader client.Reader
	// Wake re-queues runs (the waiters of a listing).
	Wake func(runs ...types.NamespacedName)
	// Tracer emits the calls' spans (nil: tracing off).
	Tracer *tracing.Tracer
	// Limiter holds model calls within their providers' limits (a new one,
	// on the real clock, when nil).
	Limiter *ratelimit.Limiter

	Clock          clock.PassiveClock
	StepTimeout    time.Duration
	CallbackPolicy callbacks.Policy
	// Log is for steps whose context carries no logger of their run.
	Log logr.Logger
}

// New is the runtime over o's dependencies, with defaults for what o leaves
// zero (catalog, breakers, egress-guarded HTTP, clock, limiter, step
// timeout, callback policy, log). A Journal, a Reader and Wake are required.
func New(o Options) (*Runtime, error) {
	if o.Journal == nil || o.Reader == nil || o.Wake == nil {
		return nil, errors.New("steps: a Journal, a Reader and a Wake function are required")
	}
	rt := &Runtime{Options: o, Deliveries: NewDeliveries(), Refusals: perrun.New[error](), Unrecorded: perrun.New[Unrecorded](), ListTimeout: 20 * time.Second}
	if rt.Catalog == nil {
		rt.Catalog = toolcatalog.New(0, 0)
	}
	if rt.Breakers == nil {
		rt.Breakers = circuit.New()
	}
	if rt.HTTP == nil {
		// No client given: the default egress policy, never an unguarded
		// client (loopback, link-local, cloud metadata refused).
		p, err := egress.New(nil)
		if err != nil {
			return nil, err
		}
		rt.HTTP = p.Client
	}
	if rt.Clock == nil {
		rt.Clock = clock.RealClock{}
	}
	if rt.Limiter == nil {
		rt.Limiter = ratelimit.New(clock.RealClock{})
	}
	if rt.StepTimeout <= 0 {
		rt.StepTimeout = DefaultStepTimeout
	}
	if rt.CallbackPolicy.Attempts == 0 {
		rt.CallbackPolicy = callbacks.DefaultPolicy
	}
	if rt.Log.GetSink() == nil {
		rt.Log = logr.Discard()
	}
	return rt, nil
}

// record journals a call's intent and its outcome in one write, retrying a
// few times so an API server blip does not cost the result (a database
// store that cannot be used is not retried: see keep). final, when
// set, is the output the answer submits, stored in the same write. A cancelled
// step journals nothing and returns nil: its intent stays pending by
// design. Another writer holding the seq (the run changed hands) is final,
// and so is a write the API server refuses for good, which is kept in
// Refusals for the reconcile.
func (rt *Runtime) record(ctx context.Context, run *arv1.AgentRun, final *string, es ...journal.Entry) error {
	b := retry.Backoff{Attempts: 5, Base: 200 * time.Millisecond, Cap: 2 * time.Second, Jitter: 0.5}
	_, err := retry.Do(ctx, b, func(int) (bool, error) {
		var err error
		if final != nil {
			err = rt.Journal.AppendWithOutput(ctx, run, *final, es...)
		} else {
			err = rt.Journal.Append(ctx, run, es...)
		}
		// A store that cannot be used now is not retried here: the answer
		// is kept for the reconcile (keep), which shows the run waiting on
		// the store and journals it once the store answers again.
		return !errors.Is(err, store.ErrSeqTaken) && !errors.Is(err, store.ErrRefused) && !errors.Is(err, store.ErrUnavailable) && !errors.Is(err, store.ErrFenced) && !errors.Is(err, store.ErrQuotaExceeded), err
	})
	if ctx.Err() != nil {
		return nil
	}
	if errors.Is(err, store.ErrRefused) {
		rt.Refusals.Put(run.UID, err)
	}
	return err
}

// Unrecorded is a call's intent and outcome a step could not journal,
// with the final output its answer submits.
type Unrecorded struct {
	Entries []journal.Entry
	Final   *string
}

// keep holds a call's intent and outcome the store could not journal
// (store.ErrUnavailable) for the run's reconcile: the answer was paid for.
// A continuation's next intent is not kept (that call was not made).
func (rt *Runtime) keep(run *arv1.AgentRun, err error, final *string, call ...journal.Entry) bool {
	if !errors.Is(err, store.ErrUnavailable) {
		return false
	}
	rt.Unrecorded.Put(run.UID, Unrecorded{Entries: call, Final: final})
	return true
}

// providerFor returns the client for a provider entry: the registered one
// for its type, else an SDK client for its base URL.
func (rt *Runtime) providerFor(p *providerconfig.Provider, namespace string) (providers.Provider, bool) {
	if c, ok := rt.Providers[p.Type]; ok {
		return c, true
	}
	switch p.Type {
	case providerconfig.TypeOpenAI:
		return providers.NewOpenAI(p.BaseURL, rt.HTTP(namespace)), true
	case providerconfig.TypeAnthropic:
		return providers.NewAnthropic(p.BaseURL, rt.HTTP(namespace)), true
	}
	return nil, false
}

// runRef is the part of a run a step needs: enough to name and own its
// journal, never its spec or status.
func runRef(run *arv1.AgentRun) *arv1.AgentRun {
	r := &arv1.AgentRun{}
	r.Name, r.Namespace, r.UID = run.Name, run.Namespace, run.UID
	return r
}

// RunRef is runRef for callers that build steps.
func RunRef(run *arv1.AgentRun) *arv1.AgentRun { return runRef(run) }

// logFor is the logger of the run a step works for: the one ctx carries
// (the reconcile that started the step puts its own there, naming the run
// and the reconcile), else the runtime's, naming the run.
func (rt *Runtime) logFor(ctx context.Context, name string, run *arv1.AgentRun, kv ...any) logr.Logger {
	if l, err := logr.FromContext(ctx); err == nil {
		return l.WithName(name).WithValues(kv...)
	}
	return rt.Log.WithName(name).WithValues(append([]any{"AgentRun", run.Namespace + "/" + run.Name}, kv...)...)
}
