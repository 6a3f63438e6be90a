package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// conformanceDir holds one directory per case: the blueprint's files (every
// file but expect.yaml becomes a key of the blueprint ConfigMap, named after
// the directory) and expect.yaml, a conformanceCase.
const conformanceDir = "testdata/conformance"

// conformanceCase is what expect.yaml states about one Leviath-format
// blueprint run through the real API server with the scripted provider.
// Every field but phase is optional; maps are matched as subsets, where a
// key must be present with the value given, or absent where it is null.
type conformanceCase struct {
	// Description says which feature of the format the case proves.
	Description string `json:"description"`
	// Spec is merged over the run's spec (agent and task are preset).
	Spec map[string]any `json:"spec"`
	// ConfigMaps and Secrets are created in the run's namespace first.
	ConfigMaps map[string]map[string]string `json:"configMaps"`
	Secrets    map[string]map[string]string `json:"secrets"`
	// Phase is the phase the run must reach.
	Phase arv1.Phase `json:"phase"`
	// Path is the stages of the run's model turns in order, consecutive
	// repeats collapsed.
	Path []string `json:"path"`
	// Flags, WaitingOn and Status are subsets of status.flags,
	// status.waitingOn and status.
	Flags     map[string]any `json:"flags"`
	WaitingOn map[string]any `json:"waitingOn"`
	Status    map[string]any `json:"status"`
	// Stages are subsets of status.stages entries, matched by name.
	Stages []map[string]any `json:"stages"`
	// Output is the run's final output, exactly.
	Output *string `json:"output"`
	// ErrorContains must be a substring of status.error.
	ErrorContains string `json:"errorContains"`
	// ReadyMessage must be a substring of the Ready condition's message.
	ReadyMessage string `json:"readyMessage"`
	// Answers are given in order, as the admin user, each once the run
	// waits on its point; each must be applied before the next is given.
	Answers []conformanceAnswer `json:"answers"`
	// Regions are the content the run's journal holds for these regions
	// at the end, exactly.
	Regions map[string]string `json:"regions"`
	// Texts are, per stage, a substring some model answer of that stage
	// (its text, as journaled) must contain: with the scripted provider's
	// placeholders, what the model was sent.
	Texts map[string]string `json:"texts"`
	// ToolResults are results of the run's tool calls, in journal order:
	// each matches the next completion of its tool after the previous match.
	ToolResults []toolResultCase `json:"toolResults"`
	// Runs are other runs of the namespace (children) and the phase each
	// must reach.
	Runs map[string]arv1.Phase `json:"runs"`
	// RunErrors are substrings of those runs' status.error.
	RunErrors map[string]string `json:"runErrors"`
}

// toolResultCase is one expected tool result.
type toolResultCase struct {
	Tool     string `json:"tool"`
	Contains string `json:"contains"`
	IsError  bool   `json:"isError"`
}

// conformanceAnswer is one AgentRunAnswer a case gives.
type conformanceAnswer struct {
	Point    string              `json:"point"`
	Decision arv1.AnswerDecision `json:"decision"`
	Text     *string             `json:"text"`
	Input    *string             `json:"input"`
	// Question is a substring waitingOn.question must hold before the
	// answer is given.
	Question string `json:"question"`
	// HoldSeconds: first wait this long, and the run must still wait on
	// the point (no policy or timeout passed it).
	HoldSeconds int `json:"holdSeconds"`
	// Rejected: the answer must be rejected with a message containing
	// this, and the run must still wait on the point.
	Rejected string `json:"rejected"`
}

// TestConformance runs every blueprint of testdata/conformance as a user
// would: the directory becomes a ConfigMap, a run of it is created, and the
// stage path, flags, per-stage status and output are checked against the
// case's expect.yaml.
func TestConformance(t *testing.T) {
	startManager(t, managerOpts{})
	dirs, err := os.ReadDir(conformanceDir)
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		ran++
		dir := filepath.Join(conformanceDir, d.Name())
		t.Run(d.Name(), func(t *testing.T) {
			t.Parallel()
			runConformanceCase(t, dir)
		})
	}
	if ran == 0 {
		t.Fatalf("no cases under %s", conformanceDir)
	}
}

func runConformanceCase(t *testing.T, dir string) {
	name := filepath.Base(dir)
	files, c := readConformanceCase(t, dir)
	ns := newNamespace(t)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	for n, data := range c.ConfigMaps {
		createConfigMap(t, ns, n, data)
	}
	for n, data := range c.Secrets {
		createSecret(t, ns, n, data)
	}
	createConfigMap(t, ns, name, files)
	createRun(t, ns, "run", name, func(r *arv1.AgentRun) {
		if c.Spec == nil {
			return
		}
		raw, err := json.Marshal(c.Spec)
		if err == nil {
			err = json.Unmarshal(raw, &r.Spec)
		}
		if err != nil {
			t.Fatalf("spec: %v", err)
		}
	})
	for i, a := range c.Answers {
		giveAnswer(t, ns, fmt.Sprintf("answer-%d", i), a)
	}
	run := waitFor(t, ns, "run", 60*time.Second, string(c.Phase), phaseIs(c.Phase))
	if c.Regions != nil {
		got := journal.Regions(journalEntries(t, ns, string(run.UID)))
		for name, want := range c.Regions {
			if got[name].Content != want {
				t.Errorf("region %s = %q, want %q", name, got[name].Content, want)
			}
		}
	}

	if c.Path != nil {
		if got := turnPath(journalEntries(t, ns, string(run.UID))); !reflect.DeepEqual(got, c.Path) {
			t.Errorf("stage path %v, want %v", got, c.Path)
		}
	}
	matchSubset(t, "status.flags", run.Status.Flags, c.Flags)
	matchSubset(t, "status.waitingOn", run.Status.WaitingOn, c.WaitingOn)
	matchSubset(t, "status", run.Status, c.Status)
	for _, want := range c.Stages {
		got := stageNamed(run, want["name"])
		if got == nil {
			t.Errorf("status.stages has no %v: %+v", want["name"], run.Status.Stages)
			continue
		}
		matchSubset(t, "stage "+got.Name, got, want)
	}
	for stage, want := range c.Texts {
		if !answerContains(journalEntries(t, ns, string(run.UID)), stage, want) {
			t.Errorf("no answer of stage %s contains %q", stage, want)
		}
	}
	if c.Output != nil {
		if got := finalOutput(t, run); got != *c.Output {
			t.Errorf("output %q, want %q", got, *c.Output)
		}
	}
	if c.ErrorContains != "" && !strings.Contains(run.Status.Error, c.ErrorContains) {
		t.Errorf("status.error %q lacks %q", run.Status.Error, c.ErrorContains)
	}
	if c.ReadyMessage != "" {
		if ready := meta.FindStatusCondition(run.Status.Conditions, arv1.ConditionReady); ready == nil || !strings.Contains(ready.Message, c.ReadyMessage) {
			t.Errorf("Ready condition %+v lacks %q", ready, c.ReadyMessage)
		}
	}
	if c.ToolResults != nil {
		matchToolResults(t, journalEntries(t, ns, string(run.UID)), c.ToolResults)
	}
	for n, p := range c.Runs {
		r := waitFor(t, ns, n, 60*time.Second, string(p), phaseIs(p))
		if want, ok := c.RunErrors[n]; ok && !strings.Contains(r.Status.Error, want) {
			t.Errorf("%s: status.error %q lacks %q", n, r.Status.Error, want)
		}
	}
}

// matchToolResults finds each expected result in the journal's tool
// completions, in order.
func matchToolResults(t *testing.T, entries []journal.Entry, want []toolResultCase) {
	t.Helper()
	i := 0
	for _, w := range want {
		found := false
		for ; i < len(entries) && !found; i++ {
			res, isErr, ok := toolResultOf(entries[i])
			found = ok && entries[i].Tool == w.Tool && strings.Contains(res, w.Contains) && isErr == w.IsError
		}
		if !found {
			t.Errorf("no %s result containing %q (isError %v) in order; the journal's tool results:%s", w.Tool, w.Contains, w.IsError, toolResultsOf(entries))
			return
		}
	}
}

func toolResultsOf(entries []journal.Entry) string {
	var b strings.Builder
	for _, e := range entries {
		if res, isErr, ok := toolResultOf(e); ok {
			fmt.Fprintf(&b, "\n  %s (isError %v): %s", e.Tool, isErr, res)
		}
	}
	return b.String()
}

// toolResultOf is what an entry tells the model of a tool call: a
// completion's result, or a denial (which is an error result).
func toolResultOf(e journal.Entry) (string, bool, bool) {
	switch {
	case e.Kind == journal.ToolCallCompleted:
		return e.Result, e.IsError, true
	case e.Kind == journal.ToolCallDecided && !e.Approved:
		return "denied by " + e.By + ": " + e.Result, true, true
	}
	return "", false, false
}

func readConformanceCase(t *testing.T, dir string) (map[string]string, conformanceCase) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	var c conformanceCase
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() != "expect.yaml" {
			files[e.Name()] = string(b)
			continue
		}
		if err := yaml.UnmarshalStrict(b, &c); err != nil {
			t.Fatalf("%s/expect.yaml: %v", dir, err)
		}
	}
	if c.Phase == "" {
		t.Fatalf("%s/expect.yaml names no phase", dir)
	}
	return files, c
}

// turnPath is the stages of the run's model turns (not its title call), in
// journal order, with consecutive repeats collapsed.
func turnPath(entries []journal.Entry) []string {
	var path []string
	for _, e := range entries {
		if e.Kind != journal.ModelCallRequested || e.Purpose != "" {
			continue
		}
		if len(path) == 0 || path[len(path)-1] != e.Stage {
			path = append(path, e.Stage)
		}
	}
	return path
}

// answerContains: some completed model call of stage answered with text
// containing want.
func answerContains(entries []journal.Entry, stage, want string) bool {
	for _, e := range entries {
		if e.Kind == journal.ModelCallCompleted && e.Stage == stage && e.Response != nil && strings.Contains(e.Response.Text, want) {
			return true
		}
	}
	return false
}

func stageNamed(run *arv1.AgentRun, name any) *arv1.StageStatus {
	for i := range run.Status.Stages {
		if run.Status.Stages[i].Name == name {
			return &run.Status.Stages[i]
		}
	}
	return nil
}

func finalOutput(t *testing.T, run *arv1.AgentRun) string {
	t.Helper()
	fo := run.Status.FinalOutput
	if fo == nil || fo.ObjectName == "" {
		return ""
	}
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), keyOf(run.Namespace, fo.ObjectName), cm); err != nil {
		t.Fatal(err)
	}
	return cm.Data["output"]
}

// matchSubset checks that every key of want has the same value in got's
// JSON form, recursing into maps so a case states only what it proves. A
// key that is absent fails the check, whatever its value: a case expects
// absence explicitly, with null (which is how an omitempty field's zero
// value reads: maxIterationsHit: null, not false). Every key must be a
// field of got's type, so a misspelt key cannot pass as absent.
func matchSubset(t *testing.T, what string, got any, want map[string]any) {
	t.Helper()
	if want == nil {
		return
	}
	raw, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var have map[string]any
	_ = json.Unmarshal(raw, &have)
	for _, diff := range subsetDiff("", reflect.TypeOf(got), have, want) {
		t.Errorf("%s: %s", what, diff)
	}
}

// subsetDiff lists how have (of Go type typ, when known) differs from
// want: a key of want absent from have (unless want says null), present
// where want says null, or with another value.
func subsetDiff(prefix string, typ reflect.Type, have, want map[string]any) []string {
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		w := want[k]
		ft, known := jsonField(typ, k)
		if !known {
			diffs = append(diffs, prefix+k+" is not a field of "+typ.String())
			continue
		}
		h, ok := have[k]
		wm, wIsMap := w.(map[string]any)
		hm, hIsMap := h.(map[string]any)
		switch {
		case w == nil:
			if ok && h != nil {
				diffs = append(diffs, prefix+k+" = "+jsonText(h)+", want it absent")
			}
		case wIsMap && (hIsMap || h == nil):
			// An absent map holds nothing: each key of want is checked
			// (and reported) on its own.
			diffs = append(diffs, subsetDiff(prefix+k+".", ft, hm, wm)...)
		case !ok:
			diffs = append(diffs, prefix+k+" is absent, want "+jsonText(w))
		case !reflect.DeepEqual(h, w):
			diffs = append(diffs, prefix+k+" = "+jsonText(h)+", want "+jsonText(w))
		}
	}
	return diffs
}

// jsonField is the type of typ's field (or map value) whose JSON name is
// key, and whether typ has one; an unknown type (nil, an interface)
// accepts any key.
func jsonField(typ reflect.Type, key string) (reflect.Type, bool) {
	for typ != nil && typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if typ == nil {
		return nil, true
	}
	switch typ.Kind() {
	case reflect.Map:
		return typ.Elem(), true
	case reflect.Struct:
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" && f.Anonymous {
				if ft, ok := jsonField(f.Type, key); ok {
					return ft, true
				}
				continue
			}
			if name == "" {
				name = f.Name
			}
			if name == key && name != "-" {
				return f.Type, true
			}
		}
		return nil, false
	case reflect.Interface:
		return nil, true
	}
	return nil, false
}

// TestConformanceMatchIsStrict: the runner's subset match fails a key that
// is absent, whatever value the case gives it, unless the case says null;
// and a key that is no field of the type fails even as null.
func TestConformanceMatchIsStrict(t *testing.T) {
	flags := arv1.RunFlags{ProducedOutput: true} // maxIterationsHit false: omitted
	typ := reflect.TypeOf(flags)
	raw, _ := json.Marshal(flags)
	var have map[string]any
	_ = json.Unmarshal(raw, &have)
	status := arv1.AgentRunStatus{Usage: arv1.Usage{CostUSD: "0"}}
	raw, _ = json.Marshal(status)
	var haveStatus map[string]any
	_ = json.Unmarshal(raw, &haveStatus)
	for _, c := range []struct {
		name  string
		typ   reflect.Type
		have  map[string]any
		want  map[string]any
		diffs []string
	}{
		{"present and equal", typ, have, map[string]any{"producedOutput": true}, nil},
		{"absent, want false", typ, have, map[string]any{"maxIterationsHit": false}, []string{"maxIterationsHit is absent, want false"}},
		{"absent, want null", typ, have, map[string]any{"maxIterationsHit": nil}, nil},
		{"present, want null", typ, have, map[string]any{"producedOutput": nil}, []string{"producedOutput = true, want it absent"}},
		{"misspelt, want null", typ, have, map[string]any{"maxIterationHit": nil}, []string{"maxIterationHit is not a field of v1alpha1.RunFlags"}},
		{"nested absent, want 0", reflect.TypeOf(status), haveStatus, map[string]any{"usage": map[string]any{"modelCalls": float64(0)}}, []string{"usage.modelCalls is absent, want 0"}},
		{"nested absent, want null", reflect.TypeOf(status), haveStatus, map[string]any{"usage": map[string]any{"modelCalls": nil}}, nil},
		{"map absent, want a key", reflect.TypeOf(status), haveStatus, map[string]any{"children": map[string]any{"total": float64(3)}}, []string{"children.total is absent, want 3"}},
	} {
		if got := subsetDiff("", c.typ, c.have, c.want); !slices.Equal(got, c.diffs) {
			t.Errorf("%s: diffs %q, want %q", c.name, got, c.diffs)
		}
	}
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// giveAnswer answers point a.Point once the run waits on it, and waits for
// the run to apply the answer (a rejected answer fails the case, unless
// the case expects the rejection).
func giveAnswer(t *testing.T, ns, name string, a conformanceAnswer) {
	t.Helper()
	waiting := func(r *arv1.AgentRun) bool { return r.Status.WaitingOn != nil && r.Status.WaitingOn.Point == a.Point }
	run := waitFor(t, ns, "run", 60*time.Second, "waiting on point "+a.Point, waiting)
	if a.HoldSeconds > 0 {
		time.Sleep(time.Duration(a.HoldSeconds) * time.Second)
		run = getRun(t, ns, "run")
		if !waiting(run) {
			t.Fatalf("after %ds the run no longer waits on %s: phase %s, waitingOn %+v", a.HoldSeconds, a.Point, run.Status.Phase, run.Status.WaitingOn)
		}
	}
	if !strings.Contains(run.Status.WaitingOn.Question, a.Question) {
		t.Errorf("waitingOn.question %q lacks %q", run.Status.WaitingOn.Question, a.Question)
	}
	ans := &arv1.AgentRunAnswer{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: arv1.AgentRunAnswerSpec{Run: "run", Point: a.Point, Decision: a.Decision, Text: a.Text, Input: a.Input, By: "admin"}}
	ctx := context.Background()
	if err := k8s.Create(ctx, ans); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for ans.Status.State == "" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		if err := k8s.Get(ctx, keyOf(ns, name), ans); err != nil {
			t.Fatal(err)
		}
	}
	if a.Rejected != "" {
		if ans.Status.State != arv1.AnswerRejected || !strings.Contains(ans.Status.Message, a.Rejected) {
			t.Fatalf("answer %s to %s: %q %s, want Rejected with %q", name, a.Point, ans.Status.State, ans.Status.Message, a.Rejected)
		}
		if run := getRun(t, ns, "run"); !waiting(run) {
			t.Fatalf("after the rejected answer %s the run no longer waits on %s: phase %s", name, a.Point, run.Status.Phase)
		}
		return
	}
	if ans.Status.State != arv1.AnswerApplied {
		t.Fatalf("answer %s to %s: %q %s", name, a.Point, ans.Status.State, ans.Status.Message)
	}
}
