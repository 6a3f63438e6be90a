{{/* The chart's name, or nameOverride. */}}
{{- define "agentrun-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The prefix of every object's name: fullnameOverride, else the release name,
followed by the chart name unless the release name already contains it.
Kept to 52 characters so that suffixed names ("-leader-election") stay
within the 63 a label value allows.
*/}}
{{- define "agentrun-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "agentrun-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "agentrun-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: agentrun-operator
{{- end -}}

{{/* Labels that select the manager's pods. */}}
{{- define "agentrun-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agentrun-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The manager's ServiceAccount. */}}
{{- define "agentrun-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "agentrun-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The manager image: by tag, pinned to image.digest when set. */}}
{{- define "agentrun-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- with .Values.image.digest -}}@{{ . }}{{- end -}}
{{- end -}}

{{/* Refuses value combinations the manager would run wrongly with. */}}
{{- define "agentrun-operator.validate" -}}
{{- if lt (int .Values.shards) 1 -}}
{{- fail (printf "shards must be at least 1, not %v" .Values.shards) -}}
{{- end -}}
{{- if and (gt (int .Values.replicas) 1) (eq (int .Values.shards) 1) (not .Values.leaderElect) -}}
{{- fail "replicas above 1 with shards 1 need leaderElect: true, else every replica drives every run" -}}
{{- end -}}
{{- include "agentrun-operator.validateStore" . -}}
{{- end -}}

{{/*
Refuses a store the manager would run wrongly with, or that would put a
password where anyone reading the Deployment sees it. No message repeats
the DSN: it may hold a password.
*/}}
{{- define "agentrun-operator.validateStore" -}}
{{- with .Values.store -}}
{{- if and .dsn .dsnSecret -}}
{{- fail "store.dsn and store.dsnSecret both give the DSN: set one" -}}
{{- end -}}
{{- if hasPrefix "sqlite:" .dsn -}}
{{- fail "store.dsn: SQLite is make run's store, a file on one machine; the chart's replicas need one database they all reach: give a PostgreSQL DSN" -}}
{{- end -}}
{{- if and .dsn (not (regexMatch `^postgres(ql)?://` .dsn)) (not (regexMatch `(^|\s)(host|dbname)=` .dsn)) -}}
{{- fail "store.dsn is neither postgres://USER@HOST:PORT/DB?sslmode=verify-full nor libpq's key=value form (host=... dbname=...); the value is not shown" -}}
{{- end -}}
{{- if or (regexMatch `^postgres(ql)?://[^/?#@]*:[^/?#@]*@` .dsn) (regexMatch `(^|[\s?&])password=` .dsn) -}}
{{- fail "store.dsn holds a password, which anyone reading the Deployment would see: put the password in a Secret named by store.existingSecret (key store.passwordKey), or the whole DSN in a Secret named by store.dsnSecret; the value is not shown" -}}
{{- end -}}
{{- if and (or .existingSecret .caSecret) (not (or .dsn .dsnSecret)) -}}
{{- fail "store.existingSecret and store.caSecret are for a database: set store.dsn (or store.dsnSecret) too" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "true" when runs' journals are kept in a database, else empty. */}}
{{- define "agentrun-operator.storeDatabase" -}}
{{- if or .Values.store.dsn .Values.store.dsnSecret -}}true{{- end -}}
{{- end -}}

{{/* Where the database's CA certificate is mounted, and the file. */}}
{{- define "agentrun-operator.storeCADir" -}}/etc/agentrun/store-ca{{- end -}}
{{- define "agentrun-operator.storeCAFile" -}}{{ include "agentrun-operator.storeCADir" . }}/ca.crt{{- end -}}

{{/* The manager's ServiceAccount as the one subject of a binding. */}}
{{- define "agentrun-operator.managerSubject" -}}
- kind: ServiceAccount
  name: {{ include "agentrun-operator.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end -}}

{{/*
The manager's rules a Role can grant: files/manager-role.yaml less the
cluster-scoped resources (Namespaces, TokenReviews, SubjectAccessReviews,
ClusterAgentToolPolicies: the cluster admin's, which a namespace-scoped
install does not read) and the one EndpointSlice read in the default
namespace, which the namespace-scoped install grants apart.
*/}}
{{- define "agentrun-operator.namespacedRules" -}}
{{- $out := list -}}
{{- range (.Files.Get "files/manager-role.yaml" | fromYaml).rules -}}
{{- $res := without .resources "namespaces" "tokenreviews" "subjectaccessreviews" "endpointslices" "clusteragenttoolpolicies" "clusteragenttoolpolicies/status" "clusteragentrunquotas" "clusteragentrunquotas/status" -}}
{{- if $res -}}
{{- $out = append $out (set (deepCopy .) "resources" $res) -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}
