{{- /*
  "field" renders one row of a struct's field table. A field type's markers
  are merged into the field by crd-ref-docs (an enum's values, a pointed-to
  struct's rules); "validation" shows the enum but leaves a struct's own
  rules to that struct's section.
*/ -}}
{{- define "field" -}}
{{- $f := . -}}
| `{{ $f.Name }}` | {{ template "jsonType" $f.Type }} | {{ template "required" $f }} | {{ template "validation" $f }} | {{ template "fieldDoc" $f }} |
{{- end -}}

{{- define "required" -}}
{{- $m := .Markers -}}
{{- if or (index $m "required") (index $m "kubebuilder:validation:Required") (index $m "k8s:required") -}}
required
{{- else if or (index $m "optional") (index $m "kubebuilder:validation:Optional") (index $m "k8s:optional") -}}
optional
{{- else -}}
{{- /* Unmarked: required, as controller-gen reads a field without omitempty. */ -}}
required
{{- end -}}
{{- end -}}

{{- define "fieldDoc" -}}
{{- $doc := .Doc -}}
{{- if and (not $doc) (eq .Type.Package "k8s.io/apimachinery/pkg/apis/meta/v1") -}}
{{- if eq .Type.Name "ObjectMeta" }}{{ $doc = "Standard object metadata: name, namespace, labels, annotations." }}{{ end -}}
{{- if eq .Type.Name "ListMeta" }}{{ $doc = "Standard list metadata." }}{{ end -}}
{{- end -}}
{{- template "cell" $doc -}}
{{- end -}}

{{- /*
  jsonType renders a type in JSON terms, linking the API's own types. The
  numbers are crd-ref-docs' types.Kind: 0 alias (a named non-struct type),
  1 basic, 3 map, 4 pointer, 5 slice, 6 struct.
*/ -}}
{{- define "jsonType" -}}
{{- $t := . -}}
{{- if not $t -}}
object
{{- else if eq $t.Kind 4 -}}
{{ template "jsonType" $t.UnderlyingType }}
{{- else if eq $t.Kind 5 -}}
{{- if and $t.UnderlyingType (or (eq $t.UnderlyingType.Name "byte") (eq $t.UnderlyingType.Name "uint8")) -}}
string (base64)
{{- else -}}
array of {{ template "jsonType" $t.UnderlyingType }}
{{- end -}}
{{- else if eq $t.Kind 3 -}}
object (map of {{ template "jsonType" $t.KeyType }} to {{ template "jsonType" $t.ValueType }})
{{- else if eq $t.Kind 1 -}}
{{ template "basicType" $t.Name }}
{{- else if eq $t.Package "k8s.io/apimachinery/pkg/apis/meta/v1" -}}
{{ template "metaType" $t }}
{{- else if eq $t.Package "k8s.io/apimachinery/pkg/api/resource" -}}
string or integer (quantity)
{{- else if and (markdownShouldRenderType $t) (eq $t.Kind 0) -}}
{{ template "jsonType" $t.UnderlyingType }} ([{{ $t.Name }}](#{{ lower $t.Name }}))
{{- else if and (markdownShouldRenderType $t) (eq $t.Kind 6) (not $t.Imported) -}}
object ([{{ $t.Name }}](#{{ lower $t.Name }}))
{{- else -}}
object ({{ markdownRenderTypeLink $t }})
{{- end -}}
{{- end -}}

{{- define "basicType" -}}
{{- if eq . "string" -}}string
{{- else if eq . "bool" -}}boolean
{{- else if has . (list "int" "int64" "uint" "uint64") -}}integer (int64)
{{- else if has . (list "int8" "int16" "int32" "uint8" "uint16" "uint32") -}}integer (int32)
{{- else if has . (list "float32" "float64") -}}number
{{- else -}}{{ . }}
{{- end -}}
{{- end -}}

{{- /* The meta/v1 types an API embeds, described in place or linked to
       Kubernetes' stable reference pages. */ -}}
{{- define "metaType" -}}
{{- if has .Name (list "Time" "MicroTime") -}}string (date-time)
{{- else if eq .Name "Duration" -}}string (duration)
{{- else if eq .Name "Condition" -}}object (Condition: `type`, `status`, `reason`, `message`, `lastTransitionTime`, `observedGeneration`)
{{- else if eq .Name "ObjectMeta" -}}object ([ObjectMeta](https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/object-meta/))
{{- else if eq .Name "ListMeta" -}}object ([ListMeta](https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/list-meta/))
{{- else -}}object ({{ markdownRenderTypeLink . }})
{{- end -}}
{{- end -}}

{{- /*
  validation lists what the field's markers constrain, in a fixed order.
  Markers this template does not know are shown as crd-ref-docs words them.
*/ -}}
{{- define "validation" -}}
{{- $f := . -}}
{{- $m := $f.Markers -}}
{{- $parts := list -}}
{{- range $name := list "kubebuilder:default" "default" -}}
{{- with index $m $name -}}
{{- $v := (first .).Value -}}
{{- $parts = append $parts (print "default: `" (ternary $v (toJson $v) (kindIs "string" $v)) "`") -}}
{{- end -}}
{{- end -}}
{{- with index $m "kubebuilder:validation:Enum" }}{{ $parts = append $parts (print "one of: `" (join "`, `" (first .)) "`") }}{{ end -}}
{{- $words := dict
    "kubebuilder:validation:MinLength" "min length"
    "kubebuilder:validation:MaxLength" "max length"
    "kubebuilder:validation:Minimum" "minimum"
    "kubebuilder:validation:Maximum" "maximum"
    "kubebuilder:validation:ExclusiveMinimum" "exclusive minimum"
    "kubebuilder:validation:ExclusiveMaximum" "exclusive maximum"
    "kubebuilder:validation:MultipleOf" "multiple of"
    "kubebuilder:validation:MinItems" "min items"
    "kubebuilder:validation:MaxItems" "max items"
    "kubebuilder:validation:UniqueItems" "unique items"
    "kubebuilder:validation:MinProperties" "min properties"
    "kubebuilder:validation:MaxProperties" "max properties"
    "kubebuilder:validation:Format" "format"
    "kubebuilder:validation:items:MinLength" "each item min length"
    "kubebuilder:validation:items:MaxLength" "each item max length"
    "listType" "list type"
-}}
{{- $order := list
    "listType"
    "kubebuilder:validation:MinLength" "kubebuilder:validation:MaxLength"
    "kubebuilder:validation:Minimum" "kubebuilder:validation:ExclusiveMinimum"
    "kubebuilder:validation:Maximum" "kubebuilder:validation:ExclusiveMaximum"
    "kubebuilder:validation:MultipleOf"
    "kubebuilder:validation:MinItems" "kubebuilder:validation:MaxItems" "kubebuilder:validation:UniqueItems"
    "kubebuilder:validation:MinProperties" "kubebuilder:validation:MaxProperties"
    "kubebuilder:validation:Format"
    "kubebuilder:validation:items:MinLength" "kubebuilder:validation:items:MaxLength"
-}}
{{- range $name := $order -}}
{{- with index $m $name }}{{ $parts = append $parts (print (get $words $name) " " (first .)) }}{{ end -}}
{{- if eq $name "kubebuilder:validation:MaxLength" -}}
{{- with index $m "kubebuilder:validation:Pattern" }}{{ $parts = append $parts (print "pattern `" (first .) "`") }}{{ end -}}
{{- end -}}
{{- if eq $name "kubebuilder:validation:items:MaxLength" -}}
{{- with index $m "kubebuilder:validation:items:Pattern" }}{{ $parts = append $parts (print "each item pattern `" (first .) "`") }}{{ end -}}
{{- end -}}
{{- if eq $name "listType" -}}
{{- range index $m "listMapKey" }}{{ $parts = append $parts (print "list map key `" . "`") }}{{ end -}}
{{- end -}}
{{- end -}}
{{- range $f.Validation -}}
{{- $key := regexReplaceAll ": .*$" . "" -}}
{{- if not (or (has $key (list "Required" "Optional" "Enum" "Pattern" "items:Pattern")) (hasKey $words (print "kubebuilder:validation:" $key))) -}}
{{- $parts = append $parts . -}}
{{- end -}}
{{- end -}}
{{- /* Rules: the field's own, not those of its struct type (crd-ref-docs
       copies a type's markers onto the fields of that type). */ -}}
{{- $target := $f.Type -}}
{{- if and (eq $target.Kind 4) $target.UnderlyingType }}{{ $target = $target.UnderlyingType }}{{ end -}}
{{- $inherited := list -}}
{{- if eq $target.Kind 6 }}{{ $inherited = index $target.Markers "kubebuilder:validation:XValidation" }}{{ end -}}
{{- range index $m "kubebuilder:validation:XValidation" -}}
{{- if not (has . $inherited) -}}
{{- $text := .Message -}}
{{- if not $text }}{{ $text = print "`" .Rule "`" }}{{ end -}}
{{- $parts = append $parts (print "rule: " $text) -}}
{{- end -}}
{{- end -}}
{{- template "cell" (join "; " $parts) -}}
{{- end -}}
