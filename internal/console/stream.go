package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/plugin"
)

// keepAlive is how often an idle stream sends a comment, so proxies keep
// it open.
const keepAlive = 20 * time.Second

// sse writes Server-Sent Events.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func startSSE(w http.ResponseWriter) (*sse, bool) {
	f, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming is not supported here")
		return nil, false
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	f.Flush()
	return &sse{w: w, f: f}, true
}

func (s *sse) send(event string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, b); err != nil {
		return err
	}
	s.f.Flush()
	return nil
}

func (s *sse) ping() error {
	if _, err := fmt.Fprint(s.w, ": keep-alive\n\n"); err != nil {
		return err
	}
	s.f.Flush()
	return nil
}

// sendError ends a stream with what went wrong: a refusal keeps the API
// server's code and message.
func (s *sse) sendError(err error) {
	body := map[string]any{"error": err.Error(), "code": http.StatusBadGateway}
	if st, ok := err.(apierrors.APIStatus); ok && st.Status().Code != 0 {
		body = map[string]any{"error": st.Status().Message, "code": st.Status().Code, "from": "the API server"}
	}
	_ = s.send("failure", body)
}

// follow lists the runs the options select, then watches them from the
// list's resourceVersion, calling changed with the runs after the list
// and after every change. A watch the API server ends is opened again
// from a fresh list. It returns when ctx ends or a request fails.
func follow(ctx context.Context, c client.WithWatch, out *sse, changed func(map[string]arv1.AgentRun) error, opts ...client.ListOption) error {
	for {
		var list arv1.AgentRunList
		if err := c.List(ctx, &list, opts...); err != nil {
			return err
		}
		runs := make(map[string]arv1.AgentRun, len(list.Items))
		for _, r := range list.Items {
			runs[r.Namespace+"/"+r.Name] = r
		}
		if err := changed(runs); err != nil {
			return err
		}
		w, err := c.Watch(ctx, &arv1.AgentRunList{}, append(opts, &client.ListOptions{Raw: rawWatchFrom(list.ResourceVersion)})...)
		if err != nil {
			return err
		}
		err = drain(ctx, w, out, runs, changed)
		w.Stop()
		if err != nil || ctx.Err() != nil {
			return err
		}
	}
}

// drain applies the watch's events to runs until it ends.
func drain(ctx context.Context, w watch.Interface, out *sse, runs map[string]arv1.AgentRun, changed func(map[string]arv1.AgentRun) error) error {
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if err := out.ping(); err != nil {
				return err
			}
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			switch ev.Type {
			case watch.Error:
				return nil // expired: list again
			case watch.Bookmark:
				continue
			}
			run, ok := ev.Object.(*arv1.AgentRun)
			if !ok {
				continue
			}
			key := run.Namespace + "/" + run.Name
			if ev.Type == watch.Deleted {
				delete(runs, key)
			} else {
				runs[key] = *run
			}
			if err := changed(runs); err != nil {
				return err
			}
		}
	}
}

// watchRuns streams the listing of a namespace's runs (all=1: every
// namespace), in ps order, after the list and after every change.
func (s *Server) watchRuns(w http.ResponseWriter, r *http.Request, se *session) {
	ns := r.URL.Query().Get("namespace")
	all := r.URL.Query().Get("all") == "1"
	var opts []client.ListOption
	if !all {
		if ns == "" {
			writeError(w, http.StatusBadRequest, "name a namespace (or all=1)")
			return
		}
		opts = append(opts, client.InNamespace(ns))
	}
	out, ok := startSSE(w)
	if !ok {
		return
	}
	// Without access to the classes, places in line count spec.priority.
	classes, _ := plugin.ReadPriorityClasses(r.Context(), se.c, "")
	err := follow(r.Context(), se.c, out, func(runs map[string]arv1.AgentRun) error {
		return out.send("runs", listView(runs, time.Now(), classes))
	}, opts...)
	if err != nil && r.Context().Err() == nil {
		out.sendError(err)
	}
}

// watchRun streams one run's page after every change of the run.
func (s *Server) watchRun(w http.ResponseWriter, r *http.Request, se *session) {
	ns, name := r.URL.Query().Get("namespace"), r.URL.Query().Get("name")
	if ns == "" || name == "" {
		writeError(w, http.StatusBadRequest, "name the run's namespace and name")
		return
	}
	ctx := r.Context()
	can := permissionsFor(ctx, se, ns)
	out, ok := startSSE(w)
	if !ok {
		return
	}
	sel := client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", name)}
	err := follow(ctx, se.c, out, func(runs map[string]arv1.AgentRun) error {
		run, ok := runs[ns+"/"+name]
		if !ok {
			return out.send("gone", map[string]string{"error": fmt.Sprintf("agentrun %q not found in namespace %q", name, ns)})
		}
		return out.send("run", runView(ctx, se, &run, time.Now(), can))
	}, client.InNamespace(ns), sel)
	if err != nil && ctx.Err() == nil {
		out.sendError(err)
	}
}

// rawWatchFrom starts a watch where a list left off.
func rawWatchFrom(rv string) *metav1.ListOptions {
	return &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}
}
