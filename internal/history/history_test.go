package history_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	hv1 "github.com/agentrun-dev/agentrun-operator/api/history/v1alpha1"
	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/history"
	"github.com/agentrun-dev/agentrun-operator/internal/history/historyclient"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

func kubectl(t *testing.T, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	return testenv.Kubectl(kubeconfig, args...)
}

func mustKubectl(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	out, err := kubectl(t, kubeconfig, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestViewerReadsOnlyItsNamespaceAndAdminPurges: a user bound to the
// viewer role in namespace A lists A's records and reads their
// transcripts, outputs and cost report with kubectl, is forbidden B's and
// delete; an admin of A deletes a record, which then is gone from the
// list, its transcript and the cost report.
func TestViewerReadsOnlyItsNamespaceAndAdminPurges(t *testing.T) {
	a, b := "viewer-a", "viewer-b"
	out := "the answer"
	archiveRun(t, runSpec{ns: a, name: "kept", agent: "researcher", phase: arv1.PhaseComplete, calls: []*int64{ptr.To[int64](1_500_000)}, output: &out})
	archiveRun(t, runSpec{ns: a, name: "purged", agent: "researcher", phase: arv1.PhaseError, model: "purged-model", calls: []*int64{ptr.To[int64](2_000_000), nil}})
	archiveRun(t, runSpec{ns: b, name: "secret", agent: "other", phase: arv1.PhaseComplete, calls: []*int64{ptr.To[int64](1)}})

	viewer, _ := userConfig(t, "alice")
	bind(t, a, "alice", "agentrun-history-viewer")
	bind(t, b, "nobody", "agentrun-history-viewer")

	list := mustKubectl(t, viewer, "get", "agentrunrecords", "-n", a)
	for _, want := range []string{"NAME", "AGENT", "PHASE", "TOKENS", "COST", "DURATION", "FINISHED", "kept", "purged", "$0.0015", "unknown"} {
		if !strings.Contains(list, want) {
			t.Errorf("kubectl get agentrunrecords -n %s lacks %q:\n%s", a, want, list)
		}
	}
	transcript := mustKubectl(t, viewer, "get", "--raw", "/apis/history.agentrun.dev/v1alpha1/namespaces/"+a+"/agentrunrecords/kept/transcript")
	if !strings.Contains(transcript, `"kind":"AgentRunTranscript"`) || !strings.Contains(transcript, "test/gpt-test") {
		t.Errorf("transcript: %s", transcript)
	}
	output := mustKubectl(t, viewer, "get", "--raw", "/apis/history.agentrun.dev/v1alpha1/namespaces/"+a+"/agentrunrecords/kept/output")
	if !strings.Contains(output, `"output":"the answer"`) {
		t.Errorf("output: %s", output)
	}
	costs := mustKubectl(t, viewer, "get", "agentruncostreports", "-n", a, "--field-selector", "spec.groupBy=model")
	if !strings.Contains(costs, "purged-model") || !strings.Contains(costs, "unknown") || !strings.Contains(costs, "$0.0015") {
		t.Errorf("cost report:\n%s", costs)
	}

	for _, args := range [][]string{
		{"get", "agentrunrecords", "-n", b},
		{"get", "--raw", "/apis/history.agentrun.dev/v1alpha1/namespaces/" + b + "/agentrunrecords/secret/transcript"},
		{"get", "agentruncostreports", "-n", b},
		{"delete", "agentrunrecord", "purged", "-n", a},
	} {
		out, err := kubectl(t, viewer, args...)
		if err == nil || !strings.Contains(out, "Forbidden") && !strings.Contains(out, "forbidden") {
			t.Errorf("kubectl %v as a viewer of %s: want forbidden, got %v: %s", args, a, err, out)
		}
	}

	adminUser, _ := userConfig(t, "carol")
	bind(t, a, "carol", "agentrun-history-viewer")
	bind(t, a, "carol", "agentrun-history-admin")
	mustKubectl(t, adminUser, "delete", "agentrunrecord", "purged", "-n", a)
	list = mustKubectl(t, viewer, "get", "agentrunrecords", "-n", a)
	if strings.Contains(list, "purged") || !strings.Contains(list, "kept") {
		t.Errorf("after the purge:\n%s", list)
	}
	if out, err := kubectl(t, viewer, "get", "--raw", "/apis/history.agentrun.dev/v1alpha1/namespaces/"+a+"/agentrunrecords/purged/transcript"); err == nil || !strings.Contains(out, "NotFound") {
		t.Errorf("the purged record's transcript: %v %s", err, out)
	}
	costs = mustKubectl(t, viewer, "get", "agentruncostreports", "-n", a, "--field-selector", "spec.groupBy=model")
	if strings.Contains(costs, "purged-model") || strings.Contains(costs, "unknown") {
		t.Errorf("the purged run's calls are still in the cost report:\n%s", costs)
	}
}

// TestSelectorsAsTyped: the label and field selectors of the issue, typed
// as a person would, across namespaces.
func TestSelectorsAsTyped(t *testing.T) {
	for i, s := range []runSpec{
		{ns: "sel-1", name: "x-error", agent: "a1", phase: arv1.PhaseError, labels: map[string]string{"team": "x"}},
		{ns: "sel-2", name: "x-error-2", agent: "a2", phase: arv1.PhaseError, labels: map[string]string{"team": "x"}},
		{ns: "sel-1", name: "x-ok", agent: "a1", phase: arv1.PhaseComplete, labels: map[string]string{"team": "x"}},
		{ns: "sel-2", name: "y-error", agent: "a2", phase: arv1.PhaseError, labels: map[string]string{"team": "y"}},
		{ns: "sel-2", name: "none-error", agent: "a2", phase: arv1.PhaseError},
	} {
		s.calls = []*int64{ptr.To(int64(i))}
		archiveRun(t, s)
	}
	phase := string(arv1.PhaseError)
	out := mustKubectl(t, admin, "get", "agentrunrecords", "-A", "-l", "team=x", "--field-selector", "status.phase="+phase, "-o", "name")
	got := strings.Fields(out)
	want := []string{"agentrunrecord.history.agentrun.dev/x-error", "agentrunrecord.history.agentrun.dev/x-error-2"}
	if strings.Join(got, " ") != strings.Join(want, " ") && strings.Join(got, " ") != want[1]+" "+want[0] {
		t.Errorf("-A -l team=x --field-selector status.phase=%s: got %v, want %v", phase, got, want)
	}
	out = mustKubectl(t, admin, "get", "agentrunrecords", "-n", "sel-2", "-l", "team!=x", "--field-selector", "spec.agent=a2,metadata.name!=y-error", "-o", "name")
	if strings.TrimSpace(out) != "agentrunrecord.history.agentrun.dev/none-error" {
		t.Errorf("-l team!=x --field-selector spec.agent=a2,metadata.name!=y-error: %s", out)
	}
}

// TestBadInput: an unknown field selector is a 400 naming the supported
// fields; a forged continue token a 400, an expired one a 410; a missing
// record a 404.
func TestBadInput(t *testing.T) {
	out, err := kubectl(t, admin, "get", "agentrunrecords", "-A", "--field-selector", "status.cost=1")
	if err == nil || !strings.Contains(out, "BadRequest") && !strings.Contains(out, "field label not supported") || !strings.Contains(out, "status.phase") {
		t.Errorf("unknown field selector: %v %s", err, out)
	}
	out, err = kubectl(t, admin, "get", "agentrunrecords", "-n", "bad", "no-such-run")
	if err == nil || !strings.Contains(out, "NotFound") {
		t.Errorf("missing record: %v %s", err, out)
	}

	for i := range 3 {
		archiveRun(t, runSpec{ns: "pages", name: fmt.Sprintf("p%d", i), agent: "a", phase: arv1.PhaseComplete})
	}
	c, err := historyclient.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	page, err := c.ListRecords(ctx, "pages", metav1.ListOptions{Limit: 1})
	if err != nil || page.Continue == "" {
		t.Fatalf("first page: %v %+v", err, page.ListMeta)
	}
	forged := "x" + page.Continue[1:]
	if _, err := c.ListRecords(ctx, "pages", metav1.ListOptions{Limit: 1, Continue: forged}); !apierrors.IsBadRequest(err) {
		t.Errorf("forged continue token: %v", err)
	}
	if _, err := c.ListRecords(ctx, "other", metav1.ListOptions{Limit: 1, Continue: page.Continue}); !apierrors.IsBadRequest(err) {
		t.Errorf("continue token of another list: %v", err)
	}
	clk.Step(history.DefaultContinueTTL + time.Minute)
	if _, err := c.ListRecords(ctx, "pages", metav1.ListOptions{Limit: 1, Continue: page.Continue}); !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Errorf("expired continue token: %v", err)
	}
}

// TestPagesCoverEveryRecordOnce: following continue tokens lists every
// record once, newest finished first.
func TestPagesCoverEveryRecordOnce(t *testing.T) {
	base := clk.Now().Add(-time.Hour)
	for i := range 7 {
		archiveRun(t, runSpec{ns: "paged", name: fmt.Sprintf("r%d", i), agent: "a", phase: arv1.PhaseComplete, finished: base.Add(time.Duration(i%3) * time.Minute)})
	}
	c, err := historyclient.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	var got []hv1.AgentRunRecord
	opts := metav1.ListOptions{Limit: 2}
	for {
		page, err := c.ListRecords(context.Background(), "paged", opts)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page.Items...)
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
	}
	seen := map[string]bool{}
	for i, r := range got {
		if seen[r.Name] {
			t.Errorf("%s listed twice", r.Name)
		}
		seen[r.Name] = true
		if i > 0 && got[i-1].Archive.FinishedAt.Before(&r.Archive.FinishedAt) {
			t.Errorf("%s listed before %s, which finished later", got[i-1].Name, r.Name)
		}
	}
	if len(seen) != 7 {
		t.Errorf("listed %d records, want 7", len(seen))
	}
}

// TestWatchSendsNewRecords: a watch from a list's resourceVersion gets
// the records archived after it, and only those of its selector.
func TestWatchSendsNewRecords(t *testing.T) {
	archiveRun(t, runSpec{ns: "watched", name: "before", agent: "a", phase: arv1.PhaseComplete})
	c, err := historyclient.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := c.ListRecords(ctx, "watched", metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.WatchRecords(ctx, "watched", metav1.ListOptions{ResourceVersion: list.ResourceVersion, LabelSelector: "watch=yes"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	archiveRun(t, runSpec{ns: "watched", name: "unlabelled", agent: "a", phase: arv1.PhaseComplete})
	archiveRun(t, runSpec{ns: "watched", name: "after", agent: "a", phase: arv1.PhaseComplete, labels: map[string]string{"watch": "yes"}})
	select {
	case e := <-w.ResultChan():
		r, ok := e.Object.(*hv1.AgentRunRecord)
		if e.Type != watch.Added || !ok || r.Name != "after" {
			t.Fatalf("first event: %s %#v", e.Type, e.Object)
		}
	case <-ctx.Done():
		t.Fatal("no event for the record archived after the list")
	}
}

// TestDirectRequestsAreRefused: the history server answers only the API
// server's front proxy: a cluster admin's own client certificate or
// bearer token sent straight to it is refused with 401.
func TestDirectRequestsAreRefused(t *testing.T) {
	url := fmt.Sprintf("https://127.0.0.1:%d/apis/history.agentrun.dev/v1alpha1/namespaces/viewer-a/agentrunrecords", port)
	certCfg := rest.CopyConfig(env.Config)
	tlsCfg, err := rest.TLSConfigFor(certCfg)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg.RootCAs, tlsCfg.InsecureSkipVerify = nil, true //nolint:gosec // the test reaches the server by IP; what is checked is that it refuses the caller
	withCert := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	bare := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // as above
	for name, try := range map[string]func() (*http.Response, error){
		"the admin's client certificate": func() (*http.Response, error) { return withCert.Get(url) },
		"a bearer token": func() (*http.Response, error) {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Header.Set("Authorization", "Bearer "+env.Config.BearerToken+"x")
			return bare.Do(req)
		},
		"impersonation headers without the proxy's certificate": func() (*http.Response, error) {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Header.Set("X-Remote-User", "admin")
			req.Header.Set("X-Remote-Group", "system:masters")
			return bare.Do(req)
		},
	} {
		resp, err := try()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s straight to the history server: %d %s", name, resp.StatusCode, body)
		}
	}
}

// TestRunNamesStillMeanRuns: with the history API up, the names people
// type for runs (agentrun, ar, the category agentrun-all) still mean the
// runs of agentrun.dev, even where a record of the same name exists; only
// agentrunrecord and arr mean records.
func TestRunNamesStillMeanRuns(t *testing.T) {
	ns := "run-names"
	bind(t, ns, "nobody", "view") // makes the namespace
	archiveRun(t, runSpec{ns: ns, name: "same", agent: "a1", phase: arv1.PhaseComplete, calls: []*int64{ptr.To[int64](1)}})
	liveRun(t, ns, "same", nil)
	for _, args := range [][]string{
		{"get", "agentrun", "same", "-n", ns, "-o", "name"},
		{"get", "ar", "same", "-n", ns, "-o", "name"},
		{"get", "agentrun-all", "-n", ns, "-o", "name"},
	} {
		if out := mustKubectl(t, admin, args...); strings.TrimSpace(out) != "agentrun.agentrun.dev/same" {
			t.Errorf("kubectl %s: %q, want the run", strings.Join(args, " "), out)
		}
	}
	if out := mustKubectl(t, admin, "describe", "agentrun", "same", "-n", ns); !strings.Contains(out, "agentrun.dev/v1alpha1") || strings.Contains(out, "history.agentrun.dev") {
		t.Errorf("kubectl describe agentrun describes no run:\n%s", out)
	}
	for _, name := range []string{"agentrunrecord", "arr"} {
		if out := mustKubectl(t, admin, "get", name, "same", "-n", ns, "-o", "name"); strings.TrimSpace(out) != "agentrunrecord.history.agentrun.dev/same" {
			t.Errorf("kubectl get %s same: %q, want the record", name, out)
		}
	}
}
