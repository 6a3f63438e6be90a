package v1alpha1_test

// These tests drive the real kubectl against the real API server, so what
// they check is exactly what a person at a terminal sees.

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := testenv.Kubectl(kubeconfig, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var columnGap = regexp.MustCompile(` {2,}`)

// parseTable splits kubectl's table output into rows of cells, keyed by
// header. It asserts the header is exactly want. Cells are cut at the
// header's column offsets, because cells (and one header) contain spaces.
func parseTable(t *testing.T, out string, want []string) map[string]map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	header := lines[0]
	if got := columnGap.Split(strings.TrimSpace(header), -1); !slices.Equal(got, want) {
		t.Fatalf("header columns = %q, want %q\n%s", got, want, out)
	}
	starts := make([]int, len(want))
	pos := 0
	for i, h := range want {
		idx := strings.Index(header[pos:], h)
		if idx < 0 {
			t.Fatalf("header %q has no %q after offset %d", header, h, pos)
		}
		starts[i] = pos + idx
		pos = starts[i] + len(h)
	}
	rows := map[string]map[string]string{}
	for _, line := range lines[1:] {
		row := map[string]string{}
		for i, h := range want {
			from, to := starts[i], len(line)
			if i+1 < len(starts) {
				to = min(starts[i+1], len(line))
			}
			if from >= len(line) {
				row[h] = ""
				continue
			}
			// A cell that spills into the next column would mean the
			// offsets are wrong.
			if i > 0 && line[from-1] != ' ' {
				t.Fatalf("row %q: column %s does not start at offset %d", line, h, from)
			}
			row[h] = strings.TrimSpace(line[from:to])
		}
		rows[row["NAME"]] = row
	}
	return rows
}

type kubectlRun struct {
	name      string
	spec      arv1.AgentRunSpec
	status    arv1.AgentRunStatus
	wantCells map[string]string // exact cells, by header
	lastMoved *time.Time        // expected LAST MOVED source, nil for blank
	wideCells map[string]string // TITLE, MODEL, PARENT
	unwritten bool              // no status write: the CRD default shows
}

func TestKubectlGetColumns(t *testing.T) {
	ns := newNamespace(t)
	ctx := testCtx(t)
	now := time.Now()
	thirtyMinAgo := now.Add(-30 * time.Minute).Truncate(time.Second)
	twoHoursAgo := now.Add(-2 * time.Hour).Truncate(time.Second)
	fiveMinAgo := now.Add(-5 * time.Minute).Truncate(time.Second)

	spec := func(agent string) arv1.AgentRunSpec {
		s := validSpec()
		s.Agent = agent
		return s
	}
	runs := []kubectlRun{
		{
			name: "fanout", spec: spec("researcher"),
			status: arv1.AgentRunStatus{
				Phase: arv1.PhaseWaitingInput,
				WaitingOn: &arv1.WaitingOn{Reason: arv1.WaitFanOutWorkers, Summary: "FanOutWorkers(3)",
					Outstanding: ptr(int32(3))},
				Stage: "research 1/3", Title: "Survey retry libraries", Model: "anthropic/claude-sonnet",
				Usage:          arv1.Usage{TotalTokens: 1200, CostUSD: "0.0042"},
				LastProgressAt: at(thirtyMinAgo, 0),
			},
			wantCells: map[string]string{"AGENT": "researcher", "PHASE": "WaitingInput", "WAITING": "FanOutWorkers(3)",
				"STAGE": "research 1/3", "TOKENS": "1200", "COST": "0.0042"},
			lastMoved: &thirtyMinAgo,
			wideCells: map[string]string{"TITLE": "Survey retry libraries", "MODEL": "anthropic/claude-sonnet", "PARENT": ""},
		},
		{
			name: "setup", spec: spec("researcher"),
			status: arv1.AgentRunStatus{
				Phase: arv1.PhaseWaitingInput,
				WaitingOn: &arv1.WaitingOn{Reason: arv1.WaitNeedsSetup, NeedsAPerson: true, Summary: "NeedsSetup: SecretMissing",
					Blocker: arv1.BlockerSecretMissing, Remedy: `Create Secret "openai" with key "api-key".`},
			},
			wantCells: map[string]string{"AGENT": "researcher", "PHASE": "WaitingInput", "WAITING": "NeedsSetup: SecretMissing",
				"STAGE": "", "TOKENS": "", "COST": ""},
			wideCells: map[string]string{"TITLE": "", "MODEL": "", "PARENT": ""},
		},
		{
			name: "unpriced", spec: spec("writer"),
			status: arv1.AgentRunStatus{
				Phase: arv1.PhaseRunning, Stage: "draft 2/4", ParentRun: "fanout", Model: "local/llama",
				Usage:          arv1.Usage{TotalTokens: 500, CostUSD: "unknown", CostPricedUSD: "0.0010", UnpricedCalls: 1},
				LastProgressAt: at(fiveMinAgo, 0),
			},
			wantCells: map[string]string{"AGENT": "writer", "PHASE": "Running", "WAITING": "",
				"STAGE": "draft 2/4", "TOKENS": "500", "COST": "unknown"},
			lastMoved: &fiveMinAgo,
			wideCells: map[string]string{"TITLE": "", "MODEL": "local/llama", "PARENT": "fanout"},
		},
		{
			name: "done", spec: spec("code-reviewer"),
			status: arv1.AgentRunStatus{
				Phase: arv1.PhaseComplete, Stage: "review 3/3", Title: "Review the payment retry change",
				Model: "openai/gpt-5",
				Usage: arv1.Usage{PromptTokens: 90000, CompletionTokens: 8765, TotalTokens: 98765,
					CostUSD: "1.2345", CostPricedUSD: "1.2345", CostIsExact: true},
				LastProgressAt: at(twoHoursAgo, 0),
			},
			wantCells: map[string]string{"AGENT": "code-reviewer", "PHASE": "Complete", "WAITING": "",
				"STAGE": "review 3/3", "TOKENS": "98765", "COST": "1.2345"},
			lastMoved: &twoHoursAgo,
			wideCells: map[string]string{"TITLE": "Review the payment retry change", "MODEL": "openai/gpt-5", "PARENT": ""},
		},
		{
			// Never written by a controller: the status default says it
			// waits in line, at no write's cost.
			name: "waiting", spec: spec("researcher"), unwritten: true,
			wantCells: map[string]string{"AGENT": "researcher", "PHASE": "Queued", "WAITING": "",
				"STAGE": "", "TOKENS": "", "COST": ""},
			wideCells: map[string]string{"TITLE": "", "MODEL": "", "PARENT": ""},
		},
	}
	created := map[string]time.Time{}
	for _, r := range runs {
		run := createRun(t, ns, r.name, r.spec)
		created[r.name] = run.CreationTimestamp.Time
		if r.unwritten {
			continue
		}
		run.Status = r.status
		if err := k8sClient.Status().Update(ctx, run); err != nil {
			t.Fatalf("status of %s: %v", r.name, err)
		}
	}

	// dateCell is the set of renderings acceptable for a date column: the
	// age as of just before and just after kubectl ran.
	dateCells := func(since time.Time, before, after time.Time) []string {
		return []string{duration.HumanDuration(before.Sub(since)), duration.HumanDuration(after.Sub(since))}
	}
	getTable := func(t *testing.T, header []string, args ...string) (map[string]map[string]string, time.Time, time.Time) {
		before := time.Now()
		out := kubectl(t, args...)
		after := time.Now()
		t.Logf("kubectl %s:\n%s", strings.Join(args, " "), out)
		rows := parseTable(t, out, header)
		if len(rows) != len(runs) {
			t.Fatalf("%d rows, want %d:\n%s", len(rows), len(runs), out)
		}
		return rows, before, after
	}
	check := func(t *testing.T, rows map[string]map[string]string, before, after time.Time, wide bool) {
		for _, r := range runs {
			row, ok := rows[r.name]
			if !ok {
				t.Fatalf("no row for %s", r.name)
			}
			want := map[string]string{}
			for k, v := range r.wantCells {
				want[k] = v
			}
			if wide {
				for k, v := range r.wideCells {
					want[k] = v
				}
			}
			for col, v := range want {
				if row[col] != v {
					t.Errorf("%s: %s = %q, want %q", r.name, col, row[col], v)
				}
			}
			if r.lastMoved == nil {
				if row["LAST MOVED"] != "" {
					t.Errorf("%s: LAST MOVED = %q, want blank", r.name, row["LAST MOVED"])
				}
			} else if ok := dateCells(*r.lastMoved, before, after); !slices.Contains(ok, row["LAST MOVED"]) {
				t.Errorf("%s: LAST MOVED = %q, want one of %q", r.name, row["LAST MOVED"], ok)
			}
			if ok := dateCells(created[r.name], before, after); !slices.Contains(ok, row["AGE"]) {
				t.Errorf("%s: AGE = %q, want one of %q", r.name, row["AGE"], ok)
			}
		}
	}

	header := []string{"NAME", "AGENT", "PHASE", "WAITING", "STAGE", "TOKENS", "COST", "LAST MOVED", "AGE"}
	wideHeader := append(slices.Clone(header), "TITLE", "MODEL", "PARENT", "PRIORITY", "CLASS")

	t.Run("get agentruns", func(t *testing.T) {
		rows, before, after := getTable(t, header, "get", "agentruns", "-n", ns)
		check(t, rows, before, after, false)
	})
	t.Run("get ar -o wide", func(t *testing.T) {
		rows, before, after := getTable(t, wideHeader, "get", "ar", "-o", "wide", "-n", ns)
		check(t, rows, before, after, true)
	})
	t.Run("get agentrun", func(t *testing.T) {
		rows, before, after := getTable(t, header, "get", "agentrun", "-n", ns)
		check(t, rows, before, after, false)
	})
	// kubectl expands a category before it looks up a resource name, so a
	// category named like the singular "agentrun" would turn `kubectl get
	// agentrun NAME` into a get across every resource of the category. The
	// category has a name of its own and holds the runs and their answers.
	t.Run("category agentrun-all holds runs, answers and schedules", func(t *testing.T) {
		out := kubectl(t, "api-resources", "--categories=agentrun-all", "-o", "name")
		if got := strings.Fields(out); !slices.Equal(got, []string{"agentrunanswers.agentrun.dev", "agentruns.agentrun.dev", "agentrunschedules.agentrun.dev"}) {
			t.Fatalf("resources in category agentrun-all = %q, want [agentrunanswers.agentrun.dev agentruns.agentrun.dev agentrunschedules.agentrun.dev]", got)
		}
		if got := strings.Fields(kubectl(t, "api-resources", "--categories=agentrun", "-o", "name")); len(got) != 0 {
			t.Fatalf("category agentrun, which would shadow the singular name, holds %q", got)
		}
		// A category lists kind/name, as it may span several kinds.
		out = kubectl(t, "get", "agentrun-all", "-n", ns)
		for _, r := range runs {
			if !strings.Contains(out, "agentrun.agentrun.dev/"+r.name+" ") {
				t.Errorf("kubectl get agentrun-all lacks run %s:\n%s", r.name, out)
			}
		}
	})
	t.Run("get one by name", func(t *testing.T) {
		rows, before, after := getTable(t, header, "get", "agentruns", "-n", ns)
		// Also a single-object get must print the same row.
		out := kubectl(t, "get", "ar", "setup", "-n", ns)
		one := parseTable(t, out, header)
		if len(one) != 1 || one["setup"]["WAITING"] != "NeedsSetup: SecretMissing" {
			t.Fatalf("single get rows = %v", one)
		}
		check(t, rows, before, after, false)
	})
}

// sampleFiles lists the sample manifests in config/samples.
func sampleFiles(t *testing.T) (string, []string) {
	t.Helper()
	dir := filepath.Join(testenv.RepoRoot(), "config", "samples")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || n == "kustomization.yaml" || !strings.HasSuffix(n, ".yaml") && !strings.HasSuffix(n, ".yml") {
			continue
		}
		files = append(files, n)
	}
	return dir, files
}

func TestSamplesApply(t *testing.T) {
	dir, files := sampleFiles(t)
	if !slices.Contains(files, "agentrun_v1alpha1_agentrun.yaml") {
		t.Fatalf("config/samples lacks agentrun_v1alpha1_agentrun.yaml; has %v", files)
	}

	t.Run("kustomization lists every sample", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var k struct {
			Resources []string `json:"resources"`
		}
		if err := yaml.Unmarshal(data, &k); err != nil {
			t.Fatal(err)
		}
		got := slices.Sorted(slices.Values(k.Resources))
		if !slices.Equal(got, files) {
			t.Fatalf("kustomization.yaml resources = %v, sample files = %v", got, files)
		}
	})

	ns := newNamespace(t)
	var names []string
	for _, f := range files {
		path := filepath.Join(dir, f)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if isToolPolicy(t, data) {
			continue // TestToolPolicySamplesApply
		}
		sample := &arv1.AgentRun{}
		if err := yaml.UnmarshalStrict(data, sample); err != nil {
			t.Fatalf("%s: not an AgentRun with only known fields: %v", f, err)
		}
		names = append(names, sample.Name)

		t.Run(f, func(t *testing.T) {
			if sample.APIVersion != arv1.GroupVersion.String() || sample.Kind != "AgentRun" {
				t.Fatalf("apiVersion/kind = %s/%s", sample.APIVersion, sample.Kind)
			}
			if sample.Name == "" || sample.Namespace != "" {
				t.Fatalf("a sample needs a name and no namespace; got %q in %q", sample.Name, sample.Namespace)
			}
			out := kubectl(t, "apply", "--dry-run=server", "-f", path, "-n", ns)
			if want := "agentrun.agentrun.dev/" + sample.Name + " created (server dry run)"; !strings.Contains(out, want) {
				t.Fatalf("server dry run said %q, want %q", out, want)
			}
			out = kubectl(t, "apply", "-f", path, "-n", ns)
			if want := "agentrun.agentrun.dev/" + sample.Name + " created"; strings.TrimSpace(out) != want {
				t.Fatalf("apply said %q, want exactly %q", out, want)
			}
			got := &arv1.AgentRun{}
			if err := k8sClient.Get(testCtx(t), client.ObjectKey{Namespace: ns, Name: sample.Name}, got); err != nil {
				t.Fatal(err)
			}
			want := sample.Spec
			if want.ProviderConfig == "" {
				want.ProviderConfig = "agentrun-providers"
			}
			if !equality.Semantic.DeepEqual(got.Spec, want) {
				t.Fatalf("stored spec differs from the sample.\nsample: %s\nstored: %s", mustJSON(want), mustJSON(got.Spec))
			}
			// Re-applying the unchanged sample is a no-op, not a refusal.
			out = kubectl(t, "apply", "-f", path, "-n", ns)
			if want := "agentrun.agentrun.dev/" + sample.Name + " unchanged"; strings.TrimSpace(out) != want {
				t.Fatalf("re-apply said %q, want %q", out, want)
			}
		})
	}

	t.Run("apply -k", func(t *testing.T) {
		ns := newNamespace(t)
		out := kubectl(t, "apply", "--dry-run=server", "-k", dir, "-n", ns)
		for _, n := range names {
			if want := "agentrun.agentrun.dev/" + n + " created (server dry run)"; !strings.Contains(out, want) {
				t.Errorf("apply -k output %q lacks %q", out, want)
			}
		}
	})
}
