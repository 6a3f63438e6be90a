package controllers_test

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool/mcptest"
	"github.com/agentrun-dev/agentrun-operator/internal/metrics"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv/postgres"
)

// slowSteps is n stages of one scripted call each taking ms, then done.
func slowSteps(n, ms int) string {
	var b strings.Builder
	b.WriteString("[agent]\nname = \"steps\"\n[agent.title]\nenabled = false\n")
	for i := range n {
		fmt.Fprintf(&b, "[stages.s%d]\n[stages.s%d.model]\nmodels = [{provider = \"demo\", model = \"scripted-1\"}]\n", i, i)
		if i < n-1 {
			fmt.Fprintf(&b, "[stages.s%d.transitions.s%d]\ncondition = \"always\"\n[[stages.s%d.script]]\ntext = \"step %d\"\ndelay_ms = %d\nusage = {prompt = 10, completion = 1}\n", i, i+1, i, i, ms)
		} else {
			fmt.Fprintf(&b, "[[stages.s%d.script]]\ntext = \"done\"\ndelay_ms = %d\nusage = {prompt = 10, completion = 1}\ncomplete = true\noutput = \"all done\"\n", i, ms)
		}
	}
	return b.String()
}

// waitOnStore runs stop, waits until every run named that had not
// finished shows the store wait (healthy: no person needed), holds the
// database away for away, then runs start.
func waitOnStore(t *testing.T, ns string, names []string, stop, start func() error, away time.Duration) {
	t.Helper()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	parked := 0
	for _, n := range names {
		if getRun(t, ns, n).Status.Phase.IsTerminal() {
			continue // it finished before the database went away
		}
		parked++
		run := waitFor(t, ns, n, 60*time.Second, "StoreUnavailable or its end", func(r *arv1.AgentRun) bool {
			return r.Status.Phase.IsTerminal() || (r.Status.WaitingOn != nil && r.Status.WaitingOn.Reason == arv1.WaitStoreUnavailable)
		})
		if run.Status.Phase.IsTerminal() {
			t.Fatalf("%s ended (%s) while the database was away", n, run.Status.Phase)
		}
		if w := run.Status.WaitingOn; w.NeedsAPerson || w.StoreError == "" || run.Status.Phase != arv1.PhaseWaitingInput {
			t.Fatalf("%s: waits %+v in phase %s; want a healthy StoreUnavailable wait saying why", n, w, run.Status.Phase)
		}
	}
	if parked == 0 {
		t.Fatal("every run had finished before the database went away: nothing was tested")
	}
	time.Sleep(max(0, away-time.Since(began)))
	if err := start(); err != nil {
		t.Fatal(err)
	}
}

// TestDatabaseAwayRunsWaitAndGoOn: while the database store is frozen
// (SIGSTOP) and while it is down (a real restart), runs park on a healthy
// StoreUnavailable wait, start no call, and go on by themselves when it is
// back: every run completes, every call the provider served is in some
// run's usage (answered or lost), and no write tool call runs twice.
func TestDatabaseAwayRunsWaitAndGoOn(t *testing.T) {
	srv, d := postgres.ForTest(t, postgres.Options{})
	tools := mcptest.New(t, mcptest.Options{})
	h := startManager(t, managerOpts{store: d.DSN})
	ns := newNamespace(t)
	createConfigMap(t, ns, "steps", map[string]string{"agent.toml": slowSteps(24, 300)})
	createConfigMap(t, ns, "tooling", map[string]string{"agent.toml": toolAgent(tools.URL(), "", "[tools.create_ticket]\npermission = \"allow\"",
		`create_ticket {"title":"a"}`, `create_ticket {"title":"b"}`, `create_ticket {"title":"c"}`)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	names := []string{"a", "b", "c"}
	for _, n := range names {
		createRun(t, ns, n, "steps")
	}
	createRun(t, ns, "w", "tooling")
	waitFor(t, ns, "a", 30*time.Second, "a first call answered", func(r *arv1.AgentRun) bool { return h.scripted.Calls(string(r.UID)) >= 2 })

	waitOnStore(t, ns, names, srv.Pause, srv.Resume, 20*time.Second)
	waitFor(t, ns, "a", 60*time.Second, "moving again", func(r *arv1.AgentRun) bool { return r.Status.WaitingOn == nil })
	waitOnStore(t, ns, names, func() error { srv.Down(); return nil }, srv.Up, 20*time.Second)

	served := 0
	for _, n := range append(names, "w") {
		run := waitFor(t, ns, n, 120*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
		u := run.Status.Usage
		served += h.scripted.Calls(string(run.UID))
		if int(u.ModelCalls+u.LostCalls) != h.scripted.Calls(string(run.UID)) {
			t.Errorf("%s: %d answered + %d lost calls in its usage, the provider served %d", n, u.ModelCalls, u.LostCalls, h.scripted.Calls(string(run.UID)))
		}
		if !meta.IsStatusConditionTrue(run.Status.Conditions, arv1.ConditionArchived) || run.Status.JournalStore != arv1.JournalDatabase {
			t.Errorf("%s: journal in %q, conditions %+v; want the database, Archived", n, run.Status.JournalStore, run.Status.Conditions)
		}
	}
	for _, title := range []string{"a", "b", "c"} {
		if n := executedWith(tools, "create_ticket", `"title":"`+title+`"`); n != 1 {
			t.Errorf("create_ticket %s executed %d times, want once", title, n)
		}
	}
	t.Logf("the provider served %d calls in all", served)
}

// TestStoreRefusingTheLoginParksRunsWithARemedy: a manager whose database
// refuses its password still starts; its runs park on StoreUnavailable
// naming what to fix (a person is needed), no call is made, the password
// is never shown; a manager given the right one finishes them.
func TestStoreRefusingTheLoginParksRunsWithARemedy(t *testing.T) {
	dsn := storeDSNFor(t, "postgres")
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), "not-the-password")
	h1 := startManager(t, managerOpts{store: u.String()})
	ns := newNamespace(t)
	createConfigMap(t, ns, "steps", map[string]string{"agent.toml": slowSteps(2, 0)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	run := createRun(t, ns, "r", "steps")
	parked := waitFor(t, ns, "r", 30*time.Second, "StoreUnavailable", waitingOn(arv1.WaitStoreUnavailable))
	w := parked.Status.WaitingOn
	if !w.NeedsAPerson || !strings.Contains(w.Remedy, "refused the login") || !strings.Contains(w.Remedy, "PGPASSWORD") {
		t.Errorf("wait %+v; want a person needed, with a remedy naming the password's Secret", w)
	}
	if c := meta.FindStatusCondition(parked.Status.Conditions, arv1.ConditionNeedsAttention); c == nil || c.Status != "True" {
		t.Errorf("NeedsAttention %+v, want True", c)
	}
	pw, _ := u.User.Password()
	for _, s := range []string{w.StoreError, w.Remedy, logSink.String()} {
		if strings.Contains(s, pw) {
			t.Fatal("the password shows in the run's wait or the manager's log")
		}
	}
	if n := h1.scripted.Calls(string(run.UID)); n != 0 {
		t.Fatalf("%d calls made while no intent could be recorded", n)
	}
	h1.stop()
	startManager(t, managerOpts{store: dsn})
	waitFor(t, ns, "r", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
}

// TestArchiveKeepsARunAfterItsTTL: a run deleted by its TTL is in the
// archive, once, with the numbers its CR showed when it finished, its
// output and its journal.
func TestArchiveKeepsARunAfterItsTTL(t *testing.T) {
	dsn := storeDSNFor(t, cmp.Or(suiteStore, "postgres"))
	startManager(t, managerOpts{store: dsn})
	ns := newNamespace(t)
	createConfigMap(t, ns, "steps", map[string]string{"agent.toml": slowSteps(3, 0)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	run := createRun(t, ns, "r", "steps", func(r *arv1.AgentRun) { r.Spec.TTLSecondsAfterFinished = ptr.To[int32](2) })
	done := waitFor(t, ns, "r", 30*time.Second, "Complete and archived", func(r *arv1.AgentRun) bool {
		return r.Status.Phase == arv1.PhaseComplete && meta.IsStatusConditionTrue(r.Status.Conditions, arv1.ConditionArchived)
	})
	waitGone(t, ns, "r", 30*time.Second)
	db := storeReader(t, dsn)
	got, out, err := db.ArchivedRun(context.Background(), run.UID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != arv1.PhaseComplete || got.Status.Usage != done.Status.Usage || out == nil || *out != "all done" {
		t.Errorf("archived %s with usage %+v and output %v; the CR showed Complete with %+v and \"all done\"", got.Status.Phase, got.Status.Usage, out, done.Status.Usage)
	}
	var rows int
	q := "SELECT count(*) FROM archived_runs WHERE run_uid = $1"
	if db.Kind() == "sqlite" {
		q = strings.ReplaceAll(q, "$1", "?1")
	}
	if err := db.DB().QueryRow(q, string(run.UID)).Scan(&rows); err != nil || rows != 1 {
		t.Errorf("%d archive rows (%v), want 1", rows, err)
	}
	es, err := db.Entries(context.Background(), store.RunRef{Namespace: ns, Name: "r", UID: run.UID})
	if err != nil || len(es) != 6 {
		t.Errorf("the archived journal holds %d entries (%v), want 3 intents and 3 answers", len(es), err)
	}
}

// TestFinishedRunsWaitForTheStoreToBeArchived: finished runs whose
// record is not in the archive (here, finished on ConfigMaps before the
// database was configured) are not tried while the store is known down,
// so none holds a reconcile worker on a database that does not answer:
// past the tries made before the outage was known, no archive write fails
// however long it lasts. They are counted as unarchived meanwhile, and
// archived once it answers.
func TestFinishedRunsWaitForTheStoreToBeArchived(t *testing.T) {
	srv, d := postgres.ForTest(t, postgres.Options{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "steps", map[string]string{"agent.toml": slowSteps(2, 0)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	h1 := startManager(t, managerOpts{store: "-", namespaces: []string{ns}})
	names := []string{"a", "b", "c"}
	for _, n := range names {
		createRun(t, ns, n, "steps")
	}
	for _, n := range names {
		waitFor(t, ns, n, 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	}
	h1.stop()

	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = srv.Resume()
		}
	}()
	started := time.Now()
	startManager(t, managerOpts{store: d.DSN, namespaces: []string{ns}})
	failed := metrics.ArchiveWrites.WithLabelValues(metrics.ArchiveFailed)
	waitGauge(t, "agentrun_store_up", "", 30*time.Second, 0)
	waitGauge(t, "agentrun_runs_unarchived", ns, 30*time.Second, float64(len(names)))
	// The tries begun before the outage was known (the manager's first
	// probe takes the operation timeout to fail) end within their turn's
	// wait and their operation's timeout. Then the window is a whole
	// retry interval (archiveRetry, 10 s), and as long again as a try
	// begun at its end would take.
	tryTakes := 2 * sqlstore.DefaultOpTimeout
	time.Sleep(time.Until(started.Add(sqlstore.DefaultOpTimeout + tryTakes + 3*time.Second)))
	before := counterValue(failed)
	time.Sleep(10*time.Second + tryTakes + time.Second)
	if n := counterValue(failed) - before; n != 0 {
		t.Errorf("%v archive writes failed while the store was known down; want none tried", n)
	}
	for _, n := range names {
		if run := getRun(t, ns, n); meta.IsStatusConditionTrue(run.Status.Conditions, arv1.ConditionArchived) {
			t.Fatalf("%s shows Archived while the database is stopped", n)
		}
	}

	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	for _, n := range names {
		waitFor(t, ns, n, 30*time.Second, "Archived", func(r *arv1.AgentRun) bool {
			return meta.IsStatusConditionTrue(r.Status.Conditions, arv1.ConditionArchived)
		})
	}
	waitGauge(t, "agentrun_runs_unarchived", ns, 10*time.Second, 0)
	waitGauge(t, "agentrun_store_up", "", 10*time.Second, 1)
	for _, n := range names {
		run := getRun(t, ns, n)
		if _, _, err := storeReader(t, d.DSN).ArchivedRun(context.Background(), run.UID); err != nil {
			t.Errorf("%s is not in the archive: %v", n, err)
		}
	}
}

// waitGauge waits until the manager's gauge name (of namespace ns; "":
// every series) reads want.
func waitGauge(t *testing.T, name, ns string, timeout time.Duration, want float64) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, found := gaugeSum(t, name, ns)
		if found && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s{namespace=%q} = %v (exported: %v) after %s, want %v", name, ns, got, found, timeout, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRunBegunOnConfigMapsFinishesThere: a run in flight when the manager
// is restarted with a database store keeps its journal in its ConfigMaps,
// finishes there, and is archived with its journal imported; a new run
// goes to the database.
func TestRunBegunOnConfigMapsFinishesThere(t *testing.T) {
	dsn := storeDSNFor(t, cmp.Or(suiteStore, "postgres"))
	h1 := startManager(t, managerOpts{store: "-"})
	ns := newNamespace(t)
	createConfigMap(t, ns, "steps", map[string]string{"agent.toml": slowSteps(4, 600)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	old := createRun(t, ns, "old", "steps")
	waitFor(t, ns, "old", 30*time.Second, "two calls answered", func(r *arv1.AgentRun) bool { return h1.scripted.Calls(string(r.UID)) >= 3 })
	h1.stop()
	startManager(t, managerOpts{store: dsn})
	createRun(t, ns, "new", "steps")
	for name, where := range map[string]arv1.JournalStore{"old": arv1.JournalConfigMaps, "new": arv1.JournalDatabase} {
		run := waitFor(t, ns, name, 60*time.Second, "Complete and archived", func(r *arv1.AgentRun) bool {
			return r.Status.Phase == arv1.PhaseComplete && meta.IsStatusConditionTrue(r.Status.Conditions, arv1.ConditionArchived)
		})
		if run.Status.JournalStore != where {
			t.Errorf("%s keeps its journal in %q, want %q", name, run.Status.JournalStore, where)
		}
	}
	if es := journalEntriesIn(t, "", ns, old); len(es) < 8 {
		t.Errorf("the old run's ConfigMap journal holds %d entries, want its 4 calls", len(es))
	}
	if es, err := storeReader(t, dsn).Entries(context.Background(), store.RefOf(old)); err != nil || len(es) < 8 {
		t.Errorf("the old run's archived journal holds %d entries (%v), want its 4 calls imported", len(es), err)
	}
}

// executedWith counts the executions of tool whose arguments hold substr.
func executedWith(srv *mcptest.Server, tool, substr string) int {
	n := 0
	for _, c := range srv.Log() {
		if c.Executed && c.Tool == tool && strings.Contains(c.Args, substr) {
			n++
		}
	}
	return n
}

// waitGone waits until the run is deleted.
func waitGone(t *testing.T, ns, name string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := k8s.Get(context.Background(), keyOf(ns, name), &arv1.AgentRun{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s was not deleted within %s (%v)", ns, name, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// journalEntriesIn reads a run's journal from the store dsn names ("":
// its ConfigMaps).
func journalEntriesIn(t *testing.T, dsn, ns string, run *arv1.AgentRun) []journal.Entry {
	t.Helper()
	var es []journal.Entry
	var err error
	if dsn == "" {
		es, err = configmaps.Read(context.Background(), k8s, ns, run.UID)
	} else {
		es, err = storeReader(t, dsn).Entries(context.Background(), store.RefOf(run))
	}
	if err != nil {
		t.Fatal(err)
	}
	return es
}
