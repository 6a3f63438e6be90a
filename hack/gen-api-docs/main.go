// Command gen-api-docs writes the AgentRun API reference (Markdown) from the
// Go types in api/v1alpha1: every exported struct with its doc comment and a
// table of its fields, and every string enum with its values. Field
// requiredness, defaults and validation come from the same +required,
// +optional, +kubebuilder:default and +kubebuilder:validation markers that
// controller-gen turns into the CRD schema, so the reference cannot say
// something the API server does not enforce.
//
// Usage, from the repository root:
//
//	go run ./hack/gen-api-docs -o docs/api-reference.md
//
// Without -o the reference is written to standard output. The output is
// deterministic: the same sources always give the same bytes.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

func main() {
	apiDir := flag.String("api", filepath.Join("api", "v1alpha1"), "directory holding the *_types.go files")
	out := flag.String("o", "", "write the reference to this file instead of standard output")
	flag.Parse()

	b, err := Generate(*apiDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen-api-docs:", err)
		os.Exit(1)
	}
	if *out == "" {
		if _, err := os.Stdout.Write(b); err != nil {
			fmt.Fprintln(os.Stderr, "gen-api-docs:", err)
			os.Exit(1)
		}
		return
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gen-api-docs:", err)
		os.Exit(1)
	}
}

// leadingTypes come first, in this order; every other struct follows in
// name order.
var leadingTypes = []string{"AgentRun", "AgentRunSpec", "AgentRunStatus"}

// marker is one +name=args comment line.
type marker struct {
	name string
	// value is everything after the first "=" for single-value markers.
	value string
	// args are the key=value pairs of multi-argument markers
	// (XValidation, printcolumn, resource).
	args map[string]string
}

// multiArg are the markers whose arguments are key=value pairs after the
// marker name.
var multiArg = []string{
	"kubebuilder:validation:XValidation:",
	"kubebuilder:printcolumn:",
	"kubebuilder:resource:",
}

func parseMarker(line string) marker {
	line = strings.TrimPrefix(strings.TrimSpace(line), "+")
	for _, p := range multiArg {
		if rest, ok := strings.CutPrefix(line, p); ok {
			return marker{name: strings.TrimSuffix(p, ":"), args: parseArgs(rest)}
		}
	}
	name, value, _ := strings.Cut(line, "=")
	return marker{name: name, value: unquote(value)}
}

// parseArgs splits the arguments of a multi-argument marker, such as
// rule="...",message="...",fieldPath=".x", into their pairs. Values may be
// double-quoted (with backslash escapes), back-quoted or bare.
func parseArgs(s string) map[string]string {
	args := map[string]string{}
	for len(s) > 0 {
		key, rest, ok := strings.Cut(s, "=")
		if !ok {
			args[strings.TrimSpace(s)] = ""
			break
		}
		key = strings.TrimSpace(key)
		var val string
		switch {
		case strings.HasPrefix(rest, `"`):
			i := 1
			var b strings.Builder
			for i < len(rest) && rest[i] != '"' {
				if rest[i] == '\\' && i+1 < len(rest) {
					i++
				}
				b.WriteByte(rest[i])
				i++
			}
			val, rest = b.String(), rest[min(i+1, len(rest)):]
		case strings.HasPrefix(rest, "`"):
			end := strings.Index(rest[1:], "`")
			if end < 0 {
				val, rest = rest[1:], ""
			} else {
				val, rest = rest[1:end+1], rest[end+2:]
			}
		default:
			end := strings.Index(rest, ",")
			if end < 0 {
				val, rest = rest, ""
			} else {
				val, rest = rest[:end], rest[end:]
			}
		}
		args[key] = val
		s = strings.TrimPrefix(rest, ",")
	}
	return args
}

func unquote(v string) string {
	if len(v) >= 2 && v[0] == '`' && v[len(v)-1] == '`' {
		return v[1 : len(v)-1]
	}
	if len(v) >= 2 && v[0] == '"' {
		if u, err := strconv.Unquote(v); err == nil {
			return u
		}
	}
	return v
}

// splitDoc separates a comment into its prose (markers removed) and its
// markers. Prose keeps paragraph breaks as blank lines.
func splitDoc(cg *ast.CommentGroup) (string, []marker) {
	if cg == nil {
		return "", nil
	}
	var prose []string
	var markers []marker
	for _, l := range strings.Split(cg.Text(), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "+") {
			markers = append(markers, parseMarker(l))
			continue
		}
		prose = append(prose, strings.TrimRight(l, " \t"))
	}
	return strings.TrimSpace(strings.Join(prose, "\n")), markers
}

// structType is an exported struct of the API.
type structType struct {
	name    string
	doc     string
	markers []marker
	fields  []*ast.Field
}

// enumType is an exported string type and its values.
type enumType struct {
	name    string
	doc     string
	markers []marker
	values  []enumValue
}

type enumValue struct {
	goName, value, doc string
}

type api struct {
	files   []string
	structs map[string]*structType
	enums   map[string]*enumType
}

// Generate reads the *_types.go files of dir and returns the reference.
func Generate(dir string) ([]byte, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*_types.go"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no *_types.go files in %s", dir)
	}
	sort.Strings(paths)
	a := &api{structs: map[string]*structType{}, enums: map[string]*enumType{}}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, p := range paths {
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
		a.files = append(a.files, filepath.Base(p))
	}
	// Types first, so constants can find the enum they belong to.
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, s := range g.Specs {
				ts := s.(*ast.TypeSpec)
				if !ts.Name.IsExported() {
					continue
				}
				cg := ts.Doc
				if cg == nil && len(g.Specs) == 1 {
					cg = g.Doc
				}
				doc, markers := splitDoc(cg)
				switch t := ts.Type.(type) {
				case *ast.StructType:
					a.structs[ts.Name.Name] = &structType{name: ts.Name.Name, doc: doc, markers: markers, fields: t.Fields.List}
				case *ast.Ident:
					if t.Name == "string" {
						a.enums[ts.Name.Name] = &enumType{name: ts.Name.Name, doc: doc, markers: markers}
					}
				}
			}
		}
	}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				id, ok := vs.Type.(*ast.Ident)
				if !ok {
					continue
				}
				e, ok := a.enums[id.Name]
				if !ok {
					continue
				}
				doc, _ := splitDoc(vs.Doc)
				for i, n := range vs.Names {
					if i >= len(vs.Values) {
						break
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						continue
					}
					e.values = append(e.values, enumValue{goName: n.Name, value: v, doc: constDoc(n.Name, doc)})
				}
			}
		}
	}
	// An enum marker is what the API server enforces: it decides which
	// values are listed and in what order.
	for _, e := range a.enums {
		allowed := markerValue(e.markers, "kubebuilder:validation:Enum")
		if allowed == "" {
			continue
		}
		byValue := map[string]enumValue{}
		for _, v := range e.values {
			byValue[v.value] = v
		}
		e.values = nil
		for _, v := range strings.Split(allowed, ";") {
			ev, ok := byValue[v]
			if !ok {
				ev = enumValue{value: v}
			}
			e.values = append(e.values, ev)
		}
	}
	for name, e := range a.enums {
		if len(e.values) == 0 {
			delete(a.enums, name)
		}
	}
	var buf bytes.Buffer
	a.render(&buf)
	return buf.Bytes(), nil
}

// constDoc drops the "Name:" lead-in the constants' comments use.
func constDoc(name, doc string) string {
	doc = strings.TrimSpace(doc)
	if rest, ok := strings.CutPrefix(doc, name+":"); ok {
		doc = strings.TrimSpace(rest)
	} else if rest, ok := strings.CutPrefix(doc, name+" "); ok {
		doc = strings.TrimSpace(rest)
	}
	return oneLine(doc)
}

func markerValue(ms []marker, name string) string {
	for _, m := range ms {
		if m.name == name {
			return m.value
		}
	}
	return ""
}

func hasMarker(ms []marker, name string) bool {
	for _, m := range ms {
		if m.name == name {
			return true
		}
	}
	return false
}

func (a *api) orderedStructs() []*structType {
	var out []*structType
	seen := map[string]bool{}
	for _, n := range leadingTypes {
		if s, ok := a.structs[n]; ok {
			out = append(out, s)
			seen[n] = true
		}
	}
	var rest []string
	for n := range a.structs {
		if !seen[n] {
			rest = append(rest, n)
		}
	}
	sort.Strings(rest)
	for _, n := range rest {
		out = append(out, a.structs[n])
	}
	return out
}

func (a *api) orderedEnums() []*enumType {
	names := make([]string, 0, len(a.enums))
	for n := range a.enums {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]*enumType, 0, len(names))
	for _, n := range names {
		out = append(out, a.enums[n])
	}
	return out
}

func (a *api) render(w *bytes.Buffer) {
	structs := a.orderedStructs()
	enums := a.orderedEnums()

	fmt.Fprintf(w, "# AgentRun API reference (agentrun.dev/v1alpha1)\n\n")
	fmt.Fprintf(w, "<!-- Generated by hack/gen-api-docs from api/v1alpha1/%s. Do not edit by hand:\n", strings.Join(a.files, ", api/v1alpha1/"))
	fmt.Fprintf(w, "     run `go run ./hack/gen-api-docs -o docs/api-reference.md` after changing the types. -->\n\n")
	fmt.Fprintf(w, "This page is generated from the Go types and their kubebuilder markers, which are\n")
	fmt.Fprintf(w, "also what the CRD schema is generated from. \"Required\" and \"Validation\" are\n")
	fmt.Fprintf(w, "enforced by the API server when an object is created or updated; rules that\n")
	fmt.Fprintf(w, "compare with the old object (`oldSelf`) apply to updates only.\n\n")
	fmt.Fprintf(w, "Go types are shown in JSON terms: `integer (int32)` and `integer (int64)` are JSON\n")
	fmt.Fprintf(w, "numbers, a pointer is the same JSON type as what it points to, and a `Time` is an\n")
	fmt.Fprintf(w, "RFC 3339 string.\n\n")

	fmt.Fprintf(w, "## Contents\n\n")
	fmt.Fprintf(w, "Types:\n\n")
	for _, s := range structs {
		fmt.Fprintf(w, "- [%s](#%s)\n", s.name, anchor(s.name))
	}
	fmt.Fprintf(w, "\nEnums:\n\n")
	for _, e := range enums {
		fmt.Fprintf(w, "- [%s](#%s)\n", e.name, anchor(e.name))
	}
	fmt.Fprintf(w, "\n## Types\n")
	for _, s := range structs {
		a.renderStruct(w, s)
	}
	fmt.Fprintf(w, "\n## Enums\n")
	for _, e := range enums {
		renderEnum(w, e)
	}
}

func anchor(name string) string { return strings.ToLower(name) }

func (a *api) renderStruct(w *bytes.Buffer, s *structType) {
	fmt.Fprintf(w, "\n### %s\n\n", s.name)
	if s.doc != "" {
		fmt.Fprintf(w, "%s\n\n", escapeProse(s.doc))
	}
	if hasMarker(s.markers, "kubebuilder:object:root") {
		renderResource(w, s)
	}
	var rules []marker
	for _, m := range s.markers {
		if m.name == "kubebuilder:validation:XValidation" {
			rules = append(rules, m)
		}
	}
	if len(rules) > 0 {
		fmt.Fprintf(w, "Validation rules on the whole object:\n\n")
		for _, r := range rules {
			line := "- " + escapeProse(r.args["message"])
			if fp := r.args["fieldPath"]; fp != "" {
				line += fmt.Sprintf(" (reported at `%s`)", fp)
			}
			fmt.Fprintf(w, "%s\n", line)
		}
		fmt.Fprintf(w, "\n")
	}
	fmt.Fprintf(w, "| Field | Type | Required | Validation | Description |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|\n")
	for _, f := range s.fields {
		for _, row := range a.fieldRows(f) {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", row.name, row.typ, row.required, row.validation, row.doc)
		}
	}
}

// renderResource lists what kubebuilder markers say about a root type: its
// short names, categories, subresources and printer columns.
func renderResource(out *bytes.Buffer, s *structType) {
	var w bytes.Buffer
	defer func() {
		if w.Len() > 0 {
			out.Write(w.Bytes())
			out.WriteString("\n")
		}
	}()
	for _, m := range s.markers {
		if m.name != "kubebuilder:resource" {
			continue
		}
		if v := m.args["shortName"]; v != "" {
			fmt.Fprintf(&w, "- Short name: `%s`\n", strings.ReplaceAll(v, ";", "`, `"))
		}
		if v := m.args["categories"]; v != "" {
			fmt.Fprintf(&w, "- Categories: `%s`\n", strings.ReplaceAll(v, ";", "`, `"))
		}
		if v := m.args["scope"]; v != "" {
			fmt.Fprintf(&w, "- Scope: %s\n", v)
		}
	}
	if hasMarker(s.markers, "kubebuilder:subresource:status") {
		fmt.Fprintf(&w, "- Subresources: `status`\n")
	}
	var cols []marker
	for _, m := range s.markers {
		if m.name == "kubebuilder:printcolumn" {
			cols = append(cols, m)
		}
	}
	if len(cols) > 0 {
		fmt.Fprintf(&w, "\n`kubectl get` columns (priority 0 by default; the others with `-o wide`):\n\n")
		fmt.Fprintf(&w, "| Column | Type | JSONPath | Priority |\n|---|---|---|---|\n")
		for _, c := range cols {
			p := c.args["priority"]
			if p == "" {
				p = "0"
			}
			fmt.Fprintf(&w, "| %s | %s | `%s` | %s |\n", cell(c.args["name"]), cell(c.args["type"]), cell(c.args["JSONPath"]), p)
		}
	}
}

type row struct {
	name, typ, required, validation, doc string
}

func (a *api) fieldRows(f *ast.Field) []row {
	doc, markers := splitDoc(f.Doc)
	jsonName, opts := jsonTag(f)
	if jsonName == "-" {
		return nil
	}
	if len(f.Names) == 0 && slicesContains(opts, "inline") {
		// Embedded and inlined: TypeMeta contributes apiVersion and kind.
		if typeName(f.Type) == "TypeMeta" {
			return []row{
				{name: "`apiVersion`", typ: "string", required: "required", validation: "", doc: "`agentrun.dev/v1alpha1`"},
				{name: "`kind`", typ: "string", required: "required", validation: "", doc: "The kind of the object, e.g. `AgentRun`."},
			}
		}
	}
	if len(f.Names) > 0 && !f.Names[0].IsExported() {
		return nil
	}
	if jsonName == "" {
		if len(f.Names) > 0 {
			jsonName = f.Names[0].Name
		} else {
			jsonName = typeName(f.Type)
		}
	}
	req := "optional"
	switch {
	case hasMarker(markers, "required"), hasMarker(markers, "kubebuilder:validation:Required"):
		req = "required"
	case hasMarker(markers, "optional"), hasMarker(markers, "kubebuilder:validation:Optional"):
		req = "optional"
	case !slicesContains(opts, "omitempty") && !slicesContains(opts, "omitzero"):
		req = "required"
	}
	if doc == "" && typeName(f.Type) == "ObjectMeta" {
		doc = "Standard object metadata: name, namespace, labels, annotations."
	}
	if doc == "" && typeName(f.Type) == "ListMeta" {
		doc = "Standard list metadata."
	}
	return []row{{
		name:       "`" + jsonName + "`",
		typ:        a.jsonType(f.Type),
		required:   req,
		validation: a.validation(f.Type, markers),
		doc:        cell(oneLine(doc)),
	}}
}

func jsonTag(f *ast.Field) (string, []string) {
	if f.Tag == nil {
		return "", nil
	}
	raw, err := strconv.Unquote(f.Tag.Value)
	if err != nil {
		return "", nil
	}
	tag := reflect.StructTag(raw).Get("json")
	if tag == "" {
		return "", nil
	}
	parts := strings.Split(tag, ",")
	return parts[0], parts[1:]
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// typeName is the bare name of a (possibly qualified) type identifier.
func typeName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.SelectorExpr:
		return t.Sel.Name
	case *ast.StarExpr:
		return typeName(t.X)
	}
	return ""
}

// jsonType renders a Go type in JSON terms, linking the API's own types.
func (a *api) jsonType(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return a.jsonType(t.X)
	case *ast.ArrayType:
		if id, ok := t.Elt.(*ast.Ident); ok && id.Name == "byte" {
			return "string (base64)"
		}
		return "array of " + a.jsonType(t.Elt)
	case *ast.MapType:
		return "object (map of " + a.jsonType(t.Key) + " to " + a.jsonType(t.Value) + ")"
	case *ast.SelectorExpr:
		switch t.Sel.Name {
		case "Time", "MicroTime":
			return "string (date-time)"
		case "Duration":
			return "string (duration)"
		case "Quantity":
			return "string or integer (quantity)"
		case "Condition":
			return "object (Condition: `type`, `status`, `reason`, `message`, `lastTransitionTime`, `observedGeneration`)"
		case "ObjectMeta":
			return "object ([ObjectMeta](https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/object-meta/))"
		case "ListMeta":
			return "object ([ListMeta](https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/list-meta/))"
		}
		return "object (" + t.Sel.Name + ")"
	case *ast.Ident:
		switch t.Name {
		case "string":
			return "string"
		case "bool":
			return "boolean"
		case "int", "int64", "uint64":
			return "integer (int64)"
		case "int32", "uint32", "int16", "uint16", "int8", "uint8":
			return "integer (int32)"
		case "float32", "float64":
			return "number"
		}
		if _, ok := a.structs[t.Name]; ok {
			return fmt.Sprintf("object ([%s](#%s))", t.Name, anchor(t.Name))
		}
		if _, ok := a.enums[t.Name]; ok {
			return fmt.Sprintf("string ([%s](#%s))", t.Name, anchor(t.Name))
		}
		return t.Name
	}
	return "object"
}

// validation lists what the markers on a field, and the enum marker of its
// type, constrain.
func (a *api) validation(typ ast.Expr, markers []marker) string {
	var parts []string
	for _, m := range markers {
		v := m.value
		switch m.name {
		case "kubebuilder:default":
			parts = append(parts, "default: "+code(v))
		case "kubebuilder:validation:Enum":
			parts = append(parts, "one of: "+codeList(strings.Split(v, ";")))
		case "kubebuilder:validation:MinLength":
			parts = append(parts, "min length "+v)
		case "kubebuilder:validation:MaxLength":
			parts = append(parts, "max length "+v)
		case "kubebuilder:validation:Minimum":
			parts = append(parts, "minimum "+v)
		case "kubebuilder:validation:Maximum":
			parts = append(parts, "maximum "+v)
		case "kubebuilder:validation:MinItems":
			parts = append(parts, "min items "+v)
		case "kubebuilder:validation:MaxItems":
			parts = append(parts, "max items "+v)
		case "kubebuilder:validation:MaxProperties":
			parts = append(parts, "max properties "+v)
		case "kubebuilder:validation:MinProperties":
			parts = append(parts, "min properties "+v)
		case "kubebuilder:validation:Pattern":
			parts = append(parts, "pattern "+code(v))
		case "kubebuilder:validation:Format":
			parts = append(parts, "format "+v)
		case "kubebuilder:validation:items:MaxLength":
			parts = append(parts, "each item max length "+v)
		case "kubebuilder:validation:items:MinLength":
			parts = append(parts, "each item min length "+v)
		case "kubebuilder:validation:items:Pattern":
			parts = append(parts, "each item pattern "+code(v))
		case "listType":
			parts = append(parts, "list type "+v)
		case "listMapKey":
			parts = append(parts, "list map key "+code(v))
		case "kubebuilder:validation:XValidation":
			msg := m.args["message"]
			if msg == "" {
				msg = "rule " + code(m.args["rule"])
			}
			parts = append(parts, "rule: "+escapeProse(msg))
		}
	}
	if e, ok := a.enums[typeName(typ)]; ok {
		if _, isArray := typ.(*ast.ArrayType); !isArray {
			vals := make([]string, len(e.values))
			for i, v := range e.values {
				vals[i] = v.value
			}
			parts = append(parts, "one of: "+codeList(vals))
		}
	}
	return cell(strings.Join(parts, "; "))
}

func renderEnum(w *bytes.Buffer, e *enumType) {
	fmt.Fprintf(w, "\n### %s\n\n", e.name)
	if e.doc != "" {
		fmt.Fprintf(w, "%s\n\n", escapeProse(e.doc))
	}
	fmt.Fprintf(w, "String enum.\n\n| Value | Description |\n|---|---|\n")
	for _, v := range e.values {
		fmt.Fprintf(w, "| `%s` | %s |\n", v.value, cell(v.doc))
	}
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func code(s string) string { return "`" + s + "`" }

func codeList(vs []string) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = code(v)
	}
	return strings.Join(out, ", ")
}

// escapeProse escapes < and > outside code spans, so a placeholder such as
// <run> is shown rather than read as HTML.
func escapeProse(s string) string {
	parts := strings.Split(s, "`")
	for i := 0; i < len(parts); i += 2 {
		parts[i] = strings.NewReplacer("<", "&lt;", ">", "&gt;").Replace(parts[i])
	}
	return strings.Join(parts, "`")
}

// cell makes text safe inside a table cell: one line, prose escaped, pipes
// escaped (also inside code spans, as GitHub's tables require).
func cell(s string) string {
	return strings.ReplaceAll(escapeProse(oneLine(s)), "|", `\|`)
}
