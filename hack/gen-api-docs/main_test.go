package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is where go test runs this package from, two levels down.
var repoRoot = filepath.Join("..", "..")

// TestReferenceIsFresh regenerates the API reference in memory and fails if
// the committed docs/api-reference.md differs, so the page cannot drift
// from the types.
func TestReferenceIsFresh(t *testing.T) {
	want, err := Generate(filepath.Join(repoRoot, "api", "v1alpha1"))
	if err != nil {
		t.Fatalf("generating the reference: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(repoRoot, "docs", "api-reference.md"))
	if err != nil {
		t.Fatalf("reading docs/api-reference.md: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("docs/api-reference.md is stale: run go run ./hack/gen-api-docs -o docs/api-reference.md")
	}
}

// TestDeterministic: two runs give the same bytes.
func TestDeterministic(t *testing.T) {
	dir := filepath.Join(repoRoot, "api", "v1alpha1")
	a, err := Generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		b, err := Generate(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Fatal("two generations differ")
		}
	}
}

// TestContent checks the order of the leading types and a few facts the
// markers carry.
func TestContent(t *testing.T) {
	b, err := Generate(filepath.Join(repoRoot, "api", "v1alpha1"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	order := []string{"\n### AgentRun\n", "\n### AgentRunSpec\n", "\n### AgentRunStatus\n", "\n### ActiveClock\n"}
	last := -1
	for _, h := range order {
		i := strings.Index(s, h)
		if i < 0 {
			t.Fatalf("missing heading %q", strings.TrimSpace(h))
		}
		if i < last {
			t.Fatalf("heading %q out of order", strings.TrimSpace(h))
		}
		last = i
	}
	for _, want := range []string{
		"| `agent` | string | required |",
		"default: `agentrun-providers`",
		"- budgets.costUSD may only be raised (reported at `.costUSD`)",
		"rule: agent is immutable",
		"| `BlueprintMissing` |",
		"pattern `^(unknown\\|[0-9]+(\\.[0-9]+)?)$`",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("reference lacks %q", want)
		}
	}
}

func TestParseArgs(t *testing.T) {
	got := parseArgs(`rule="self == 'a,b' && x == \"y\"",message="m, n",fieldPath=".steps"`)
	if got["rule"] != `self == 'a,b' && x == "y"` || got["message"] != "m, n" || got["fieldPath"] != ".steps" {
		t.Fatalf("parseArgs: %#v", got)
	}
	got = parseArgs("name=\"Agent\",type=string,JSONPath=`.spec.agent`,priority=10")
	if got["name"] != "Agent" || got["type"] != "string" || got["JSONPath"] != ".spec.agent" || got["priority"] != "10" {
		t.Fatalf("parseArgs: %#v", got)
	}
}
