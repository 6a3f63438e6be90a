package router

import (
	"context"
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// fake is a backend holding entries of some runs; it records the runs it
// was asked to load.
type fake struct {
	store.Backend
	name    string
	entries map[types.UID][]journal.Entry
	loaded  []types.UID
	err     error
}

func (f *fake) Load(_ context.Context, run *arv1.AgentRun, _ bool) ([]journal.Entry, error) {
	f.loaded = append(f.loaded, run.UID)
	return f.entries[run.UID], f.err
}

func (f *fake) Entries(_ context.Context, run store.RunRef) ([]journal.Entry, error) {
	return f.entries[run.UID], f.err
}

func (f *fake) Forget(types.UID) {}

func run(uid string, st arv1.AgentRunStatus) *arv1.AgentRun {
	return &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: uid, UID: types.UID(uid)}, Status: st}
}

// TestRoutes: a run goes to the store its status names; a new run (seen
// created, or whose status shows nothing begun) to the configured store;
// a run an older operator began (its status shows a snapshot, an intent,
// calls or an end, and names no store) to its ConfigMaps; a run whose
// status was never written to whichever store holds entries of it.
func TestRoutes(t *testing.T) {
	one := []journal.Entry{{Seq: 0, Kind: journal.ModelCallRequested}}
	cases := []struct {
		name  string
		run   *arv1.AgentRun
		empty bool
		inDB  bool
		inCM  bool
		want  string
	}{
		{"status says Database", run("a", arv1.AgentRunStatus{JournalStore: arv1.JournalDatabase, BlueprintSnapshot: "s"}), false, false, true, "db"},
		{"status says ConfigMaps", run("b", arv1.AgentRunStatus{JournalStore: arv1.JournalConfigMaps}), false, true, false, "cm"},
		{"seen created", run("c", arv1.AgentRunStatus{}), true, false, true, "db"},
		{"begun by an older operator", run("d", arv1.AgentRunStatus{BlueprintSnapshot: "s"}), false, false, false, "cm"},
		{"finished under an older operator", run("e", arv1.AgentRunStatus{Phase: arv1.PhaseComplete}), false, false, false, "cm"},
		{"never written, journal in the database", run("f", arv1.AgentRunStatus{}), false, true, true, "db"},
		{"never written, journal in ConfigMaps", run("g", arv1.AgentRunStatus{}), false, false, true, "cm"},
		{"never written, no journal", run("h", arv1.AgentRunStatus{}), false, false, false, "db"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := &fake{name: "db", entries: map[types.UID][]journal.Entry{}}
			cm := &fake{name: "cm", entries: map[types.UID][]journal.Entry{}}
			if tc.inDB {
				db.entries[tc.run.UID] = one
			}
			if tc.inCM {
				cm.entries[tc.run.UID] = one
			}
			r := New(db, cm)
			if _, err := r.Load(context.Background(), tc.run, tc.empty); err != nil {
				t.Fatal(err)
			}
			got := "db"
			if len(cm.loaded) > 0 {
				got = "cm"
			}
			if got != tc.want || len(cm.loaded)+len(db.loaded) != 1 {
				t.Fatalf("loaded from %s (db %v, cm %v), want %s", got, db.loaded, cm.loaded, tc.want)
			}
			wantWhere := arv1.JournalDatabase
			if tc.want == "cm" {
				wantWhere = arv1.JournalConfigMaps
			}
			if w := r.Where(tc.run); w != wantWhere {
				t.Fatalf("Where = %s, want %s", w, wantWhere)
			}
		})
	}
}

// TestOnlyConfigMaps: without a database every run is the ConfigMap
// store's, and says so.
func TestOnlyConfigMaps(t *testing.T) {
	cm := &fake{name: "cm"}
	r := New(cm, nil)
	x := run("x", arv1.AgentRunStatus{JournalStore: arv1.JournalDatabase})
	if _, err := r.Load(context.Background(), x, false); err != nil || len(cm.loaded) != 1 {
		t.Fatalf("Load: %v, loaded %v", err, cm.loaded)
	}
	if r.Where(x) != arv1.JournalConfigMaps || r.Database() || r.Archive() != nil {
		t.Fatal("a ConfigMap-only router says it has a database")
	}
}

// TestUnavailableIsTold: a store's ErrUnavailable reaches OnUnavailable's
// function; other errors do not.
func TestUnavailableIsTold(t *testing.T) {
	down := &store.UnavailableError{Backend: "postgres", Cause: "connection refused"}
	db := &fake{name: "db", err: down, entries: map[types.UID][]journal.Entry{}}
	r := New(db, &fake{name: "cm"})
	var told []error
	r.OnUnavailable(func(err error) { told = append(told, err) })
	if _, err := r.Load(context.Background(), run("a", arv1.AgentRunStatus{JournalStore: arv1.JournalDatabase}), false); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Load: %v", err)
	}
	db.err = errors.New("something else")
	_, _ = r.Load(context.Background(), run("b", arv1.AgentRunStatus{JournalStore: arv1.JournalDatabase}), false)
	if len(told) != 1 || !errors.Is(told[0], store.ErrUnavailable) {
		t.Fatalf("told %v, want the one unavailable error", told)
	}
}
