package plugin

import (
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
)

// The commands that read one run (describe, output, transcript) and the
// ones that patch its spec (pause, resume, cancel).

func (a *app) describe(ctx context.Context, c client.Client, ns string, o options) error {
	run, err := getRun(ctx, c, ns, o.args[0])
	if err != nil {
		return err
	}
	entries, _, err := RunJournalLenient(ctx, c, a.cfg, run)
	if err != nil {
		return err
	}
	return RenderDescribe(a.stdout, run, a.now(), readOwnership(ctx, c, o), Failovers(entries)...)
}

// patchSpec is a command that merge-patches the run's spec.
func patchSpec(patch, done string) func(a *app, ctx context.Context, c client.Client, ns string, o options) error {
	return func(a *app, ctx context.Context, c client.Client, ns string, o options) error {
		run := &arv1.AgentRun{}
		run.Namespace, run.Name = ns, o.args[0]
		if err := c.Patch(ctx, run, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			if apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
				return fmt.Errorf("agentrun %q not found in namespace %q", o.args[0], ns)
			}
			return err
		}
		fmt.Fprintf(a.stdout, "agentrun.%s/%s %s\n", arv1.GroupVersion.Group, run.Name, done)
		if run.Status.Phase.IsTerminal() {
			fmt.Fprintf(a.stderr, "note: the run is already %s; this changes nothing it does\n", run.Status.Phase)
		}
		return nil
	}
}

func (a *app) output(ctx context.Context, c client.Client, ns string, o options) error {
	run, gone, err := lookupRun(ctx, c, ns, o.args[0])
	if err != nil {
		return err
	}
	if gone {
		return a.goneOutput(ctx, ns, o.args[0])
	}
	text, err := ReadRunOutput(ctx, c, a.cfg, run)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(a.stdout, text); err != nil {
		return err
	}
	if d := run.Status.FinalOutput; d.Truncated {
		fmt.Fprintf(a.stderr, "note: the stored output was cut at the 256 KiB cap (%d bytes were submitted)\n", d.Bytes)
	}
	return nil
}

// databaseTranscript prints the transcript of a run whose journal is in
// the database, read through the history API; with --follow, then each
// entry as the run moves past it (followDatabase).
func (a *app) databaseTranscript(ctx context.Context, run *arv1.AgentRun, follow bool) error {
	if follow {
		return a.followDatabase(ctx, run)
	}
	lines, err := JournalTranscript(ctx, a.cfg, run.Namespace, run.Name, run.UID)
	if err != nil {
		return err
	}
	if len(lines) == 0 {
		fmt.Fprintf(a.stderr, "run %s/%s has no journal entries yet\n", run.Namespace, run.Name)
		return nil
	}
	return writeLines(a.stdout, lines)
}

// ReadOutput reads the run's final output from the ConfigMap that
// status.finalOutput names; an error says why there is none.
func ReadOutput(ctx context.Context, c client.Client, run *arv1.AgentRun) (string, error) {
	ns := run.Namespace
	d := run.Status.FinalOutput
	if d == nil || d.ObjectName == "" {
		return "", noOutput(run)
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: d.ObjectName}, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("run %s/%s names output ConfigMap %q, which does not exist", ns, run.Name, d.ObjectName)
		}
		return "", err
	}
	text, ok := cm.Data["output"]
	if !ok {
		return "", fmt.Errorf("output ConfigMap %s/%s has no \"output\" key", ns, d.ObjectName)
	}
	return text, nil
}

func (a *app) transcript(ctx context.Context, c client.Client, ns string, o options) error {
	run, gone, err := lookupRun(ctx, c, ns, o.args[0])
	switch {
	case err != nil:
		return err
	case gone:
		return a.goneTranscript(ctx, ns, o.args[0])
	case inDatabase(run):
		return a.databaseTranscript(ctx, run, o.follow)
	}
	if o.follow {
		return a.followTranscript(ctx, ns, run)
	}
	entries, unreadable, err := configmaps.ReadLenient(ctx, c, ns, run.UID)
	if err != nil {
		return err
	}
	if len(entries)+len(unreadable) == 0 {
		fmt.Fprintf(a.stderr, "run %s/%s has no journal entries yet\n", ns, run.Name)
		return nil
	}
	return RenderTranscript(a.stdout, entries, unreadable)
}
