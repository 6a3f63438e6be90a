package history_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/console"
)

// consoleAs signs a person in to an in-cluster console with the token of
// ServiceAccount sa of ns, bound to clusterRoles there, and returns a
// client holding the session.
func consoleAs(t *testing.T, ns, sa string, clusterRoles ...string) (*http.Client, string) {
	t.Helper()
	ctx := context.Background()
	kube := kubernetes.NewForConfigOrDie(env.Config)
	bind(t, ns, "nobody", "agentrun-history-viewer") // makes the namespace
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, role := range clusterRoles {
		if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa + "-" + role},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := console.New(console.Options{Mode: console.InCluster, Config: env.Config, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/api/login", strings.NewReader(`{"token":"`+tok.Status.Token+`"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Agentrun-Console", "1")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("sign-in: %s", res.Status)
	}
	return c, ts.URL
}

func getJSON(t *testing.T, c *http.Client, u string, into any) int {
	t.Helper()
	res, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	if err := json.NewDecoder(res.Body).Decode(into); err != nil {
		t.Fatal(err)
	}
	return res.StatusCode
}

// firstEvent reads the first Server-Sent Event named event.
func firstEvent(t *testing.T, c *http.Client, u, event string, into any) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && name == event:
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), into); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no %q event from %s: %v", event, u, sc.Err())
}

// TestConsoleHistoryAsTheSignedInPerson: the console's history page lists
// a namespace's records with the filters of kubectl agentrun history and
// shows one record's transcript and output, as the signed-in person (a
// namespace they may not read is refused with the API server's 403); its
// run page shows the transcript and output of a live run whose journal is
// in the database.
func TestConsoleHistoryAsTheSignedInPerson(t *testing.T) {
	ns := "console-history"
	answer := "archived output"
	archiveRun(t, runSpec{ns: ns, name: "done", agent: "researcher", phase: arv1.PhaseComplete, labels: map[string]string{"team": "x"},
		model: "console-model", calls: []*int64{ptr.To[int64](1_000)}, output: &answer})
	archiveRun(t, runSpec{ns: ns, name: "broke", agent: "writer", phase: arv1.PhaseError, labels: map[string]string{"team": "y"}, calls: []*int64{nil}})
	c, base := consoleAs(t, ns, "gina", "agentrun-history-viewer")
	runReader(t, ns, "system:serviceaccount:"+ns+":gina")

	var page struct {
		Records []struct{ Name, Phase, Cost string } `json:"records"`
	}
	if code := getJSON(t, c, base+"/api/history?"+url.Values{"namespace": {ns}}.Encode(), &page); code != http.StatusOK || len(page.Records) != 2 {
		t.Fatalf("history page: %d %+v", code, page)
	}
	page.Records = nil
	getJSON(t, c, base+"/api/history?"+url.Values{"namespace": {ns}, "label": {"team=y"}, "phase": {"Error"}, "since": {"30d"}}.Encode(), &page)
	if len(page.Records) != 1 || page.Records[0].Name != "broke" || page.Records[0].Cost != "unknown" {
		t.Errorf("history page filtered: %+v", page)
	}
	var rec struct {
		Transcript []struct{ What, Detail string } `json:"transcript"`
		Output     string                          `json:"output"`
	}
	getJSON(t, c, base+"/api/history/record?"+url.Values{"namespace": {ns}, "name": {"done"}}.Encode(), &rec)
	if rec.Output != answer || len(rec.Transcript) != 2 || !strings.Contains(rec.Transcript[0].Detail, "console-model") {
		t.Errorf("record page: %+v", rec)
	}
	var refusal struct{ Error, From string }
	if code := getJSON(t, c, base+"/api/history?"+url.Values{"namespace": {"plugin-reads"}}.Encode(), &refusal); code != http.StatusForbidden || refusal.From != "the API server" {
		t.Errorf("another namespace's history: %d %+v", code, refusal)
	}

	live := "live output"
	liveRun(t, ns, "running", &live, modelCall(0, "live-console-model", "hi")...)
	var run struct {
		Transcript      []struct{ What, Detail string } `json:"transcript"`
		TranscriptError string                          `json:"transcriptError"`
		Output          *string                         `json:"output"`
	}
	firstEvent(t, c, base+"/api/run/watch?"+url.Values{"namespace": {ns}, "name": {"running"}}.Encode(), "run", &run)
	if run.TranscriptError != "" || len(run.Transcript) != 2 || !strings.Contains(run.Transcript[0].Detail, "live-console-model") || run.Output == nil || *run.Output != live {
		t.Errorf("run page of a live run with a database journal: %+v", run)
	}
}
