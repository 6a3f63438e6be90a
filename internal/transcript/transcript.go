// Package transcript puts a run's journal in words, one line an entry:
// what kubectl agentrun transcript prints, its web console shows, and the
// history API's transcript subresource serves. It is its own package so
// the manager, which serves that subresource, does not link the kubectl
// plugin's command-line libraries.
package transcript

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/money"
	"github.com/agentrun-dev/agentrun-operator/internal/wirestatus"
)

// Line is one journal entry in words. The history API's TranscriptLine has
// the same fields, so each converts to the other directly.
type Line struct {
	Seq int64 `json:"seq"`
	// At is RFC 3339 in UTC, "-" when the entry has no time.
	At string `json:"at"`
	// Turn is "stage[iteration]" ("title" for the title call, "-" before any).
	Turn   string `json:"turn"`
	What   string `json:"what"`
	Detail string `json:"detail,omitempty"`
}

// Lines are the journal's lines, in seq order.
func Lines(entries []journal.Entry) []Line {
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].Seq < entries[j].Seq })
	turns := Turns(entries)
	out := make([]Line, len(entries))
	for i := range entries {
		out[i] = LineOf(&entries[i], turns[i])
	}
	return out
}

// LineOf is entry e's line, in turn (Turns).
func LineOf(e *journal.Entry, turn string) Line {
	at := OrDash("")
	if !e.At.IsZero() {
		at = e.At.UTC().Format(time.RFC3339)
	}
	what, detail := Describe(e)
	return Line{Seq: e.Seq, At: at, Turn: OrDash(turn), What: what, Detail: detail}
}

// Turns says which turn of which stage each entry belongs to, as
// "stage[iteration]": a call's outcome belongs to its intent's turn (older
// journals did not record it on the outcome), and the tool calls, gates
// and questions after an answer belong to that answer's turn.
func Turns(entries []journal.Entry) []string {
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

// Describe is an entry's kind in words and its details.
func Describe(e *journal.Entry) (string, string) {
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
		return "message", fmt.Sprintf("from the parent (%s): %q", e.MessageID, OneLine(e.Text, 100))
	case journal.SubagentResultDelivered:
		return "sub-agent result", fmt.Sprintf("%s, shown to the model: %q", e.Child, OneLine(e.Text, 100))
	case journal.ToolCallDecided:
		return describeToolGate(e)
	case journal.ToolPolicyDecided:
		return describeToolPolicy(e)
	case journal.ToolCallRequested:
		return "tool call", fmt.Sprintf("%s on %s (%s, key %s) %s", e.Tool, OrDash(e.Server), e.Effect, OrDash(e.IdempotencyKey), OneLine(e.Input, 80))
	case journal.ToolCallCompleted:
		return describeToolResult(e)
	case journal.ToolCallRetried:
		return "tool retried", fmt.Sprintf("%s call #%d by %s", e.Tool, e.Call, OrDash(e.By))
	case journal.RunAbandoned:
		return "abandoned", "by " + OrDash(e.By)
	case journal.RegionWritten:
		return "region written", fmt.Sprintf("%s: %d bytes by %s", e.Region, len(e.Content), OrDash(e.By))
	}
	raw, _ := json.Marshal(e)
	return string(e.Kind), OneLine(string(raw), 160)
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
			d = append(d, fmt.Sprintf("output %q", OneLine(r.Output, 60)))
		}
		if r.Text != "" {
			d = append(d, fmt.Sprintf("%q", OneLine(r.Text, 80)))
		}
		for _, c := range r.Calls {
			d = append(d, "calls "+c.Name)
		}
		if r.OutputRejected != "" {
			// The output was not accepted: say so and why, so a run refused
			// once does not read like one accepted.
			d = append(d, fmt.Sprintf("refused: %s", OneLine(r.OutputRejected, 200)))
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
			d = append(d, fmt.Sprintf("%q", OneLine(f.Message, 120)))
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
	t := OrDash(e.Point) + " " + verdict
	if e.By != "" {
		t += " by " + e.By
	}
	if e.Auto {
		t += " (automatically: unattended run)"
	}
	switch {
	case e.Abort != "":
		t += fmt.Sprintf(", abort option %q", OneLine(e.Abort, 120))
	case e.Choice != "":
		t += fmt.Sprintf(", answered %q", OneLine(e.Choice, 120))
	}
	if e.Result != "" {
		t += fmt.Sprintf(", reason %q", OneLine(e.Result, 120))
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
		t += fmt.Sprintf(", arguments edited by %s to %s", OrDash(e.By), OneLine(e.Input, 120))
	}
	if e.Result != "" {
		t += fmt.Sprintf(", reason %q", OneLine(e.Result, 120))
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
		t += fmt.Sprintf(": %q", OneLine(d.Message, 120))
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
	return "tool " + verb, t + fmt.Sprintf(": %q", OneLine(e.Result, 100))
}

// OrDash is s, or "-" when it is empty.
func OrDash(s string) string {
	if s == "" {
		return wirestatus.Empty
	}
	return s
}

// OneLine collapses whitespace and cuts s at limit runes, so one value never
// breaks a listing.
func OneLine(s string, limit int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > limit {
		return string(r[:limit-1]) + "…"
	}
	return s
}
