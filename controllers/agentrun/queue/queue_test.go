package queue

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/priority"
	"github.com/agentrun-dev/agentrun-operator/internal/runqueue"
)

func runIn(name string, phase arv1.Phase, created time.Time) arv1.AgentRun {
	return arv1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name), CreationTimestamp: metav1.NewTime(created)},
		Status:     arv1.AgentRunStatus{Phase: phase},
	}
}

// TestWorkingIsTheRunsThatWereDriven: after a restart the line is seeded
// with the runs not parked and not finished, each placed as admission
// places it (a child under its root's priority).
func TestWorkingIsTheRunsThatWereDriven(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	root := runIn("root", arv1.PhaseRunning, t0)
	root.Spec.Priority = ptr.To(int32(7))
	child := runIn("child", arv1.PhaseStarting, t0.Add(time.Minute))
	child.Labels = map[string]string{arv1.LabelRoot: "root", arv1.LabelRootCreated: "1700000000000000000"}
	cases := []struct {
		name string
		runs []arv1.AgentRun
		want []runqueue.Run
	}{
		{name: "none", runs: nil, want: nil},
		{
			name: "unstarted, starting and running are in line; parked and finished are not",
			runs: []arv1.AgentRun{
				runIn("queued", arv1.PhaseQueued, t0), runIn("blank", "", t0), runIn("starting", arv1.PhaseStarting, t0),
				runIn("running", arv1.PhaseRunning, t0), runIn("parked", arv1.PhaseWaitingInput, t0), runIn("paused", arv1.PhasePaused, t0), runIn("done", arv1.PhaseComplete, t0),
				runIn("failed", arv1.PhaseError, t0),
			},
			want: []runqueue.Run{
				{UID: "queued", Namespace: "ns", Name: "queued", Place: runqueue.Place{Root: t0, RootName: "queued", Created: t0, Name: "queued"}},
				{UID: "blank", Namespace: "ns", Name: "blank", Place: runqueue.Place{Root: t0, RootName: "blank", Created: t0, Name: "blank"}},
				{UID: "starting", Namespace: "ns", Name: "starting", Place: runqueue.Place{Root: t0, RootName: "starting", Created: t0, Name: "starting"}},
				{UID: "running", Namespace: "ns", Name: "running", Place: runqueue.Place{Root: t0, RootName: "running", Created: t0, Name: "running"}},
			},
		},
		{
			name: "a child takes its root's priority from the same list",
			runs: []arv1.AgentRun{root, child},
			want: []runqueue.Run{
				{UID: "root", Namespace: "ns", Name: "root", Place: runqueue.Place{Priority: 7, Root: t0, RootName: "root", Created: t0, Name: "root"}},
				{UID: "child", Namespace: "ns", Name: "child", Place: runqueue.Place{Priority: 7, Root: t0, RootName: "root", Created: t0.Add(time.Minute), Name: "child"}},
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := working(c.runs, priority.Classes{})
			if !slices.EqualFunc(got, c.want, func(a, b runqueue.Run) bool {
				return a.UID == b.UID && a.Namespace == b.Namespace && a.Name == b.Name && a.Place.Priority == b.Place.Priority &&
					a.Place.Root.Equal(b.Place.Root) && a.Place.RootName == b.Place.RootName && a.Place.Created.Equal(b.Place.Created) && a.Place.Name == b.Place.Name
			}) {
				t.Fatalf("working = %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestReleaseIfIdleGivesTheSlotBack: a run keeps its active-run slot while
// it starts or runs, unless it waits on MCP servers only; any other phase
// gives it back.
func TestReleaseIfIdleGivesTheSlotBack(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	cases := []struct {
		phase       arv1.Phase
		onlyServers bool
		keeps       bool
	}{
		{phase: arv1.PhaseStarting, keeps: true},
		{phase: arv1.PhaseRunning, keeps: true},
		{phase: arv1.PhaseRunning, onlyServers: true, keeps: false},
		{phase: arv1.PhaseStarting, onlyServers: true, keeps: false},
		{phase: arv1.PhaseWaitingInput, keeps: false},
		{phase: arv1.PhaseComplete, keeps: false},
		{phase: arv1.PhaseQueued, keeps: false},
	}
	for _, c := range cases {
		q := New(Options{Runs: fake.NewClientBuilder().WithScheme(scheme(t)).Build(), Wake: func(...types.NamespacedName) {}})
		run := runIn("r", c.phase, t0)
		if ok, _ := q.Admit(t.Context(), &run, t0); !ok {
			t.Fatalf("%s: an empty line without bounds did not admit the run", c.phase)
		}
		q.ReleaseIfIdle(&run, c.onlyServers)
		if got := q.Slots().Has(run.UID); got != c.keeps {
			t.Errorf("%s (only servers: %v): keeps its slot = %v, want %v", c.phase, c.onlyServers, got, c.keeps)
		}
	}
}

func scheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	if err := arv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPromptBytesCountsWhatARequestSends: every part of a request the
// provider is sent counts toward the bound on its prompt tokens.
