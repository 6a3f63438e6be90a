package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/history/historyclient"
	"github.com/agentrun-dev/agentrun-operator/internal/transcript"
)

// Journals the plugin cannot read as ConfigMaps are read through the
// history API (history.agentrun.dev, docs/history.md), as the same user:
// the journal of a run whose status.journalStore is Database, and the
// record of a run that is gone.

// errNoHistory is the history API missing from the cluster.
var errNoHistory = errors.New("the history API (history.agentrun.dev) is not served in this cluster: install the history server (docs/history.md)")

// lookupRun reads the run; gone says it does not exist (any other error
// is returned).
func lookupRun(ctx context.Context, c client.Client, ns, name string) (run *arv1.AgentRun, gone bool, err error) {
	run = &arv1.AgentRun{}
	err = c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, run)
	if apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	return run, false, nil
}

// inDatabase says the run's journal and output are in the operator's
// database, not in ConfigMaps.
func inDatabase(run *arv1.AgentRun) bool {
	return run.Status.JournalStore == arv1.JournalDatabase
}

// historyError words the history API's answers the reader can act on.
func historyError(err error, ns, name string, gone bool) error {
	switch {
	case err == nil:
		return nil
	case gone && apierrors.IsNotFound(err):
		if isMissingAPI(err) {
			return fmt.Errorf("agentrun %q not found in namespace %q, and %w", name, ns, errNoHistory)
		}
		return fmt.Errorf("agentrun %q not found in namespace %q, nor an archived record of it", name, ns)
	case isMissingAPI(err):
		return fmt.Errorf("run %s/%s keeps its journal in the database, and %w", ns, name, errNoHistory)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("reading the history of %s/%s: %w (the view role grants it, docs/history.md)", ns, name, err)
	}
	return err
}

// isMissingAPI says a 404 is the API group's absence, not the record's:
// the history server answers a missing record with a Status naming it,
// while a path nothing serves is answered without one (client-go then
// makes a NotFound of its own, which names the request's object but
// carries the cause UnexpectedServerResponse).
func isMissingAPI(err error) bool {
	if !apierrors.IsNotFound(err) {
		return false
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return false
	}
	d := st.Status().Details
	if d == nil || d.Name == "" {
		return true
	}
	return slices.ContainsFunc(d.Causes, func(c metav1.StatusCause) bool { return c.Type == metav1.CauseTypeUnexpectedServerResponse })
}

// JournalTranscript reads the transcript of a run whose journal is in the
// database, or of a record when the run is gone, through the history API
// with cfg. uid, when set, is the run's: a transcript of another run of
// the same name (an older record) is no transcript of it yet.
func JournalTranscript(ctx context.Context, cfg *rest.Config, ns, name string, uid types.UID) ([]transcript.Line, error) {
	h, err := historyclient.New(cfg)
	if err != nil {
		return nil, err
	}
	t, err := h.Transcript(ctx, ns, name)
	if uid != "" && apierrors.IsNotFound(err) && !isMissingAPI(err) {
		return nil, nil // a live run that has journaled nothing yet
	}
	if err != nil {
		return nil, historyError(err, ns, name, uid == "")
	}
	if uid != "" && t.UID != uid {
		return nil, nil
	}
	out := make([]transcript.Line, 0, len(t.Lines))
	for _, l := range t.Lines {
		out = append(out, transcript.Line(l))
	}
	return out, nil
}

// JournalOutput reads the final output of a run whose journal is in the
// database, or of a record when the run is gone (uid ""); ok is false
// when none is stored.
func JournalOutput(ctx context.Context, cfg *rest.Config, ns, name string, uid types.UID) (text string, ok bool, err error) {
	h, err := historyclient.New(cfg)
	if err != nil {
		return "", false, err
	}
	o, err := h.Output(ctx, ns, name)
	if uid != "" && apierrors.IsNotFound(err) && !isMissingAPI(err) {
		return "", false, nil // a live run that has stored nothing yet
	}
	if err != nil {
		return "", false, historyError(err, ns, name, uid == "")
	}
	if uid != "" && o.UID != uid {
		return "", false, nil
	}
	return o.Output, o.Stored, nil
}

// ReadRunOutput reads the run's final output wherever its journal is
// kept; an error says why there is none.
func ReadRunOutput(ctx context.Context, c client.Client, cfg *rest.Config, run *arv1.AgentRun) (string, error) {
	if !inDatabase(run) {
		return ReadOutput(ctx, c, run)
	}
	text, ok, err := JournalOutput(ctx, cfg, run.Namespace, run.Name, run.UID)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", noOutput(run)
	}
	return text, nil
}

// noOutput is the error of a run without an output.
func noOutput(run *arv1.AgentRun) error {
	phase := string(run.Status.Phase)
	if phase == "" {
		phase = "not started"
	}
	return fmt.Errorf("run %s/%s has no output (phase: %s)", run.Namespace, run.Name, phase)
}

// goneTranscript prints the archived record's transcript of a run that is
// gone, saying so.
func (a *app) goneTranscript(ctx context.Context, ns, name string) error {
	lines, err := JournalTranscript(ctx, a.cfg, ns, name, "")
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "agentrun %s/%s is gone: this is its archived record (kubectl get agentrunrecord %s -n %s)\n", ns, name, name, ns)
	return writeLines(a.stdout, lines)
}

// goneOutput prints the archived record's output of a run that is gone,
// saying so.
func (a *app) goneOutput(ctx context.Context, ns, name string) error {
	text, ok, err := JournalOutput(ctx, a.cfg, ns, name, "")
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "agentrun %s/%s is gone: this is its archived record (kubectl get agentrunrecord %s -n %s)\n", ns, name, name, ns)
	if !ok {
		return fmt.Errorf("the archived run %s/%s has no output", ns, name)
	}
	_, err = io.WriteString(a.stdout, text)
	return err
}

// writeLines prints transcript lines as RenderTranscript does.
func writeLines(w io.Writer, lines []transcript.Line) error {
	tw := newTable(w)
	for _, l := range lines {
		writeLine(tw, l)
	}
	return tw.Flush()
}
