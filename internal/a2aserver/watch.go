package a2aserver

import (
	"context"
	"fmt"
	"iter"
	"net/http"

	"github.com/a2aproject/a2a-go/a2a"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// interrupts: a task in one of these states waits on its caller, so a
// blocking call returns and a stream ends there.
func interrupts(s a2a.TaskState) bool {
	return s.Terminal() || s == a2a.TaskStateInputRequired || s == a2a.TaskStateAuthRequired
}

// follow yields the run's task now and again whenever its state or
// message changes, from a watch on the run (as the caller), until the
// task ends or needs input. An input-required for the point just answered
// is skipped: the controller has not taken the answer up yet.
func (h *handler) follow(ctx context.Context, run *arv1.AgentRun, answered string) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		last := ""
		// emit reports whether to go on watching.
		emit := func(r *arv1.AgentRun) bool {
			state, text := StateOf(r)
			if w := r.Status.WaitingOn; answered != "" && state == a2a.TaskStateInputRequired && w != nil && w.Point == answered {
				return true
			}
			key := string(state) + "\x00" + text
			if key == last {
				return true
			}
			last = key
			t, err := h.task(ctx, r)
			if err != nil {
				yield(nil, err)
				return false
			}
			return yield(t, nil) && !interrupts(state)
		}
		if !emit(run) {
			return
		}
		rv := run.ResourceVersion
		for ctx.Err() == nil {
			next, ok := h.watchOnce(ctx, run.Name, &rv, emit, yield)
			if !ok {
				return
			}
			if next != nil && !emit(next) {
				return
			}
		}
	}
}

// watchOnce runs one watch from *rv, handing every new version of the run
// to emit; it returns ok false when following should stop, and a fresh
// copy of the run when the watch had to be restarted from a new read.
func (h *handler) watchOnce(ctx context.Context, name string, rv *string, emit func(*arv1.AgentRun) bool,
	yield func(a2a.Event, error) bool) (*arv1.AgentRun, bool) {
	w, err := h.c.Watch(ctx, &arv1.AgentRunList{}, &client.ListOptions{Namespace: h.ns,
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name),
		Raw:           &metav1.ListOptions{ResourceVersion: *rv, AllowWatchBookmarks: true}})
	if err != nil {
		yield(nil, rpcError(err))
		return nil, false
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, false
		case ev, open := <-w.ResultChan():
			if !open {
				return nil, true
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				r := ev.Object.(*arv1.AgentRun)
				*rv = r.ResourceVersion
				if !emit(r) {
					return nil, false
				}
			case watch.Bookmark:
				if o, ok := ev.Object.(*arv1.AgentRun); ok {
					*rv = o.ResourceVersion
				}
			case watch.Deleted:
				yield(nil, fmt.Errorf("run %s/%s was deleted: %w", h.ns, name, a2a.ErrTaskNotFound))
				return nil, false
			case watch.Error:
				// Usually 410 Gone: the version is compacted away; read
				// the run afresh and watch from there.
				if st, ok := ev.Object.(*metav1.Status); ok && st.Code != http.StatusGone {
					yield(nil, rpcError(&apierrors.StatusError{ErrStatus: *st}))
					return nil, false
				}
				r := &arv1.AgentRun{}
				if err := h.c.Get(ctx, types.NamespacedName{Namespace: h.ns, Name: name}, r); err != nil {
					yield(nil, rpcError(err))
					return nil, false
				}
				*rv = r.ResourceVersion
				return r, true
			}
		}
	}
}
