package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/perrun"
)

// Log is one run's journal as a store's process knows it: its entries in
// seq order and the text each is stored as, so a retried append is
// recognised without a read and a reconcile never reads its journal back.
// Backends keep their own details beside it (where the journal lies).
type Log struct {
	// Mu serialises the run's appends and loads.
	Mu sync.Mutex
	// Loaded: Entries hold the stored journal (or the run has none yet).
	Loaded bool
	// MustRead: what is stored is known to differ from what this process
	// thought, so the journal is read even for a run that looks new.
	MustRead bool
	Entries  []journal.Entry
	// Raw is each entry's stored text by seq.
	Raw map[int64]string
}

// Planned is one entry an append writes: the entry, its stored text, and
// when it issues an intent again under the same seq, the text it replaces.
type Planned struct {
	Entry    journal.Entry
	Text     string
	Replaces string
}

// CountsLost says p issues a model call's intent again counting the
// dispatch it replaces as lost (its Lost went up: that dispatch may have
// reached the provider and be billed). A reissue that keeps Lost replaces
// a dispatch its manager knows it never sent (journaled, then refused, cut
// short or stopped before the call), which cost nothing. Stores count
// lost calls by this, the fact the runs' status.usage.lostCalls counts.
func (p *Planned) CountsLost() bool {
	if p.Replaces == "" || p.Entry.Kind != journal.ModelCallRequested {
		return false
	}
	var was journal.Entry
	if err := json.Unmarshal([]byte(p.Replaces), &was); err != nil {
		return true // unknown is never free
	}
	return p.Entry.Lost > was.Lost
}

// Plan encodes es and returns what an append must write: an entry stored
// already with the same text is left out (an earlier attempt of a retried
// append was stored); an entry whose seq holds other text is ErrSeqTaken,
// unless it supersedes the journal's last entry.
func (l *Log) Plan(es []journal.Entry) ([]Planned, error) {
	var out []Planned
	for _, e := range es {
		b, err := json.Marshal(e)
		if err != nil {
			return nil, err
		}
		p := Planned{Entry: e, Text: string(b)}
		if have, ok := l.Raw[e.Seq]; ok {
			if have == p.Text {
				continue
			}
			if !l.supersedes(e) {
				return nil, fmt.Errorf("journaling %s #%d: %w", e.Kind, e.Seq, ErrSeqTaken)
			}
			p.Replaces = have
		}
		out = append(out, p)
	}
	return out, nil
}

// supersedes says e may replace the journal's last entry: both are the
// intent of one model call under one seq, still unanswered, and e issues
// it again (after a restart, or a status write that failed), counting at
// least as many earlier dispatches lost. Its answer, journaled after it,
// then finds the intent it answers as dispatched.
func (l *Log) supersedes(e journal.Entry) bool {
	n := len(l.Entries)
	if e.Kind != journal.ModelCallRequested || n == 0 {
		return false
	}
	last := l.Entries[n-1]
	return last.Seq == e.Seq && last.Kind == journal.ModelCallRequested && last.RequestHash == e.RequestHash && e.Lost >= last.Lost
}

// Commit adds what an append stored to the in-memory copy.
func (l *Log) Commit(ps []Planned) {
	for _, p := range ps {
		if p.Replaces != "" {
			l.Entries[len(l.Entries)-1] = p.Entry
		} else {
			l.Entries = append(l.Entries, p.Entry)
		}
		l.Raw[p.Entry.Seq] = p.Text
	}
	sort.SliceStable(l.Entries, func(i, j int) bool { return l.Entries[i].Seq < l.Entries[j].Seq })
}

// View is the entries as a caller may keep them (appends never write
// into the slice it sees).
func (l *Log) View() []journal.Entry {
	return l.Entries[:len(l.Entries):len(l.Entries)]
}

// Logs are the journals a store's process holds in memory, by run: each a
// Log with what its backend keeps beside it (L).
type Logs[L any] struct {
	runs *perrun.Box[*L]
	// fresh makes a new, unloaded log; log is its Log.
	fresh func(mustRead bool) *L
	log   func(*L) *Log
}

// NewLogs holds no run yet; fresh makes each run's log, log finds the Log
// in it.
func NewLogs[L any](fresh func(mustRead bool) *L, log func(*L) *Log) *Logs[L] {
	return &Logs[L]{runs: perrun.New[*L](), fresh: fresh, log: log}
}

// Load returns the run's entries, loading its log first (load reads the
// stored journal into it, unless it is loaded).
func (s *Logs[L]) Load(uid types.UID, load func(*L) error) ([]journal.Entry, error) {
	l := s.Get(uid)
	lg := s.log(l)
	lg.Mu.Lock()
	defer lg.Mu.Unlock()
	if err := load(l); err != nil {
		return nil, err
	}
	return lg.View(), nil
}

// Append serialises an append of es to the run's journal: it loads the
// log, plans what must be written, and has write store it; what was
// stored is committed to the log. An entry whose seq is taken (in the plan
// or by the write), and a write fenced out, make the log read afresh next
// time.
func (s *Logs[L]) Append(uid types.UID, load func(*L) error, es []journal.Entry, write func(*L, []Planned) error) error {
	if len(es) == 0 {
		return nil
	}
	l := s.Get(uid)
	lg := s.log(l)
	lg.Mu.Lock()
	defer lg.Mu.Unlock()
	if err := load(l); err != nil {
		return err
	}
	plan, err := lg.Plan(es)
	if err == nil && len(plan) > 0 {
		err = write(l, plan)
	}
	if errors.Is(err, ErrSeqTaken) || errors.Is(err, ErrFenced) {
		s.Stale(uid)
	}
	if err != nil || len(plan) == 0 {
		return err
	}
	lg.Commit(plan)
	return nil
}

// Get is the run's log, made when there is none.
func (s *Logs[L]) Get(uid types.UID) *L {
	var l *L
	s.runs.Update(uid, func(have *L, ok bool) (*L, bool) {
		if !ok {
			have = s.fresh(false)
		}
		l = have
		return have, true
	})
	return l
}

// Stale replaces the run's log with one that reads the stored journal
// first: the caller's view of it is behind what is stored.
func (s *Logs[L]) Stale(uid types.UID) { s.runs.Put(uid, s.fresh(true)) }

// Forget drops the in-memory copy of a run (finished, deleted, or stale).
func (s *Logs[L]) Forget(uid types.UID) { s.runs.Forget(uid) }

// Has reports whether the run's journal is held in memory.
func (s *Logs[L]) Has(uid types.UID) bool { return s.runs.Has(uid) }

// EachRun calls fn with every run whose journal is held in memory.
func (s *Logs[L]) EachRun(fn func(types.UID)) { s.runs.EachRun(fn) }

// Cached reports how many runs' journals are held in memory.
func (s *Logs[L]) Cached() int { return s.runs.Len() }

// Dense checks a journal's entries are numbered 0, 1, 2, ... (an entry
// issued again may repeat its seq): every write appends after the last
// seq, so a number missing is an entry lost. object names the journal.
func Dense(entries []journal.Entry, object string) error {
	next := int64(0)
	for _, e := range entries {
		switch {
		case e.Seq == next-1:
			// issued again
		case e.Seq != next:
			return &CorruptError{Object: object, Key: fmt.Sprintf("%06d", next), Problem: fmt.Sprintf("entry %d is missing (the next stored is %d)", next, e.Seq)}
		default:
			next++
		}
	}
	return nil
}

// ShorterThanStatus catches a journal that lost its end (or all of it):
// the run's status records a call whose seq says how many entries came
// before it, or completed model calls, which are only ever journaled.
// object names the journal.
func ShorterThanStatus(run *arv1.AgentRun, entries []journal.Entry, object string) error {
	want := int64(0)
	if p := run.Status.PendingCall; p != nil {
		want = p.Seq
	}
	if run.Status.Usage.ModelCalls > 0 {
		want = max(want, 2) // an intent and its completion
	}
	have := int64(0)
	if n := len(entries); n > 0 {
		have = entries[n-1].Seq + 1
	}
	if have >= want {
		return nil
	}
	what := fmt.Sprintf("the run's status records %d completed model calls", run.Status.Usage.ModelCalls)
	if p := run.Status.PendingCall; p != nil && p.Seq >= want {
		what = fmt.Sprintf("the run's status records a pending call at seq %d", p.Seq)
	}
	return &CorruptError{Object: object, Problem: fmt.Sprintf("the journal holds %d entries but %s", have, what)}
}
