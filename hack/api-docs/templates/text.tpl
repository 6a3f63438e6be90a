{{- /*
  prose escapes < and > outside code spans, so a placeholder such as <run>
  is shown rather than read as HTML. cell does the same to one line of a
  table cell and escapes its pipes (inside code spans too, as GitHub's
  tables require).
*/ -}}
{{- define "prose" -}}
{{- $parts := splitList "`" (trim .) -}}
{{- $out := list -}}
{{- range $i, $p := $parts -}}
{{- if eq (mod $i 2) 0 }}{{ $p = $p | replace "<" "&lt;" | replace ">" "&gt;" }}{{ end -}}
{{- $out = append $out $p -}}
{{- end -}}
{{- join "`" $out -}}
{{- end -}}

{{- define "cell" -}}
{{- $parts := splitList "`" (regexReplaceAll "\\s+" (trim .) " ") -}}
{{- $out := list -}}
{{- range $i, $p := $parts -}}
{{- if eq (mod $i 2) 0 }}{{ $p = $p | replace "<" "&lt;" | replace ">" "&gt;" }}{{ end -}}
{{- $out = append $out $p -}}
{{- end -}}
{{- join "`" $out | replace "|" "\\|" -}}
{{- end -}}
