package writegauge

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func TestResource(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/namespaces/team/events":                                      "events",
		"/api/v1/namespaces/team/events/r-1.abc":                              "events",
		"/apis/events.k8s.io/v1/namespaces/team/events":                       "events",
		"/apis/agentrun.dev/v1alpha1/namespaces/team/agentruns/events/status": "agentruns",
		"/api/v1/namespaces/events/configmaps/j":                              "configmaps",
		"/api/v1/namespaces/team":                                             "namespaces",
		"/apis/coordination.k8s.io/v1/namespaces/sys/leases/shard-0":          "leases",
		"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/p": "validatingadmissionpolicies",
		"/healthz": "",
	} {
		if got := resource(path); got != want {
			t.Errorf("resource(%q) = %q, want %q", path, got, want)
		}
	}
}

// Writes are counted while the API server holds them, reads and Events
// never, and the count falls back once each is answered.
func TestCountsWritesInFlight(t *testing.T) {
	var g Gauge
	hold, held := make(chan struct{}), make(chan string, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		held <- r.Method + " " + r.URL.Path
		<-hold
	}))
	defer srv.Close()
	c := &http.Client{Transport: g.Wrap(http.DefaultTransport)}
	reqs := []struct{ method, path string }{
		{http.MethodPut, "/apis/agentrun.dev/v1alpha1/namespaces/team/agentruns/r/status"},
		{http.MethodPatch, "/api/v1/namespaces/team/configmaps/r-journal"},
		{http.MethodGet, "/api/v1/namespaces/team/configmaps/r-journal"},
		{http.MethodPost, "/apis/events.k8s.io/v1/namespaces/team/events"},
	}
	var wg sync.WaitGroup
	for _, r := range reqs {
		wg.Go(func() {
			req, _ := http.NewRequest(r.method, srv.URL+r.path, strings.NewReader("{}"))
			resp, err := c.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
		})
	}
	for range reqs {
		<-held
	}
	if n := g.InFlight(); n != 2 || !g.Busy() {
		t.Fatalf("%d writes counted in flight, want 2 (the status PUT and the journal PATCH)", n)
	}
	close(hold)
	wg.Wait()
	if n := g.InFlight(); n != 0 || g.Busy() {
		t.Fatalf("%d writes still counted after every answer", n)
	}
}
