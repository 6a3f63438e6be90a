package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// echoDraft hands back the draft region it was given.
const echoDraft = `
[agent]
name = "echo"
[agent.title]
enabled = false
[stages.only]
document_region = "draft"
[stages.only.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.only.script]]
complete = true
output = "got: {document}"
`

func text(s string) *string { return &s }

func regionRun(ns, name string, regions ...arv1.RegionSource) *arv1.AgentRun {
	return &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: arv1.AgentRunSpec{Agent: "echo", Task: "t", Regions: regions}}
}

// TestRegionsValidation: the API server refuses a region with no source
// or two, a bad or repeated name, inline text over its caps, too many
// regions, and any change to spec.regions after creation.
func TestRegionsValidation(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	cm := &arv1.ConfigMapKeyRef{Name: "drafts", Key: "d.md"}
	many := func(n, size int) []arv1.RegionSource {
		var out []arv1.RegionSource
		for i := range n {
			out = append(out, arv1.RegionSource{Name: fmt.Sprintf("r%d", i), Text: text(strings.Repeat("x", size))})
		}
		return out
	}
	refused := []struct {
		name    string
		regions []arv1.RegionSource
		msg     string
	}{
		{"no source", []arv1.RegionSource{{Name: "draft"}}, "exactly one of text, configMapKeyRef and secretKeyRef"},
		{"two sources", []arv1.RegionSource{{Name: "draft", Text: text("a"), ConfigMapKeyRef: cm}}, "exactly one of text, configMapKeyRef and secretKeyRef"},
		{"three sources", []arv1.RegionSource{{Name: "draft", Text: text("a"), ConfigMapKeyRef: cm, SecretKeyRef: &arv1.SecretKeyRef{Name: "s", Key: "k"}}}, "exactly one of"},
		{"bad name", []arv1.RegionSource{{Name: "Draft", Text: text("a")}}, "spec.regions[0].name"},
		{"repeated name", []arv1.RegionSource{{Name: "draft", Text: text("a")}, {Name: "draft", Text: text("b")}}, "Duplicate value"},
		{"one text too long", many(1, 16385), "spec.regions[0].text: Too long"},
		{"texts too long together", many(5, 16000), "inline region text may total at most 64 KiB"},
		{"too many regions", many(17, 1), "must have at most 16 items"},
		{"empty key reference", []arv1.RegionSource{{Name: "draft", ConfigMapKeyRef: &arv1.ConfigMapKeyRef{Name: "drafts"}}}, "spec.regions[0].configMapKeyRef.key"},
	}
	for i, c := range refused {
		err := k8s.Create(ctx, regionRun(ns, fmt.Sprintf("bad-%d", i), c.regions...))
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.msg)
		}
	}

	ok := regionRun(ns, "ok", append(many(4, 16000), arv1.RegionSource{Name: "draft", ConfigMapKeyRef: cm},
		arv1.RegionSource{Name: "secret-notes", SecretKeyRef: &arv1.SecretKeyRef{Name: "notes", Key: "n"}},
		arv1.RegionSource{Name: "empty", Text: text("")})...)
	if err := k8s.Create(ctx, ok); err != nil {
		t.Fatalf("a valid set of regions is refused: %v", err)
	}
	ok.Spec.Regions[0].Text = text("changed")
	if err := k8s.Update(ctx, ok); err == nil || !strings.Contains(err.Error(), "regions are fixed at creation") {
		t.Errorf("changing a region: %v", err)
	}
	none := regionRun(ns, "none")
	if err := k8s.Create(ctx, none); err != nil {
		t.Fatal(err)
	}
	none.Spec.Regions = []arv1.RegionSource{{Name: "draft", Text: text("late")}}
	if err := k8s.Update(ctx, none); err == nil || !strings.Contains(err.Error(), "regions are fixed at creation") {
		t.Errorf("adding regions after creation: %v", err)
	}
}

// TestRegionSourcesParkUntilFixed: a region read from a ConfigMap or
// Secret that does not exist, lacks the key or holds too much parks the
// run on NeedsSetup with a remedy naming the object; fixing the object
// wakes the run, which then sees the content. The content is journaled,
// never copied into the AgentRun.
func TestRegionSourcesParkUntilFixed(t *testing.T) {
	startManager(t, managerOpts{})
	for _, c := range regionSourceCases() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ns := newNamespace(t)
			createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
			createConfigMap(t, ns, "echo", map[string]string{"agent.toml": echoDraft})
			c.arrange(t, ns)
			if err := k8s.Create(context.Background(), regionRun(ns, "r", c.source)); err != nil {
				t.Fatal(err)
			}
			run := waitFor(t, ns, "r", 20*time.Second, "NeedsSetup "+string(c.blocker), blockedOn(c.blocker))
			w := run.Status.WaitingOn
			for _, s := range append(c.remedyHas, ns) {
				if !strings.Contains(w.Remedy, s) {
					t.Errorf("remedy %q lacks %q", w.Remedy, s)
				}
			}
			if fmt.Sprint(run.Status.SetupRefs) != fmt.Sprint([]string{c.ref}) || !w.NeedsAPerson {
				t.Errorf("setupRefs = %v needsAPerson %v, want [%s] true", run.Status.SetupRefs, w.NeedsAPerson, c.ref)
			}
			if run.Status.BlueprintSnapshot != "" {
				t.Error("the run started before its regions could be read")
			}

			c.fix(t, ns)
			done := waitFor(t, ns, "r", 20*time.Second, "Complete after the fix", phaseIs(arv1.PhaseComplete))
			if got := finalOutput(t, done); got != "got: "+regionContent {
				t.Errorf("output %q: the model did not see the region", got)
			}
			raw, _ := json.Marshal(done)
			if strings.Contains(string(raw), regionContent) {
				t.Error("the region's content is copied into the AgentRun")
			}
			if r := journal.Regions(journalEntries(t, ns, string(done.UID)))["draft"]; r.Content != regionContent || r.By != journal.BySpec || !r.Seeded {
				t.Errorf("journaled region %+v", r)
			}
		})
	}
}

// regionContent is what a fixed region source holds.
const regionContent = "Chapter one: the region's content."

// regionSourceCase is a region source that parks a run, and its fix.
type regionSourceCase struct {
	name      string
	source    arv1.RegionSource
	arrange   func(t *testing.T, ns string)
	blocker   arv1.SetupBlocker
	remedyHas []string
	ref       string
	fix       func(t *testing.T, ns string)
}

func regionSourceCases() []regionSourceCase {
	const content = regionContent
	return []regionSourceCase{
		{
			name:      "ConfigMap missing",
			source:    arv1.RegionSource{Name: "draft", ConfigMapKeyRef: &arv1.ConfigMapKeyRef{Name: "drafts", Key: "ch1.md"}},
			arrange:   func(*testing.T, string) {},
			blocker:   arv1.BlockerRegionMissing,
			remedyHas: []string{"Create the ConfigMap", "/drafts", `"ch1.md"`, `region "draft"`, "kubectl create configmap drafts -n "},
			ref:       "ConfigMap/drafts",
			fix: func(t *testing.T, ns string) {
				createConfigMap(t, ns, "drafts", map[string]string{"ch1.md": content})
			},
		},
		{
			name:   "Secret key missing",
			source: arv1.RegionSource{Name: "draft", SecretKeyRef: &arv1.SecretKeyRef{Name: "private-drafts", Key: "ch1.md"}},
			arrange: func(t *testing.T, ns string) {
				createSecret(t, ns, "private-drafts", map[string]string{"other.md": "x"})
			},
			blocker:   arv1.BlockerRegionMissing,
			remedyHas: []string{"has no key", `"ch1.md"`, "kubectl create secret generic private-drafts -n "},
			ref:       "Secret/private-drafts",
			fix: func(t *testing.T, ns string) {
				setSecretData(t, ns, "private-drafts", map[string]string{"ch1.md": content})
			},
		},
		{
			name:   "ConfigMap key too large",
			source: arv1.RegionSource{Name: "draft", ConfigMapKeyRef: &arv1.ConfigMapKeyRef{Name: "drafts", Key: "ch1.md"}},
			arrange: func(t *testing.T, ns string) {
				createConfigMap(t, ns, "drafts", map[string]string{"ch1.md": strings.Repeat("x", journal.MaxRegionBytes+1)})
			},
			blocker:   arv1.BlockerRegionTooLarge,
			remedyHas: []string{fmt.Sprintf("holds %d bytes", journal.MaxRegionBytes+1), "shorten it"},
			ref:       "ConfigMap/drafts",
			fix: func(t *testing.T, ns string) {
				setConfigMapData(t, ns, "drafts", map[string]string{"ch1.md": content})
			},
		},
	}
}
