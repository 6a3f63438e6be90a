package output

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	schema := `{"type":"object","required":["verdict"],"properties":{"verdict":{"enum":["ok","bad"]}}}`
	for _, c := range []struct {
		name string
		spec Spec
		text string
		want string // substring of the refusal; "" = accepted
	}{
		{"text accepts prose", Spec{Format: "text"}, "hello", ""},
		{"no spec accepts anything", Spec{}, "{not json", ""},
		{"empty is refused", Spec{}, "  ", "empty"},
		{"json must parse", Spec{Format: "json"}, "{not json", "must be JSON"},
		{"json without schema", Spec{Format: "json"}, `{"a":1}`, ""},
		{"schema satisfied", Spec{Format: "json", Schema: schema}, `{"verdict":"ok"}`, ""},
		{"schema: missing property", Spec{Format: "json", Schema: schema}, `{"x":1}`, "verdict"},
		{"schema: bad enum", Spec{Format: "json", Schema: schema}, `{"verdict":"maybe"}`, "does not match the schema"},
		{"broken schema", Spec{Format: "json", Schema: "{"}, `{}`, "schema itself"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Check(c.spec, c.text)
			if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
				t.Fatalf("Check = %q, want %q", got, c.want)
			}
		})
	}
}

// TestCheckNamesTheSchemaChecked: a refusal names the schema checked: the
// run's output schema by default, the name a caller gives otherwise (a
// tool's input schema), never the output schema in its place.
func TestCheckNamesTheSchemaChecked(t *testing.T) {
	schema := `{"type":"object","properties":{"title":{"type":"string"}}}`
	const tool = "https://agentrun.dev/schemas/tools/create_ticket/input.json"
	if why := Check(Spec{Format: "json", Schema: schema}, `{"title":42}`); !strings.Contains(why, "'"+outputSchemaURL+"#'") {
		t.Errorf("the output's refusal %q does not name the output schema", why)
	}
	why := Check(Spec{Format: "json", Schema: schema, SchemaURL: tool}, `{"title":42}`)
	if !strings.Contains(why, "'"+tool+"#'") || strings.Contains(why, outputSchemaURL) {
		t.Errorf("the refusal %q does not name the schema checked, %s", why, tool)
	}
}
