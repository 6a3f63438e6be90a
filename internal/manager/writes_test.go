package manager

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// Clients built from the manager's config (controller-runtime builds its
// own with rest.HTTPClientFor) count their writes in flight, so its Events
// can give way to them.
func TestClientsCountTheirWrites(t *testing.T) {
	hold, held := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, _ *http.Request) {
		held <- struct{}{}
		<-hold
	}))
	defer srv.Close()
	cfg, writes := countingWrites(&rest.Config{Host: srv.URL})
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/apis/agentrun.dev/v1alpha1/namespaces/team/agentruns/r/status", strings.NewReader("{}"))
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-held
	if !writes.Busy() {
		t.Error("a status write in flight through the manager's client is not counted")
	}
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if writes.Busy() {
		t.Error("the write is still counted once answered")
	}
}
