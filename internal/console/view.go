package console

import (
	"context"
	"sort"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/plugin"
	"github.com/agentrun-dev/agentrun-operator/internal/priority"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
	"github.com/agentrun-dev/agentrun-operator/internal/transcript"
	"github.com/agentrun-dev/agentrun-operator/internal/wirestatus"
)

// may is what the signed-in person may do in one namespace, as the API
// server's SelfSubjectAccessReview says: the page shows no button the
// API server would refuse.
type may struct {
	Answer bool `json:"answer"` // create agentrunanswers
	Steer  bool `json:"steer"`  // patch agentruns
}

// permissionsFor asks the API server what se may do in ns.
func permissionsFor(ctx context.Context, se *session, ns string) may {
	return may{
		Answer: allowed(ctx, se.c, ns, "agentrunanswers", "create"),
		Steer:  allowed(ctx, se.c, ns, "agentruns", "patch"),
	}
}

// allowed: the API server would let the caller do verb on resource in
// ns. A review that fails counts as no.
func allowed(ctx context.Context, c client.Client, ns, resource, verb string) bool {
	r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Group: arv1.GroupVersion.Group, Resource: resource, Verb: verb},
	}}
	if err := c.Create(ctx, r); err != nil {
		return false
	}
	return r.Status.Allowed
}

// listRow is one run of the listing.
type listRow struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Depth     int    `json:"depth"`
	Phase     string `json:"phase"`
	Waiting   string `json:"waiting"`
	Stage     string `json:"stage"`
	Tokens    int64  `json:"tokens"`
	Cost      string `json:"cost"`
	Working   string `json:"working"`
	LastMoved string `json:"lastMoved"`
	Agent     string `json:"agent"`
	Title     string `json:"title,omitempty"`
	Needs     bool   `json:"needsAPerson"`
}

type listing struct {
	Runs    []listRow `json:"runs"`
	Footer  string    `json:"footer"`
	Needing int       `json:"needing"`
}

// listView orders runs as ps does (plugin.OrderTrees), places in line by
// the priority classes in force.
func listView(runs map[string]arv1.AgentRun, now time.Time, classes priority.Classes) listing {
	items := make([]arv1.AgentRun, 0, len(runs))
	for _, r := range runs {
		items = append(items, r)
	}
	sort.Slice(items, func(i, j int) bool {
		return items[i].Namespace+"/"+items[i].Name < items[j].Namespace+"/"+items[j].Name
	})
	ordered, needing := plugin.OrderTrees(items, now, nil, classes)
	l := listing{Runs: make([]listRow, 0, len(ordered)), Needing: needing, Footer: plugin.Footer(needing)}
	for _, t := range ordered {
		r := t.Row
		l.Runs = append(l.Runs, listRow{Namespace: r.Namespace, Name: r.Name, Depth: t.Depth, Phase: r.Phase, Waiting: r.Waiting,
			Stage: r.Stage, Tokens: r.Tokens, Cost: r.Cost, Working: r.Working, LastMoved: r.LastMoved, Agent: t.Run.Spec.Agent,
			Title: t.Run.Status.Title, Needs: r.NeedsAPerson})
	}
	return l
}

// stageView is one stage on the timeline.
type stageView struct {
	Name       string `json:"name"`
	State      string `json:"state"`
	Visits     int32  `json:"visits"`
	Iterations int32  `json:"iterations"`
	Entered    string `json:"entered,omitempty"`
	// Time is the time spent in ended visits, humanised.
	Time    string `json:"time,omitempty"`
	Current bool   `json:"current"`
}

// waitView is what the run waits on, and how it is answered.
type waitView struct {
	Reason       string `json:"reason"`
	Summary      string `json:"summary"`
	NeedsAPerson bool   `json:"needsAPerson"`
	Since        string `json:"since,omitempty"`
	Question     string `json:"question,omitempty"`
	Point        string `json:"point,omitempty"`
	Remedy       string `json:"remedy,omitempty"`
	Tool         string `json:"tool,omitempty"`
	Signal       string `json:"signal,omitempty"`
	// Command answers it: approve (with deny), answer or resolve; "" when
	// no answer clears it (ClearHint says what does).
	Command     string `json:"command"`
	TakesChoice bool   `json:"takesChoice"`
	Checkpoint  bool   `json:"checkpoint"`
	ClearHint   string `json:"clearHint,omitempty"`
}

type usageView struct {
	Tokens     int64  `json:"tokens"`
	Prompt     int64  `json:"prompt"`
	Completion int64  `json:"completion"`
	ModelCalls int64  `json:"modelCalls"`
	ToolCalls  int64  `json:"toolCalls"`
	Cost       string `json:"cost"`
}

type regionView struct {
	Name    string `json:"name"`
	Bytes   int    `json:"bytes"`
	By      string `json:"by"`
	Seq     int64  `json:"seq"`
	Content string `json:"content"`
}

// runPage is everything the run page shows.
type runPage struct {
	Namespace       string            `json:"namespace"`
	Name            string            `json:"name"`
	Agent           string            `json:"agent"`
	Task            string            `json:"task"`
	Title           string            `json:"title,omitempty"`
	Phase           string            `json:"phase"`
	Error           string            `json:"error,omitempty"`
	Paused          bool              `json:"paused"`
	Cancelled       bool              `json:"cancelled"`
	Terminal        bool              `json:"terminal"`
	Stages          []stageView       `json:"stages"`
	Waiting         *waitView         `json:"waiting,omitempty"`
	Usage           usageView         `json:"usage"`
	Transcript      []transcript.Line `json:"transcript"`
	TranscriptError string            `json:"transcriptError,omitempty"`
	Regions         []regionView      `json:"regions"`
	Output          *string           `json:"output,omitempty"`
	OutputNote      string            `json:"outputNote,omitempty"`
	May             may               `json:"may"`
}

// runView reads what the run page shows of run: its status, and its
// journal (transcript, regions) and output as the plugin reads them.
func runView(ctx context.Context, se *session, run *arv1.AgentRun, now time.Time, can may) runPage {
	st := &run.Status
	p := runPage{Namespace: run.Namespace, Name: run.Name, Agent: run.Spec.Agent, Task: run.Spec.Task, Title: st.Title,
		Phase: wirestatus.NewPsRow(run, now).Phase, Error: st.Error, Paused: run.Spec.Paused, Cancelled: run.Spec.Cancel,
		Terminal: st.Phase.IsTerminal(), May: can,
		Usage: usageView{Tokens: wirestatus.NewPsRow(run, now).Tokens, Prompt: st.Usage.PromptTokens, Completion: st.Usage.CompletionTokens,
			ModelCalls: st.Usage.ModelCalls, ToolCalls: st.Usage.ToolCalls, Cost: plugin.CostText(st.Usage)},
		Stages: stagesOf(st), Waiting: waitOf(st.WaitingOn), Regions: []regionView{}}
	if st.JournalStore == arv1.JournalDatabase {
		databaseJournal(ctx, se, run, &p)
	} else {
		configMapJournal(ctx, se.c, run, &p)
	}
	if st.FinalOutput != nil && st.FinalOutput.Truncated {
		p.OutputNote = "the stored output was cut at the 256 KiB cap"
	}
	return p
}

// configMapJournal reads the transcript, regions and output of a run
// whose journal is in ConfigMaps.
func configMapJournal(ctx context.Context, c client.Client, run *arv1.AgentRun, p *runPage) {
	entries, unreadable, err := configmaps.ReadLenient(ctx, c, run.Namespace, run.UID)
	switch {
	case err != nil:
		p.TranscriptError = err.Error()
	case len(unreadable) > 0:
		p.TranscriptError = "some journal entries could not be read"
	}
	p.Transcript = transcript.Lines(entries)
	p.Regions = regionsOf(journal.Regions(entries))
	if d := run.Status.FinalOutput; d != nil && d.ObjectName != "" {
		text, err := plugin.ReadOutput(ctx, c, run)
		if err != nil {
			p.OutputNote = err.Error()
		} else {
			p.Output = &text
		}
	}
}

// databaseJournal reads the transcript and output of a run whose journal
// is in the database, through the history API as the signed-in person
// (regions are not served there).
func databaseJournal(ctx context.Context, se *session, run *arv1.AgentRun, p *runPage) {
	lines, err := plugin.JournalTranscript(ctx, se.cfg, run.Namespace, run.Name, run.UID)
	if err != nil {
		p.TranscriptError = err.Error()
	}
	p.Transcript = append([]transcript.Line{}, lines...)
	if run.Status.FinalOutput == nil {
		return
	}
	text, ok, err := plugin.JournalOutput(ctx, se.cfg, run.Namespace, run.Name, run.UID)
	switch {
	case err != nil:
		p.OutputNote = err.Error()
	case ok:
		p.Output = &text
	}
}

func stagesOf(st *arv1.AgentRunStatus) []stageView {
	out := make([]stageView, 0, len(st.Stages))
	for _, ss := range st.Stages {
		v := stageView{Name: ss.Name, State: string(ss.State), Visits: ss.Visits, Iterations: ss.Iterations,
			Current: ss.Name == st.CurrentStage}
		if v.State == "" {
			v.State = string(arv1.StagePending)
		}
		if ss.Entered != nil {
			v.Entered = ss.Entered.UTC().Format(time.RFC3339)
		}
		if ss.TimeInStage != nil {
			v.Time = wirestatus.Duration(int64(ss.TimeInStage.Seconds()))
		}
		out = append(out, v)
	}
	return out
}

func waitOf(w *arv1.WaitingOn) *waitView {
	if w == nil {
		return nil
	}
	v := &waitView{Reason: string(w.Reason), Summary: w.Summary, NeedsAPerson: w.NeedsAPerson || w.Reason.NeedsAPerson(),
		Question: w.Question, Point: w.Point, Remedy: w.Remedy, Tool: w.Tool, Signal: w.Signal,
		Command: plugin.AnswerCommand(w), TakesChoice: plugin.TakesChoice(w), Checkpoint: w.Reason == arv1.WaitInteractionPoint}
	if v.Summary == "" {
		v.Summary = v.Reason
	}
	if w.Since != nil {
		v.Since = w.Since.UTC().Format(time.RFC3339)
	}
	if v.Command == "" || w.Point == "" {
		v.Command = ""
		v.ClearHint = plugin.ClearHint(w)
	}
	return v
}

func regionsOf(held map[string]journal.Region) []regionView {
	out := make([]regionView, 0, len(held))
	for n, r := range held {
		out = append(out, regionView{Name: n, Bytes: len(r.Content), By: r.By, Seq: r.Seq, Content: r.Content})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
