package tomlpos

import (
	"errors"
	"testing"

	"github.com/BurntSushi/toml"
)

const src = `# comment
[agent]
name = "x"   # trailing
description = """
[not.a.table]
fake = 1
"""
list = [
  ["nested"],
  { a = 1 },
]

[stages."quoted.name"]
mode = 'lit'

[[stages.s.script]]
text = "a # not a comment [x]"

[[stages.s.script]]
next = "b"
usage = {prompt = 1}

[[stages.s.script.tool_calls]]
name = "t"

[ stages . s . model ]
models = []
`

func TestIndex(t *testing.T) {
	x := New(src)
	tests := []struct {
		name string
		got  int
		want int
	}{
		{"agent", x.Line("agent"), 2},
		{"agent.name", x.Line("agent", "name"), 3},
		{"description", x.Line("agent", "description"), 4},
		{"fake not seen", x.Exact("not", "a", "table"), 0},
		{"fake key not seen", x.Exact("agent", "fake"), 0},
		{"list", x.Line("agent", "list"), 8},
		{"nested not a header", x.Exact("nested"), 0},
		{"quoted", x.Line("stages", "quoted.name"), 13},
		{"quoted mode", x.Line("stages", "quoted.name", "mode"), 14},
		{"script first", x.Line("stages", "s", "script"), 16},
		{"elem 0", x.Elem([]string{"stages", "s", "script"}, 0), 16},
		{"elem 0 text", x.Elem([]string{"stages", "s", "script"}, 0, "text"), 17},
		{"elem 1", x.Elem([]string{"stages", "s", "script"}, 1), 19},
		{"elem 1 next", x.Elem([]string{"stages", "s", "script"}, 1, "next"), 20},
		{"elem 1 missing key falls back", x.Elem([]string{"stages", "s", "script"}, 1, "text"), 19},
		{"inline falls back", x.Line("stages", "s", "script", "usage", "prompt"), 21},
		{"nested array", x.Line("stages", "s", "script", "tool_calls", "name"), 24},
		{"spaced header", x.Line("stages", "s", "model", "models"), 27},
		{"unknown", x.Line("nope"), 0},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: line %d, want %d", tt.name, tt.got, tt.want)
		}
	}
}

func TestDecodeError(t *testing.T) {
	var v struct{ A struct{ B int } }
	_, err := toml.Decode("[a]\nb = \"str\"\n", &v)
	line, msg := DecodeError(err, New("[a]\nb = \"str\"\n"))
	if line != 2 || msg == "" {
		t.Errorf("type error: line %d msg %q", line, msg)
	}
	_, err = toml.Decode("a = 1\nb = = 2\n", &v)
	line, _ = DecodeError(err, nil)
	if line != 2 {
		t.Errorf("syntax error: line %d (%v)", line, err)
	}
	line, msg = DecodeError(errors.New("toml: other"), nil)
	if line != 0 || msg != "other" {
		t.Errorf("plain: %d %q", line, msg)
	}
}

func TestDecodeErrorLines(t *testing.T) {
	for _, tt := range []struct {
		src  string
		line int
	}{
		{"[agent\n", 1},
		{"[agent\nname=1\n", 1},
		{"a = \"x\nb=1\n", 1},
		{"a = \nb=1\n", 1},
		{"a = 1\nb = = 2\n", 2},
		{"a = 1\n\n\nb = 'x", 4},
	} {
		var v any
		_, err := toml.Decode(tt.src, &v)
		if err == nil {
			t.Fatalf("%q: no error", tt.src)
		}
		if line, _ := DecodeError(err, New(tt.src)); line != tt.line {
			t.Errorf("%q: line %d, want %d (%v)", tt.src, line, tt.line, err)
		}
	}
}
