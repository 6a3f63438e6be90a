package callbacks

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/egress"
)

func TestSignVerify(t *testing.T) {
	key := []byte("whsec-test")
	body := []byte(`{"event":"agent_completed"}`)
	now := time.Unix(1_700_000_000, 0)
	h := Sign(key, now, body)
	if !strings.HasPrefix(h, "t=1700000000,v1=") {
		t.Fatalf("header %q", h)
	}
	if err := Verify(key, h, body, now.Add(time.Minute), 5*time.Minute); err != nil {
		t.Fatalf("valid signature refused: %v", err)
	}
	for name, c := range map[string]struct {
		key, body []byte
		header    string
		at        time.Time
	}{
		"tampered body":  {key, []byte(`{"event":"other"}`), h, now},
		"wrong key":      {[]byte("other"), body, h, now},
		"replayed later": {key, body, h, now.Add(6 * time.Minute)},
		"no signature":   {key, body, "t=1700000000", now},
		"garbage":        {key, body, "nonsense", now},
	} {
		if err := Verify(c.key, c.header, c.body, c.at, 5*time.Minute); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// receiver answers with the given statuses in turn and records requests.
type receiver struct {
	mu       sync.Mutex
	statuses []int
	ids      []string
	bodies   []string
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.ids = append(rc.ids, r.Header.Get(HeaderDelivery))
	rc.bodies = append(rc.bodies, string(b))
	s := http.StatusOK
	if len(rc.statuses) > 0 {
		s, rc.statuses = rc.statuses[0], rc.statuses[1:]
	}
	rc.mu.Unlock()
	w.WriteHeader(s)
}

var fast = Policy{Attempts: 4, PerAttempt: time.Second, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}

func TestDeliverRetriesOnlyWhatIsWorthRetrying(t *testing.T) {
	for _, c := range []struct {
		name          string
		statuses      []int
		wantAttempts  int
		wantDelivered bool
	}{
		{"2xx at once", nil, 1, true},
		{"503 then 429 then 408 then ok", []int{503, 429, 408}, 4, true},
		{"500 every time gives up", []int{500, 500, 500, 500}, 4, false},
		{"400 is not retried", []int{400}, 1, false},
		{"404 is not retried", []int{404}, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			rc := &receiver{statuses: c.statuses}
			srv := httptest.NewServer(rc)
			defer srv.Close()
			res := Deliver(context.Background(), srv.Client(), fast, srv.URL, "agent_completed:uid-1", []byte("k"), []byte(`{}`), time.Now)
			if res.Attempts != c.wantAttempts || res.Delivered != c.wantDelivered {
				t.Fatalf("attempts %d delivered %v (err %v), want %d %v", res.Attempts, res.Delivered, res.Err, c.wantAttempts, c.wantDelivered)
			}
			for _, id := range rc.ids {
				if id != "agent_completed:uid-1" {
					t.Errorf("delivery id %q changed across attempts", id)
				}
			}
		})
	}
}

func TestDeliverRetriesNetworkErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close()
	res := Deliver(context.Background(), http.DefaultClient, fast, url, "id", nil, []byte(`{}`), time.Now)
	if res.Delivered || res.Attempts != fast.Attempts || res.Err == nil {
		t.Fatalf("refused connection: %+v, want %d attempts and an error", res, fast.Attempts)
	}
}

// TestDeliverDoesNotRetryAnEgressRefusal: a callback whose address (or
// whose redirect target) the egress policy refuses fails after one
// attempt, with the refusal and its remedy in Err, and the refused
// receiver sees no request.
func TestDeliverDoesNotRetryAnEgressRefusal(t *testing.T) {
	refused := &receiver{}
	target := httptest.NewUnstartedServer(refused)
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2: %v", err)
	}
	target.Listener = l
	target.Start()
	defer target.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/hook", http.StatusTemporaryRedirect)
	}))
	defer redirect.Close()
	p, err := egress.New(&egress.Config{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	if err != nil {
		t.Fatal(err)
	}
	for name, url := range map[string]string{"direct": target.URL + "/hook", "redirect": redirect.URL + "/hook"} {
		t.Run(name, func(t *testing.T) {
			res := Deliver(context.Background(), p.Client("team-a"), fast, url, "id", nil, []byte(`{}`), time.Now)
			if res.Delivered || res.Attempts != 1 {
				t.Fatalf("%+v, want one attempt, not delivered", res)
			}
			var r *egress.Refusal
			if !errors.As(res.Err, &r) || r.Rule != egress.RuleLoopback {
				t.Fatalf("err %v, want an egress refusal with rule %s", res.Err, egress.RuleLoopback)
			}
			for _, want := range []string{"(rule loopback)", "(not retried)", "--egress-allow-cidr=127.0.0.0/8"} {
				if !strings.Contains(res.Err.Error(), want) {
					t.Errorf("err %q lacks %q", res.Err, want)
				}
			}
		})
	}
	if len(refused.ids) != 0 {
		t.Errorf("the refused receiver got %d requests", len(refused.ids))
	}
}
