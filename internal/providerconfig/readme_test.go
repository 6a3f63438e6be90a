package providerconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMEExampleParses keeps the README's provider example honest: the
// TOML block headed "# providers.toml" must parse and resolve.
func TestREADMEExampleParses(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	start := strings.Index(text, "# providers.toml\n")
	if start < 0 {
		t.Fatal("README has no providers.toml example")
	}
	end := strings.Index(text[start:], "```")
	var lines []string
	for _, l := range strings.Split(text[start:start+end], "\n") {
		lines = append(lines, strings.TrimPrefix(l, "  "))
	}
	cfg, err := Parse(map[string]string{DataKey: strings.Join(lines, "\n")})
	if err != nil {
		t.Fatalf("README example does not parse: %v", err)
	}
	for _, ref := range []string{"openai/gpt-4o-mini", "anthropic/claude-sonnet-4-5"} {
		if _, _, ok := cfg.Resolve(ref); !ok {
			t.Errorf("README example does not resolve %s", ref)
		}
	}
}
