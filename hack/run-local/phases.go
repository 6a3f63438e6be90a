package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
)

// printPhases prints one short line each time a run's phase, stage or wait
// changes, so the terminal shows the runs moving without the manager's
// log (which --verbose brings back). It watches until ctx ends, watching
// again when the API server closes a watch.
func printPhases(ctx context.Context, cfg *rest.Config, w io.Writer) {
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		fmt.Fprintln(w, ">> Not showing the runs' progress:", err)
		return
	}
	last := map[string]string{}
	for ctx.Err() == nil {
		watch, err := c.Watch(ctx, &arv1.AgentRunList{})
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for ev := range watch.ResultChan() {
			run, ok := ev.Object.(*arv1.AgentRun)
			if !ok || run.Status.Phase == "" {
				continue
			}
			key, line := run.Namespace+"/"+run.Name, phaseLine(run)
			if last[key] != line {
				last[key] = line
				fmt.Fprintf(w, "   %s %s: %s\n", time.Now().Format("15:04:05"), key, line)
			}
		}
		watch.Stop()
	}
}

// phaseLine is what a person watching wants to know of a run: its phase,
// its stage, and what it waits on.
func phaseLine(run *arv1.AgentRun) string {
	line := string(run.Status.Phase)
	if st := run.Status.Stage; st != "" && !run.Status.Phase.IsTerminal() {
		line += " at " + st
	}
	if w := run.Status.WaitingOn; w != nil && w.Summary != "" {
		line += ", waiting on " + w.Summary
	}
	if e := run.Status.Error; e != "" {
		line += ": " + e
	}
	return line
}
