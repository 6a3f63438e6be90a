package journal

import (
	"strings"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
)

// recovering: work fails over to recover on an error, and to reassess when
// stuck by any of four thresholds.
const recovering = `[agent]
name = "recovering"

[stages.work]
max_iterations = 10
[stages.work.transitions.done]
hint = "finished"
[stages.work.transitions.recover]
condition = "error"
[stages.work.transitions.reassess]
condition = "stuck"
stuck_after_iterations = 3
stuck_after_tool_calls = 5
stuck_after_minutes = 10
stuck_after_same_file_edits = 2

[stages.done]
allow_complete = true
[stages.recover]
allow_complete = true
[stages.reassess]
allow_complete = true
`

// revisiting: plan and review loop; plan may be re-entered once; review
// strands into answer (dead_end) once plan is spent, unless fix is open.
const revisiting = `[agent]
name = "revisiting"

[stages.plan]
max_revisits = 1
[stages.plan.transitions.review]
hint = "plan ready"

[stages.review]
[stages.review.transitions.plan]
hint = "rework the plan"
[stages.review.transitions.answer]
condition = "dead_end"
[stages.review.transitions.oops]
condition = "error"

[stages.answer]
allow_complete = true
[stages.oops]
allow_complete = true
`

func withAt(e Entry, t time.Time) Entry { e.At = t; return e }

func toolDone(seq int64, result string, isError bool) Entry {
	return Entry{Seq: seq, Kind: ToolCallCompleted, At: at(seq), Result: result, IsError: isError}
}

func writeCall(path string) Response {
	return Response{Calls: []ToolCall{{Name: "write_file", Arguments: `{"path": "` + path + `"}`}}, ToolCalls: 1}
}

// TestTransitionRules folds one journal per rule and checks where the run
// stands and what the last transition records.
func TestTransitionRules(t *testing.T) {
	rec := mustParse(t, recovering)
	rev := mustParse(t, revisiting)
	cases := []struct {
		name    string
		bp      *blueprint.Blueprint
		entries []Entry
		stage   string
		outcome Outcome
		// cond and reason are the last transition's (reason as a substring).
		cond, reason string
	}{
		{
			name:    "a fatal model failure takes the error edge and says why",
			bp:      rec,
			entries: []Entry{req(0, "work", 0), failed(1, 0, FailFatal, 400, "", "malformed request")},
			stage:   "recover", cond: "error", reason: "model call failed: malformed request",
		},
		{
			name:    "a setup failure still parks: no edge is taken",
			bp:      rec,
			entries: []Entry{req(0, "work", 0), failed(1, 0, FailAuth, 401, "v1", "bad key")},
			stage:   "work",
		},
		{
			name:    "a refused child takes the error edge",
			bp:      rec,
			entries: []Entry{{Seq: 0, Kind: SpawnRefused, At: at(0), Message: "depth limit 4 reached"}},
			stage:   "recover", cond: "error", reason: "depth limit 4 reached",
		},
		{
			name: "stuck after iterations",
			bp:   rec,
			entries: []Entry{
				req(0, "work", 0), done(1, 0, Response{Text: "a"}),
				req(2, "work", 1), done(3, 2, Response{Text: "b"}),
				req(4, "work", 2), done(5, 4, Response{Text: "c"}),
			},
			stage: "reassess", cond: "stuck", reason: "3 model turns in this visit (stuck_after_iterations = 3)",
		},
		{
			name:    "not stuck before the threshold",
			bp:      rec,
			entries: []Entry{req(0, "work", 0), done(1, 0, Response{Text: "a"}), req(2, "work", 1), done(3, 2, Response{Text: "b"})},
			stage:   "work",
		},
		{
			name:    "stuck after tool calls",
			bp:      rec,
			entries: []Entry{req(0, "work", 0), done(1, 0, Response{ToolCalls: 5})},
			stage:   "reassess", cond: "stuck", reason: "stuck_after_tool_calls = 5",
		},
		{
			name:    "stuck after minutes, by the journal's own times",
			bp:      rec,
			entries: []Entry{req(0, "work", 0), withAt(done(1, 0, Response{Text: "slow"}), t0.Add(11*time.Minute))},
			stage:   "reassess", cond: "stuck", reason: "11 minutes in this visit (stuck_after_minutes = 10)",
		},
		{
			name: "stuck after same-file edits",
			bp:   rec,
			entries: []Entry{
				req(0, "work", 0), done(1, 0, writeCall("a.go")), toolDone(2, "ok", false),
				req(3, "work", 1), done(4, 3, writeCall("a.go")), toolDone(5, "ok", false),
			},
			stage: "reassess", cond: "stuck", reason: "2 edits of a.go in this visit",
		},
		{
			name: "failed edits and other paths do not count",
			bp:   rec,
			entries: []Entry{
				req(0, "work", 0), done(1, 0, writeCall("a.go")), toolDone(2, "denied", true),
				req(3, "work", 1), done(4, 3, writeCall("b.go")), toolDone(5, "ok", false),
			},
			stage: "work",
		},
		{
			name: "the model's own choice beats a stuck threshold",
			bp:   rec,
			entries: []Entry{
				req(0, "work", 0), done(1, 0, Response{Text: "a"}),
				req(2, "work", 1), done(3, 2, Response{Text: "b"}),
				req(4, "work", 2), done(5, 4, Response{Next: "done"}),
			},
			stage: "done", cond: "llm_choice",
		},
		{
			name: "a revisit within max_revisits",
			bp:   rev,
			entries: []Entry{
				req(0, "plan", 0), done(1, 0, Response{Next: "review"}),
				req(2, "review", 0), done(3, 2, Response{Next: "plan"}),
			},
			stage: "plan", cond: "llm_choice",
		},
		{
			name: "dead_end fires when every normal target is out of revisits",
			bp:   rev,
			entries: []Entry{
				req(0, "plan", 0), done(1, 0, Response{Next: "review"}),
				req(2, "review", 0), done(3, 2, Response{Next: "plan"}),
				req(4, "plan", 0), done(5, 4, Response{Next: "review"}),
				req(6, "review", 0), done(7, 6, Response{Next: "plan"}),
			},
			stage: "answer", cond: "dead_end", reason: `stage "review" finished, and every stage it may go on to is out of max_revisits`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := Fold(tc.bp, tc.entries)
			if st.Stage != tc.stage || st.Outcome != tc.outcome {
				t.Fatalf("stage %q outcome %q (%s), want %q %q", st.Stage, st.Outcome, st.Message, tc.stage, tc.outcome)
			}
			last := st.LastTransition()
			if tc.cond == "" {
				if last != nil {
					t.Errorf("last transition %+v, want none", *last)
				}
				return
			}
			if last == nil || last.To != tc.stage || last.Condition != tc.cond || !strings.Contains(last.Reason, tc.reason) {
				t.Fatalf("last transition %+v, want to %q by %q with reason %q", last, tc.stage, tc.cond, tc.reason)
			}
			if tc.reason != "" && st.Note() != last.Reason {
				t.Errorf("note %q, want the reason %q carried into the stage", st.Note(), last.Reason)
			}
		})
	}
}

// TestStrandedWithoutDeadEnd: the error edge takes a stranded stage when
// there is no dead_end edge; with neither, the run ends in Error.
func TestStrandedWithoutDeadEnd(t *testing.T) {
	journal := []Entry{
		req(0, "plan", 0), done(1, 0, Response{Next: "review"}),
		req(2, "review", 0), done(3, 2, Response{Next: "plan"}),
		req(4, "plan", 0), done(5, 4, Response{Next: "review"}),
		req(6, "review", 0), done(7, 6, Response{Next: "plan"}),
	}
	noDeadEnd := strings.Replace(revisiting, "[stages.review.transitions.answer]\ncondition = \"dead_end\"\n", "", 1)
	bp := mustParse(t, noDeadEnd)
	st := Fold(bp, journal)
	if st.Stage != "oops" || st.LastTransition().Condition != blueprint.CondError {
		t.Fatalf("stage %q last %+v, want the error edge to oops", st.Stage, st.LastTransition())
	}
	bp = mustParse(t, strings.Replace(noDeadEnd, "[stages.review.transitions.oops]\ncondition = \"error\"\n", "", 1))
	st = Fold(bp, journal)
	if st.Outcome != OutcomeError || !strings.Contains(st.Message, "out of max_revisits") {
		t.Fatalf("outcome %q message %q, want Error naming max_revisits", st.Outcome, st.Message)
	}
}

// TestRevisitRefusedWhileAnotherTargetIsOpen: choosing a spent stage while
// another normal target has revisits left is refused and told to the
// model, which then chooses the open one.
func TestRevisitRefusedWhileAnotherTargetIsOpen(t *testing.T) {
	bp := mustParse(t, strings.Replace(revisiting, "[stages.answer]", "[stages.review.transitions.fix]\nhint = \"fix it\"\n[stages.fix]\nallow_complete = true\n[stages.answer]", 1))
	st := Fold(bp, []Entry{
		req(0, "plan", 0), done(1, 0, Response{Next: "review"}),
		req(2, "review", 0), done(3, 2, Response{Next: "plan"}),
		req(4, "plan", 0), done(5, 4, Response{Next: "review"}),
		req(6, "review", 0), done(7, 6, Response{Next: "plan"}),
	})
	if st.Stage != "review" || st.Outcome != OutcomeNone || len(st.Turns) != 1 || !strings.Contains(st.Turns[0].Refused, "choose one of: fix") {
		t.Fatalf("stage %q outcome %q turns %+v, want review with the choice refused", st.Stage, st.Outcome, st.Turns)
	}
	if got := st.Choices(bp, bp.Stages[1]); len(got) != 1 || got[0].Target != "fix" {
		t.Errorf("choices %+v, want only fix", got)
	}
	st.Apply(bp, req(8, "review", 1))
	st.Apply(bp, done(9, 8, Response{Next: "fix"}))
	if st.Stage != "fix" {
		t.Errorf("stage %q after choosing fix", st.Stage)
	}
}

// TestRequireOutput: a stage with require_output refuses to complete (or
// transition) before output was submitted in it, telling the model.
func TestRequireOutput(t *testing.T) {
	bp := mustParse(t, `[agent]
name = "strict"
[stages.write]
require_output = true
allow_complete = true
max_iterations = 2
[stages.write.transitions.next]
hint = "on"
[stages.next]
`)
	st := Fold(bp, []Entry{req(0, "write", 0), done(1, 0, Response{Complete: true})})
	if st.Outcome != OutcomeNone || len(st.Turns) != 1 || !strings.Contains(st.Turns[0].Refused, "requires output") {
		t.Fatalf("outcome %q turns %+v, want the completion refused", st.Outcome, st.Turns)
	}
	ok := st
	ok.Turns = append([]Turn(nil), st.Turns...)
	ok.Apply(bp, req(2, "write", 1))
	ok.Apply(bp, done(3, 2, Response{Next: "next", Output: "the text"}))
	if ok.Stage != "next" || ok.Output == nil {
		t.Errorf("stage %q output %+v, want next with the output", ok.Stage, ok.Output)
	}
	st.Apply(bp, req(2, "write", 1))
	st.Apply(bp, done(3, 2, Response{Next: "next"}))
	if st.Outcome != OutcomeError || !strings.Contains(st.Message, "could not leave") || !st.MaxIterationsHit {
		t.Errorf("outcome %q message %q, want Error at max_iterations", st.Outcome, st.Message)
	}
}

// TestTransforms: what the next stage receives over each transform.
func TestTransforms(t *testing.T) {
	manifest := func(transform string) string {
		return `[agent]
name = "carry"
[stages.a]
[stages.a.transitions.b]
hint = "on"
` + transform + `
[stages.b]
allow_complete = true
`
	}
	journal := []Entry{req(0, "a", 0), done(1, 0, Response{Text: "looked"}), req(2, "a", 1), done(3, 2, Response{Text: "decided", Next: "b"})}
	for _, tc := range []struct {
		name, transform string
		carried         []string
		compact         bool
	}{
		{name: "direct by default", carried: []string{"looked", "decided"}},
		{name: "clear", transform: `transform = "clear"`},
		{name: "compact", transform: `transform = "compact"`, compact: true},
		{name: "summarize", transform: `transform = "summarize"`, compact: true},
		{name: "custom clearing the conversation", transform: "transform = \"custom\"\n[stages.a.transitions.b.transform_config]\nclear = [\"conversation\"]"},
		{name: "custom carrying it", transform: "transform = \"custom\"\n[stages.a.transitions.b.transform_config]\ncarry = [\"conversation\"]\nclear = [\"scratch\"]", carried: []string{"looked", "decided"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := Fold(mustParse(t, manifest(tc.transform)), journal)
			var got []string
			for _, turn := range st.Carried() {
				got = append(got, turn.Text)
			}
			if strings.Join(got, "|") != strings.Join(tc.carried, "|") {
				t.Errorf("carried %q, want %q", got, tc.carried)
			}
			if job := st.Compacting(); (job != nil) != tc.compact || (job != nil && len(job.Turns) != 2) {
				t.Errorf("compacting %+v, want %v with both turns", job, tc.compact)
			}
		})
	}
}

// TestCompaction: the summary replaces the carried turns; a fatal failure
// of the summarization carries them as they were.
func TestCompaction(t *testing.T) {
	bp := mustParse(t, "[agent]\nname = \"c\"\n[stages.a]\n[stages.a.transitions.b]\nhint = \"on\"\ntransform = \"compact\"\n[stages.b]\nallow_complete = true\n")
	base := []Entry{req(0, "a", 0), done(1, 0, Response{Text: "long work", Next: "b"})}
	compactReq := req(2, "b", 0)
	compactReq.Purpose = PurposeCompact

	st := Fold(bp, append(append([]Entry(nil), base...), compactReq, done(3, 2, Response{Text: "short"})))
	if st.Compacting() != nil || len(st.Carried()) != 1 || !strings.Contains(st.Carried()[0].Text, "short") || st.Iteration != 0 || st.ModelCalls != 1 {
		t.Fatalf("compacting %+v carried %+v iteration %d calls %d", st.Compacting(), st.Carried(), st.Iteration, st.ModelCalls)
	}
	if st.Usage.Prompt != 200 {
		t.Errorf("prompt tokens %d: the summarization is billed", st.Usage.Prompt)
	}

	st = Fold(bp, append(append([]Entry(nil), base...), compactReq, failed(3, 2, FailFatal, 400, "", "too long")))
	if st.Compacting() != nil || st.Outcome != OutcomeNone || len(st.Carried()) != 1 || st.Carried()[0].Text != "long work" {
		t.Fatalf("after a failed summarization: compacting %+v outcome %q carried %+v", st.Compacting(), st.Outcome, st.Carried())
	}
}

// TestMaxIterationsNote: the stage after an iteration cap is told the work
// was cut off.
func TestMaxIterationsNote(t *testing.T) {
	st := Fold(mustParse(t, looping), []Entry{req(0, "work", 0), done(1, 0, Response{}), req(2, "work", 1), done(3, 2, Response{})})
	if st.Stage != "wrap" || !strings.Contains(st.Note(), "cut off") || st.LastTransition().Condition != blueprint.CondMaxIterations {
		t.Fatalf("stage %q note %q last %+v", st.Stage, st.Note(), st.LastTransition())
	}
}

// TestMaxIterationsNoteAfterRefusals: a stage cut off while its output
// kept being refused tells the next stage the same.
func TestMaxIterationsNoteAfterRefusals(t *testing.T) {
	st := Fold(mustParse(t, looping), []Entry{
		req(0, "work", 0), done(1, 0, Response{OutputRejected: "not JSON"}),
		req(2, "work", 1), done(3, 2, Response{OutputRejected: "not JSON"}),
	})
	if st.Stage != "wrap" || !strings.Contains(st.Note(), "cut off") || !st.MaxIterationsHit {
		t.Fatalf("stage %q note %q maxIterationsHit %v", st.Stage, st.Note(), st.MaxIterationsHit)
	}
}
