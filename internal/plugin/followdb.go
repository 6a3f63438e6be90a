package plugin

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// A database journal has no watch of its own: the history API serves it
// whole (the journal subresource), and the plugin does not poll it.
// What moves when an entry is journaled is the run: its manager journals
// each entry before it writes the status that follows from it, writes a
// wait, a phase change, an error and the end at once, and, while the run
// only goes from one model call to the next, the status at most the
// manager's --status-interval (10 s by default) after the last write. So
// the readers below watch the run and read the journal again each time it
// changes: an entry shows as the run's status moves past it (within that
// interval), and every entry by the time the run has ended.

// runChanged reads an event of a watch of run (watchRun): done when the
// run has ended or is gone, with the run as the event showed it (nil when
// deleted, or when the event is not of this run); an error when the watch
// failed.
func runChanged(run *arv1.AgentRun, ev watch.Event) (r *arv1.AgentRun, done bool, err error) {
	if ev.Type == watch.Error {
		return nil, true, fmt.Errorf("watching the run: %w", apierrors.FromObject(ev.Object))
	}
	r, ok := ev.Object.(*arv1.AgentRun)
	switch {
	case !ok || r.UID != run.UID:
		return nil, false, nil
	case ev.Type == watch.Deleted:
		return nil, true, nil
	}
	return r, r.Status.Phase.IsTerminal(), nil
}

// followDatabase is transcript --follow of a run whose journal is in the
// database: the journal as it stands, then what each change of the run
// brings to it, until the run has ended (its last entries printed) or
// the context ends.
func (a *app) followDatabase(ctx context.Context, run *arv1.AgentRun) error {
	wc, err := a.watchClient()
	if err != nil {
		return err
	}
	// The watch starts from the version read, before the first read of
	// the journal: no change between the two is missed.
	runs, err := watchRun(ctx, wc, run)
	if err != nil {
		return err
	}
	defer runs.Stop()
	f := &follower{w: a.stdout, printed: map[int64]string{}}
	read := func(r *arv1.AgentRun) error {
		entries, bad, err := RunJournalLenient(ctx, nil, a.cfg, r)
		if err != nil {
			return fmt.Errorf("reading the journal: %w", err)
		}
		f.addEntries(entries, bad)
		return f.flush()
	}
	if err := read(run); err != nil || run.Status.Phase.IsTerminal() {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, open := <-runs.ResultChan():
			if !open {
				return watchEnded(ctx, "run")
			}
			r, done, err := runChanged(run, ev)
			switch {
			case err != nil:
				return err
			case done && r == nil:
				return fmt.Errorf("agentrun %s/%s was deleted", run.Namespace, run.Name)
			case r == nil:
				continue
			}
			if err := read(r); err != nil {
				return err
			}
			if done {
				fmt.Fprintf(a.stderr, "run %s/%s ended: %s\n", run.Namespace, run.Name, r.Status.Phase)
				return nil
			}
		}
	}
}
