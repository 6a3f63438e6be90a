package children

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
)

// TestChildNameIsDeterministicAndFits: a child's name is its parent's plus
// a suffix (and the attempt after the first), shortened with a hash when
// the parent's name is too long, so a retried create finds the same child.
func TestChildNameIsDeterministicAndFits(t *testing.T) {
	long := strings.Repeat("p", 251)
	cases := []struct {
		parent, suffix string
		attempt        int
		want           string
	}{
		{parent: "p", suffix: "w0", attempt: 1, want: "p-w0"},
		{parent: "p", suffix: "w3", attempt: 2, want: "p-w3-a2"},
		{parent: "p", suffix: "c1", attempt: 0, want: "p-c1"},
		{parent: strings.Repeat("p", 250), suffix: "w0", attempt: 1, want: strings.Repeat("p", 250) + "-w0"},
		{parent: long, suffix: "w0", attempt: 1, want: long[:200] + "-" + "{hash}" + "-w0"},
	}
	for _, c := range cases {
		got := childName(&arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: c.parent}}, c.suffix, c.attempt)
		if again := childName(&arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: c.parent}}, c.suffix, c.attempt); again != got {
			t.Errorf("%s/%s: %q then %q", c.parent[:1], c.suffix, got, again)
		}
		if len(got) > 253 {
			t.Errorf("%s/%s: %d characters, over 253", c.parent[:1], c.suffix, len(got))
		}
		if pre, post, hashed := strings.Cut(c.want, "{hash}"); hashed {
			if !strings.HasPrefix(got, pre) || !strings.HasSuffix(got, post) || len(got) != len(pre)+8+len(post) {
				t.Errorf("long parent: %q, want %q with an 8-digit hash", got, c.want)
			}
			continue
		}
		if got != c.want {
			t.Errorf("childName(%q, %q, %d) = %q, want %q", c.parent, c.suffix, c.attempt, got, c.want)
		}
	}
}

// TestLabelValueFitsALabel: a name goes into a label as it is up to 63
// characters, and longer ones are cut with a hash that keeps them apart.
func TestLabelValueFitsALabel(t *testing.T) {
	a, b := strings.Repeat("a", 70), strings.Repeat("a", 69)+"b"
	cases := []struct {
		in   string
		want int
	}{{in: "", want: 0}, {in: "run", want: 3}, {in: strings.Repeat("x", 63), want: 63}, {in: a, want: 63}}
	for _, c := range cases {
		if got := labelValue(c.in); len(got) != c.want || (len(c.in) <= 63 && got != c.in) {
			t.Errorf("labelValue(%d characters) = %q", len(c.in), got)
		}
	}
	if labelValue(a) == labelValue(b) {
		t.Errorf("two long names share the label value %q", labelValue(a))
	}
}

// TestFactOfReadsTheChildsLabels: what Decide knows of a child comes from
// the labels its parent set when it created it.
func TestFactOfReadsTheChildsLabels(t *testing.T) {
	cases := []struct {
		labels map[string]string
		phase  arv1.Phase
		want   runstate.ChildFact
	}{
		{labels: map[string]string{arv1.LabelItem: "2", arv1.LabelAttempt: "3", arv1.LabelChildKind: string(runstate.ChildWorker)}, phase: arv1.PhaseRunning,
			want: runstate.ChildFact{Name: "c", Kind: runstate.ChildWorker, Index: 2, Attempt: 3, Phase: arv1.PhaseRunning}},
		{labels: map[string]string{arv1.LabelItem: "0", arv1.LabelChildKind: string(runstate.ChildSubagent)}, phase: arv1.PhaseComplete,
			want: runstate.ChildFact{Name: "c", Kind: runstate.ChildSubagent, Phase: arv1.PhaseComplete}},
		{labels: nil, want: runstate.ChildFact{Name: "c"}},
	}
	for i, c := range cases {
		got := factOf(&arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "c", Labels: c.labels}, Status: arv1.AgentRunStatus{Phase: c.phase}})
		if got != c.want {
			t.Errorf("case %d: factOf = %+v, want %+v", i, got, c.want)
		}
	}
}

// TestExpectedChildrenLeaveOnceSeen: a child created and not yet in the
// cache counts until a listing shows it.
func TestExpectedChildrenLeaveOnceSeen(t *testing.T) {
	e := newExpectations()
	e.expect("p", runstate.ChildFact{Name: "a"})
	e.expect("p", runstate.ChildFact{Name: "b"})
	if got := e.pending("p", sets.New("a")); len(got) != 1 || got[0].Name != "b" {
		t.Fatalf("pending with a seen = %+v, want b alone", got)
	}
	if got := e.pending("p", sets.New[string]()); len(got) != 1 || got[0].Name != "b" {
		t.Fatalf("a, once seen, came back: %+v", got)
	}
	e.forget("p", "b")
	if got := e.pending("p", sets.New[string]()); len(got) != 0 {
		t.Fatalf("pending after forgetting b = %+v", got)
	}
}
