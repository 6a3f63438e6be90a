// Package output checks a run's submitted output against the output spec
// (format and JSON Schema) before it is accepted, so a model that hands back
// the wrong shape is told why and tries again.
package output

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Spec is what output must look like.
type Spec struct {
	// Format is "text", "markdown" or "json" ("" accepts anything).
	Format string
	// Schema is a JSON Schema document (as JSON) the output must satisfy.
	Schema string
	// SchemaURL names Schema in validation messages; empty names it the
	// run's output schema (outputSchemaURL). Another document checked
	// here (a tool's input schema) gives its own name, so a message never
	// points a person at a schema they did not write.
	SchemaURL string
}

// outputSchemaURL names the run's output schema in validation messages.
const outputSchemaURL = "https://agentrun.dev/schemas/output.json"

// MaxBytes is the stored output's cap (the seeds' 256 KiB); longer output
// is stored truncated and flagged.
const MaxBytes = 256 << 10

// Check returns "" when text satisfies the spec, else a message for the
// model saying what is wrong.
func Check(spec Spec, text string) string {
	if strings.TrimSpace(text) == "" {
		return "the output is empty"
	}
	if spec.Format != "json" && spec.Schema == "" {
		return ""
	}
	var doc any
	if err := json.Unmarshal([]byte(text), &doc); err != nil {
		return fmt.Sprintf("the output must be JSON: %v", err)
	}
	if spec.Schema == "" {
		return ""
	}
	schemaDoc, err := jsonschema.UnmarshalJSON(strings.NewReader(spec.Schema))
	if err != nil {
		return fmt.Sprintf("the output schema itself is not valid JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	// An absolute name of our own: a relative one would be resolved against
	// the manager's working directory, which would then show in the message
	// a model, a status or an event gets.
	url := cmp.Or(spec.SchemaURL, outputSchemaURL)
	if err := c.AddResource(url, schemaDoc); err != nil {
		return fmt.Sprintf("the output schema cannot be used: %v", err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return fmt.Sprintf("the output schema cannot be used: %v", err)
	}
	inst, _ := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err := sch.Validate(inst); err != nil {
		msg := err.Error()
		if len(msg) > 1500 {
			msg = msg[:1500] + "..."
		}
		return "the output does not match the schema: " + msg
	}
	return ""
}

// Stored is the part of an output that is kept: at most MaxBytes, cut on a
// character boundary; truncated says whether anything was cut.
func Stored(text string) (stored string, truncated bool) {
	if len(text) <= MaxBytes {
		return text, false
	}
	return strings.ToValidUTF8(text[:MaxBytes], ""), true
}
