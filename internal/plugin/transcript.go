package plugin

import (
	"fmt"
	"io"
	"sort"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/transcript"
)

// RenderTranscript writes one line per journal entry, in seq order:
// "#SEQ  TIME  STAGE[ITERATION]  WHAT  DETAIL". Entries that could not be
// read are listed after, and make the command fail.
func RenderTranscript(w io.Writer, entries []journal.Entry, unreadable []string) error {
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].Seq < entries[j].Seq })
	tw := newTable(w)
	turns := transcript.Turns(entries)
	for i := range entries {
		writeEntry(tw, &entries[i], turns[i])
	}
	for _, bad := range unreadable {
		fmt.Fprintf(tw, "#?\t\t\t%s\n", bad)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(unreadable) > 0 {
		return fmt.Errorf("%d journal entr(ies) could not be read", len(unreadable))
	}
	return nil
}

// writeEntry writes an entry's line: "#SEQ  TIME  TURN  WHAT  DETAIL".
func writeEntry(w io.Writer, e *journal.Entry, turn string) {
	writeLine(w, transcript.LineOf(e, turn))
}

// writeLine writes a transcript line: "#SEQ  TIME  TURN  WHAT  DETAIL".
func writeLine(w io.Writer, l transcript.Line) {
	if l.Detail == "" {
		fmt.Fprintf(w, "#%d\t%s\t%s\t%s\n", l.Seq, l.At, l.Turn, l.What)
		return
	}
	fmt.Fprintf(w, "#%d\t%s\t%s\t%s\t%s\n", l.Seq, l.At, l.Turn, l.What, l.Detail)
}
