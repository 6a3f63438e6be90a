package mcptool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/mcptool"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool/mcptest"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func callErr(t *testing.T, err error) *mcptool.CallError {
	t.Helper()
	var ce *mcptool.CallError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T) is not a *CallError", err, err)
	}
	return ce
}

func TestListReadsEffectsFromAnnotationsAcrossPages(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{PageSize: 1}) // one tool per page
	tools, err := mcptool.List(ctxT(t), nil, mcptool.Server{Name: "docs", URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]mcptool.Effect{}
	for _, tl := range tools {
		got[tl.Name] = tl.Effect
		if tl.Server != "docs" || tl.Description == "" || !json.Valid(tl.InputSchema) {
			t.Errorf("tool %+v: want server docs, a description and a JSON schema", tl)
		}
	}
	want := map[string]mcptool.Effect{
		"read_doc":      mcptool.EffectRead,
		"upsert_record": mcptool.EffectIdempotent,
		"create_ticket": mcptool.EffectWrite,
		"fail_tool":     mcptool.EffectRead,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("effects = %v, want %v", got, want)
	}
	for _, tl := range tools {
		if tl.Name == "upsert_record" && !strings.Contains(string(tl.InputSchema), `"value"`) {
			t.Errorf("upsert_record schema %s lacks the value property", tl.InputSchema)
		}
	}
}

func TestCallSendsIdempotencyKeyInMeta(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	s := mcptool.Server{Name: "rec", URL: srv.URL()}
	ctx := ctxT(t)

	res, err := mcptool.Call(ctx, nil, s, "upsert_record", json.RawMessage(`{"id":"a","value":"v"}`), "run-1/step-2")
	if err != nil || res != (mcptool.Result{Text: "upserted a"}) {
		t.Fatalf("upsert = %+v, %v", res, err)
	}
	for i := 1; i <= 2; i++ {
		res, err = mcptool.Call(ctx, nil, s, "create_ticket", json.RawMessage(`{"title":"disk full"}`), "")
		if want := fmt.Sprintf("ticket %d created: disk full", i); err != nil || res.Text != want {
			t.Fatalf("create_ticket #%d = %+v, %v; want %q", i, res, err, want)
		}
	}
	if k := srv.Keys("upsert_record"); !slices.Equal(k, []string{"run-1/step-2"}) {
		t.Errorf("upsert keys = %q", k)
	}
	if k := srv.Keys("create_ticket"); !slices.Equal(k, []string{"", ""}) {
		t.Errorf("create_ticket keys = %q, want two empty ones", k)
	}
	if srv.Calls("create_ticket") != 2 || srv.Executed("create_ticket") != 2 {
		t.Errorf("create_ticket calls %d executed %d, want 2 and 2", srv.Calls("create_ticket"), srv.Executed("create_ticket"))
	}
}

func TestToolErrorIsAResultNotAnError(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	res, err := mcptool.Call(ctxT(t), nil, mcptool.Server{Name: "x", URL: srv.URL()}, "fail_tool", nil, "k")
	if err != nil {
		t.Fatalf("err = %v, want a result", err)
	}
	if res != (mcptool.Result{Text: "boom", IsError: true}) {
		t.Fatalf("result = %+v", res)
	}
	if srv.Executed("fail_tool") != 1 {
		t.Errorf("executed %d, want 1", srv.Executed("fail_tool"))
	}
}

func TestConnectionRefusedIsNotSent(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String() + "/mcp"
	l.Close()
	s := mcptool.Server{Name: "gone", URL: url, Token: "tok-refused-123"}

	_, err = mcptool.Call(ctxT(t), nil, s, "create_ticket", json.RawMessage(`{"title":"t"}`), "k")
	ce := callErr(t, err)
	if !ce.NotSent || ce.Status != 0 {
		t.Fatalf("CallError = %+v, want NotSent with no status", ce)
	}
	if _, err := mcptool.List(ctxT(t), nil, s); !callErr(t, err).NotSent {
		t.Fatalf("List error %v not NotSent", err)
	}
}

func TestWrongTokenIs401NotSentAndNeverPrinted(t *testing.T) {
	const good, bad = "good-secret-token-1", "bad-secret-token-2"
	srv := mcptest.New(t, mcptest.Options{Token: good})
	ctx := ctxT(t)

	s := mcptool.Server{Name: "auth", URL: srv.URL(), Token: bad}
	_, err := mcptool.Call(ctx, nil, s, "create_ticket", json.RawMessage(`{"title":"t"}`), "k")
	ce := callErr(t, err)
	if !ce.NotSent || ce.Status != http.StatusUnauthorized {
		t.Fatalf("CallError = %+v, want NotSent with status 401", ce)
	}
	if srv.Calls("create_ticket") != 0 {
		t.Fatal("a refused call reached the tool")
	}
	_, err = mcptool.List(ctx, nil, s)
	if ce := callErr(t, err); ce.Status != http.StatusUnauthorized {
		t.Fatalf("List CallError = %+v, want status 401", ce)
	}

	// The right token is sent on every request (handshake and call); a
	// failure after the handshake still keeps the token out of the text.
	s.Token = good
	if res, err := mcptool.Call(ctx, nil, s, "read_doc", json.RawMessage(`{"id":"7"}`), ""); err != nil || res.Text != "doc 7" {
		t.Fatalf("read_doc with the right token = %+v, %v", res, err)
	}
	_, err2 := mcptool.Call(ctx, nil, s, "no_such_tool", nil, "")
	if ce2 := callErr(t, err2); ce2.NotSent {
		t.Fatalf("unknown tool: %+v, want sent (the server answered)", ce2)
	}
	for _, text := range []string{
		err.Error(), err2.Error(),
		fmt.Sprintf("%v %+v %#v %s", s, s, s, s),
	} {
		if strings.Contains(text, good) || strings.Contains(text, bad) {
			t.Errorf("token printed: %s", text)
		}
	}
}

// failCalls makes tools/call POSTs fail before they get a connection, as if
// the server went away between the handshake and the call.
type failCalls struct{ base http.RoundTripper }

func (f failCalls) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.GetBody != nil {
		b, _ := req.GetBody()
		data, _ := io.ReadAll(b)
		if strings.Contains(string(data), `"tools/call"`) {
			return nil, errors.New("dial tcp: connection refused")
		}
	}
	return f.base.RoundTrip(req)
}

func TestCallFailingBeforeAConnectionIsNotSent(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	hc := &http.Client{Transport: failCalls{http.DefaultTransport}}
	_, err := mcptool.Call(ctxT(t), hc, mcptool.Server{Name: "x", URL: srv.URL()}, "create_ticket", json.RawMessage(`{"title":"t"}`), "k")
	if ce := callErr(t, err); !ce.NotSent {
		t.Fatalf("CallError = %+v, want NotSent", ce)
	}
	if srv.Calls("create_ticket") != 0 {
		t.Fatal("call reached the server")
	}
}

func TestCancelledInFlightCallMayHaveBeenSent(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	s := mcptool.Server{Name: "x", URL: srv.URL()}
	entered, release := srv.Hold("create_ticket")
	defer release()

	ctx, cancel := context.WithCancel(ctxT(t))
	errc := make(chan error, 1)
	go func() {
		_, err := mcptool.Call(ctx, nil, s, "create_ticket", json.RawMessage(`{"title":"t"}`), "k1")
		errc <- err
	}()
	<-entered
	cancel()
	err := <-errc
	if ce := callErr(t, err); ce.NotSent || !errors.Is(err, context.Canceled) {
		t.Fatalf("CallError = %+v (%v), want sent and context.Canceled", ce, err)
	}
	// The cancellation reaches the handler, which gives up: releasing the
	// hold afterwards runs nothing.
	waitFor(t, func() bool { return srv.InFlight("create_ticket") == 0 })
	release()
	if srv.Calls("create_ticket") != 1 || srv.Executed("create_ticket") != 0 {
		t.Fatalf("calls %d executed %d, want 1 and 0", srv.Calls("create_ticket"), srv.Executed("create_ticket"))
	}

	// Released, a held call completes.
	entered, release2 := srv.Hold("create_ticket")
	go func() {
		_, err := mcptool.Call(ctxT(t), nil, s, "create_ticket", json.RawMessage(`{"title":"t"}`), "k2")
		errc <- err
	}()
	<-entered
	release2()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if srv.Executed("create_ticket") != 1 || !slices.Equal(srv.Keys("create_ticket"), []string{"k1", "k2"}) {
		t.Fatalf("executed %d keys %q", srv.Executed("create_ticket"), srv.Keys("create_ticket"))
	}
}

func TestSlowToolTimesOutAsSent(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	srv.SetDelay("read_doc", 10*time.Second)
	ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	defer cancel()
	_, err := mcptool.Call(ctx, nil, mcptool.Server{Name: "x", URL: srv.URL()}, "read_doc", json.RawMessage(`{"id":"1"}`), "")
	if ce := callErr(t, err); ce.NotSent || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("CallError = %+v, want sent and a deadline error", ce)
	}
	waitFor(t, func() bool { return srv.Calls("read_doc") == 1 && srv.InFlight("read_doc") == 0 })
	if srv.Executed("read_doc") != 0 {
		t.Fatalf("calls %d executed %d, want 1 and 0", srv.Calls("read_doc"), srv.Executed("read_doc"))
	}
}

func TestTokenNotSentToRedirectTarget(t *testing.T) {
	seen := make(chan string, 16)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case seen <- r.Header.Get("Authorization"):
		default:
		}
		http.Error(w, "nope", http.StatusNotFound)
	}))
	defer other.Close()
	redirect := httptest.NewServer(http.RedirectHandler(other.URL+"/mcp", http.StatusTemporaryRedirect))
	defer redirect.Close()

	_, err := mcptool.List(ctxT(t), nil, mcptool.Server{Name: "r", URL: redirect.URL, Token: "redirect-secret"})
	if err == nil {
		t.Fatal("List succeeded against a 404")
	}
	close(seen)
	n := 0
	for got := range seen {
		n++
		if got != "" {
			t.Fatalf("redirect target got Authorization %q", got)
		}
	}
	if n == 0 {
		t.Fatal("the redirect was not followed")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
