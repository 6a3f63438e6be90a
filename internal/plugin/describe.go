package plugin

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/shards"
	"github.com/agentrun-dev/agentrun-operator/internal/transcript"
	"github.com/agentrun-dev/agentrun-operator/internal/wirestatus"
)

// RenderDescribe writes the run record of run at now, for a person;
// failovers are the lines Failovers makes of its journal.
// own is who holds the shards (nil when the Leases could not be read).
func RenderDescribe(w io.Writer, run *arv1.AgentRun, now time.Time, own *shards.Ownership, failovers ...string) error {
	rec := record{newTable(w)}
	describeRun(rec, run, now, own)
	describeStages(rec, &run.Status)
	describeLineage(rec, run, failovers)
	describeUsage(rec, run, now)
	describeRequests(rec, run)
	if wo := run.Status.WaitingOn; wo != nil {
		describeWait(rec, run, wo, now)
	}
	if pc := run.Status.PendingCall; pc != nil {
		describePendingCall(rec, pc)
	}
	describeOutcome(rec, &run.Status)
	if err := rec.tw.Flush(); err != nil {
		return err
	}
	return describeConditions(w, run.Status.Conditions, now)
}

// record is a run record's table: a label and its value per line.
type record struct{ tw *tabwriter.Writer }

// line writes a labelled line.
func (r record) line(label, format string, a ...any) {
	fmt.Fprintf(r.tw, "%s:\t%s\n", label, fmt.Sprintf(format, a...))
}

// opt writes a labelled line when there is a value.
func (r record) opt(label, v string) {
	if v != "" {
		r.line(label, "%s", v)
	}
}

// sub writes an indented labelled line, under the one before, when there
// is a value.
func (r record) sub(label, v string) {
	if v != "" {
		fmt.Fprintf(r.tw, "  %s:\t%s\n", label, v)
	}
}

// describeRun writes what the run is and where it stands.
func describeRun(rec record, run *arv1.AgentRun, now time.Time, own *shards.Ownership) {
	st := &run.Status
	rec.line("Name", "%s", run.Name)
	rec.line("Namespace", "%s", run.Namespace)
	agent := run.Spec.Agent
	if st.AgentName != "" && st.AgentName != agent {
		agent += fmt.Sprintf(" (agent %q)", st.AgentName)
	}
	rec.line("Agent", "%s", agent)
	rec.opt("Title", st.Title)
	rec.line("Task", "%s", transcript.OneLine(run.Spec.Task, 200))
	phase := string(st.Phase)
	if phase == "" {
		phase = "(not seen by the controller yet)"
	}
	rec.line("Phase", "%s", phase)
	rec.line("State", "%s", wirestatus.Status(run, now).String("state"))
	rec.line("Driver", "%s", DriverText(run, own))
}

// describeStages writes the stage the run is in, and every stage's record.
func describeStages(rec record, st *arv1.AgentRunStatus) {
	if st.CurrentStage != "" || st.NumStages > 0 {
		rec.line("Stage", "%s %d/%d", st.CurrentStage, st.StageIndex+1, st.NumStages)
	} else {
		rec.opt("Stage", st.Stage)
	}
	rec.line("Iteration", "%d", st.Iteration)
	if len(st.Stages) > 0 {
		rec.line("Stages", "%d in the blueprint", len(st.Stages))
	}
	for _, ss := range st.Stages {
		rec.line("  "+ss.Name, "%s", stageLine(ss))
	}
	if l := st.LastTransition; l != nil {
		rec.line("Transition", "%s", transitionLine(l))
	}
}

// describeLineage writes the model (and its failovers), the parent and the
// children.
func describeLineage(rec record, run *arv1.AgentRun, failovers []string) {
	st := &run.Status
	model := st.Model
	if run.Spec.Model != "" {
		model = run.Spec.Model + " (override)"
	}
	rec.opt("Model", model)
	for _, f := range failovers {
		rec.line("Failover", "%s", f)
	}
	if p := wirestatus.ParentOf(run); p != "" {
		rec.line("Parent", "%s (depth %d)", p, run.Spec.Depth)
	}
	if c := st.Children; c != nil {
		rec.line("Children", "%d total: %d running, %d queued, %d succeeded, %d failed", c.Total, c.Running, c.Queued, c.Succeeded, c.Failed)
	}
}

// describeUsage writes what the run used, and for how long.
func describeUsage(rec record, run *arv1.AgentRun, now time.Time) {
	st := &run.Status
	u := st.Usage
	rec.line("Tokens", "%d prompt, %d completion (%d cached, %d cache write), %d total", u.PromptTokens, u.CompletionTokens,
		u.CachedTokens, u.CacheWriteTokens, totalTokens(u))
	rec.line("Calls", "%d model, %d tool", u.ModelCalls, u.ToolCalls)
	rec.line("Cost", "%s", costText(u))
	if t := st.TreeUsage; t != nil {
		rec.line("Tree cost", "%s, %d tokens (this run and its descendants)", costText(*t), totalTokens(*t))
	}
	rec.line("Age", "%s", wirestatus.Duration(run.AgeSeconds(now)))
	rec.line("Working", "%s", wirestatus.Duration(run.ActiveRuntimeSeconds(now)))
	if s, ok := run.LastMovedSeconds(now); ok {
		rec.line("Last moved", "%s ago", wirestatus.Duration(s))
	} else {
		rec.line("Last moved", "never")
	}
}

// describeRequests writes what the spec asks of the run: pause, cancel,
// yolo, budgets.
func describeRequests(rec record, run *arv1.AgentRun) {
	var spec []string
	if run.Spec.Paused {
		spec = append(spec, "paused")
	}
	if run.Spec.Cancel {
		spec = append(spec, "cancel requested")
	}
	if run.Spec.Yolo {
		y := "yolo"
		if run.Spec.YoloProfile != "" {
			y += " (profile " + run.Spec.YoloProfile + ")"
		}
		spec = append(spec, y)
	}
	if len(spec) > 0 {
		rec.line("Requested", "%s", strings.Join(spec, ", "))
	}
	if b := run.Spec.Budgets; b != nil {
		rec.line("Budgets", "%s", budgetsText(b))
	}
}

// describeWait writes what the run waits on, whether a person is needed,
// and the exact commands that answer it.
func describeWait(rec record, run *arv1.AgentRun, wo *arv1.WaitingOn, now time.Time) {
	summary := wo.Summary
	if summary == "" {
		summary = string(wo.Reason)
	}
	rec.line("Waiting on", "%s", summary)
	if wo.NeedsAPerson || wo.Reason.NeedsAPerson() {
		rec.sub("Needs a person", "yes")
	} else {
		rec.sub("Needs a person", "no (clears by itself)")
	}
	if wo.Since != nil {
		rec.sub("Since", fmt.Sprintf("%s (%s ago)", stamp(wo.Since), wirestatus.Duration(int64(now.Sub(wo.Since.Time)/time.Second))))
	}
	rec.sub("Blocker", string(wo.Blocker))
	rec.sub("Remedy", wo.Remedy)
	rec.sub("Point", wo.Point)
	// A review's prompt spans lines; one line keeps the table whole
	// (the field is clipped at 2048 already, so nothing more is cut).
	rec.sub("Question", transcript.OneLine(wo.Question, 2048))
	describeWaitDetail(rec, wo, now)
	if len(run.Status.SetupRefs) > 0 {
		rec.sub("Waits for", strings.Join(run.Status.SetupRefs, ", "))
	}
	// The exact commands, so a person can copy one instead of looking
	// up which command fits which wait.
	for i, c := range answerCommands(run) {
		if i == 0 {
			rec.sub("Answer with", c)
		} else {
			fmt.Fprintf(rec.tw, "  \t%s\n", c)
		}
	}
}

// describeWaitDetail writes what some waits carry: the answers still
// outstanding, the wake time, the budget hit, the dangling write, the
// signal.
func describeWaitDetail(rec record, wo *arv1.WaitingOn, now time.Time) {
	if wo.Outstanding != nil {
		rec.sub("Outstanding", fmt.Sprint(*wo.Outstanding))
	}
	if wo.WakeAt != nil {
		v := stamp(wo.WakeAt)
		if now.After(wo.WakeAt.Time) {
			v += fmt.Sprintf(" (overdue by %s)", wirestatus.Duration(int64(now.Sub(wo.WakeAt.Time)/time.Second)))
		}
		rec.sub("Wake at", v)
	}
	if wo.Budget != nil {
		rec.sub("Budget", fmt.Sprintf("%s limit %s, observed %s", wo.Budget.Kind, wo.Budget.Limit, wo.Observed))
	}
	if wo.Seq != nil {
		rec.sub("Dangling write", fmt.Sprintf("%s (journal #%d): its outcome is unknown", wo.Tool, *wo.Seq))
	}
	rec.sub("Signal", wo.Signal)
}

// describePendingCall writes the call the run has in flight.
func describePendingCall(rec record, pc *arv1.PendingCall) {
	switch pc.Kind {
	case arv1.CallKindModel:
		fmt.Fprintf(rec.tw, "Pending call:\tmodel call #%d (request %s)\n", pc.Seq, pc.RequestHash)
	default:
		key := pc.IdempotencyKey
		if key == "" {
			key = "none"
		}
		fmt.Fprintf(rec.tw, "Pending call:\ttool call #%d %s (effect %s, idempotency key %s) input %s\n",
			pc.Seq, pc.Tool, pc.Effect, key, transcript.OneLine(pc.Input, 200))
	}
}

// describeOutcome writes the run's error and its output.
func describeOutcome(rec record, st *arv1.AgentRunStatus) {
	if st.Error != "" {
		fmt.Fprintf(rec.tw, "Error:\t%s\n", st.Error)
	}
	d := st.FinalOutput
	if d == nil {
		return
	}
	parts := []string{fmt.Sprintf("%s, %d bytes", transcript.OrDash(string(d.Format)), d.Bytes)}
	if d.Truncated {
		parts = append(parts, "truncated at 256 KiB")
	}
	if d.Stage != "" {
		parts = append(parts, "from stage "+d.Stage)
	}
	if d.SubmittedAt != nil {
		parts = append(parts, "submitted "+stamp(d.SubmittedAt))
	}
	if d.ObjectName != "" {
		parts = append(parts, "in ConfigMap "+d.ObjectName)
	}
	fmt.Fprintf(rec.tw, "Output:\t%s\n", strings.Join(parts, "; "))
	if len(d.Artifacts) > 0 {
		fmt.Fprintf(rec.tw, "Artifacts:\t%s\n", strings.Join(d.Artifacts, ", "))
	}
}

// describeConditions writes the run's conditions, a table of their own.
func describeConditions(w io.Writer, conditions []metav1.Condition, now time.Time) error {
	if len(conditions) == 0 {
		return nil
	}
	fmt.Fprintln(w, "Conditions:")
	tw := newTable(w)
	fmt.Fprintln(tw, "  TYPE\tSTATUS\tREASON\tAGE\tMESSAGE")
	for _, c := range conditions {
		age := wirestatus.Empty
		if !c.LastTransitionTime.IsZero() {
			age = wirestatus.Duration(int64(now.Sub(c.LastTransitionTime.Time) / time.Second))
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, age, transcript.OneLine(c.Message, 160))
	}
	return tw.Flush()
}

func costText(u arv1.Usage) string {
	var b strings.Builder
	switch u.CostUSD {
	case "":
		if u.UnpricedCalls > 0 {
			b.WriteString("unknown")
		} else {
			b.WriteString("$0")
		}
	case "unknown":
		b.WriteString("unknown")
	default:
		b.WriteString("$" + u.CostUSD)
	}
	if u.CostUSD == "unknown" || u.UnpricedCalls > 0 {
		priced := u.CostPricedUSD
		if priced == "" {
			priced = "0"
		}
		fmt.Fprintf(&b, " ($%s priced, %d unpriced call(s))", priced, u.UnpricedCalls)
	} else if u.ModelCalls > 0 || u.CostUSD != "" {
		if u.CostIsExact {
			b.WriteString(" (exact: provider-reported)")
		} else {
			b.WriteString(" (estimated from rate cards)")
		}
	}
	return b.String()
}

func budgetsText(b *arv1.Budgets) string {
	var parts []string
	if b.Steps != nil {
		parts = append(parts, fmt.Sprintf("steps %d", *b.Steps))
	}
	if b.Tokens != nil {
		parts = append(parts, fmt.Sprintf("tokens %d", *b.Tokens))
	}
	if b.ToolCalls != nil {
		parts = append(parts, fmt.Sprintf("tool calls %d", *b.ToolCalls))
	}
	if b.CostUSD != "" {
		parts = append(parts, "cost $"+b.CostUSD)
	}
	if b.WallTime != "" {
		parts = append(parts, "working time "+b.WallTime)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func stamp(t *metav1.Time) string { return t.UTC().Format(time.RFC3339) }

// totalTokens is usage.totalTokens, or prompt + completion when the total
// was not written.
func totalTokens(u arv1.Usage) int64 {
	if u.TotalTokens != 0 {
		return u.TotalTokens
	}
	return u.PromptTokens + u.CompletionTokens
}

// Failovers says, from a run's journal, where a stage's model failed and
// another of its list answered instead: "stage plan: anthropic/a failed
// (AuthFailed, HTTP 401), answered by openai/b".
func Failovers(entries []journal.Entry) []string {
	var out []string
	intents := map[int64]*journal.Entry{}
	type failure struct{ ref, text string }
	var failed []failure // since the stage's last answer
	stage := ""
	for i := range entries {
		e := &entries[i]
		switch e.Kind {
		case journal.ModelCallRequested:
			if e.Purpose != journal.PurposeTitle {
				intents[e.Seq] = e
			}
		case journal.ModelCallFailed:
			in, ok := intents[e.Call]
			if !ok || e.Failure == nil {
				continue
			}
			if in.Stage != stage {
				stage, failed = in.Stage, nil
			}
			why := string(e.Failure.Class)
			if e.Failure.Status != 0 {
				why += fmt.Sprintf(", HTTP %d", e.Failure.Status)
			}
			ref := in.Provider + "/" + in.Model
			failed = append(failed, failure{ref, fmt.Sprintf("%s failed (%s)", ref, why)})
		case journal.ModelCallCompleted:
			in, ok := intents[e.Call]
			if !ok {
				continue
			}
			var others []string
			for _, f := range failed {
				if f.ref != in.Provider+"/"+in.Model {
					others = append(others, f.text)
				}
			}
			if in.Stage == stage && len(others) > 0 {
				out = append(out, fmt.Sprintf("stage %s: %s, answered by %s/%s", stage, strings.Join(others, ", "), in.Provider, in.Model))
			}
			stage, failed = in.Stage, nil
		}
	}
	return out
}

// stageLine is one stage of describe's stage list: its state, and for a
// stage the run entered, its visits, turns and the time of ended visits.
// transitionLine is the last stage change: the edge, its condition, and
// why when a runtime signal (error, stuck, dead_end, max_iterations) took it.
func transitionLine(l *arv1.StageTransition) string {
	s := l.From + " -> " + l.To
	if l.Condition != "" {
		s += " (" + l.Condition + ")"
	}
	if l.Reason != "" {
		s += ": " + l.Reason
	}
	return s
}

func stageLine(ss arv1.StageStatus) string {
	if ss.Visits == 0 {
		return string(ss.State)
	}
	out := fmt.Sprintf("%s, %d visit(s), %d turn(s)", ss.State, ss.Visits, ss.Iterations)
	if ss.TimeInStage != nil {
		out += ", " + wirestatus.Duration(int64(ss.TimeInStage.Seconds())) + " in ended visits"
	}
	return out
}
