package runstate

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

var (
	waitNow = time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)
	wakeAt  = time.Date(2030, 1, 2, 5, 4, 5, 0, time.FixedZone("CEST", 2*3600)) // 03:04:05Z
)

func i32(v int32) *int32  { return &v }
func i64p(v int64) *int64 { return &v }
func mt(t time.Time) *metav1.Time {
	m := metav1.NewTime(t)
	return &m
}

// marker is one wait source: how to set it and the wait it alone yields.
type marker struct {
	name string
	set  func(*Markers)
	want arv1.WaitingOn // Since is filled in by the test
}

func markers() []marker {
	return []marker{
		{"NeedsSetup", func(m *Markers) {
			m.Setup = &SetupBlock{Blocker: arv1.BlockerSecretMissing, Remedy: "Create the Secret team-a/llm-keys", Refs: []string{"Secret/llm-keys"}}
		}, arv1.WaitingOn{Reason: arv1.WaitNeedsSetup, NeedsAPerson: true, Summary: "NeedsSetup: SecretMissing",
			Blocker: arv1.BlockerSecretMissing, Remedy: "Create the Secret team-a/llm-keys"}},
		{"NeedsReconciliation", func(m *Markers) {
			m.NeedsReconciliation = &DanglingWrite{Seq: 7, Tool: "write_file"}
		}, arv1.WaitingOn{Reason: arv1.WaitNeedsReconciliation, NeedsAPerson: true, Summary: "NeedsReconciliation: write_file#7",
			Seq: i64p(7), Tool: "write_file"}},
		{"BudgetExceeded", func(m *Markers) {
			m.Budget = &BudgetHit{Kind: arv1.BudgetTokens, Limit: "1000", Observed: "1200"}
		}, arv1.WaitingOn{Reason: arv1.WaitBudgetExceeded, NeedsAPerson: true, Summary: "BudgetExceeded: Tokens",
			Budget: &arv1.BudgetLimit{Kind: arv1.BudgetTokens, Limit: "1000"}, Observed: "1200"}},
		{"QuotaExceeded", func(m *Markers) {
			m.Quota = &QuotaHit{Quota: "AgentRunQuota/team-a/monthly", Resource: arv1.QuotaCost, Used: "199.5", Hard: "200", NeedsAPerson: true}
		}, arv1.WaitingOn{Reason: arv1.WaitQuotaExceeded, NeedsAPerson: true, Summary: "QuotaExceeded: AgentRunQuota/team-a/monthly cost",
			Quota: "AgentRunQuota/team-a/monthly", Resource: arv1.QuotaCost, Used: "199.5", Hard: "200"}},
		{"TaintGate", func(m *Markers) { m.TaintGate = true },
			arv1.WaitingOn{Reason: arv1.WaitTaintGate, NeedsAPerson: true, Summary: "TaintGate"}},
		{"InteractionPoint", func(m *Markers) {
			m.InteractionPoint = &Question{Point: "approve-plan", Prompt: "Proceed with this plan?"}
		},
			arv1.WaitingOn{Reason: arv1.WaitInteractionPoint, NeedsAPerson: true, Summary: "InteractionPoint",
				Point: "approve-plan", Question: "Proceed with this plan?"}},
		{"FanOutWorkers", func(m *Markers) { m.FanOutOutstanding = i32(3) },
			arv1.WaitingOn{Reason: arv1.WaitFanOutWorkers, NeedsAPerson: false, Summary: "FanOutWorkers(3)", Outstanding: i32(3)}},
		{"Children", func(m *Markers) { m.ChildrenOutstanding = i32(2) },
			arv1.WaitingOn{Reason: arv1.WaitChildren, NeedsAPerson: false, Summary: "Children(2)", Outstanding: i32(2)}},
		{"ToolApproval", func(m *Markers) { m.HubRequest = arv1.WaitToolApproval },
			arv1.WaitingOn{Reason: arv1.WaitToolApproval, NeedsAPerson: true, Summary: "ToolApproval"}},
		{"Sleeping", func(m *Markers) { t := wakeAt; m.SleepUntil = &t },
			arv1.WaitingOn{Reason: arv1.WaitSleeping, NeedsAPerson: false, Summary: "Sleeping until 2030-01-02T03:04:05Z", WakeAt: mt(wakeAt)}},
		{"Signal", func(m *Markers) { m.Signal = "deploy-finished" },
			arv1.WaitingOn{Reason: arv1.WaitSignal, NeedsAPerson: false, Summary: "Signal", Signal: "deploy-finished"}},
		{"RateLimited", func(m *Markers) {
			m.RateLimited = &RateLimit{Provider: "openai", Model: "gpt-4o-mini", RetryAt: wakeAt}
		},
			arv1.WaitingOn{Reason: arv1.WaitRateLimited, NeedsAPerson: false, Summary: "RateLimited: openai/gpt-4o-mini",
				Provider: "openai", Model: "gpt-4o-mini", RetryAt: mt(wakeAt)}},
	}
}

var userPrompt = marker{"UserPrompt", func(m *Markers) { m.HubRequest = arv1.WaitUserPrompt },
	arv1.WaitingOn{Reason: arv1.WaitUserPrompt, NeedsAPerson: true, Summary: "UserPrompt"}}

func withSince(w arv1.WaitingOn, t time.Time) *arv1.WaitingOn {
	w.Since = mt(t)
	return &w
}

func showWait(w *arv1.WaitingOn) string {
	if w == nil {
		return "nil"
	}
	s := fmt.Sprintf("%+v", *w)
	for _, p := range []struct {
		name string
		v    any
	}{{"Since", w.Since}, {"Outstanding", w.Outstanding}, {"WakeAt", w.WakeAt}, {"Budget", w.Budget}, {"Seq", w.Seq}, {"RetryAt", w.RetryAt}} {
		if rv := reflect.ValueOf(p.v); !rv.IsNil() {
			s += fmt.Sprintf(" %s=%+v", p.name, rv.Elem().Interface())
		}
	}
	return s
}

func TestDeriveWaitingOnNone(t *testing.T) {
	if w := DeriveWaitingOn(Markers{}, nil, waitNow); w != nil {
		t.Errorf("no markers: got %s, want nil", showWait(w))
	}
	prev := withSince(arv1.WaitingOn{Reason: arv1.WaitTaintGate}, waitNow.Add(-time.Hour))
	if w := DeriveWaitingOn(Markers{}, prev, waitNow); w != nil {
		t.Errorf("no markers with a previous wait: got %s, want nil", showWait(w))
	}
	// Zero-valued markers that are not "set".
	if w := DeriveWaitingOn(Markers{HubRequest: "", Signal: ""}, nil, waitNow); w != nil {
		t.Errorf("empty hub request and signal: got %s, want nil", showWait(w))
	}
}

func TestDeriveWaitingOnSingleMarker(t *testing.T) {
	for _, mk := range append(markers(), userPrompt) {
		t.Run(mk.name, func(t *testing.T) {
			var m Markers
			mk.set(&m)
			got := DeriveWaitingOn(m, nil, waitNow)
			want := withSince(mk.want, waitNow)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %s\nwant %s", showWait(got), showWait(want))
			}
			if got != nil && got.NeedsAPerson != got.Reason.NeedsAPerson() {
				t.Errorf("NeedsAPerson %v disagrees with %s.NeedsAPerson()", got.NeedsAPerson, got.Reason)
			}
			if got != nil && len(got.Summary) > 128 {
				t.Errorf("summary %q is over the CRD's 128", got.Summary)
			}
		})
	}
}

// TestDeriveWaitingOnPrecedence sets every ordered pair (a before b in the
// documented order) and expects a to win; ToolApproval and UserPrompt share
// a level, so the order is checked once with each.
func TestDeriveWaitingOnPrecedence(t *testing.T) {
	for _, hub := range []marker{markers()[8], userPrompt} {
		order := markers()
		order[8] = hub
		for i, a := range order {
			for _, b := range order[i+1:] {
				var m Markers
				a.set(&m)
				b.set(&m)
				got := DeriveWaitingOn(m, nil, waitNow)
				if want := withSince(a.want, waitNow); !reflect.DeepEqual(got, want) {
					t.Errorf("%s + %s: got %s, want %s", a.name, b.name, showWait(got), showWait(want))
				}
			}
		}
		// All set at once, removing the winner each time, walks the order.
		var m Markers
		for _, mk := range order {
			mk.set(&m)
		}
		for i, mk := range order {
			got := DeriveWaitingOn(m, nil, waitNow)
			if got == nil || got.Reason != mk.want.Reason {
				t.Fatalf("with markers %d.. set: got %s, want %s", i, showWait(got), mk.want.Reason)
			}
			clearMarker(&m, mk.name)
		}
		if got := DeriveWaitingOn(m, nil, waitNow); got != nil {
			t.Errorf("every marker cleared: got %s", showWait(got))
		}
	}
}

func clearMarker(m *Markers, name string) {
	switch name {
	case "NeedsSetup":
		m.Setup = nil
	case "NeedsReconciliation":
		m.NeedsReconciliation = nil
	case "BudgetExceeded":
		m.Budget = nil
	case "QuotaExceeded":
		m.Quota = nil
	case "TaintGate":
		m.TaintGate = false
	case "InteractionPoint":
		m.InteractionPoint = nil
	case "FanOutWorkers":
		m.FanOutOutstanding = nil
	case "Children":
		m.ChildrenOutstanding = nil
	case "ToolApproval", "UserPrompt":
		m.HubRequest = ""
	case "Sleeping":
		m.SleepUntil = nil
	case "Signal":
		m.Signal = ""
	case "RateLimited":
		m.RateLimited = nil
	default:
		panic("unknown marker " + name)
	}
}

func TestDeriveWaitingOnSince(t *testing.T) {
	earlier := waitNow.Add(-90 * time.Minute)
	fanOut := Markers{FanOutOutstanding: i32(3)}

	// Same reason: since is kept, even when the details change.
	prev := withSince(arv1.WaitingOn{Reason: arv1.WaitFanOutWorkers, Outstanding: i32(5)}, earlier)
	got := DeriveWaitingOn(fanOut, prev, waitNow)
	if got == nil || got.Since == nil || !got.Since.Time.Equal(earlier) {
		t.Fatalf("same reason: since %v, want %v", got.Since, earlier)
	}
	if *got.Outstanding != 3 {
		t.Errorf("outstanding %d, want the new 3", *got.Outstanding)
	}
	// The result does not alias prev's since.
	prev.Since.Time = waitNow.Add(time.Hour)
	if !got.Since.Time.Equal(earlier) {
		t.Errorf("result's since changed with prev's: %v", got.Since.Time)
	}

	// Reason changes: since restarts now.
	prev = withSince(arv1.WaitingOn{Reason: arv1.WaitChildren, Outstanding: i32(3)}, earlier)
	got = DeriveWaitingOn(fanOut, prev, waitNow)
	if got == nil || got.Since == nil || !got.Since.Time.Equal(waitNow) {
		t.Errorf("changed reason: since %v, want %v", got.Since, waitNow)
	}

	// Same reason but no since recorded: now.
	prev = &arv1.WaitingOn{Reason: arv1.WaitFanOutWorkers, Outstanding: i32(3)}
	got = DeriveWaitingOn(fanOut, prev, waitNow)
	if got == nil || got.Since == nil || !got.Since.Time.Equal(waitNow) {
		t.Errorf("prev without since: since %v, want %v", got.Since, waitNow)
	}

	// NeedsSetup with a different blocker is the same reason: kept.
	prev = withSince(arv1.WaitingOn{Reason: arv1.WaitNeedsSetup, Blocker: arv1.BlockerSecretMissing, Remedy: "x"}, earlier)
	got = DeriveWaitingOn(Markers{Setup: &SetupBlock{Blocker: arv1.BlockerAuthFailed, Remedy: "y"}}, prev, waitNow)
	if !got.Since.Time.Equal(earlier) || got.Blocker != arv1.BlockerAuthFailed || got.Summary != "NeedsSetup: AuthFailed" {
		t.Errorf("setup blocker change: since %v blocker %s summary %q", got.Since.Time, got.Blocker, got.Summary)
	}

	// ToolApproval -> UserPrompt is a reason change.
	prev = withSince(arv1.WaitingOn{Reason: arv1.WaitToolApproval}, earlier)
	got = DeriveWaitingOn(Markers{HubRequest: arv1.WaitUserPrompt}, prev, waitNow)
	if !got.Since.Time.Equal(waitNow) {
		t.Errorf("ToolApproval -> UserPrompt: since %v, want %v", got.Since.Time, waitNow)
	}
}

// TestDeriveWaitingOnCopies: the wait does not alias the markers, so a
// marker changed later cannot change a status already derived.
func TestDeriveWaitingOnCopies(t *testing.T) {
	n := int32(3)
	m := Markers{FanOutOutstanding: &n}
	w := DeriveWaitingOn(m, nil, waitNow)
	n = 9
	if *w.Outstanding != 3 {
		t.Errorf("outstanding followed the marker: %d", *w.Outstanding)
	}
	dw := &DanglingWrite{Seq: 4, Tool: "shell"}
	w = DeriveWaitingOn(Markers{NeedsReconciliation: dw}, nil, waitNow)
	dw.Seq = 99
	if *w.Seq != 4 {
		t.Errorf("seq followed the marker: %d", *w.Seq)
	}
}

func TestDeriveWaitingOnSummaryFitsCRD(t *testing.T) {
	tool := "mcp__" + strings.Repeat("a", 200)
	w := DeriveWaitingOn(Markers{NeedsReconciliation: &DanglingWrite{Seq: 12345, Tool: tool}}, nil, waitNow)
	if len(w.Summary) > 128 {
		t.Errorf("summary is %d bytes, want <= 128", len(w.Summary))
	}
	if !strings.HasPrefix(w.Summary, "NeedsReconciliation: ") {
		t.Errorf("summary %q lost its reason", w.Summary)
	}
}

// TestDeriveWaitingOnQuotaThatResets: a quota wait its period's reset will
// lift needs no person, and says when.
func TestDeriveWaitingOnQuotaThatResets(t *testing.T) {
	reset := wakeAt
	m := Markers{Quota: &QuotaHit{Quota: "ClusterAgentRunQuota/team", Resource: arv1.QuotaTokens, Used: "1000", Hard: "1000", ResetAt: &reset}}
	got := DeriveWaitingOn(m, nil, waitNow)
	want := withSince(arv1.WaitingOn{Reason: arv1.WaitQuotaExceeded, Summary: "QuotaExceeded: ClusterAgentRunQuota/team tokens",
		Quota: "ClusterAgentRunQuota/team", Resource: arv1.QuotaTokens, Used: "1000", Hard: "1000", ResetAt: mt(wakeAt)}, waitNow)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %s\nwant %s", showWait(got), showWait(want))
	}
}
