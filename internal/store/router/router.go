// Package router keeps each run's journal where the run began it: in the
// store --store configures, or, for a run begun on ConfigMaps before a
// database was configured, in its ConfigMaps until it ends. The
// controller, its steps and in-process readers use the Router as their one
// store, so a run in flight across an upgrade is never split between two.
package router

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/types"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/perrun"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// Router routes each run's journal to its store.
type Router struct {
	primary store.Backend
	// legacy is the ConfigMap store when primary is a database (runs begun
	// on it finish there); nil when primary is the ConfigMap store.
	legacy store.Backend

	routes *perrun.Box[store.Backend]
	// unavailable is told of every ErrUnavailable a store returns.
	unavailable func(error)
}

// OnUnavailable has fn told of every error a store returns that says it
// cannot be used now (store.ErrUnavailable), whoever called it: the
// controller's health of the store follows the steps' writes too.
func (r *Router) OnUnavailable(fn func(error)) { r.unavailable = fn }

// note tells OnUnavailable's fn of err, and returns it.
func (r *Router) note(err error) error {
	if err != nil && r.unavailable != nil && errors.Is(err, store.ErrUnavailable) {
		r.unavailable(err)
	}
	return err
}

// New routes new runs to primary, and runs begun on legacy (the ConfigMap
// store, when primary is a database; nil otherwise) to legacy.
func New(primary, legacy store.Backend) *Router {
	return &Router{primary: primary, legacy: legacy, routes: perrun.New[store.Backend]()}
}

var _ store.Journal = (*Router)(nil)

// Primary is the configured store.
func (r *Router) Primary() store.Backend { return r.primary }

// Database says whether the configured store is a database (so there is an
// archive, and calls are not written to the API server).
func (r *Router) Database() bool { return r.legacy != nil }

// Archive is the configured store's archive, nil without a database.
func (r *Router) Archive() store.Archive {
	a, _ := r.primary.(store.Archive)
	return a
}

// Where says where the run's journal is kept, once it has been routed
// (by a Load or an append); the configured store's before.
func (r *Router) Where(run *arv1.AgentRun) arv1.JournalStore {
	b, ok := r.routes.Get(run.UID)
	switch {
	case r.legacy == nil:
		return arv1.JournalConfigMaps
	case ok && b == r.legacy:
		return arv1.JournalConfigMaps
	case ok:
		return arv1.JournalDatabase
	case run.Status.JournalStore != "":
		return run.Status.JournalStore
	case driven(run):
		return arv1.JournalConfigMaps
	}
	return arv1.JournalDatabase
}

// route decides, once per run, where its journal is: what status says; a
// run this process saw created (empty), or with no other store, the
// configured store; a run whose status shows it began before status said
// where (an older operator's), its ConfigMaps; otherwise whichever store
// holds entries of it, the configured one first.
func (r *Router) route(ctx context.Context, run *arv1.AgentRun, empty bool) (store.Backend, error) {
	b, ok := r.routes.Get(run.UID)
	if ok {
		return b, nil
	}
	b = r.primary
	switch {
	case r.legacy == nil || empty || run.Status.JournalStore == arv1.JournalDatabase:
	case run.Status.JournalStore == arv1.JournalConfigMaps || driven(run):
		b = r.legacy
	default:
		es, err := r.primary.Entries(ctx, store.RefOf(run))
		if err != nil {
			return nil, err
		}
		if len(es) == 0 {
			if old, err := r.legacy.Entries(ctx, store.RefOf(run)); err == nil && len(old) > 0 {
				b = r.legacy
			}
		}
	}
	r.routes.Update(run.UID, func(have store.Backend, ok bool) (store.Backend, bool) {
		if ok {
			b = have // another caller routed it meanwhile
		}
		return b, true
	})
	return b, nil
}

// driven says the run's status records that it began (a snapshot, an
// intent, a model call, an end), so an operator that did not say where its
// journal is began it: on ConfigMaps, the only store it had.
func driven(run *arv1.AgentRun) bool {
	st := &run.Status
	return st.BlueprintSnapshot != "" || st.PendingCall != nil || st.Phase.IsTerminal() || st.Usage.ModelCalls > 0
}

// RaiseFence records f in the configured store when it keeps fences
// (store.Fencer); the ConfigMaps' resourceVersions fence without it.
func (r *Router) RaiseFence(ctx context.Context, f store.Fence) error {
	if fr, ok := r.primary.(store.Fencer); ok {
		return r.note(fr.RaiseFence(ctx, f))
	}
	return nil
}

// Load returns the run's entries from its store.
func (r *Router) Load(ctx context.Context, run *arv1.AgentRun, empty bool) ([]journal.Entry, error) {
	b, err := r.route(ctx, run, empty)
	if err != nil {
		return nil, r.note(err)
	}
	es, err := b.Load(ctx, run, empty)
	return es, r.note(err)
}

// Append journals entries in the run's store.
func (r *Router) Append(ctx context.Context, run *arv1.AgentRun, es ...journal.Entry) error {
	b, err := r.route(ctx, run, false)
	if err != nil {
		return r.note(err)
	}
	return r.note(b.Append(ctx, run, es...))
}

// AppendWithOutput journals entries and the final output in the run's store.
func (r *Router) AppendWithOutput(ctx context.Context, run *arv1.AgentRun, output string, es ...journal.Entry) error {
	b, err := r.route(ctx, run, false)
	if err != nil {
		return r.note(err)
	}
	return r.note(b.AppendWithOutput(ctx, run, output, es...))
}

// PutOutput stores the final output in the run's store.
func (r *Router) PutOutput(ctx context.Context, run *arv1.AgentRun, text string) (string, error) {
	b, err := r.route(ctx, run, false)
	if err != nil {
		return "", r.note(err)
	}
	name, err := b.PutOutput(ctx, run, text)
	return name, r.note(err)
}

// Forget drops what any store and the router keep of the run.
func (r *Router) Forget(uid types.UID) {
	r.routes.Forget(uid)
	r.each(func(b store.Backend) { b.Forget(uid) })
}

// Has reports whether any store holds the run's journal in memory.
func (r *Router) Has(uid types.UID) bool {
	has := false
	r.each(func(b store.Backend) { has = has || b.Has(uid) })
	return has
}

// EachRun calls fn with every run whose journal a store holds in memory.
func (r *Router) EachRun(fn func(types.UID)) { r.each(func(b store.Backend) { b.EachRun(fn) }) }

// Cached reports how many runs' journals the stores hold in memory.
func (r *Router) Cached() int {
	n := 0
	r.each(func(b store.Backend) { n += b.Cached() })
	return n
}

func (r *Router) each(fn func(store.Backend)) {
	fn(r.primary)
	if r.legacy != nil {
		fn(r.legacy)
	}
}

// Entries reads any run's journal from where it is kept.
func (r *Router) Entries(ctx context.Context, run store.RunRef) ([]journal.Entry, error) {
	b := r.reading(run)
	es, err := b.Entries(ctx, run)
	if err == nil && len(es) == 0 && run.Store == "" && b == r.primary && r.legacy != nil {
		return r.legacy.Entries(ctx, run)
	}
	return es, r.note(err)
}

// Output reads any run's final output from where it is kept.
func (r *Router) Output(ctx context.Context, run store.RunRef) (string, bool, error) {
	text, ok, err := r.reading(run).Output(ctx, run)
	return text, ok, r.note(err)
}

// reading is the store a reader finds a run's journal in: what the run's
// status says, a ConfigMap's name when status names one, the configured
// store otherwise.
func (r *Router) reading(run store.RunRef) store.Backend {
	if r.legacy != nil && (run.Store == arv1.JournalConfigMaps || run.OutputObject != "") {
		return r.legacy
	}
	return r.primary
}

// Check reports whether the configured store can be written now.
func (r *Router) Check(ctx context.Context) error { return r.primary.Check(ctx) }

// Quotas is the configured store's quota counts, nil without a database.
func (r *Router) Quotas() store.Quotas {
	if r.legacy == nil {
		return nil
	}
	q, _ := r.primary.(store.Quotas)
	return q
}
