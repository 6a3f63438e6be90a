// Package store says what keeping runs' journals means, whichever backend
// keeps them: the ConfigMaps of the API server (internal/store/configmaps),
// or a database, PostgreSQL or SQLite (internal/store/sqlstore). The
// controller and the steps see only these interfaces and errors, so every
// backend keeps the same guarantees: an intent is durable before its call
// and a completion after it, a retried append is recognised, an entry
// whose seq holds other content is refused (ErrSeqTaken), and a writer
// whose hold on the run's shard has ended is refused (ErrFenced).
package store

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/types"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// Journal keeps the journals of the runs this process drives, with an
// in-memory copy of each active run's so a reconcile never reads its
// journal back.
type Journal interface {
	// Load returns the run's entries in seq order. empty says the run
	// cannot have a journal yet (its status was never written and this
	// process saw it created), so nothing is read.
	Load(ctx context.Context, run *arv1.AgentRun, empty bool) ([]journal.Entry, error)
	// Append journals entries in one write, after the run's last entry. A
	// retried append whose earlier attempt was stored succeeds; an entry
	// whose seq holds other content is ErrSeqTaken, and the in-memory copy
	// is dropped so the next Load reads the journal afresh.
	Append(ctx context.Context, run *arv1.AgentRun, es ...journal.Entry) error
	// AppendWithOutput is Append that also stores the run's final output
	// in the same write.
	AppendWithOutput(ctx context.Context, run *arv1.AgentRun, output string, es ...journal.Entry) error
	// PutOutput stores a finished run's final output and returns where:
	// the ConfigMap's name, or "" when a database holds it.
	PutOutput(ctx context.Context, run *arv1.AgentRun, text string) (string, error)
	// Forget drops the in-memory copy of a run (finished, deleted, stale).
	Forget(uid types.UID)
	// Has reports whether the run's journal is held in memory.
	Has(uid types.UID) bool
	// EachRun calls fn with every run whose journal is held in memory.
	EachRun(fn func(types.UID))
	// Cached reports how many runs' journals are held in memory.
	Cached() int
}

// Reader reads what a store keeps of any run, for readers other than the
// run's driver: a parent reading its child's output, a fork its source's
// journal, the console a transcript.
type Reader interface {
	// Entries returns a run's journal as stored, in seq order.
	Entries(ctx context.Context, run RunRef) ([]journal.Entry, error)
	// Output returns a finished run's stored final output; ok is false
	// when none is stored.
	Output(ctx context.Context, run RunRef) (text string, ok bool, err error)
}

// RunRef names a run for a Reader: its namespace, name and UID, and where
// its output is stored when status says (a ConfigMap's name).
type RunRef struct {
	Namespace, Name string
	UID             types.UID
	// OutputObject is status.finalOutput.objectName, when set.
	OutputObject string
	// Store is status.journalStore, when set.
	Store arv1.JournalStore
}

// RefOf is the RunRef of run.
func RefOf(run *arv1.AgentRun) RunRef {
	r := RunRef{Namespace: run.Namespace, Name: run.Name, UID: run.UID, Store: run.Status.JournalStore}
	if fo := run.Status.FinalOutput; fo != nil {
		r.OutputObject = fo.ObjectName
	}
	return r
}

// Archive keeps finished runs after their custom resources are deleted:
// the run record (spec and final status), its journal, its output, its
// children, and what it used and cost.
type Archive interface {
	// Archive stores rec, replacing what an earlier attempt stored for the
	// same run: one record per run, whatever the retries.
	Archive(ctx context.Context, rec *Record) error
	// Archived reports whether the run's record is stored.
	Archived(ctx context.Context, uid types.UID) (bool, error)
	// Deleted marks the journal of a run deleted before it was archived,
	// so the sweep removes it once it is older than the retention.
	Deleted(ctx context.Context, uid types.UID) error
	// Sweep deletes at most limit records (with their journals) of runs
	// that finished before before, and journals of runs deleted before
	// then, and returns how many went.
	Sweep(ctx context.Context, before time.Time, limit int) (int, error)
}

// Record is a finished run as the archive keeps it.
type Record struct {
	// Run is the run as it finished: metadata (labels, owner), spec and
	// final status.
	Run *arv1.AgentRun
	// Output is the stored final output, if any.
	Output *string
	// Entries is the run's journal when the archive's database does not
	// hold it already (a run begun on ConfigMaps); nil when it does.
	Entries []journal.Entry
	// Children are the run's child runs, by name, as they stood.
	Children []ChildRecord
}

// ChildRecord is one child of an archived run.
type ChildRecord struct {
	Name  string     `json:"name"`
	UID   types.UID  `json:"uid"`
	Phase arv1.Phase `json:"phase"`
}

// Backend is one configured store: its journals, its reader, and, for a
// database, its archive.
type Backend interface {
	Journal
	Reader
	// Kind names the backend ("configmaps", "postgres", "sqlite").
	Kind() string
	// Check reports whether the backend can be written now (readiness).
	Check(ctx context.Context) error
	// Close releases its connections.
	Close() error
}

// Errors every backend returns for the same causes (errors.Is).
var (
	// ErrSeqTaken: an entry's seq is already journaled with other content;
	// the caller's view of the run is stale (or another writer drives it),
	// so it must derive again from the reloaded journal.
	ErrSeqTaken = errors.New("journal seq already taken")
	// ErrCorrupt is what every CorruptError is: the stored journal cannot
	// be what was written, so reading it again cannot help.
	ErrCorrupt = errors.New("the journal is corrupt")
	// ErrRefused: the store refused the write for what it is (invalid,
	// too large, forbidden), not for when it came; sending it again gets
	// the same answer, so it needs a change from outside.
	ErrRefused = errors.New("the store refuses the run's journal write")
	// ErrFenced: the writer's hold on the run's shard Lease is older than
	// the newest hold the store has seen, so another replica drives the
	// run now. Final for this writer.
	ErrFenced = errors.New("the journal write is fenced out: another replica holds the run's shard")
	// ErrUnavailable: the store cannot be reached or used now (down,
	// unreachable, credentials refused, permissions missing). Nothing was
	// written; the run waits (StoreUnavailable) and goes on when it
	// returns.
	ErrUnavailable = errors.New("the run store is unavailable")
)

// CorruptError says what is wrong with a run's stored journal: an entry
// that does not decode, a chunk missing while a later one exists, a gap in
// the sequence, or fewer entries than the run's status records. Its text
// names the object (or row) and key at fault, never the stored value.
type CorruptError struct {
	// Object is the journal object at fault (a ConfigMap's name, or the
	// run's journal in a database).
	Object string
	// Key is the data key (or seq) at fault, when one entry is.
	Key string
	// Problem says what is wrong.
	Problem string
}

func (e *CorruptError) Error() string {
	where := "journal " + e.Object
	if e.Key != "" {
		where += " key " + e.Key
	}
	return where + ": " + e.Problem
}

// Is makes errors.Is(err, ErrCorrupt) hold.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// UnavailableError is ErrUnavailable with why, and the remedy a person can
// act on (the Secret or flag to fix), never a credential.
type UnavailableError struct {
	// Backend is the store's kind.
	Backend string
	// Cause is what the driver said, with any password removed.
	Cause string
	// Remedy says what to fix, when a person must (wrong password, unknown
	// host, missing permission); empty when it clears by itself (the
	// database restarting).
	Remedy string
}

func (e *UnavailableError) Error() string {
	s := e.Backend + " store unavailable: " + e.Cause
	if e.Remedy != "" {
		s += " (" + e.Remedy + ")"
	}
	return s
}

// Is makes errors.Is(err, ErrUnavailable) hold.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Fence is a writer's hold on its runs' shard Lease: which Lease, and how
// many times it had changed hands when the hold began. A database store
// keeps the newest fence it has seen per Lease and refuses, in the same
// transaction as the append, an append whose fence is older (ErrFenced);
// the ConfigMap store needs none (every append is fenced by its chunk's
// resourceVersion).
type Fence struct {
	// Lease is the shard Lease's namespace/name.
	Lease string
	// Created is the Lease's creation time (Unix seconds): a Lease deleted
	// and created again counts its transitions from 0 again, and is newer.
	Created int64
	// Transitions is the Lease's spec.leaseTransitions when the hold began.
	Transitions int64
}

// Older reports whether f is an older hold of the same Lease than o.
func (f Fence) Older(o Fence) bool {
	return f.Created < o.Created || (f.Created == o.Created && f.Transitions < o.Transitions)
}

// Fencer is a store that records a hold's fence as its Lease's newest
// (a database). A replica records it when it takes a shard, before it
// drives any of the shard's runs, so from then on no append of an older
// hold can commit, not only from the new holder's first append (between
// the two, an older holder still alive could answer a call the new one
// had already read as pending and issue again).
type Fencer interface {
	RaiseFence(ctx context.Context, f Fence) error
}

type fenceKey struct{}

// WithFence is ctx carrying f: appends made with it are fenced by f.
func WithFence(ctx context.Context, f Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// FenceFrom is the fence ctx carries, if any (none: a single replica
// driving every run, fenced by seq alone).
func FenceFrom(ctx context.Context) (Fence, bool) {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	return f, ok
}

// Unusable is a configured store that cannot be used at all until the
// manager is restarted with another configuration (a DSN that does not
// parse): every call returns err, so runs wait on it with its remedy and
// readiness says why, instead of the manager failing to start or falling
// back to another store.
func Unusable(kind string, err *UnavailableError) Backend { return unusable{kind: kind, err: err} }

type unusable struct {
	kind string
	err  *UnavailableError
}

func (u unusable) Load(context.Context, *arv1.AgentRun, bool) ([]journal.Entry, error) {
	return nil, u.err
}
func (u unusable) Append(context.Context, *arv1.AgentRun, ...journal.Entry) error { return u.err }
func (u unusable) AppendWithOutput(context.Context, *arv1.AgentRun, string, ...journal.Entry) error {
	return u.err
}
func (u unusable) PutOutput(context.Context, *arv1.AgentRun, string) (string, error) {
	return "", u.err
}
func (u unusable) Forget(types.UID)                                         {}
func (u unusable) Has(types.UID) bool                                       { return false }
func (u unusable) EachRun(func(types.UID))                                  {}
func (u unusable) Cached() int                                              { return 0 }
func (u unusable) Entries(context.Context, RunRef) ([]journal.Entry, error) { return nil, u.err }
func (u unusable) Output(context.Context, RunRef) (string, bool, error)     { return "", false, u.err }
func (u unusable) Kind() string                                             { return u.kind }
func (u unusable) Check(context.Context) error                              { return u.err }
func (u unusable) Close() error                                             { return nil }
