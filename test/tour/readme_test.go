package tour

import (
	"strings"
	"testing"
)

// TestBlocks: the extraction takes exactly the marked blocks, and refuses a
// README whose tour has a shell block the test would silently skip.
func TestBlocks(t *testing.T) {
	readme := strings.Join([]string{
		"# x",
		"<!-- tour: terminal 1 -->",
		"```sh",
		"make run",
		"```",
		"```console",
		"$ not a command",
		"```",
		"<!-- tour -->",
		"```sh",
		"export A=1",
		"",
		"echo $A   # a comment",
		"```",
		"## Later",
		"```sh",
		"unmarked after the tour",
		"```",
		"<!-- tour: not run (needs a cluster) -->",
		"```sh",
		"helm install x",
		"```",
	}, "\n")
	blocks, err := Blocks(readme, "## Later")
	if err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, b := range blocks {
		got = append(got, b.Kind+":"+strings.Join(b.Commands, "|"))
	}
	want := []string{"terminal 1:make run", ":export A=1|echo $A   # a comment", "not run (needs a cluster):helm install x"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("blocks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !blocks[2].Skipped() || blocks[1].Skipped() {
		t.Error("Skipped is wrong")
	}

	for name, bad := range map[string]string{
		"unmarked tour block":   "```sh\nkubectl get ar\n```\n## Later\n",
		"marker before console": "<!-- tour -->\n```console\nx\n```\n## Later\n",
		"marker before prose":   "<!-- tour -->\nsome text\n## Later\n",
		"unterminated block":    "<!-- tour -->\n```sh\nx\n",
	} {
		if _, err := Blocks(bad, "## Later"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
