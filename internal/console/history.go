package console

import (
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun-operator/internal/history/historyclient"
	"github.com/agentrun-dev/agentrun-operator/internal/transcript"
)

// The history page: archived runs (history.agentrun.dev, docs/history.md)
// with the filters of kubectl agentrun history, and one record's
// transcript and output, read through the API server as the signed-in
// person (the history server authorizes each request with a
// SubjectAccessReview for them).

// historyPageSize bounds one page of the history page.
const historyPageSize = 100

// historyList answers a page of records: namespace (or all=1), label (a
// label selector), phase, agent, since (an age, RFC 3339 time or date)
// and continue (the previous page's token).
func (s *Server) historyList(w http.ResponseWriter, r *http.Request, se *session) {
	q := r.URL.Query()
	ns := q.Get("namespace")
	if q.Get("all") == "1" {
		ns = ""
	} else if ns == "" {
		writeError(w, http.StatusBadRequest, "name a namespace, or all=1")
		return
	}
	h, err := historyclient.New(se.cfg)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	var fields []string
	for param, field := range map[string]string{"phase": "status.phase", "agent": "spec.agent", "since": "status.finishedAfter"} {
		if v := strings.TrimSpace(q.Get(param)); v != "" {
			fields = append(fields, field+"="+v)
		}
	}
	page, err := h.ListRecords(r.Context(), ns, metav1.ListOptions{LabelSelector: q.Get("label"), FieldSelector: strings.Join(fields, ","),
		Limit: historyPageSize, Continue: q.Get("continue")})
	if err != nil {
		writeAPIError(w, err)
		return
	}
	now := time.Now()
	rows := make([]historyclient.Row, 0, len(page.Items))
	for i := range page.Items {
		rows = append(rows, historyclient.RowOf(&page.Items[i], now))
	}
	writeJSON(w, http.StatusOK, map[string]any{"records": rows, "continue": page.Continue})
}

// historyRecord answers one record: its row, task, error, children,
// transcript and output.
func (s *Server) historyRecord(w http.ResponseWriter, r *http.Request, se *session) {
	ns, name := r.URL.Query().Get("namespace"), r.URL.Query().Get("name")
	if ns == "" || name == "" {
		writeError(w, http.StatusBadRequest, "name the record's namespace and name")
		return
	}
	h, err := historyclient.New(se.cfg)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	ctx := r.Context()
	rec, err := h.GetRecord(ctx, ns, name)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	page := map[string]any{"record": historyclient.RowOf(rec, time.Now()), "task": rec.Spec.Task, "error": rec.Status.Error,
		"children": rec.Archive.Children, "transcript": []transcript.Line{}}
	if t, err := h.Transcript(ctx, ns, name); err != nil {
		page["transcriptError"] = err.Error()
	} else {
		lines := make([]transcript.Line, 0, len(t.Lines))
		for _, l := range t.Lines {
			lines = append(lines, transcript.Line(l))
		}
		page["transcript"] = lines
	}
	if o, err := h.Output(ctx, ns, name); err != nil {
		page["outputNote"] = err.Error()
	} else if o.Stored {
		page["output"] = o.Output
	}
	writeJSON(w, http.StatusOK, page)
}
