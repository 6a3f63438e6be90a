package plugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// An approval with edited arguments (approve --args) is Applied when the
// run takes it, but that does not say the call is made: the tool policies
// are evaluated again on the edited arguments, and may deny the call or
// hold it for another approval (docs/tool-policy.md). So --wait reads on,
// in the run's journal, to the entry that settles what became of the call.

// errEditDenied ends an approve --args --wait whose edited call a tool
// policy then denied: the verdict is already printed, only the exit code
// is left to give.
var errEditDenied = errors.New("the edited call was denied")

// editFate is what became of a call approved with edited arguments.
type editFate struct {
	// line is the verdict printed, err the command's result (errEditDenied
	// on a denial).
	line string
	err  error
}

// fateOfEdit reads, in entries, what became of the call the answer named
// answer approved with edited arguments: the first entry after its
// ToolCallDecided that decides it. ok is false while nothing has yet.
func fateOfEdit(entries []journal.Entry, answer string) (fate editFate, ok bool) {
	entries = slices.Clone(entries)
	slices.SortStableFunc(entries, func(a, b journal.Entry) int { return cmp.Compare(a.Seq, b.Seq) })
	decided := -1
	for i := range entries {
		if e := &entries[i]; e.Kind == journal.ToolCallDecided && e.Message == answer && e.Approved {
			decided = i
			break
		}
	}
	if decided < 0 {
		return editFate{}, false
	}
	atPolicy, tool := entries[decided].Gate == journal.GatePolicy, entries[decided].Tool
	for _, e := range entries[decided+1:] {
		switch e.Kind {
		case journal.ToolPolicyDecided:
			if d := e.Policy; d != nil {
				if f, ok := policyFate(d, atPolicy, tool); ok {
					return f, true
				}
			}
		case journal.ToolCallRequested, journal.ToolCallCompleted:
			return editFate{line: fmt.Sprintf("Applied: %s is made with the edited arguments", tool)}, true
		case journal.RunCancelled, journal.RunAbandoned:
			return editFate{line: fmt.Sprintf("Applied, but the run ended before %s was made", tool)}, true
		}
	}
	return editFate{}, false
}

// policyFate is what the policies' decision on the edited arguments means
// for the call: a Deny ends it, a RequireApproval holds it unless the
// approval was the policy's own (which answers it again); an Audit lets
// it go on, so it does not settle anything.
func policyFate(d *journal.PolicyDecision, atPolicy bool, tool string) (editFate, bool) {
	why := d.Cause()
	if d.Message != "" {
		why += ": " + d.Message
	}
	switch {
	case d.Action == journal.PolicyDeny:
		return editFate{line: fmt.Sprintf("Denied: the edited call %s was not made: denied by %s", tool, why), err: errEditDenied}, true
	case d.Action == journal.PolicyRequireApproval && !atPolicy:
		return editFate{line: fmt.Sprintf("Held: the edited call %s waits on another approval, required by %s", tool, why)}, true
	}
	return editFate{}, false
}

// awaitEdit waits until the deadline for the run's journal to show what
// became of the call ans approved with edited arguments, and prints it;
// past the deadline it says the run took the arguments and no more. A
// journal in ConfigMaps is read every pollEvery; one in the database is
// read again each time the run changes (runChanges), never polled.
func (a *app) awaitEdit(ctx context.Context, c client.Client, ans *arv1.AgentRunAnswer, deadline time.Time) error {
	run, err := getRun(ctx, c, ans.Namespace, ans.Spec.Run)
	if err != nil {
		return err
	}
	next := a.pollJournal
	if inDatabase(run) {
		changes, stop, err := a.runChanges(ctx, run)
		if err != nil {
			return err
		}
		defer stop()
		next = changes
	}
	for {
		entries, _, err := RunJournalLenient(ctx, c, a.cfg, run)
		if err != nil {
			return err
		}
		if f, ok := fateOfEdit(entries, ans.Name); ok {
			fmt.Fprintln(a.stdout, f.line)
			return f.err
		}
		if !time.Now().Before(deadline) {
			fmt.Fprintf(a.stdout, "Applied: the run took the edited arguments; it has not made or refused the call yet (kubectl agentrun transcript %s -n %s shows what it does)\n",
				run.Name, run.Namespace)
			return nil
		}
		if err := next(ctx, deadline); err != nil {
			return err
		}
	}
}

// pollJournal waits pollEvery before a journal in ConfigMaps is read again.
func (a *app) pollJournal(ctx context.Context, _ time.Time) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(a.pollEvery):
		return nil
	}
}

// runChanges watches run; the function it returns waits until the run
// changes, is gone, or the deadline passes, before its journal (in the
// database, followDatabase says why the run) is read again.
func (a *app) runChanges(ctx context.Context, run *arv1.AgentRun) (next func(context.Context, time.Time) error, stop func(), err error) {
	wc, err := a.watchClient()
	if err != nil {
		return nil, nil, err
	}
	runs, err := watchRun(ctx, wc, run)
	if err != nil {
		return nil, nil, err
	}
	gone := false
	next = func(ctx context.Context, deadline time.Time) error {
		wait := time.NewTimer(time.Until(deadline))
		defer wait.Stop()
		for !gone {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-wait.C:
				return nil
			case ev, open := <-runs.ResultChan():
				if !open {
					if err := watchEnded(ctx, "run"); err != nil {
						return err
					}
					return ctx.Err()
				}
				r, done, err := runChanged(run, ev)
				switch {
				case err != nil:
					return err
				case done && r == nil:
					// Deleted: its journal, archived, is read once more.
					gone = true
					return nil
				case r != nil:
					return nil
				}
			}
		}
		// Nothing more can come: read once more at the deadline.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wait.C:
			return nil
		}
	}
	return next, runs.Stop, nil
}
