package manager_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv/postgres"
)

// TestReadinessSaysWhyTheStoreCannotBeUsed: a manager whose database
// refuses its login, or whose --store does not parse, still starts; its
// /readyz fails, and /readyz/store says the cause and the remedy, never
// the password; with a database that accepts it, /readyz passes.
func TestReadinessSaysWhyTheStoreCannotBeUsed(t *testing.T) {
	srv, err := postgres.Start(postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Stop() }()
	d, err := srv.CreateDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(d.DSN)
	u.User = url.UserPassword(d.Role, "wrong-password-123")
	for _, c := range []struct {
		name, dsn string
		want      []string
		ready     bool
	}{
		{"wrong password", u.String(), []string{"refused the login", "PGPASSWORD"}, false},
		{"bad DSN", "mysql://root:wrong-password-123@db/x", []string{"--store", "neither postgres"}, false},
		{"fine", d.DSN, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			body, code := readyz(t, c.dsn)
			if (code == http.StatusOK) != c.ready {
				t.Fatalf("/readyz answered %d: %s", code, body)
			}
			for _, w := range c.want {
				if !strings.Contains(body, w) {
					t.Errorf("/readyz says %q, want it to say %q", body, w)
				}
			}
			if strings.Contains(body, "wrong-password-123") || strings.Contains(body, d.Password) {
				t.Fatalf("/readyz shows a password: %s", body)
			}
		})
	}
}

// readyz starts a manager on dsn and returns its verbose /readyz once the
// store check has an answer.
func readyz(t *testing.T, dsn string) (string, int) {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	probe := fmt.Sprintf("127.0.0.1:%d", port)
	mgr, err := manager.New(env.Config, manager.Options{MetricsAddr: "0", ProbeAddr: probe, SkipNameValidation: true, Store: manager.StoreOptions{DSN: dsn}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the manager ended with %v", err)
		}
	}()
	var body string
	var code int
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		resp, err := http.Get("http://" + probe + "/readyz?verbose")
		if err != nil {
			return false, nil
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		body, code = string(b), resp.StatusCode
		return strings.Contains(body, "store"), nil
	})
	if err != nil {
		t.Fatalf("/readyz never reported the store: %q", body)
	}
	if code == http.StatusOK {
		return body, code
	}
	// The aggregate withholds reasons; the check's own path says why.
	resp, err := http.Get("http://" + probe + "/readyz/store")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
