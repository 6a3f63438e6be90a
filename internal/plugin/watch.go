package plugin

import (
	"context"
	"fmt"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/priority"
	"github.com/agentrun-dev/agentrun-operator/internal/shards"
	"github.com/agentrun-dev/agentrun-operator/internal/wirestatus"
)

// watchRuns is ps --watch: the listing as of list, then every change the
// API server reports from list's resource version on, until the context
// ends (Ctrl-C). It is a watch, re-opened from the last version seen when
// the server closes it, never a poll.
func (a *app) watchRuns(ctx context.Context, ns string, o options, list *arv1.AgentRunList, own *shards.Ownership, classes priority.Classes) error {
	cfg := rest.CopyConfig(a.cfg)
	cfg.Timeout = 0 // a watch is long-running; the server ends each one
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("connecting to the cluster: %w", err)
	}
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, lo metav1.ListOptions) (watch.Interface, error) {
		return wc.Watch(ctx, &arv1.AgentRunList{}, append(listScope(ns, o), &client.ListOptions{Raw: &lo})...)
	}}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, lw)
	if err != nil {
		return err
	}
	defer rw.Stop()

	out := a.watchPrinter(o, own, classes)
	if err := out.start(list.Items); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-rw.ResultChan():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("the watch of agentruns ended")
			}
			if ev.Type == watch.Error {
				return fmt.Errorf("watching agentruns: %w", apierrors.FromObject(ev.Object))
			}
			run, ok := ev.Object.(*arv1.AgentRun)
			if !ok || ev.Type == watch.Bookmark {
				continue
			}
			if err := out.event(ev.Type, run); err != nil {
				return err
			}
		}
	}
}

// runPrinter prints what ps --watch sees.
type runPrinter interface {
	start(runs []arv1.AgentRun) error
	event(t watch.EventType, run *arv1.AgentRun) error
}

func (a *app) watchPrinter(o options, own *shards.Ownership, classes priority.Classes) runPrinter {
	if o.output != "" && o.output != "wide" {
		return &objectWatch{a: a, o: o}
	}
	return &tableWatch{w: a.stdout, stderr: a.stderr, now: a.now, own: own, classes: classes,
		cols: psColumns{allNamespaces: o.allNamespaces, wide: o.output == "wide"}, needs: map[string]bool{}}
}

// objectWatch prints each run, then each changed run, through -o's printer.
type objectWatch struct {
	a *app
	o options
}

func (w *objectWatch) start(runs []arv1.AgentRun) error {
	for i := range runs {
		if err := w.a.printObjects(w.o, withKind(&runs[i])); err != nil {
			return err
		}
	}
	return nil
}

func (w *objectWatch) event(_ watch.EventType, run *arv1.AgentRun) error {
	return w.a.printObjects(w.o, withKind(run))
}

// tableWatch prints the listing, then one row per change (kubectl get -w
// style), and the footer again whenever the count of runs needing an
// answer changes.
type tableWatch struct {
	w, stderr io.Writer
	now       func() time.Time
	own       *shards.Ownership
	classes   priority.Classes
	cols      psColumns
	needs     map[string]bool // namespace/name -> needs a person
	footer    string
}

func (t *tableWatch) start(runs []arv1.AgentRun) error {
	for i := range runs {
		t.needs[runs[i].Namespace+"/"+runs[i].Name] = runs[i].NeedsAPerson()
	}
	t.footer = Footer(t.needing())
	if len(runs) == 0 {
		fmt.Fprintln(t.stderr, "No AgentRuns yet; watching for them.")
		return nil
	}
	return renderPs(t.w, runs, t.now(), t.cols, t.own, t.classes)
}

func (t *tableWatch) event(typ watch.EventType, run *arv1.AgentRun) error {
	key := run.Namespace + "/" + run.Name
	row := wirestatus.NewPsRow(run, t.now())
	if typ == watch.Deleted {
		row.Phase = "Deleted"
		delete(t.needs, key)
	} else {
		t.needs[key] = run.NeedsAPerson()
	}
	tw := newTable(t.w)
	fmt.Fprintln(tw, t.cols.line(run, row, row.Name, DriverText(run, t.own), t.now()))
	if err := tw.Flush(); err != nil {
		return err
	}
	if f := Footer(t.needing()); f != t.footer {
		t.footer = f
		_, err := fmt.Fprintln(t.w, f)
		return err
	}
	return nil
}

func (t *tableWatch) needing() int {
	n := 0
	for _, needs := range t.needs {
		if needs {
			n++
		}
	}
	return n
}
