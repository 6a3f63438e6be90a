package journal

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
)

// threeStage: plan -> build (llm_choice), build -> review (always), review
// may complete.
const threeStage = `[agent]
name = "three"

[stages.plan]
system_prompt = "Plan the change."

[stages.plan.transitions.build]
condition = "llm_choice"

[stages.build]
system_prompt = "Build it."

[stages.build.transitions.review]
condition = "always"

[stages.review]
system_prompt = "Review it."
allow_complete = true
`

// gated: draft has two interaction points before it moves to publish (by
// "always"); publish has one point before the run completes.
const gated = `[agent]
name = "gated"

[stages.draft]
system_prompt = "Draft."

[stages.draft.transitions.publish]
condition = "always"

[[stages.draft.interaction_points]]
name = "approve-draft"
prompt = "Is the draft good?"

[[stages.draft.interaction_points]]
name = "confirm-publish"
prompt = "Publish now?"
unattended = "ask"

[stages.publish]
system_prompt = "Publish."
allow_complete = true

[[stages.publish.interaction_points]]
name = "final-ok"
prompt = "Done?"
`

// looping: work runs at most twice, then max_iterations takes it to wrap.
const looping = `[agent]
name = "looping"

[stages.work]
system_prompt = "Work."
max_iterations = 2

[stages.work.transitions.wrap]
condition = "max_iterations"

[stages.wrap]
system_prompt = "Wrap up."
allow_complete = true
`

// stuck: work runs at most twice and has no max_iterations transition.
const stuck = `[agent]
name = "stuck"

[stages.work]
system_prompt = "Work."
max_iterations = 2

[stages.work.transitions.wrap]
condition = "llm_choice"

[stages.wrap]
system_prompt = "Wrap up."
allow_complete = true
`

// prefixBP drives the every-prefix test: plan iterates, passes a checkpoint
// and moves to build, which iterates and completes.
const prefixBP = `[agent]
name = "prefix"

[stages.plan]
system_prompt = "Plan."

[stages.plan.transitions.build]
condition = "llm_choice"

[[stages.plan.interaction_points]]
name = "approve-plan"
prompt = "Proceed with this plan?"

[stages.build]
system_prompt = "Build."
allow_complete = true

[stages.build.transitions.plan]
condition = "llm_choice"
`

func mustParse(t *testing.T, manifest string) *blueprint.Blueprint {
	t.Helper()
	bp, err := blueprint.Parse(map[string]string{"agent.toml": manifest})
	if err != nil {
		t.Fatalf("parsing test blueprint: %v", err)
	}
	return bp
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func at(seq int64) time.Time { return t0.Add(time.Duration(seq) * time.Second) }

func i64(v int64) *int64 { return &v }

func req(seq int64, stage string, iter int) Entry {
	return Entry{
		Seq: seq, Kind: ModelCallRequested, At: at(seq), Stage: stage, Iteration: iter,
		Provider: "anthropic", Model: "claude-x", RequestHash: fmt.Sprintf("hash-%d", seq),
	}
}

// done is a completion of call with 100 prompt / 10 completion tokens,
// priced exactly at 1000 nano-USD unless opts change it.
func done(seq, call int64, r Response, opts ...func(*Entry)) Entry {
	e := Entry{
		Seq: seq, Kind: ModelCallCompleted, At: at(seq), Call: call,
		Provider: "anthropic", Model: "claude-x",
		Response: &r, Usage: &Usage{Prompt: 100, Completion: 10},
		CostNanoUSD: i64(1000), CostExact: true,
	}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func usage(u Usage) func(*Entry) { return func(e *Entry) { e.Usage = &u } }

func cost(c *int64, exact bool) func(*Entry) {
	return func(e *Entry) { e.CostNanoUSD, e.CostExact = c, exact }
}

func model(provider, m string) func(*Entry) {
	return func(e *Entry) { e.Provider, e.Model = provider, m }
}

func failed(seq, call int64, class FailureClass, status int, version, msg string) Entry {
	return Entry{
		Seq: seq, Kind: ModelCallFailed, At: at(seq), Call: call,
		Failure: &Failure{Class: class, Status: status, Message: msg, SecretVersion: version},
	}
}

func answer(seq int64, point string, approved, auto bool) Entry {
	return Entry{Seq: seq, Kind: InteractionAnswered, At: at(seq), Point: point, Approved: approved, Auto: auto, By: "alice"}
}

func cancelled(seq int64) Entry { return Entry{Seq: seq, Kind: RunCancelled, At: at(seq)} }

func ptrEntry(e Entry) *Entry { return &e }

// diffState reports every field of State that differs, following pointers,
// so a failing case says exactly what is wrong.
func diffState(got, want State) []string {
	var out []string
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := 0; i < gv.NumField(); i++ {
		f := gv.Type().Field(i)
		if !f.IsExported() {
			continue // bookkeeping, seen through the exported fields and methods
		}
		if (f.Name == "Stages" && want.Stages == nil) || (f.Name == "Visits" && want.Visits == nil) {
			continue // TestFoldStages and TestFoldVisits check them
		}
		g, w := gv.Field(i).Interface(), wv.Field(i).Interface()
		if !reflect.DeepEqual(g, w) {
			out = append(out, fmt.Sprintf("%s: got %s, want %s", f.Name, show(g), show(w)))
		}
	}
	return out
}

func show(v any) string {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return "nil"
		}
		return fmt.Sprintf("&%+v", rv.Elem().Interface())
	}
	return fmt.Sprintf("%+v", v)
}

func assertState(t *testing.T, got, want State) {
	t.Helper()
	for _, d := range diffState(got, want) {
		t.Error(d)
	}
}

func TestFoldFullState(t *testing.T) {
	three := mustParse(t, threeStage)
	gate := mustParse(t, gated)
	loop := mustParse(t, looping)

	draftPoints := gate.Stages[0].InteractionPoints
	publishPoints := gate.Stages[1].InteractionPoints
	if len(draftPoints) != 2 || draftPoints[0].Name != "approve-draft" || draftPoints[1].Name != "confirm-publish" || len(publishPoints) != 1 {
		t.Fatalf("test blueprint parsed unexpectedly: %+v / %+v", draftPoints, publishPoints)
	}

	cases := []struct {
		name    string
		bp      *blueprint.Blueprint
		entries []Entry
		want    State
	}{
		{
			name: "empty journal starts in the entry stage",
			bp:   three,
			want: State{Stage: "plan", StageIndex: 0},
		},
		{
			name:    "intent only is pending",
			bp:      three,
			entries: []Entry{req(0, "plan", 0)},
			want:    State{NextSeq: 1, Stage: "plan", Pending: ptrEntry(req(0, "plan", 0))},
		},
		{
			name: "model iterates in plan without choosing",
			bp:   three,
			entries: []Entry{
				req(0, "plan", 0),
				done(1, 0, Response{Text: "thinking"}),
				req(2, "plan", 1),
			},
			want: State{
				Turns:   []Turn{{Text: "thinking"}},
				NextSeq: 3, Stage: "plan", Iteration: 1, Moves: 1,
				Usage: Usage{Prompt: 100, Completion: 10}, ModelCalls: 1, PricedNanoUSD: 1000,
				EntryModel: "anthropic/claude-x", Pending: ptrEntry(req(2, "plan", 1)),
			},
		},
		{
			name: "plan -> build by llm_choice, build -> review by always, review completes",
			bp:   three,
			entries: []Entry{
				req(0, "plan", 0),
				done(1, 0, Response{Text: "plan ok", Next: "build"}, usage(Usage{Prompt: 10, Completion: 5, Cached: 2, CacheWrite: 1}), cost(i64(100), true)),
				req(2, "build", 0),
				done(3, 2, Response{Text: "built"}, usage(Usage{Prompt: 20, Completion: 10}), cost(i64(200), false), model("openai", "gpt-y")),
				req(4, "review", 0),
				done(5, 4, Response{Text: "lgtm", Complete: true, Output: "final report"}, usage(Usage{Prompt: 1, Completion: 1}), cost(nil, false)),
			},
			want: State{
				Turns:   []Turn{{Text: "lgtm"}},
				NextSeq: 6, Stage: "review", StageIndex: 2, Iteration: 1,
				// plan iteration + build entry, build iteration + review
				// entry, review iteration.
				Moves:         5,
				Usage:         Usage{Prompt: 31, Completion: 16, Cached: 2, CacheWrite: 1},
				ModelCalls:    3,
				PricedNanoUSD: 300,
				UnpricedCalls: 1,
				CostInexact:   true,
				EntryModel:    "anthropic/claude-x",
				Output:        &SubmittedOutput{Text: "final report", Stage: "review", Seq: 5},
				Outcome:       OutcomeComplete,
			},
		},
		{
			name: "output submitted mid-stage is kept and a later output replaces it",
			bp:   three,
			entries: []Entry{
				req(0, "plan", 0),
				done(1, 0, Response{Output: "draft 1"}),
				req(2, "plan", 1),
				done(3, 2, Response{Output: "draft 2", Next: "build"}),
			},
			want: State{
				NextSeq: 4, Stage: "build", StageIndex: 1, Iteration: 0, Moves: 3,
				Usage: Usage{Prompt: 200, Completion: 20}, ModelCalls: 2, PricedNanoUSD: 2000,
				EntryModel: "anthropic/claude-x",
				Output:     &SubmittedOutput{Text: "draft 2", Stage: "plan", Seq: 3},
			},
		},
		{
			name: "auth failure parks with the failure recorded, pending cleared",
			bp:   three,
			entries: []Entry{
				req(0, "plan", 0),
				failed(1, 0, FailAuth, 401, "v1", "invalid x-api-key"),
			},
			want: State{
				NextSeq: 2, Stage: "plan",
				Failure:        &Failure{Class: FailAuth, Status: 401, Message: "invalid x-api-key", SecretVersion: "v1"},
				FailureAt:      at(1),
				FailedAttempts: 1,
				Failed:         failedAt(FailAuth, 401, "invalid x-api-key", "v1", 1),
			},
		},
		{
			name: "two failures count, a completion clears them",
			bp:   three,
			entries: []Entry{
				req(0, "plan", 0),
				failed(1, 0, FailAuth, 401, "v1", "bad key"),
				req(2, "plan", 0),
				failed(3, 2, FailCredits, 402, "v2", "no credits"),
				req(4, "plan", 0),
			},
			want: State{
				NextSeq: 5, Stage: "plan",
				Pending:        ptrEntry(req(4, "plan", 0)),
				Failure:        &Failure{Class: FailCredits, Status: 402, Message: "no credits", SecretVersion: "v2"},
				FailureAt:      at(3),
				FailedAttempts: 2,
				Failed:         failedAt(FailCredits, 402, "no credits", "v2", 3),
			},
		},
		{
			name: "completion after failures resets Failure and FailedAttempts, not the run's memory of the failed model",
			bp:   three,
			entries: []Entry{
				req(0, "plan", 0),
				failed(1, 0, FailAuth, 401, "v1", "bad key"),
				req(2, "plan", 0),
				done(3, 2, Response{Text: "ok"}),
			},
			want: State{
				Turns:   []Turn{{Text: "ok"}},
				NextSeq: 4, Stage: "plan", Iteration: 1, Moves: 1,
				Usage: Usage{Prompt: 100, Completion: 10}, ModelCalls: 1, PricedNanoUSD: 1000,
				EntryModel: "anthropic/claude-x",
				// FailureAt is cleared with Failure; Failed is the run's.
				Failed: failedAt(FailAuth, 401, "bad key", "v1", 1),
			},
		},
		{
			name: "fatal failure ends the run in Error",
			bp:   three,
			entries: []Entry{
				req(0, "plan", 0),
				failed(1, 0, FailFatal, 400, "", "malformed request"),
			},
			want: State{
				NextSeq: 2, Stage: "plan",
				Failure:        &Failure{Class: FailFatal, Status: 400, Message: "malformed request"},
				FailureAt:      at(1),
				FailedAttempts: 1,
				Failed:         failedAt(FailFatal, 400, "malformed request", "", 1),
				Outcome:        OutcomeError,
				Message:        "model call failed: malformed request",
			},
		},
		{
			name: "cancel with a call pending",
			bp:   three,
			entries: []Entry{
				req(0, "plan", 0),
				cancelled(1),
			},
			want: State{NextSeq: 2, Stage: "plan", Outcome: OutcomeCancelled, Message: "cancelled"},
		},
		{
			name: "stage boundary waits on the first interaction point",
			bp:   gate,
			entries: []Entry{
				req(0, "draft", 0),
				done(1, 0, Response{Text: "draft"}),
			},
			want: State{
				Turns:   []Turn{{Text: "draft"}},
				NextSeq: 2, Stage: "draft", Iteration: 1, Moves: 1,
				Usage: Usage{Prompt: 100, Completion: 10}, ModelCalls: 1, PricedNanoUSD: 1000,
				EntryModel:  "anthropic/claude-x",
				Interaction: &PendingInteraction{Stage: "draft", Point: draftPoints[0], Target: "publish"},
			},
		},
		{
			name: "first point approved by a person: the second point is pending",
			bp:   gate,
			entries: []Entry{
				req(0, "draft", 0),
				done(1, 0, Response{Text: "draft"}),
				answer(2, "approve-draft", true, false),
			},
			want: State{
				Turns:   []Turn{{Text: "draft"}},
				NextSeq: 3, Stage: "draft", Iteration: 1, Moves: 1,
				Usage: Usage{Prompt: 100, Completion: 10}, ModelCalls: 1, PricedNanoUSD: 1000,
				EntryModel:  "anthropic/claude-x",
				Interaction: &PendingInteraction{Stage: "draft", Point: draftPoints[1], Target: "publish", answered: 1},
			},
		},
		{
			name: "second point approved by policy: gates forced, run moves on",
			bp:   gate,
			entries: []Entry{
				req(0, "draft", 0),
				done(1, 0, Response{Text: "draft"}),
				answer(2, "approve-draft", true, false),
				answer(3, "confirm-publish", true, true),
			},
			want: State{
				NextSeq: 4, Stage: "publish", StageIndex: 1, Iteration: 0, Moves: 2,
				Usage: Usage{Prompt: 100, Completion: 10}, ModelCalls: 1, PricedNanoUSD: 1000,
				EntryModel:  "anthropic/claude-x",
				GatesForced: true,
			},
		},
		{
			name: "last stage's point approved completes the run",
			bp:   gate,
			entries: []Entry{
				req(0, "draft", 0),
				done(1, 0, Response{}),
				answer(2, "approve-draft", true, false),
				answer(3, "confirm-publish", true, false),
				req(4, "publish", 0),
				done(5, 4, Response{Complete: true, Output: "published"}),
				answer(6, "final-ok", true, false),
			},
			want: State{
				Turns:   []Turn{{}},
				NextSeq: 7, Stage: "publish", StageIndex: 1, Iteration: 1, Moves: 3,
				Usage: Usage{Prompt: 200, Completion: 20}, ModelCalls: 2, PricedNanoUSD: 2000,
				EntryModel: "anthropic/claude-x",
				Output:     &SubmittedOutput{Text: "published", Stage: "publish", Seq: 5},
				Outcome:    OutcomeComplete,
			},
		},
		{
			name: "declined point cancels the run",
			bp:   gate,
			entries: []Entry{
				req(0, "draft", 0),
				done(1, 0, Response{}),
				answer(2, "approve-draft", false, false),
			},
			want: State{
				Turns:   []Turn{{}},
				NextSeq: 3, Stage: "draft", Iteration: 1, Moves: 1,
				Usage: Usage{Prompt: 100, Completion: 10}, ModelCalls: 1, PricedNanoUSD: 1000,
				EntryModel: "anthropic/claude-x",
				Outcome:    OutcomeCancelled,
				Message:    `interaction point "approve-draft" was declined`,
			},
		},
		{
			name: "max_iterations transition fires after the second iteration",
			bp:   loop,
			entries: []Entry{
				req(0, "work", 0),
				done(1, 0, Response{Text: "one"}),
				req(2, "work", 1),
				done(3, 2, Response{Text: "two"}),
			},
			want: State{
				NextSeq: 4, Stage: "wrap", StageIndex: 1, Iteration: 0, Moves: 3,
				Usage: Usage{Prompt: 200, Completion: 20}, ModelCalls: 2, PricedNanoUSD: 2000,
				EntryModel:       "anthropic/claude-x",
				MaxIterationsHit: true,
			},
		},
		{
			name: "one iteration below max_iterations stays in the stage",
			bp:   loop,
			entries: []Entry{
				req(0, "work", 0),
				done(1, 0, Response{Text: "one"}),
			},
			want: State{
				Turns:   []Turn{{Text: "one"}},
				NextSeq: 2, Stage: "work", Iteration: 1, Moves: 1,
				Usage: Usage{Prompt: 100, Completion: 10}, ModelCalls: 1, PricedNanoUSD: 1000,
				EntryModel: "anthropic/claude-x",
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assertState(t, Fold(tc.bp, tc.entries), tc.want)
		})
	}
}

// prefixJournal is one complete run over prefixBP: an auth failure and its
// retry, an iteration, a checkpoint, a second stage and completion.
func prefixJournal() []Entry {
	return []Entry{
		req(0, "plan", 0),
		failed(1, 0, FailAuth, 401, "v1", "invalid key"),
		req(2, "plan", 0),
		done(3, 2, Response{Text: "thinking"}),
		req(4, "plan", 1),
		done(5, 4, Response{Text: "plan ready", Next: "build"}),
		answer(6, "approve-plan", true, false),
		req(7, "build", 0),
		done(8, 7, Response{Text: "half done"}),
		req(9, "build", 1),
		done(10, 9, Response{Text: "done", Complete: true, Output: "shipped"}),
		// After the outcome: ignored except for NextSeq.
		req(11, "build", 2),
	}
}

func TestFoldEveryPrefix(t *testing.T) {
	bp := mustParse(t, prefixBP)
	entries := prefixJournal()

	type want struct {
		stage       string
		stageIndex  int
		iteration   int
		moves       int64
		pending     int64 // -1: nil
		outcome     Outcome
		modelCalls  int64
		failure     FailureClass // "": nil
		attempts    int
		interaction string // point name, "": nil
		output      string
	}
	table := []want{
		0:  {stage: "plan", pending: -1},
		1:  {stage: "plan", pending: 0},
		2:  {stage: "plan", pending: -1, failure: FailAuth, attempts: 1},
		3:  {stage: "plan", pending: 2, failure: FailAuth, attempts: 1},
		4:  {stage: "plan", iteration: 1, moves: 1, pending: -1, modelCalls: 1},
		5:  {stage: "plan", iteration: 1, moves: 1, pending: 4, modelCalls: 1},
		6:  {stage: "plan", iteration: 2, moves: 2, pending: -1, modelCalls: 2, interaction: "approve-plan"},
		7:  {stage: "build", stageIndex: 1, moves: 3, pending: -1, modelCalls: 2},
		8:  {stage: "build", stageIndex: 1, moves: 3, pending: 7, modelCalls: 2},
		9:  {stage: "build", stageIndex: 1, iteration: 1, moves: 4, pending: -1, modelCalls: 3},
		10: {stage: "build", stageIndex: 1, iteration: 1, moves: 4, pending: 9, modelCalls: 3},
		11: {stage: "build", stageIndex: 1, iteration: 2, moves: 5, pending: -1, modelCalls: 4, outcome: OutcomeComplete, output: "shipped"},
		12: {stage: "build", stageIndex: 1, iteration: 2, moves: 5, pending: -1, modelCalls: 4, outcome: OutcomeComplete, output: "shipped"},
	}
	if len(table) != len(entries)+1 {
		t.Fatalf("table has %d rows for %d prefixes", len(table), len(entries)+1)
	}

	for i := 0; i <= len(entries); i++ {
		w := table[i]
		prefix := append([]Entry(nil), entries[:i]...)
		before := append([]Entry(nil), prefix...)

		var st State
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("prefix %d: Fold panicked: %v", i, r)
				}
			}()
			st = Fold(bp, prefix)
		}()

		if st.Stage != w.stage || st.StageIndex != w.stageIndex {
			t.Errorf("prefix %d: stage %q/%d, want %q/%d", i, st.Stage, st.StageIndex, w.stage, w.stageIndex)
		}
		if st.Iteration != w.iteration {
			t.Errorf("prefix %d: iteration %d, want %d", i, st.Iteration, w.iteration)
		}
		if st.Moves != w.moves {
			t.Errorf("prefix %d: moves %d, want %d", i, st.Moves, w.moves)
		}
		switch {
		case w.pending < 0 && st.Pending != nil:
			t.Errorf("prefix %d: pending seq %d, want none", i, st.Pending.Seq)
		case w.pending >= 0 && st.Pending == nil:
			t.Errorf("prefix %d: no pending call, want seq %d", i, w.pending)
		case w.pending >= 0 && !reflect.DeepEqual(*st.Pending, entries[w.pending]):
			t.Errorf("prefix %d: pending %+v, want entry %d %+v", i, *st.Pending, w.pending, entries[w.pending])
		}
		if st.Outcome != w.outcome {
			t.Errorf("prefix %d: outcome %q, want %q", i, st.Outcome, w.outcome)
		}
		if st.ModelCalls != w.modelCalls {
			t.Errorf("prefix %d: model calls %d, want %d", i, st.ModelCalls, w.modelCalls)
		}
		if got := st.NextSeq; got != int64(i) {
			t.Errorf("prefix %d: NextSeq %d, want %d", i, got, i)
		}
		var gotClass FailureClass
		if st.Failure != nil {
			gotClass = st.Failure.Class
		}
		if gotClass != w.failure || st.FailedAttempts != w.attempts {
			t.Errorf("prefix %d: failure %q x%d, want %q x%d", i, gotClass, st.FailedAttempts, w.failure, w.attempts)
		}
		var gotPoint string
		if st.Interaction != nil {
			gotPoint = st.Interaction.Point.Name
			if st.Interaction.Target != "build" || st.Interaction.Stage != "plan" {
				t.Errorf("prefix %d: interaction %+v, want plan -> build", i, *st.Interaction)
			}
		}
		if gotPoint != w.interaction {
			t.Errorf("prefix %d: interaction point %q, want %q", i, gotPoint, w.interaction)
		}
		var gotOutput string
		if st.Output != nil {
			gotOutput = st.Output.Text
		}
		if gotOutput != w.output {
			t.Errorf("prefix %d: output %q, want %q", i, gotOutput, w.output)
		}
		if st.Usage.Prompt != 100*w.modelCalls || st.PricedNanoUSD != 1000*w.modelCalls {
			t.Errorf("prefix %d: usage %+v priced %d, want %d prompt tokens and %d nano-USD", i, st.Usage, st.PricedNanoUSD, 100*w.modelCalls, 1000*w.modelCalls)
		}

		// Determinism: the same prefix folds to the same state.
		if again := Fold(bp, prefix); !reflect.DeepEqual(st, again) {
			t.Errorf("prefix %d: folding twice differs:\n%s", i, strings.Join(diffState(again, st), "\n"))
		}
		// Fold reads its input only.
		if !reflect.DeepEqual(prefix, before) {
			t.Errorf("prefix %d: Fold modified its entries", i)
		}
		// Pending is a copy: changing it leaves the journal alone.
		if st.Pending != nil {
			st.Pending.Stage = "tampered"
			if prefix[w.pending].Stage == "tampered" {
				t.Errorf("prefix %d: State.Pending aliases the journal entry", i)
			}
		}
	}
}

// TestFoldTotalOnAnyWindow folds every contiguous window of the journal (a
// journal read from the middle, or with a lost head): the fold is total, so
// it must never panic.
func TestFoldTotalOnAnyWindow(t *testing.T) {
	bp := mustParse(t, prefixBP)
	entries := prefixJournal()
	for i := 0; i <= len(entries); i++ {
		for j := i; j <= len(entries); j++ {
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("entries[%d:%d]: Fold panicked: %v", i, j, r)
					}
				}()
				st := Fold(bp, entries[i:j])
				if j > i && st.NextSeq != entries[j-1].Seq+1 {
					t.Errorf("entries[%d:%d]: NextSeq %d, want %d", i, j, st.NextSeq, entries[j-1].Seq+1)
				}
			}()
		}
	}
}

func TestFoldIgnoresMismatchedCompletion(t *testing.T) {
	bp := mustParse(t, threeStage)
	entries := []Entry{
		req(0, "plan", 0),
		done(1, 7, Response{Next: "build"}),                   // no intent 7
		failed(2, 9, FailFatal, 400, "", "not for this call"), // no intent 9
	}
	st := Fold(bp, entries)
	want := State{NextSeq: 3, Stage: "plan", Pending: ptrEntry(req(0, "plan", 0))}
	assertState(t, st, want)

	// With nothing pending, a completion is ignored too.
	st = Fold(bp, []Entry{done(0, 0, Response{Next: "build"})})
	assertState(t, st, State{NextSeq: 1, Stage: "plan"})
}

// TestReissueCountsLostOnce: an intent issued again under its seq
// replaces the pending one, whose Lost its own includes: applied after a
// fold, the state counts what a fold of the journal holding only the
// latest would.
func TestReissueCountsLostOnce(t *testing.T) {
	bp := mustParse(t, threeStage)
	lost := func(seq int64, n int) Entry { e := req(seq, "plan", 0); e.Lost = n; return e }
	st := Fold(bp, []Entry{lost(0, 0)})
	st.Apply(bp, lost(0, 1))
	st.Apply(bp, lost(0, 2))
	if st.LostCalls != 2 {
		t.Errorf("after two reissues LostCalls = %d, want 2", st.LostCalls)
	}
	if want := Fold(bp, []Entry{lost(0, 2)}); want.LostCalls != st.LostCalls || st.Pending == nil || st.Pending.Lost != 2 {
		t.Errorf("applied: LostCalls %d (pending %+v); folded: %d", st.LostCalls, st.Pending, want.LostCalls)
	}
	// The next call's intent is another seq: counted on top.
	st.Apply(bp, done(1, 0, Response{Next: "build"}))
	next := req(2, "build", 0)
	next.Lost = 1
	st.Apply(bp, next)
	if st.LostCalls != 3 {
		t.Errorf("after a lost dispatch of the next call LostCalls = %d, want 3", st.LostCalls)
	}
}

func TestFoldDuplicateEntries(t *testing.T) {
	bp := mustParse(t, threeStage)
	once := []Entry{
		req(0, "plan", 0),
		done(1, 0, Response{Next: "build"}),
		req(2, "build", 0),
	}
	twice := []Entry{
		req(0, "plan", 0),
		req(0, "plan", 0),
		done(1, 0, Response{Next: "build"}),
		done(1, 0, Response{Next: "build"}),
		req(2, "build", 0),
		req(2, "build", 0),
	}
	a, b := Fold(bp, once), Fold(bp, twice)
	if d := diffState(b, a); len(d) > 0 {
		t.Errorf("duplicated journal folds differently:\n%s", strings.Join(d, "\n"))
	}
	if a.ModelCalls != 1 || a.Usage.Prompt != 100 || a.Stage != "build" || a.Pending == nil || a.Pending.Seq != 2 {
		t.Errorf("unexpected state %+v", a)
	}

	// A duplicated answer to an interaction point approves it once.
	gate := mustParse(t, gated)
	st := Fold(gate, []Entry{
		req(0, "draft", 0),
		done(1, 0, Response{}),
		answer(2, "approve-draft", true, false),
		answer(2, "approve-draft", true, false),
	})
	if st.Interaction == nil || st.Interaction.Point.Name != "confirm-publish" || st.Stage != "draft" {
		t.Errorf("duplicate answer: stage %q interaction %+v, want draft waiting on confirm-publish", st.Stage, st.Interaction)
	}
}

func TestFoldIgnoresEntriesAfterOutcome(t *testing.T) {
	bp := mustParse(t, threeStage)
	base := []Entry{
		req(0, "plan", 0),
		cancelled(1),
	}
	after := append(append([]Entry(nil), base...),
		req(2, "plan", 0),
		done(3, 2, Response{Next: "build"}),
		failed(4, 2, FailFatal, 400, "", "late"),
		cancelled(5),
	)
	got := Fold(bp, after)
	want := Fold(bp, base)
	want.NextSeq = 6 // only NextSeq moves on
	assertState(t, got, want)
	if got.Outcome != OutcomeCancelled || got.Message != "cancelled" || got.Stage != "plan" || got.ModelCalls != 0 {
		t.Errorf("state after outcome: %+v", got)
	}

	// Complete, then more answers: still Complete with the same counters.
	done3 := []Entry{
		req(0, "plan", 0),
		done(1, 0, Response{Next: "build"}),
		req(2, "build", 0),
		done(3, 2, Response{}),
		req(4, "review", 0),
		done(5, 4, Response{Complete: true}),
	}
	final := Fold(bp, done3)
	more := Fold(bp, append(append([]Entry(nil), done3...), req(6, "review", 1), done(7, 6, Response{Text: "extra"})))
	if more.Outcome != OutcomeComplete || more.ModelCalls != final.ModelCalls || more.Iteration != final.Iteration || more.NextSeq != 8 {
		t.Errorf("entries after Complete changed the state: %+v", more)
	}
}

func TestFoldUnknownNextTarget(t *testing.T) {
	bp := mustParse(t, threeStage)
	st := Fold(bp, []Entry{
		req(0, "plan", 0),
		done(1, 0, Response{Next: "deploy"}),
	})
	if st.Outcome != OutcomeError {
		t.Fatalf("outcome %q, want Error", st.Outcome)
	}
	if !strings.Contains(st.Message, `stage "plan"`) || !strings.Contains(st.Message, `"deploy"`) {
		t.Errorf("message %q should name the stage and the chosen target", st.Message)
	}
	if st.Stage != "plan" || st.ModelCalls != 1 {
		t.Errorf("stage %q calls %d, want plan and 1", st.Stage, st.ModelCalls)
	}

	// A transition whose target stage is gone (a blueprint changed under a
	// run) ends in Error naming the target.
	bp = mustParse(t, threeStage)
	bp.Stages[0].Transitions[0].Target = "ghost"
	st = Fold(bp, []Entry{
		req(0, "plan", 0),
		done(1, 0, Response{Next: "ghost"}),
	})
	if st.Outcome != OutcomeError || !strings.Contains(st.Message, `"ghost"`) || st.Stage != "plan" {
		t.Errorf("missing target stage: outcome %q message %q stage %q", st.Outcome, st.Message, st.Stage)
	}
}

func TestFoldMaxIterationsWithoutTransition(t *testing.T) {
	bp := mustParse(t, stuck)
	one := Fold(bp, []Entry{req(0, "work", 0), done(1, 0, Response{})})
	if one.Outcome != OutcomeNone || one.Iteration != 1 {
		t.Fatalf("after one iteration: outcome %q iteration %d, want running at 1", one.Outcome, one.Iteration)
	}
	st := Fold(bp, []Entry{
		req(0, "work", 0),
		done(1, 0, Response{}),
		req(2, "work", 1),
		done(3, 2, Response{}),
	})
	if st.Outcome != OutcomeError {
		t.Fatalf("outcome %q, want Error", st.Outcome)
	}
	want := `stage "work" reached max_iterations (2) and declares no max_iterations transition`
	if st.Message != want {
		t.Errorf("message %q, want %q", st.Message, want)
	}
	if st.Stage != "work" || st.Iteration != 2 || st.ModelCalls != 2 {
		t.Errorf("stage %q iteration %d calls %d, want work 2 2", st.Stage, st.Iteration, st.ModelCalls)
	}
}

func TestFoldMaxIterationsHitOnError(t *testing.T) {
	bp := mustParse(t, stuck)
	st := Fold(bp, []Entry{
		req(0, "work", 0),
		done(1, 0, Response{}),
		req(2, "work", 1),
		done(3, 2, Response{}),
	})
	if !st.MaxIterationsHit {
		t.Errorf("MaxIterationsHit = false, want true: stage work ran out of iterations")
	}
}

func TestFoldCompleteNeedsAllowComplete(t *testing.T) {
	bp := mustParse(t, threeStage)
	st := Fold(bp, []Entry{
		req(0, "plan", 0),
		done(1, 0, Response{Complete: true}),
	})
	if st.Outcome != OutcomeError || !strings.Contains(st.Message, `stage "plan"`) {
		t.Errorf("outcome %q message %q, want Error naming stage plan", st.Outcome, st.Message)
	}
}

func TestFoldDeclinedInteractionCancels(t *testing.T) {
	bp := mustParse(t, gated)
	// Declining the second point, after approving the first.
	st := Fold(bp, []Entry{
		req(0, "draft", 0),
		done(1, 0, Response{}),
		answer(2, "approve-draft", true, false),
		answer(3, "confirm-publish", false, false),
		answer(4, "confirm-publish", true, false), // too late
	})
	if st.Outcome != OutcomeCancelled || st.Interaction != nil || st.Stage != "draft" {
		t.Errorf("outcome %q interaction %+v stage %q, want Cancelled, none, draft", st.Outcome, st.Interaction, st.Stage)
	}
	if !strings.Contains(st.Message, `"confirm-publish"`) {
		t.Errorf("message %q should name the declined point", st.Message)
	}
	if st.GatesForced {
		t.Errorf("GatesForced set though no point was passed by policy")
	}

	// An answer naming another point is ignored.
	st = Fold(bp, []Entry{
		req(0, "draft", 0),
		done(1, 0, Response{}),
		answer(2, "confirm-publish", false, false),
	})
	if st.Outcome != OutcomeNone || st.Interaction == nil || st.Interaction.Point.Name != "approve-draft" {
		t.Errorf("answer to a point not pending changed the state: outcome %q interaction %+v", st.Outcome, st.Interaction)
	}
}

func TestFoldFatalFailure(t *testing.T) {
	bp := mustParse(t, threeStage)
	st := Fold(bp, []Entry{
		req(0, "plan", 0),
		done(1, 0, Response{Next: "build"}),
		req(2, "build", 0),
		failed(3, 2, FailFatal, 0, "", "provider type \"x\" is not supported"),
	})
	if st.Outcome != OutcomeError || st.Message != `model call failed: provider type "x" is not supported` {
		t.Errorf("outcome %q message %q", st.Outcome, st.Message)
	}
	if st.Stage != "build" || st.Pending != nil || st.ModelCalls != 1 {
		t.Errorf("stage %q pending %v calls %d, want build, none, 1", st.Stage, st.Pending, st.ModelCalls)
	}

	// A non-fatal class never ends the run.
	for _, c := range []FailureClass{FailAuth, FailForbidden, FailCredits, FailUnreachable, FailTimedOut, FailFailed} {
		st := Fold(bp, []Entry{req(0, "plan", 0), failed(1, 0, c, 500, "v", "m")})
		if st.Outcome != OutcomeNone || st.Failure == nil || st.Failure.Class != c {
			t.Errorf("class %s: outcome %q failure %+v, want running with the failure recorded", c, st.Outcome, st.Failure)
		}
	}
}

func TestFoldCostAccounting(t *testing.T) {
	bp := mustParse(t, threeStage)
	cases := []struct {
		name          string
		opts          [][]func(*Entry)
		priced        int64
		unpriced      int64
		inexact       bool
		wantCallCount int64
	}{
		{"all exact", [][]func(*Entry){{cost(i64(5), true)}, {cost(i64(7), true)}}, 12, 0, false, 2},
		{"one unpriced", [][]func(*Entry){{cost(i64(5), true)}, {cost(nil, false)}}, 5, 1, false, 2},
		{"unpriced with CostExact set is still unpriced", [][]func(*Entry){{cost(nil, true)}}, 0, 1, false, 1},
		{"rate-card reconstruction is inexact", [][]func(*Entry){{cost(i64(5), false)}, {cost(i64(7), true)}}, 12, 0, true, 2},
		{"zero cost is priced, not unpriced", [][]func(*Entry){{cost(i64(0), true)}}, 0, 0, false, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var entries []Entry
			for i, o := range tc.opts {
				seq := int64(2 * i)
				entries = append(entries, req(seq, "plan", i), done(seq+1, seq, Response{}, o...))
			}
			st := Fold(bp, entries)
			if st.PricedNanoUSD != tc.priced || st.UnpricedCalls != tc.unpriced || st.CostInexact != tc.inexact || st.ModelCalls != tc.wantCallCount {
				t.Errorf("priced %d unpriced %d inexact %v calls %d, want %d %d %v %d",
					st.PricedNanoUSD, st.UnpricedCalls, st.CostInexact, st.ModelCalls,
					tc.priced, tc.unpriced, tc.inexact, tc.wantCallCount)
			}
		})
	}

	// A completion without usage counts the call but no tokens.
	st := Fold(bp, []Entry{req(0, "plan", 0), done(1, 0, Response{}, func(e *Entry) { e.Usage = nil; e.Response = nil })})
	if st.ModelCalls != 1 || st.Usage != (Usage{}) || st.Iteration != 1 {
		t.Errorf("nil usage/response: calls %d usage %+v iteration %d", st.ModelCalls, st.Usage, st.Iteration)
	}
}

func TestFoldEntryModelIsFirstCall(t *testing.T) {
	bp := mustParse(t, threeStage)
	st := Fold(bp, []Entry{
		req(0, "plan", 0),
		done(1, 0, Response{}, model("first", "m1")),
		req(2, "plan", 1),
		done(3, 2, Response{Next: "build"}, model("second", "m2")),
	})
	if st.EntryModel != "first/m1" {
		t.Errorf("EntryModel %q, want first/m1", st.EntryModel)
	}
}

// failedAt is the Failed map after one failure of the test model.
func failedAt(class FailureClass, status int, msg, version string, sec int64) map[string]FailedCall {
	return map[string]FailedCall{"anthropic/claude-x": {Failure: Failure{Class: class, Status: status, Message: msg, SecretVersion: version}, At: at(sec)}}
}

// TestFoldRefusedOutputIteratesThenErrors: output refused by its spec does
// not complete the run or count as output; the model's turn and the reason
// are kept for its next call; out of iterations the run errors saying why.
func TestFoldRefusedOutputIteratesThenErrors(t *testing.T) {
	bp := mustParse(t, "[agent]\nname = \"j\"\n[stages.only]\nmax_iterations = 2\n")
	entries := []Entry{
		req(0, "only", 0),
		done(1, 0, Response{Text: "try", OutputRejected: "the output must be JSON"}),
	}
	st := Fold(bp, entries)
	if st.Outcome != OutcomeNone || st.Output != nil || st.Iteration != 1 {
		t.Fatalf("after one refusal: outcome %q output %v iteration %d", st.Outcome, st.Output, st.Iteration)
	}
	if len(st.Turns) != 1 || st.Turns[0].Rejected != "the output must be JSON" {
		t.Fatalf("turns = %+v", st.Turns)
	}
	entries = append(entries, req(2, "only", 1), done(3, 2, Response{Text: "again", OutputRejected: "still not JSON"}))
	st = Fold(bp, entries)
	if st.Outcome != OutcomeError || !st.MaxIterationsHit || !strings.Contains(st.Message, "still not JSON") {
		t.Fatalf("out of iterations: outcome %q hit %v message %q", st.Outcome, st.MaxIterationsHit, st.Message)
	}
	ok := Fold(bp, append(entries[:2], req(2, "only", 1), done(3, 2, Response{Complete: true, Output: `{"a":1}`})))
	if ok.Outcome != OutcomeComplete || ok.Output == nil || ok.Output.Text != `{"a":1}` {
		t.Fatalf("valid output after a refusal: %+v", ok)
	}
}

// TestFoldSleep: a sleep sets the wake time from the completion's own time
// (no clock read), holds the stage, and a SleepCompleted clears it.
func TestFoldSleep(t *testing.T) {
	bp := mustParse(t, "[agent]\nname = \"s\"\n[stages.only]\n")
	entries := []Entry{req(0, "only", 0), done(1, 0, Response{Text: "nap", SleepSeconds: 30})}
	st := Fold(bp, entries)
	want := entries[1].At.Add(30 * time.Second)
	if st.SleepUntil == nil || !st.SleepUntil.Equal(want) || st.Outcome != OutcomeNone {
		t.Fatalf("after the sleep: until %v outcome %q, want %v and still running", st.SleepUntil, st.Outcome, want)
	}
	if again := Fold(bp, entries); !again.SleepUntil.Equal(*st.SleepUntil) {
		t.Fatal("the wake time depends on when the journal is folded")
	}
	st = Fold(bp, append(entries, Entry{Seq: 2, Kind: SleepCompleted, At: want}))
	if st.SleepUntil != nil || st.NextSeq != 3 {
		t.Fatalf("after waking: until %v next %d", st.SleepUntil, st.NextSeq)
	}
}

// TestFoldStages: each stage's visits, iterations, first entry and time
// spent, from the entries' times; the stage the run ends in is left when
// it ends, and the one it is in stays open.
func TestFoldStages(t *testing.T) {
	three := mustParse(t, threeStage)
	entries := []Entry{
		req(0, "plan", 0),
		done(1, 0, Response{Text: "plan ok", Next: "build"}),
		req(2, "build", 0),
		done(3, 2, Response{Text: "built"}),
		req(4, "review", 0),
		done(6, 4, Response{Text: "lgtm", Complete: true, Output: "final report"}),
	}
	want := map[string]StageRecord{
		"plan":   {Visits: 1, Iterations: 1, FirstEntered: at(0), LastEntered: at(0), Spent: time.Second, Left: true},
		"build":  {Visits: 1, Iterations: 1, FirstEntered: at(1), LastEntered: at(1), Spent: 2 * time.Second, Left: true},
		"review": {Visits: 1, Iterations: 1, FirstEntered: at(3), LastEntered: at(3), Spent: 3 * time.Second, Left: true},
	}
	if got := Fold(three, entries).Stages; !reflect.DeepEqual(got, want) {
		t.Errorf("finished run: stages %+v, want %+v", got, want)
	}
	open := Fold(three, entries[:3]).Stages
	if b := open["build"]; b.Left || b.Spent != 0 || b.Visits != 1 || !b.LastEntered.Equal(at(1)) {
		t.Errorf("the stage the run is in: %+v, want open, entered at %v", b, at(1))
	}
	if _, ok := open["review"]; ok {
		t.Errorf("a stage never entered has a record: %+v", open)
	}
	loop := mustParse(t, looping)
	iter := Fold(loop, []Entry{req(0, "work", 0), done(1, 0, Response{Text: "one"}), req(2, "work", 1), done(3, 2, Response{Text: "two"})}).Stages
	if w := iter["work"]; w.Visits != 1 || w.Iterations != 2 {
		t.Errorf("iterations in one visit: %+v", w)
	}
}

// TestFoldVisits: the visit log has one entry per stay, in order, with the
// times the stage records have, ended as the run moves on; the stay the
// run is in stays open.
func TestFoldVisits(t *testing.T) {
	three := mustParse(t, threeStage)
	entries := []Entry{
		req(0, "plan", 0),
		done(1, 0, Response{Text: "plan ok", Next: "build"}),
		req(2, "build", 0),
		done(3, 2, Response{Text: "built"}),
		req(4, "review", 0),
		done(6, 4, Response{Text: "lgtm", Complete: true, Output: "final report"}),
	}
	want := []Visit{
		{Stage: "plan", Entered: at(0), Left: at(1), Ended: true},
		{Stage: "build", Entered: at(1), Left: at(3), Ended: true},
		{Stage: "review", Entered: at(3), Left: at(6), Ended: true},
	}
	if got := Fold(three, entries).Visits; !reflect.DeepEqual(got, want) {
		t.Errorf("finished run: visits %+v, want %+v", got, want)
	}
	open := Fold(three, entries[:3]).Visits
	if len(open) != 2 || !open[0].Ended || open[1].Ended || open[1].Stage != "build" {
		t.Errorf("run in build: visits %+v, want plan ended and build open", open)
	}
}
