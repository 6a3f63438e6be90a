package controllers

import (
	"context"
	"errors"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// Terminal errors are what retrying cannot fix: the run's own records are
// damaged (a journal chunk missing or not decoding, a blueprint snapshot
// missing or not parsing), or the API server refuses a journal write for
// what it is (store.ErrRefused: an admission policy, RBAC, its size). Such
// a reconcile shows Stalled with reason ReconcileFailed and the cause,
// emits a Warning Event, gives back the run's active-run slot and is not
// retried: the controller looks at the run again when it changes (spec,
// labels, annotations: see docs/troubleshooting.md) or the manager
// restarts.

// snapshotError is a spawned run's blueprint snapshot that is missing or
// does not parse: the run was started from it, so it cannot go on until
// the snapshot is restored.
type snapshotError struct {
	name string
	err  error
}

func (e *snapshotError) Error() string {
	return fmt.Sprintf("blueprint snapshot %s: %v", e.name, e.err)
}

func (e *snapshotError) Unwrap() error { return e.err }

// stalledError is a terminal error (errors.Is reconcile.TerminalError)
// that reads as what happened, not as "terminal error: ...".
type stalledError struct{ terminal, cause error }

func (e *stalledError) Error() string {
	if errors.Is(e.cause, store.ErrRefused) {
		return e.cause.Error() + "; sending the same write again cannot change that (an answer it held was not kept)" +
			": fix the cause, then annotate the run (agentrun.dev/retry) to go on"
	}
	return "the run's own records are damaged, and retrying cannot repair them: " + e.cause.Error() +
		"; restore the object, then annotate the run (agentrun.dev/retry) to go on"
}

func (e *stalledError) Unwrap() error { return e.terminal }

// terminal returns err as a terminal reconcile error when retrying cannot
// fix it, and err itself otherwise.
func terminal(err error) error {
	var snap *snapshotError
	switch {
	case err == nil, errors.Is(err, reconcile.TerminalError(nil)):
		return err
	case errors.Is(err, store.ErrCorrupt), errors.Is(err, store.ErrRefused), errors.As(err, &snap):
		return &stalledError{terminal: reconcile.TerminalError(err), cause: err}
	}
	return err
}

// settle is finish for a reconcile whose error may be terminal: the status
// write shows it (Stalled: ReconcileFailed, by markError), then a Warning
// Event says it and the run's active-run slot goes to the next in line. If
// the status write failed, nothing shows the stall yet: the error is
// returned as transient, so the reconcile is retried until it does.
func (r *AgentRunReconciler) settle(ctx context.Context, s *scope, err error) (ctrl.Result, error) {
	stalled := terminal(err)
	if stalled == nil || stalled == err {
		return r.finish(ctx, s, err)
	}
	res, ferr := r.finish(ctx, s, stalled)
	if ferr != stalled {
		return res, errors.Join(append([]error{err}, others(ferr, stalled)...)...)
	}
	r.reportStalled(s.run, stalled)
	r.queue.Release(s.run.UID)
	return res, stalled
}

// others are the errors joined in err besides not.
func others(err, not error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		if e != not {
			out = append(out, e)
		}
	}
	return out
}
