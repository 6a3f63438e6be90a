package console

import (
	"encoding/json"
	"errors"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/plugin"
)

// routes: the page's files, and the JSON API under /api/.
func (s *Server) routes(static http.Handler) {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		if s.localSignIn(w, r) {
			return
		}
		static.ServeHTTP(w, r)
	})
	m.Handle("GET /static/", http.StripPrefix("/static", static))
	m.HandleFunc("POST /api/login", s.guard(s.login))
	m.HandleFunc("POST /api/logout", s.guard(s.logout))
	m.HandleFunc("GET /api/whoami", s.authed(s.whoami))
	m.HandleFunc("GET /api/runs/watch", s.authed(s.watchRuns))
	m.HandleFunc("GET /api/run/watch", s.authed(s.watchRun))
	m.HandleFunc("GET /api/history", s.authed(s.historyList))
	m.HandleFunc("GET /api/history/record", s.authed(s.historyRecord))
	m.HandleFunc("POST /api/answer", s.guard(s.authed(s.answer)))
	m.HandleFunc("POST /api/steer", s.guard(s.authed(s.steer)))
	s.mux = m
}

type authedHandler func(w http.ResponseWriter, r *http.Request, se *session)

// authed serves only a signed-in session.
func (s *Server) authed(h authedHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		se := s.current(r)
		if se == nil {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "not signed in", "mode": s.modeName()})
			return
		}
		h(w, r, se)
	}
}

// guard refuses a request that changes something unless the page sent it
// (the CSRF header, JSON).
func (s *Server) guard(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(csrfHeader) != "1" {
			writeError(w, http.StatusForbidden, "missing the "+csrfHeader+" header: requests that change something come from the console's page")
			return
		}
		h(w, r)
	}
}

func (s *Server) modeName() string {
	if s.o.Mode == InCluster {
		return "in-cluster"
	}
	return "local"
}

func (s *Server) whoami(w http.ResponseWriter, _ *http.Request, se *session) {
	writeJSON(w, http.StatusOK, map[string]string{"user": se.user, "namespace": s.o.Namespace, "mode": s.modeName()})
}

// answerBody is an answer from the page: the point it showed, and the
// command with its values (plugin.AnswerRequest).
type answerBody struct {
	Namespace  string  `json:"namespace"`
	Name       string  `json:"name"`
	Point      string  `json:"point"`
	Command    string  `json:"command"`
	Text       *string `json:"text"`
	Reason     *string `json:"reason"`
	Args       *string `json:"args"`
	JSON       *string `json:"json"`
	Null       bool    `json:"null"`
	Choice     *string `json:"choice"`
	Edit       *string `json:"edit"`
	Revise     *string `json:"revise"`
	Done       bool    `json:"done"`
	Retry      bool    `json:"retry"`
	Abandon    bool    `json:"abandon"`
	Output     *string `json:"output"`
	OutputJSON *string `json:"outputJSON"`
}

// answer creates the AgentRunAnswer as the signed-in person; the API
// server's RBAC and admission decide, and a refusal is passed on as is.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, se *session) {
	var b answerBody
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&b); err != nil {
		writeError(w, http.StatusBadRequest, "the answer is not JSON: "+err.Error())
		return
	}
	ctx := r.Context()
	var run arv1.AgentRun
	if err := se.c.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Name}, &run); err != nil {
		writeAPIError(w, err)
		return
	}
	if wo := run.Status.WaitingOn; wo == nil || wo.Point != b.Point {
		writeError(w, http.StatusConflict, "the run no longer waits on what the page showed; look again")
		return
	}
	ans, err := plugin.BuildAnswer(plugin.AnswerRequest{Command: b.Command, Text: b.Text, Reason: b.Reason, Args: b.Args, JSON: b.JSON, Null: b.Null,
		Choice: b.Choice, Edit: b.Edit, Revise: b.Revise, Done: b.Done, Retry: b.Retry, Abandon: b.Abandon,
		Output: b.Output, OutputJSON: b.OutputJSON}, &run, se.user)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := se.c.Create(ctx, ans); err != nil {
		writeAPIError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]string{"answer": ans.Name, "by": ans.Spec.By, "point": ans.Spec.Point})
}

// steer pauses, resumes or cancels a run, as the signed-in person.
func (s *Server) steer(w http.ResponseWriter, r *http.Request, se *session) {
	var b struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
		Action    string `json:"action"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&b); err != nil {
		writeError(w, http.StatusBadRequest, "the request is not JSON: "+err.Error())
		return
	}
	patch, ok := plugin.SteerPatches[b.Action]
	if !ok {
		writeError(w, http.StatusBadRequest, "no action "+b.Action+" (pause, resume or cancel)")
		return
	}
	run := &arv1.AgentRun{}
	run.Namespace, run.Name = b.Namespace, b.Name
	if err := se.c.Patch(r.Context(), run, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		writeAPIError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"action": b.Action})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// writeAPIError passes the API server's refusal on with its code and
// message (403 stays 403: the page says the API server refused).
func writeAPIError(w http.ResponseWriter, err error) {
	var se apierrors.APIStatus
	if errors.As(err, &se) && se.Status().Code != 0 {
		st := se.Status()
		writeJSON(w, int(st.Code), map[string]string{"error": st.Message, "reason": string(st.Reason), "from": "the API server"})
		return
	}
	writeError(w, http.StatusBadGateway, err.Error())
}
