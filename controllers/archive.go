package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/controllers/agentrun/children"
	"github.com/agentrun-dev/agentrun-operator/internal/metrics"
	"github.com/agentrun-dev/agentrun-operator/internal/output"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/store/router"
)

// With a database store every finished run is archived (its spec, final
// status, journal, output, children, usage and cost) before its custom
// resource may be deleted: the archive is its history once the CR is gone.
// The run that finishes is archived in the reconcile that ends it, before
// its final status is written, which then says so (Archived=True). A
// failed archive write is Archived=False with the cause; the finished
// run's reconcile retries it, and its TTL deletion waits for it. While
// the store is known down a finished run's archive is not tried at all:
// each try would hold a reconcile worker until the store's operation
// timeout, and the workers are what runs in flight need to park on the
// outage and go on after it. The run is parked with them and woken when
// the store answers.

// archiver archives finished runs, when the runs' store has an archive.
type archiver struct {
	journals *router.Router
	// reader reads a finished run's full record (the cache keeps a stub).
	reader   client.Reader
	children *children.Children
	// retention is how long the archive keeps records (no sweep when 0).
	retention time.Duration
	// health is what the controller knows of the store: an archive is
	// not tried while it is down, and an archive that finds it down says
	// so.
	health *storeHealth
}

// archiveRetry is how soon a failed archive write is tried again.
const archiveRetry = 10 * time.Second

// end archives a run this reconcile ends and records the outcome in its
// status (written next), when there is an archive.
func (w *archiver) end(ctx context.Context, s *scope) {
	a := w.journals.Archive()
	if a == nil || !s.run.Status.Phase.IsTerminal() || s.before.Status.Phase.IsTerminal() {
		return
	}
	rec := &store.Record{Run: s.run, Children: childRecords(s.facts)}
	if f := s.facts; f != nil && f.State.Output != nil {
		text, _ := output.Stored(f.State.Output.Text)
		rec.Output = &text
	}
	w.with(ctx, a, s.run, rec)
}

// with writes rec, importing the run's journal when the archive's
// database does not hold it, and sets the run's Archived condition.
func (w *archiver) with(ctx context.Context, a store.Archive, run *arv1.AgentRun, rec *store.Record) {
	err := func() error {
		if w.journals.Where(run) != arv1.JournalDatabase {
			es, err := w.journals.Entries(ctx, store.RefOf(run))
			if err != nil {
				return fmt.Errorf("reading the journal to archive: %w", err)
			}
			rec.Entries = es
		}
		// The record holds the status as it will be written, archived.
		archivedAs := run.DeepCopy()
		setCondition(archivedAs, arv1.ConditionArchived, metav1.ConditionTrue, arv1.ReasonArchived, archivedMessage)
		rec.Run = archivedAs
		return a.Archive(ctx, rec)
	}()
	if err != nil {
		metrics.ArchiveWrites.WithLabelValues(metrics.ArchiveFailed).Inc()
		w.health.failed(err)
		if errors.Is(err, store.ErrUnavailable) {
			w.health.park(run) // tried again as soon as the store answers
		}
		ctrl.LoggerFrom(ctx).Error(err, "Archiving the finished run failed; it is kept until the archive succeeds")
		setCondition(run, arv1.ConditionArchived, metav1.ConditionFalse, arv1.ReasonArchiveFailed, clipTo("Archiving the finished run failed, retried every "+archiveRetry.String()+"; the run is not deleted until it succeeds: "+err.Error(), 1024))
		return
	}
	metrics.ArchiveWrites.WithLabelValues(metrics.ArchiveStored).Inc()
	setCondition(run, arv1.ConditionArchived, metav1.ConditionTrue, arv1.ReasonArchived, archivedMessage)
}

// waitsForStore says whether a finished run's archive waits for the
// store, known down; the run is then parked on it, to be woken when it
// answers.
func (w *archiver) waitsForStore(run *arv1.AgentRun) bool {
	if w.health.problem() == nil {
		return false
	}
	w.health.park(run)
	return true
}

const archivedMessage = "The finished run's record, journal, output and cost are in the archive"

// archived says a finished run needs no archive write: there is no
// archive, or its record is stored.
func (w *archiver) archived(run *arv1.AgentRun) bool {
	return w.journals.Archive() == nil || meta.IsStatusConditionTrue(run.Status.Conditions, arv1.ConditionArchived)
}

// finished archives a finished run whose record is not stored yet
// (the write failed at its end, or it ended before a database store was
// configured), from its full record (the cache keeps a stub). It returns
// the run as stored and as it is to be written, with its Archived
// condition.
func (w *archiver) finished(ctx context.Context, run *arv1.AgentRun) (stored, archived *arv1.AgentRun, err error) {
	stored = &arv1.AgentRun{}
	if err := w.reader.Get(ctx, client.ObjectKeyFromObject(run), stored); err != nil {
		return nil, nil, err
	}
	archived = stored.DeepCopy()
	rec := &store.Record{}
	children, err := w.children.List(ctx, stored)
	if err != nil {
		return nil, nil, err
	}
	for i := range children {
		c := &children[i]
		rec.Children = append(rec.Children, store.ChildRecord{Name: c.Name, UID: c.UID, Phase: c.Status.Phase})
	}
	if stored.Status.FinalOutput != nil {
		text, ok, err := w.journals.Output(ctx, store.RefOf(stored))
		if err != nil {
			return nil, nil, fmt.Errorf("reading the output to archive: %w", err)
		}
		if ok {
			rec.Output = &text
		}
	}
	w.with(ctx, w.journals.Archive(), archived, rec)
	return stored, archived, nil
}

// childRecords are the run's children as the archive keeps them.
func childRecords(f *facts) []store.ChildRecord {
	if f == nil {
		return nil
	}
	out := make([]store.ChildRecord, 0, len(f.children))
	for i := range f.children {
		c := &f.children[i]
		out = append(out, store.ChildRecord{Name: c.Name, UID: c.UID, Phase: c.Status.Phase})
	}
	return out
}

// sweeper is the archive's sweep, when there is an archive and a
// retention (nil otherwise).
func (w *archiver) sweeper(now func() time.Time) *archiveSweeper {
	a := w.journals.Archive()
	if a == nil || w.retention <= 0 {
		return nil
	}
	return &archiveSweeper{archive: a, retention: w.retention, now: now}
}

// archiveSweeper deletes archived runs older than the retention, in
// bounded batches, every hour.
type archiveSweeper struct {
	archive   store.Archive
	retention time.Duration
	now       func() time.Time
}

// NeedLeaderElection: one replica sweeps.
func (w archiveSweeper) NeedLeaderElection() bool { return true }

// Start sweeps until ctx ends.
func (w archiveSweeper) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("archive")
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		total := 0
		for {
			n, err := w.archive.Sweep(ctx, w.now().Add(-w.retention), 500)
			total += n
			if err != nil {
				log.Error(err, "Sweeping archived runs past their retention")
				break
			}
			if n < 500 {
				break
			}
		}
		if total > 0 {
			log.Info("Deleted archived runs past their retention", "runs", total, "retention", w.retention.String())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
