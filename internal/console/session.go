package console

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// cookieName holds the session id: HttpOnly and SameSite=Strict, so the
// page's scripts never see it and no other site's page can send it.
const cookieName = "agentrun-console"

// csrfHeader must be on every request that changes something: a form or
// a script on another site cannot set it without the console's consent.
const csrfHeader = "X-Agentrun-Console"

// session is one signed-in person: the client that acts as them.
type session struct {
	c client.WithWatch
	// cfg is the person's connection (the history API is read with it).
	cfg     *rest.Config
	user    string
	expires time.Time
}

// sessions are the signed-in people, by session id. They live in memory:
// a restart signs everyone out, and no token is ever written anywhere.
type sessions struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[string]*session
}

func newSessions(ttl time.Duration) *sessions {
	return &sessions{ttl: ttl, m: map[string]*session{}}
}

func (ss *sessions) add(s *session) string {
	id := randomKey()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := time.Now()
	for k, old := range ss.m { // forget the expired
		if now.After(old.expires) {
			delete(ss.m, k)
		}
	}
	s.expires = now.Add(ss.ttl)
	ss.m[id] = s
	return id
}

func (ss *sessions) get(id string) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s, ok := ss.m[id]
	if !ok || time.Now().After(s.expires) {
		delete(ss.m, id)
		return nil
	}
	return s
}

func (ss *sessions) drop(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m, id)
}

// signIn asks the API server who cfg authenticates, and starts a session
// for them.
func (s *Server) signIn(ctx context.Context, cfg *rest.Config) (string, *session, error) {
	c, err := clientFor(cfg)
	if err != nil {
		return "", nil, err
	}
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return "", nil, err
	}
	se := &session{c: c, cfg: cfg, user: review.Status.UserInfo.Username}
	return s.sessions.add(se), se, nil
}

// tokenConfig is Config with only the person's token as credentials: the
// console's own (its ServiceAccount's, a kubeconfig's) are dropped.
func (s *Server) tokenConfig(token string) *rest.Config {
	cfg := rest.AnonymousClientConfig(s.o.Config)
	cfg.BearerToken = token
	return cfg
}

func setCookie(w http.ResponseWriter, r *http.Request, id string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: maxAge})
}

// current is the request's session, or nil.
func (s *Server) current(r *http.Request) *session {
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return nil
	}
	return s.sessions.get(ck.Value)
}

// localSignIn handles the printed URL: its key signs the first browser
// in as the kubeconfig's user, then the key leaves the address bar and is
// spent. A browser already signed in that opens it again (history, a
// reload) just goes to the page; any other is refused.
func (s *Server) localSignIn(w http.ResponseWriter, r *http.Request) bool {
	key := r.URL.Query().Get("key")
	if s.o.Mode != Local || key == "" {
		return false
	}
	switch s.localKey.take(key) {
	case keyWrong:
		http.Error(w, "this key does not open this console: use the URL kubectl agentrun console printed", http.StatusUnauthorized)
		return true
	case keySpent:
		if s.current(r) != nil {
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return true
		}
		http.Error(w, "this sign-in URL was already used: its key opens the console for one browser only. "+
			"Stop kubectl agentrun console and start it again for a new URL", http.StatusForbidden)
		return true
	}
	id, _, err := s.signIn(r.Context(), s.o.Config)
	if err != nil {
		s.localKey.giveBack()
		http.Error(w, "the API server did not accept the kubeconfig's credentials: "+err.Error(), http.StatusUnauthorized)
		return true
	}
	setCookie(w, r, id, int(s.o.SessionTTL.Seconds()))
	http.Redirect(w, r, "/", http.StatusSeeOther)
	return true
}

// login signs a person in with a bearer token (InCluster).
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if s.o.Mode != InCluster {
		writeError(w, http.StatusNotFound, "this console signs in with the URL kubectl agentrun console printed")
		return
	}
	var body struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&body); err != nil || strings.TrimSpace(body.Token) == "" {
		writeError(w, http.StatusBadRequest, "give a bearer token")
		return
	}
	id, se, err := s.signIn(r.Context(), s.tokenConfig(strings.TrimSpace(body.Token)))
	if err != nil {
		writeAPIError(w, err)
		return
	}
	setCookie(w, r, id, int(s.o.SessionTTL.Seconds()))
	writeJSON(w, http.StatusOK, map[string]string{"user": se.user})
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if ck, err := r.Cookie(cookieName); err == nil {
		s.sessions.drop(ck.Value)
	}
	setCookie(w, r, "", -1)
	w.WriteHeader(http.StatusNoContent)
}
