package plugin

import (
	"context"
	"fmt"
	"io"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
	"github.com/agentrun-dev/agentrun-operator/internal/transcript"
)

// followTranscript is transcript --follow: the journal as stored, then
// each entry as it is journaled, until the run has ended and its last
// entries are printed, or the context ends (Ctrl-C). It watches the
// journal's objects and the run itself (re-opened from the last version
// seen when the server closes a watch), never polls.
func (a *app) followTranscript(ctx context.Context, ns string, run *arv1.AgentRun) error {
	wc, err := a.watchClient()
	if err != nil {
		return err
	}
	f := &follower{w: a.stdout, printed: map[int64]string{}}
	rv, err := f.read(ctx, wc, ns, run)
	if err != nil || run.Status.Phase.IsTerminal() {
		return err
	}
	chunks, err := watchtools.NewRetryWatcherWithContext(ctx, rv, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, lo metav1.ListOptions) (watch.Interface, error) {
			return wc.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns), configmaps.Selector(run.UID), &client.ListOptions{Raw: &lo})
		}})
	if err != nil {
		return err
	}
	defer chunks.Stop()
	runs, err := watchRun(ctx, wc, run)
	if err != nil {
		return err
	}
	defer runs.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-chunks.ResultChan():
			if !ok {
				return watchEnded(ctx, "journal")
			}
			if ev.Type == watch.Error {
				return fmt.Errorf("watching the journal: %w", apierrors.FromObject(ev.Object))
			}
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok && ev.Type != watch.Deleted {
				f.add(cm)
				if err := f.flush(); err != nil {
					return err
				}
			}
		case ev, ok := <-runs.ResultChan():
			if !ok {
				return watchEnded(ctx, "run")
			}
			if ev.Type == watch.Error {
				return fmt.Errorf("watching the run: %w", apierrors.FromObject(ev.Object))
			}
			r, ok := ev.Object.(*arv1.AgentRun)
			switch {
			case !ok || r.UID != run.UID:
			case ev.Type == watch.Deleted:
				return fmt.Errorf("agentrun %s/%s was deleted", ns, run.Name)
			case r.Status.Phase.IsTerminal():
				// Its journal was written before its end: a read now
				// holds every entry, whatever the journal's watch has
				// delivered yet.
				_, err := f.read(ctx, wc, ns, r)
				if err == nil {
					fmt.Fprintf(a.stderr, "run %s/%s ended: %s\n", ns, run.Name, r.Status.Phase)
				}
				return err
			}
		}
	}
}

// watchClient is a client for watches: long-running requests, which the
// server ends (so without --request-timeout's bound).
func (a *app) watchClient() (client.WithWatch, error) {
	cfg := rest.CopyConfig(a.cfg)
	cfg.Timeout = 0
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster: %w", err)
	}
	return wc, nil
}

// watchRun watches run from the version read, re-opening the watch from
// the last version seen when the server closes it.
func watchRun(ctx context.Context, wc client.WithWatch, run *arv1.AgentRun) (watch.Interface, error) {
	return watchtools.NewRetryWatcherWithContext(ctx, run.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, lo metav1.ListOptions) (watch.Interface, error) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", run.Name).String()
			return wc.Watch(ctx, &arv1.AgentRunList{}, client.InNamespace(run.Namespace), &client.ListOptions{Raw: &lo})
		}})
}

func watchEnded(ctx context.Context, what string) error {
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("the watch of the %s ended", what)
}

// follower prints a journal's entries as they come, each seq once (again
// if it was journaled anew: a call issued again after a restart).
type follower struct {
	w       io.Writer
	all     []journal.Entry // every entry seen, for each line's turn
	printed map[int64]string
	pending []journal.Entry
	bad     []string
}

// read lists the run's journal and prints what is new; it returns the
// list's resourceVersion, from which a watch goes on.
func (f *follower) read(ctx context.Context, c client.Client, ns string, run *arv1.AgentRun) (string, error) {
	var list corev1.ConfigMapList
	if err := c.List(ctx, &list, client.InNamespace(ns), configmaps.Selector(run.UID)); err != nil {
		return "", fmt.Errorf("reading the journal: %w", err)
	}
	for i := range list.Items {
		f.add(&list.Items[i])
	}
	return list.ResourceVersion, f.flush()
}

// add takes the entries of one journal object not printed yet, or printed
// with other content.
func (f *follower) add(cm *corev1.ConfigMap) {
	f.addEntries(configmaps.DecodeChunk(cm))
}

// addEntries takes the entries not printed yet, or printed with other
// content, and prints each unreadable entry's description once.
func (f *follower) addEntries(entries []journal.Entry, bad []string) {
	for _, e := range entries {
		key := fmt.Sprintf("%s/%d/%d/%s", e.Kind, e.Lost, e.Call, e.At)
		if f.printed[e.Seq] == key || slices.ContainsFunc(f.pending, func(p journal.Entry) bool { return p.Seq == e.Seq }) {
			continue
		}
		f.printed[e.Seq] = key
		f.pending = append(f.pending, e)
	}
	for _, b := range bad {
		if !slices.Contains(f.bad, b) {
			f.bad = append(f.bad, b)
			fmt.Fprintf(f.w, "#?  %s\n", b)
		}
	}
}

// flush prints the pending entries in seq order, each with the turn the
// whole journal so far gives it.
func (f *follower) flush() error {
	if len(f.pending) == 0 {
		return nil
	}
	slices.SortStableFunc(f.pending, func(a, b journal.Entry) int { return int(a.Seq - b.Seq) })
	f.all = append(f.all, f.pending...)
	slices.SortStableFunc(f.all, func(a, b journal.Entry) int { return int(a.Seq - b.Seq) })
	turns := transcript.Turns(f.all)
	tw := newTable(f.w)
	for _, p := range f.pending {
		i := slices.IndexFunc(f.all, func(e journal.Entry) bool { return e.Seq == p.Seq && e.At.Equal(p.At) })
		writeEntry(tw, &f.all[i], turns[i])
	}
	f.pending = f.pending[:0]
	return tw.Flush()
}
