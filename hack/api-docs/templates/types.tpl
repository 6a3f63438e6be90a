{{- /*
  "struct" renders one struct type: its doc comment, what the kubebuilder
  markers say about a resource kind, its object-level validation rules and a
  table of its fields. "enum" renders a string type with its constants.
*/ -}}
{{- define "struct" -}}
{{- $t := . -}}
### {{ $t.Name }}

{{ with $t.Doc }}{{ template "prose" . }}

{{ end -}}
{{- if $t.GVK }}{{ template "resource" $t }}{{ end -}}
{{- with index $t.Markers "kubebuilder:validation:XValidation" -}}
Validation rules on the whole object:

{{ range . -}}
- {{ if .Message }}{{ template "prose" .Message }}{{ else }}`{{ .Rule }}`{{ end }}{{ with .FieldPath }} (reported at `{{ . }}`){{ end }}
{{ end }}
{{ end -}}
{{- if $t.IsAlias -}}
Underlying type: {{ template "jsonType" $t.UnderlyingType }}.
{{- else -}}
| Field | Type | Required | Validation | Description |
|---|---|---|---|---|
{{ if $t.GVK -}}
| `apiVersion` | string | required |  | `{{ $t.GVK.Group }}/{{ $t.GVK.Version }}` |
| `kind` | string | required |  | `{{ $t.GVK.Kind }}` |
{{ end -}}
{{- range $t.Members -}}
{{ template "field" . }}
{{ end -}}
{{- end -}}
{{- end -}}

{{- define "resource" -}}
{{- $t := . -}}
{{- $facts := list -}}
{{- range index $t.Markers "kubebuilder:resource" -}}
{{- with .ShortName }}{{ $facts = append $facts (print "Short name: `" (join "`, `" .) "`") }}{{ end -}}
{{- with .Categories }}{{ $facts = append $facts (print "Categories: `" (join "`, `" .) "`") }}{{ end -}}
{{- with .Scope }}{{ $facts = append $facts (print "Scope: " .) }}{{ end -}}
{{- end -}}
{{- $subresources := list -}}
{{- if index $t.Markers "kubebuilder:subresource:status" }}{{ $subresources = append $subresources "`status`" }}{{ end -}}
{{- if index $t.Markers "kubebuilder:subresource:scale" }}{{ $subresources = append $subresources "`scale`" }}{{ end -}}
{{- with $subresources }}{{ $facts = append $facts (print "Subresources: " (join ", " .)) }}{{ end -}}
{{- with $facts -}}
{{ range . }}- {{ . }}
{{ end }}
{{ end -}}
{{- with index $t.Markers "kubebuilder:printcolumn" -}}
`kubectl get` columns (priority 0 by default; the others with `-o wide`):

| Column | Type | JSONPath | Priority |
|---|---|---|---|
{{ range . -}}
| {{ template "cell" .Name }} | {{ .Type }} | `{{ template "cell" .JSONPath }}` | {{ .Priority }} |
{{ end }}
{{ end -}}
{{- end -}}

{{- define "enum" -}}
{{- $t := . -}}
### {{ $t.Name }}

{{ with $t.Doc }}{{ template "prose" . }}

{{ end -}}
String enum.

| Value | Description |
|---|---|
{{ range $t.EnumValues -}}
| `{{ .Name }}` | {{ template "constDoc" . }} |
{{ end -}}
{{- end -}}

{{- /*
  constDoc is a constant's comment without the lead-in naming the constant
  ("PhaseQueued: created, ..." becomes "created, ...").
*/ -}}
{{- define "constDoc" -}}
{{- $doc := trim .Doc -}}
{{- $first := regexFind "^[A-Z][A-Za-z0-9]*" $doc -}}
{{- if and $first (hasSuffix (lower .Name) (lower $first)) -}}
{{- $doc = $doc | trimPrefix $first | trimPrefix ":" | trim -}}
{{- end -}}
{{- template "cell" $doc -}}
{{- end -}}
