package store

import (
	"errors"
	"testing"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

func intent(seq int64, lost int) journal.Entry {
	return journal.Entry{Seq: seq, Kind: journal.ModelCallRequested, RequestHash: "h", Lost: lost}
}

// TestPlan: an entry stored with the same text is left out (a retried
// append), other text under a stored seq is ErrSeqTaken, and an
// unanswered model intent issued again with as many lost dispatches
// replaces the journal's last entry.
func TestPlan(t *testing.T) {
	l := &Log{Raw: map[int64]string{}}
	first, err := l.Plan([]journal.Entry{intent(0, 0)})
	if err != nil || len(first) != 1 {
		t.Fatalf("Plan of a new entry: %v, %v", first, err)
	}
	l.Commit(first)
	if p, err := l.Plan([]journal.Entry{intent(0, 0)}); err != nil || len(p) != 0 {
		t.Fatalf("Plan of a stored entry: %v, %v; want nothing to write", p, err)
	}
	again, err := l.Plan([]journal.Entry{intent(0, 1)})
	if err != nil || len(again) != 1 || again[0].Replaces != first[0].Text {
		t.Fatalf("Plan of the intent issued again: %+v, %v", again, err)
	}
	l.Commit(again)
	if len(l.Entries) != 1 || l.Entries[0].Lost != 1 {
		t.Fatalf("after the reissue the log holds %+v", l.Entries)
	}
	if _, err := l.Plan([]journal.Entry{intent(0, 0)}); !errors.Is(err, ErrSeqTaken) {
		t.Fatalf("an intent counting fewer lost dispatches: %v, want ErrSeqTaken", err)
	}
	if _, err := l.Plan([]journal.Entry{{Seq: 0, Kind: journal.RunCancelled}}); !errors.Is(err, ErrSeqTaken) {
		t.Fatalf("another kind under a stored seq: %v, want ErrSeqTaken", err)
	}
}

// TestDenseAndShorterThanStatus: a missing seq and a journal shorter than
// the status records are CorruptErrors naming the journal.
func TestDenseAndShorterThanStatus(t *testing.T) {
	if err := Dense([]journal.Entry{{Seq: 0}, {Seq: 1}, {Seq: 1}, {Seq: 2}}, "j"); err != nil {
		t.Fatalf("a journal with an entry issued again: %v", err)
	}
	var ce *CorruptError
	if err := Dense([]journal.Entry{{Seq: 0}, {Seq: 2}}, "j"); !errors.As(err, &ce) || ce.Object != "j" || ce.Key != "000001" {
		t.Fatalf("a journal missing seq 1: %v", err)
	}
	run := &arv1.AgentRun{Status: arv1.AgentRunStatus{Usage: arv1.Usage{ModelCalls: 1}}}
	if err := ShorterThanStatus(run, []journal.Entry{{Seq: 0}}, "j"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("one entry for a completed call: %v", err)
	}
	if err := ShorterThanStatus(run, []journal.Entry{{Seq: 0}, {Seq: 1}}, "j"); err != nil {
		t.Fatalf("an intent and its answer: %v", err)
	}
}
