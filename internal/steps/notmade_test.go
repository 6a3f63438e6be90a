package steps

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/circuit"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// downJournal refuses every append as a store that cannot be used; the
// write may have been stored all the same, as the caller cannot tell.
type downJournal struct {
	store.Journal
	appends int
}

func (j *downJournal) Append(context.Context, *arv1.AgentRun, ...journal.Entry) error {
	j.appends++
	return &store.UnavailableError{Backend: "postgres", Cause: "timeout: context deadline exceeded"}
}

// TestCallNotMadeWhenItsIntentIsNotJournaled: a step whose intent write
// fails makes no call and says so (NotMade), so a later issue of the
// intent, if the write was stored after all, is not counted as lost.
func TestCallNotMadeWhenItsIntentIsNotJournaled(t *testing.T) {
	j := &downJournal{}
	rt := &Runtime{Options: Options{Journal: j, Breakers: circuit.New()}}
	notMade := 0
	rt.RunModelCall(context.Background(), ModelCall{
		Run:    &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", UID: "u"}},
		Intent: journal.Entry{Seq: 4, Kind: journal.ModelCallRequested, Provider: "p", Model: "m"}, JournalIntent: true,
		NotMade: func() { notMade++ },
	})
	if j.appends != 1 || notMade != 1 {
		t.Errorf("%d intent writes, NotMade told %d times; want 1 and 1 (the call, with no provider, was not made)", j.appends, notMade)
	}
}
