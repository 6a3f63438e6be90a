package consolebrowser_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/console"
	"github.com/agentrun-dev/agentrun-operator/internal/history/historytest"
	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
)

// historyAPI is the history API the suite serves behind its API server's
// aggregation layer, started by the first test that needs it and stopped
// by TestMain.
var historyAPI struct {
	once     sync.Once
	archiver *historytest.Archiver
	stop     func()
	err      error
}

// historyArchiver serves the history API (once for the suite) on a
// SQLite store, which starts at once where a PostgreSQL would take
// seconds (internal/history's own suite reads PostgreSQL), and returns
// what archives runs into that store.
func historyArchiver(t *testing.T) *historytest.Archiver {
	t.Helper()
	historyAPI.once.Do(func() {
		dir, err := os.MkdirTemp("", "consolebrowser-history-")
		if err != nil {
			historyAPI.err = err
			return
		}
		dsn := "sqlite:" + filepath.Join(dir, "store.db")
		st, err := sqlstore.Open(sqlstore.Config{DSN: dsn})
		if err != nil {
			_ = os.RemoveAll(dir)
			historyAPI.err = err
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		historyAPI.stop = func() { cancel(); _ = st.Close(); _ = os.RemoveAll(dir) }
		if _, historyAPI.err = historytest.Start(ctx, env, historytest.Options{DSN: dsn, Dir: dir}); historyAPI.err == nil {
			historyAPI.archiver = &historytest.Archiver{Store: st, Clock: clock.RealClock{}}
		}
	})
	if historyAPI.err != nil {
		t.Fatalf("serving the history API: %v", historyAPI.err)
	}
	return historyAPI.archiver
}

func stopHistoryAPI() {
	if historyAPI.stop != nil {
		historyAPI.stop()
	}
}

// TestConsoleHistoryShowsWhatThePersonMayRead: hana, bound to the history
// viewer role in namespace A only, opens the History page and sees A's
// archived runs (archived through the store's archive path) newest first
// with their agent, phase and cost, an unpriced call's cost as unknown,
// never $0; filtering by phase, by label, by both and by agent changes
// the list to the runs that match; she opens a record and sees its output
// and transcript, and an unpriced one's cost unknown. Namespace B's run is
// not shown to her: the page passes on the API server's 403 for B, for
// all namespaces, and for B's record opened by its address.
func TestConsoleHistoryShowsWhatThePersonMayRead(t *testing.T) {
	ctx := browser(t)
	arch := historyArchiver(t)
	a, b := newNamespace(t), newNamespace(t)
	report := "the quarterly report"
	for _, r := range []historytest.Run{
		{Namespace: a, Name: "report-done", Agent: "researcher", Phase: arv1.PhaseComplete, Labels: map[string]string{"team": "x"},
			Model: "browser-model", Calls: []*int64{ptr.To[int64](1_500_000)}, Output: &report},
		{Namespace: a, Name: "fetch-failed", Agent: "fetcher", Phase: arv1.PhaseError, Labels: map[string]string{"team": "y"}, Calls: []*int64{nil}},
		{Namespace: a, Name: "mixed-cost", Agent: "writer", Phase: arv1.PhaseComplete, Labels: map[string]string{"team": "y"},
			Calls: []*int64{ptr.To[int64](2_000_000), nil}},
		{Namespace: b, Name: "b-secret", Agent: "researcher", Phase: arv1.PhaseComplete, Labels: map[string]string{"team": "x"},
			Calls: []*int64{ptr.To[int64](1)}},
	} {
		if _, err := arch.Archive(context.Background(), r); err != nil {
			t.Fatalf("archiving %s/%s: %v", r.Namespace, r.Name, err)
		}
	}
	bind(t, a, "agentrun-history-viewer", userSubject("hana"))

	hana, addr := serveConsole(t, console.Options{Mode: console.Local, Config: userConfig(t, "hana"), Namespace: a})
	screenshotOnFailure(t, ctx, "history-failure")
	if err := chromedp.Do(ctx, chromedp.Navigate(hana.LocalURL(addr)), chromedp.WaitVisible(chromedp.CSS(`#history-link`)),
		chromedp.Click(chromedp.CSS(`#history-link`)), chromedp.WaitVisible(chromedp.CSS(`#history`))); err != nil {
		t.Fatalf("hana opening the History page: %v", err)
	}
	// Archived in this order, each a second before the one before it:
	// newest finished first is the order they were archived in.
	waitHistory(t, ctx, "the unfiltered history of "+a, a+"/report-done", a+"/fetch-failed", a+"/mixed-cost")
	rows := historyRows(t, ctx)
	want := []map[string]string{
		{"Run": "report-done", "Agent": "researcher", "Phase": "Complete", "Tokens": "120", "Cost": "$0.0015"},
		{"Run": "fetch-failed", "Agent": "fetcher", "Phase": "Error", "Tokens": "120", "Cost": "unknown"},
		{"Run": "mixed-cost", "Agent": "writer", "Phase": "Complete", "Tokens": "240", "Cost": "unknown (≥$0.002)"},
	}
	for i, w := range want {
		for col, v := range w {
			if rows[i][col] != v {
				t.Errorf("row %d (%s), column %s: %q, want %q", i, w["Run"], col, rows[i][col], v)
			}
		}
	}
	for _, r := range rows {
		if r["Cost"] == "$0" {
			t.Errorf("%s shows cost $0", r["Run"])
		}
	}
	screenshot(t, ctx, "history")

	// Filters: by phase, by label, by both.
	filter(t, ctx, map[string]string{"h-phase": "Error"})
	waitHistory(t, ctx, "phase Error", a+"/fetch-failed")
	filter(t, ctx, map[string]string{"h-phase": "", "h-label": "team=y"})
	waitHistory(t, ctx, "label team=y", a+"/fetch-failed", a+"/mixed-cost")
	filter(t, ctx, map[string]string{"h-phase": "Complete", "h-label": "team=y"})
	waitHistory(t, ctx, "phase Complete and label team=y", a+"/mixed-cost")
	filter(t, ctx, map[string]string{"h-phase": "", "h-label": "", "h-agent": "writer"})
	waitHistory(t, ctx, "agent writer", a+"/mixed-cost")
	filter(t, ctx, map[string]string{"h-agent": "", "h-label": "team=x"})
	waitHistory(t, ctx, "label team=x", a+"/report-done")

	// One record: its cost, output and transcript.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#history a[href*="name=report-done"]`)), chromedp.WaitVisible(chromedp.CSS(`#output`))); err != nil {
		t.Fatalf("opening report-done: %v", err)
	}
	rec := recordShown(t, ctx)
	if rec.Name != "report-done" || rec.Phase != "Complete" || rec.Cost != "$0.0015" || rec.Output != report {
		t.Errorf("report-done's page shows %+v, want Complete, $0.0015 and output %q", rec, report)
	}
	if len(rec.Transcript) != 2 || rec.Transcript[0][0] != "model call" || !strings.Contains(rec.Transcript[0][1], "test/browser-model") ||
		!strings.Contains(rec.Transcript[1][1], `"answer 0"`) || !strings.Contains(rec.Transcript[1][1], "$0.0015") {
		t.Errorf("report-done's transcript %q, want its model call to browser-model and the answer costing $0.0015", rec.Transcript)
	}
	screenshot(t, ctx, "record")

	// Back to the history, then the unpriced record.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#main a[href^="#/history"]`)), chromedp.WaitVisible(chromedp.CSS(`#history`))); err != nil {
		t.Fatalf("back to the history: %v", err)
	}
	waitHistory(t, ctx, "the history again", a+"/report-done", a+"/fetch-failed", a+"/mixed-cost")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#history a[href*="name=fetch-failed"]`)), chromedp.WaitVisible(chromedp.CSS(`#cost`))); err != nil {
		t.Fatalf("opening fetch-failed: %v", err)
	}
	rec = recordShown(t, ctx)
	if rec.Name != "fetch-failed" || rec.Phase != "Error" || rec.Cost != "unknown" {
		t.Errorf("fetch-failed's page shows %+v, want Error and cost unknown", rec)
	}
	if len(rec.Transcript) != 2 || !strings.Contains(rec.Transcript[1][1], "cost unknown") || strings.Contains(rec.Transcript[1][1], "$0") {
		t.Errorf("fetch-failed's transcript %q, want the answer's cost unknown", rec.Transcript)
	}

	// Namespace B, all namespaces, and B's record by its address: the API
	// server's refusal, and nothing of B's run.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#history-link`)), chromedp.WaitVisible(chromedp.CSS(`#h-namespace`))); err != nil {
		t.Fatal(err)
	}
	filter(t, ctx, map[string]string{"h-namespace": b})
	refused(t, ctx, "the history of "+b, `location.hash.includes("namespace=`+b+`") && document.getElementById("h-message").className === "error"`, "#h-message")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#h-all`)), chromedp.Click(chromedp.CSS(`#h-show`))); err != nil {
		t.Fatal(err)
	}
	refused(t, ctx, "the history of all namespaces",
		`document.querySelector("#history thead th").textContent === "Namespace" && document.getElementById("h-message").className === "error"`, "#h-message")
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.hash = "#/record?namespace=`+b+`&name=b-secret"`)); err != nil {
		t.Fatal(err)
	}
	refused(t, ctx, b+"/b-secret by its address", `document.getElementById("record-error") !== null`, "#record-error")
}

// filter sets the History page's filter inputs (by id) and clicks Show.
func filter(t *testing.T, ctx context.Context, inputs map[string]string) {
	t.Helper()
	var steps []chromedp.Action[chromedp.Void]
	for id, v := range inputs {
		steps = append(steps, chromedp.Clear(chromedp.CSS("#"+id)))
		if v != "" {
			steps = append(steps, chromedp.SendKeys(chromedp.CSS("#"+id), v))
		}
	}
	steps = append(steps, chromedp.Click(chromedp.CSS(`#h-show`)))
	// Show renders the page afresh: mark this one, and wait for the new
	// one, so the next filter types into its inputs (a filter whose list
	// equals the one before would otherwise find the old page's list and
	// go on while the page is replaced under it).
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("history").dataset.stale = "1"`)); err != nil {
		t.Fatalf("marking the history page shown: %v", err)
	}
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("filtering the history by %v: %v", inputs, err)
	}
	fresh := `(() => { const h = document.getElementById("history"); return !!h && !h.dataset.stale; })()`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](fresh, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("the history page filtered by %v never showed: %v", inputs, err)
	}
}

// waitHistory waits (30 s at most) for the History page to list exactly
// the records want (namespace/name), top to bottom.
func waitHistory(t *testing.T, ctx context.Context, what string, want ...string) {
	t.Helper()
	js, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	// The page's list, as JSON, compared with want's JSON as a string.
	lit, err := json.Marshal(string(js))
	if err != nil {
		t.Fatal(err)
	}
	const listed = `JSON.stringify(Array.from(document.querySelectorAll("#history tbody tr")).map(r => r.dataset.record))`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](listed+` === `+string(lit), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](listed))
		msg, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.getElementById("h-message") || {}).textContent || ""`))
		t.Fatalf("%s: the page lists %s (message %q; %v), want %s", what, got, msg, err, js)
	}
}

// historyRows are the History page's rows, top to bottom, each cell by
// its column's heading.
func historyRows(t *testing.T, ctx context.Context) []map[string]string {
	t.Helper()
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]map[string]string](`(() => {
		const heads = Array.from(document.querySelectorAll("#history thead th")).map(h => h.textContent);
		return Array.from(document.querySelectorAll("#history tbody tr")).map(r => Object.fromEntries(Array.from(r.cells).map((c, i) => [heads[i], c.textContent])));
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// shownRecord is what a record's page shows.
type shownRecord struct {
	Name, Phase, Cost, Output string
	// Transcript is each line's What and Detail.
	Transcript [][2]string
}

func recordShown(t *testing.T, ctx context.Context) shownRecord {
	t.Helper()
	rec, err := chromedp.Run(ctx, chromedp.Evaluate[shownRecord](`(() => {
		const text = (id) => (document.getElementById(id) || {}).textContent || "";
		return {Name: document.querySelector("#main h1").firstChild.textContent, Phase: text("phase"), Cost: text("cost"), Output: text("output"),
			Transcript: Array.from(document.querySelectorAll("#transcript tbody tr")).map(r => [r.cells[3].textContent, r.cells[4].textContent])};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// refused waits for the page to show a refusal (until shown is true) and
// checks that the element sel says it is the API server's 403 and that
// nothing of namespace B's run is on the page.
func refused(t *testing.T, ctx context.Context, what, shown, sel string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](shown, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("%s: no refusal shown: %v", what, err)
	}
	msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, "HTTP 403 (the API server)") || !strings.Contains(msg, "forbidden") {
		t.Errorf("%s says %q, want the API server's 403", what, msg)
	}
	leaked, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#history tbody tr, #output, #transcript").length`))
	if err != nil {
		t.Fatal(err)
	}
	if leaked != 0 {
		t.Errorf("%s: the page shows %d rows, outputs or transcripts", what, leaked)
	}
}
