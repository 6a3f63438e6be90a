package console

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// TestNothingWithoutASession: the page itself is public, but no API call
// is served without a session, a wrong key opens nothing, and a request
// that changes something needs the console's header, so another site's
// form cannot post one.
func TestNothingWithoutASession(t *testing.T) {
	for _, mode := range []Mode{Local, InCluster} {
		s, err := New(Options{Mode: mode, Config: &rest.Config{Host: "https://127.0.0.1:1"}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(s)
		check := func(method, path, header string, want int, body string) {
			t.Helper()
			req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
			if header != "" {
				req.Header.Set(csrfHeader, header)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			if res.StatusCode != want {
				t.Errorf("mode %d: %s %s = %d, want %d", mode, method, path, res.StatusCode, want)
			}
		}
		check("GET", "/", "", 200, "")
		check("GET", "/static/app.js", "", 200, "")
		check("GET", "/api/whoami", "", 401, "")
		check("GET", "/api/runs/watch?namespace=a", "", 401, "")
		check("POST", "/api/answer", "", 403, "{}")
		check("POST", "/api/answer", "1", 401, "{}")
		check("POST", "/api/steer", "1", 401, "{}")
		check("POST", "/api/login", "", 403, `{"token":"x"}`)
		if mode == Local {
			check("GET", "/?key=not-the-key", "", 401, "")
			check("POST", "/api/login", "1", 404, `{"token":"x"}`)
		} else {
			check("POST", "/api/login", "1", 400, `{"token":""}`)
		}
		res, err := http.Get(srv.URL + "/api/whoami")
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]string
		_ = json.NewDecoder(res.Body).Decode(&body)
		res.Body.Close()
		if want := map[Mode]string{Local: "local", InCluster: "in-cluster"}[mode]; body["mode"] != want {
			t.Errorf("whoami without a session says mode %q, want %q (the page picks sign-in by it)", body["mode"], want)
		}
		srv.Close()
	}
}

// TestTokenConfigDropsTheConsolesCredentials: a signed-in person's client
// carries their token only, never the console's own credentials.
func TestTokenConfigDropsTheConsolesCredentials(t *testing.T) {
	s, err := New(Options{Mode: InCluster, Config: &rest.Config{Host: "https://api:6443", BearerToken: "console-sa",
		BearerTokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token", Username: "u", Password: "p",
		TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca"), CertData: []byte("cert"), KeyData: []byte("key")}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.tokenConfig("person")
	if cfg.BearerToken != "person" || cfg.BearerTokenFile != "" || cfg.Username != "" || cfg.Password != "" ||
		cfg.CertData != nil || cfg.KeyData != nil || string(cfg.CAData) != "ca" || cfg.Host != "https://api:6443" {
		t.Errorf("token config = %+v: want the host, the CA and the person's token only", cfg)
	}
}

// TestKeyNotSpentBySignInThatFailed: when the API server does not take
// the kubeconfig's credentials (here: nothing listens), no session is
// made, so the key is not spent: opening the URL again tries again rather
// than saying it was used.
func TestKeyNotSpentBySignInThatFailed(t *testing.T) {
	s, err := New(Options{Mode: Local, Config: &rest.Config{Host: "https://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	url := s.LocalURL(strings.TrimPrefix(srv.URL, "http://"))
	for range 2 {
		res, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "did not accept the kubeconfig's credentials") {
			t.Errorf("opening the URL with the API server away: %d %q; want 401 saying the credentials were not accepted", res.StatusCode, body)
		}
	}
}
