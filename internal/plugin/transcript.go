package plugin

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/money"
)

// RenderTranscript writes one line per journal entry, in seq order:
// "#SEQ  TIME  STAGE[ITERATION]  WHAT  DETAIL". Entries that could not be
// read are listed after, and make the command fail.
func RenderTranscript(w io.Writer, entries []journal.Entry, unreadable []string) error {
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].Seq < entries[j].Seq })
	tw := newTable(w)
	turns := turnsOf(entries)
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
	writeLine(w, entryLine(e, turn))
}

// writeLine writes a transcript line: "#SEQ  TIME  TURN  WHAT  DETAIL".
func writeLine(w io.Writer, l TranscriptLine) {
	if l.Detail == "" {
		fmt.Fprintf(w, "#%d\t%s\t%s\t%s\n", l.Seq, l.At, l.Turn, l.What)
		return
	}
	fmt.Fprintf(w, "#%d\t%s\t%s\t%s\t%s\n", l.Seq, l.At, l.Turn, l.What, l.Detail)
}

// TranscriptLine is one journal entry as the transcript shows it.
type TranscriptLine struct {
	Seq int64 `json:"seq"`
	// At is RFC 3339 in UTC, "-" when the entry has no time.
	At string `json:"at"`
	// Turn is "stage[iteration]" ("title" for the title call, "-" before any).
	Turn   string `json:"turn"`
	What   string `json:"what"`
	Detail string `json:"detail,omitempty"`
}

// TranscriptLines are the transcript's lines, in seq order (the web console
// shows the same words as kubectl agentrun transcript).
func TranscriptLines(entries []journal.Entry) []TranscriptLine {
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].Seq < entries[j].Seq })
	turns := turnsOf(entries)
	out := make([]TranscriptLine, len(entries))
	for i := range entries {
		out[i] = entryLine(&entries[i], turns[i])
	}
	return out
}

func entryLine(e *journal.Entry, turn string) TranscriptLine {
	at := orDash("")
	if !e.At.IsZero() {
		at = e.At.UTC().Format(time.RFC3339)
	}
	what, detail := describeEntry(e)
	return TranscriptLine{Seq: e.Seq, At: at, Turn: orDash(turn), What: what, Detail: detail}
}

// turnsOf says which turn of which stage each entry belongs to, as
// "stage[iteration]": a call's outcome belongs to its intent's turn (older
// journals did not record it on the outcome), and the tool calls, gates
// and questions after an answer belong to that answer's turn.
func turnsOf(entries []journal.Entry) []string {
	out := make([]string, len(entries))
	intents := map[int64]*journal.Entry{}
	turn := ""
	for i := range entries {
		e := &entries[i]
		switch e.Kind {
		case journal.ModelCallRequested:
			intents[e.Seq] = e
			turn = fmt.Sprintf("%s[%d]", e.Stage, e.Iteration)
		case journal.ModelCallCompleted, journal.ModelCallFailed:
			if in, ok := intents[e.Call]; ok {
				turn = fmt.Sprintf("%s[%d]", in.Stage, in.Iteration)
			} else if e.Stage != "" {
				turn = fmt.Sprintf("%s[%d]", e.Stage, e.Iteration)
			}
		}
		if e.Kind == journal.ModelCallRequested && e.Purpose == journal.PurposeTitle {
			out[i] = "title"
			continue
		}
		out[i] = turn
	}
	return out
}

// describeEntry is an entry's kind in words and its details.
func describeEntry(e *journal.Entry) (string, string) {
	model := e.Model
	if e.Provider != "" {
		model = e.Provider + "/" + e.Model
	}
	var d []string
	switch e.Kind {
	case journal.ModelCallRequested:
		if model != "" {
			d = append(d, model)
		}
		if e.RequestHash != "" {
			d = append(d, "request "+e.RequestHash)
		}
		return "model call", strings.Join(d, " ")
	case journal.ModelCallCompleted:
		return describeAnswer(e, model)
	case journal.ModelCallFailed:
		return describeFailure(e, model)
	case journal.InteractionAnswered:
		return describeCheckpoint(e)
	case journal.RunCancelled:
		if e.By != "" {
			return "cancelled", "by " + e.By
		}
		return "cancelled", ""
	case journal.QuestionAsked:
		return "asked", e.Point
	case journal.MessageReceived:
		return "message", fmt.Sprintf("from the parent (%s): %q", e.MessageID, oneLine(e.Text, 100))
	case journal.SubagentResultDelivered:
		return "sub-agent result", fmt.Sprintf("%s, shown to the model: %q", e.Child, oneLine(e.Text, 100))
	case journal.ToolCallDecided:
		return describeToolGate(e)
	case journal.ToolPolicyDecided:
		return describeToolPolicy(e)
	case journal.ToolCallRequested:
		return "tool call", fmt.Sprintf("%s on %s (%s, key %s) %s", e.Tool, orDash(e.Server), e.Effect, orDash(e.IdempotencyKey), oneLine(e.Input, 80))
	case journal.ToolCallCompleted:
		return describeToolResult(e)
	case journal.ToolCallRetried:
		return "tool retried", fmt.Sprintf("%s call #%d by %s", e.Tool, e.Call, orDash(e.By))
	case journal.RunAbandoned:
		return "abandoned", "by " + orDash(e.By)
	case journal.RegionWritten:
		return "region written", fmt.Sprintf("%s: %d bytes by %s", e.Region, len(e.Content), orDash(e.By))
	}
	raw, _ := json.Marshal(e)
	return string(e.Kind), oneLine(string(raw), 160)
}

// describeAnswer is a model answer in words: its cost and what it asked for.
func describeAnswer(e *journal.Entry, model string) (string, string) {
	var d []string
	d = append(d, fmt.Sprintf("call #%d", e.Call))
	if model != "" {
		d = append(d, model)
	}
	if u := e.Usage; u != nil {
		t := fmt.Sprintf("%d+%d tokens", u.Prompt, u.Completion)
		if u.Cached > 0 || u.CacheWrite > 0 {
			t += fmt.Sprintf(" (%d cached, %d cache write)", u.Cached, u.CacheWrite)
		}
		d = append(d, t)
	}
	if e.CostNanoUSD != nil {
		c := "$" + money.NanoUSD(*e.CostNanoUSD).String()
		if !e.CostExact {
			c += " (estimated)"
		}
		d = append(d, c)
	} else {
		d = append(d, "cost unknown")
	}
	if r := e.Response; r != nil {
		if r.Next != "" {
			d = append(d, "next "+r.Next)
		}
		if r.Complete {
			d = append(d, "complete")
		}
		if r.Output != "" {
			d = append(d, fmt.Sprintf("output %q", oneLine(r.Output, 60)))
		}
		if r.Text != "" {
			d = append(d, fmt.Sprintf("%q", oneLine(r.Text, 80)))
		}
		for _, c := range r.Calls {
			d = append(d, "calls "+c.Name)
		}
		if r.OutputRejected != "" {
			// The output was not accepted: say so and why, so a run refused
			// once does not read like one accepted.
			d = append(d, fmt.Sprintf("refused: %s", oneLine(r.OutputRejected, 200)))
			return "output refused", strings.Join(d, ", ")
		}
	}
	return "model answered", strings.Join(d, ", ")
}

// describeFailure is a failed model call in words.
func describeFailure(e *journal.Entry, model string) (string, string) {
	var d []string
	d = append(d, fmt.Sprintf("call #%d", e.Call))
	if model != "" {
		d = append(d, model)
	}
	if f := e.Failure; f != nil {
		t := string(f.Class)
		if f.Status != 0 {
			t += fmt.Sprintf(" (HTTP %d)", f.Status)
		}
		d = append(d, t)
		if f.Message != "" {
			d = append(d, fmt.Sprintf("%q", oneLine(f.Message, 120)))
		}
	}
	return "model failed", strings.Join(d, ", ")
}

// describeCheckpoint is a person's (or the policy's) answer at an
// interaction point, in words.
func describeCheckpoint(e *journal.Entry) (string, string) {
	verdict := "denied"
	if e.Approved {
		verdict = "approved"
	}
	t := orDash(e.Point) + " " + verdict
	if e.By != "" {
		t += " by " + e.By
	}
	if e.Auto {
		t += " (automatically: unattended run)"
	}
	switch {
	case e.Abort != "":
		t += fmt.Sprintf(", abort option %q", oneLine(e.Abort, 120))
	case e.Choice != "":
		t += fmt.Sprintf(", answered %q", oneLine(e.Choice, 120))
	}
	if e.Result != "" {
		t += fmt.Sprintf(", reason %q", oneLine(e.Result, 120))
	}
	return "checkpoint", t
}

// describeToolGate is a tool gate's verdict in words.
func describeToolGate(e *journal.Entry) (string, string) {
	verdict := "denied"
	if e.Approved {
		verdict = "approved"
	}
	t := fmt.Sprintf("%s %s %s", e.Tool, e.Gate, verdict)
	if e.By != "" {
		t += " by " + e.By
	}
	if e.Expired {
		t += " (nobody answered in time)"
	}
	if e.Input != "" {
		t += fmt.Sprintf(", arguments edited by %s to %s", orDash(e.By), oneLine(e.Input, 120))
	}
	if e.Result != "" {
		t += fmt.Sprintf(", reason %q", oneLine(e.Result, 120))
	}
	return "tool gate", t
}

// describeToolPolicy is a tool policy's decision in words, naming the
// policy and rule that decided, and any other rule that matched.
func describeToolPolicy(e *journal.Entry) (string, string) {
	d := e.Policy
	if d == nil {
		return "tool policy", e.Tool
	}
	t := fmt.Sprintf("%s %s by %s", e.Tool, d.Action, d.Cause())
	if d.Message != "" {
		t += fmt.Sprintf(": %q", oneLine(d.Message, 120))
	}
	for _, m := range d.Matches {
		if m.Policy == d.Policy && m.PolicyNamespace == d.PolicyNamespace && m.Rule == d.Rule {
			continue
		}
		where := m.Policy
		if m.PolicyNamespace != "" {
			where = m.PolicyNamespace + "/" + m.Policy
		}
		t += fmt.Sprintf("; also %s %s %s rule %s", m.Action, m.PolicyKind, where, m.Rule)
	}
	return "tool policy", t
}

// describeToolResult is a tool call's result in words.
func describeToolResult(e *journal.Entry) (string, string) {
	t := e.Tool
	if e.Call != 0 {
		t += fmt.Sprintf(" call #%d", e.Call)
	}
	if e.By != "" {
		t += " by " + e.By
	}
	verb := "returned"
	if e.IsError {
		verb = "failed"
	}
	return "tool " + verb, t + fmt.Sprintf(": %q", oneLine(e.Result, 100))
}
