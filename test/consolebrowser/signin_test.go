package consolebrowser_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"sync"
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/console"
)

// person is one browser: its own cookie jar.
type person struct {
	t *testing.T
	c *http.Client
}

func newPerson(t *testing.T) *person {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &person{t: t, c: &http.Client{Jar: jar}}
}

// get returns the status and body of GET url (following redirects).
func (p *person) get(url string) (int, string) {
	p.t.Helper()
	res, err := p.c.Get(url)
	if err != nil {
		p.t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// whoami is the user the console says this browser is signed in as ("" when
// it is not signed in).
func (p *person) whoami(base string) string {
	p.t.Helper()
	code, body := p.get(base + "/api/whoami")
	if code != http.StatusOK {
		return ""
	}
	var who map[string]string
	if err := json.Unmarshal([]byte(body), &who); err != nil {
		p.t.Fatalf("whoami: %q: %v", body, err)
	}
	return who["user"]
}

// TestConsoleKeyOpensOneBrowser: the URL kubectl agentrun console prints
// signs in the first browser that opens it, against the real API server;
// a second browser (its own cookies) opening the same URL afterwards is
// refused with 403 and a page saying why, and is not signed in. The first
// browser stays signed in, and opening the URL again (from its history)
// takes it to the page. Browsers racing with the URL: one gets in.
func TestConsoleKeyOpensOneBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a control plane; skipped with -short")
	}
	s, addr := serveConsole(t, console.Options{Mode: console.Local, Config: userConfig(t, "carol"), Namespace: "default"})
	base, url := "http://"+addr, s.LocalURL(addr)

	first, second := newPerson(t), newPerson(t)
	if code, _ := first.get(url); code != http.StatusOK {
		t.Fatalf("the first browser opening the URL: %d, want the page", code)
	}
	if who := first.whoami(base); who != "carol" {
		t.Fatalf("the first browser is signed in as %q, want carol", who)
	}
	code, body := second.get(url)
	if code != http.StatusForbidden || !strings.Contains(body, "already used") {
		t.Errorf("a second browser opening the URL: %d %q; want 403 saying the key was already used", code, body)
	}
	if who := second.whoami(base); who != "" {
		t.Errorf("the second browser is signed in as %q with a used key", who)
	}
	if code, _ := first.get(url); code != http.StatusOK || first.whoami(base) != "carol" {
		t.Errorf("the first browser reopening the URL: %d, signed in as %q; want the page, still carol", code, first.whoami(base))
	}

	s2, addr2 := serveConsole(t, console.Options{Mode: console.Local, Config: userConfig(t, "dan"), Namespace: "default"})
	browsers := make([]*person, 4)
	var wg sync.WaitGroup
	for i := range browsers {
		browsers[i] = newPerson(t)
		wg.Add(1)
		go func(p *person) {
			defer wg.Done()
			res, err := p.c.Get(s2.LocalURL(addr2))
			if err == nil {
				_ = res.Body.Close()
			}
		}(browsers[i])
	}
	wg.Wait()
	signedIn := 0
	for _, p := range browsers {
		if p.whoami("http://"+addr2) == "dan" {
			signedIn++
		}
	}
	if signedIn != 1 {
		t.Errorf("%d of %d browsers racing with the URL are signed in, want 1", signedIn, len(browsers))
	}
}
