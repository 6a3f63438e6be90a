package controllers

import (
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// TestWithUnjournaled: the intent a step has yet to journal is folded after
// the journal's entries, or over the unanswered intent it issues again;
// once the journal has moved past it, it is left out.
func TestWithUnjournaled(t *testing.T) {
	intent := func(seq int64, lost int) journal.Entry {
		return journal.Entry{Seq: seq, Kind: journal.ModelCallRequested, Lost: lost}
	}
	done := journal.Entry{Seq: 1, Kind: journal.ModelCallCompleted, Call: 0}
	cases := []struct {
		name    string
		entries []journal.Entry
		e       journal.Entry
		want    []journal.Entry
		added   bool
	}{
		{"an empty journal", nil, intent(0, 0), []journal.Entry{intent(0, 0)}, true},
		{"after the last entry", []journal.Entry{intent(0, 0), done}, intent(2, 0), []journal.Entry{intent(0, 0), done, intent(2, 0)}, true},
		{"issued again over its unanswered intent", []journal.Entry{intent(0, 0), done, intent(2, 0)}, intent(2, 1), []journal.Entry{intent(0, 0), done, intent(2, 1)}, true},
		{"already answered", []journal.Entry{intent(0, 0), done}, intent(0, 0), []journal.Entry{intent(0, 0), done}, false},
	}
	for _, c := range cases {
		kept := append([]journal.Entry(nil), c.entries...)
		got, added := withUnjournaled(c.entries, c.e)
		for i := range kept {
			if c.entries[i].Lost != kept[i].Lost || c.entries[i].Seq != kept[i].Seq {
				t.Errorf("%s: the journal's own entry %d was written over", c.name, i)
			}
		}
		if (added != nil) != c.added || len(got) != len(c.want) {
			t.Errorf("%s: got %d entries (added %v), want %d (added %v)", c.name, len(got), added != nil, len(c.want), c.added)
			continue
		}
		for i := range got {
			if got[i].Seq != c.want[i].Seq || got[i].Kind != c.want[i].Kind || got[i].Lost != c.want[i].Lost {
				t.Errorf("%s: entry %d is %+v, want %+v", c.name, i, got[i], c.want[i])
			}
		}
	}
}
