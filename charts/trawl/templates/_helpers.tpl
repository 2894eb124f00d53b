{{/* Name of the chart, overridable. */}}
{{- define "trawl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name prefix of every object: <release>-trawl, or the release name when it contains the chart name. */}}
{{- define "trawl.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "trawl.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "trawl.labels" -}}
helm.sh/chart: {{ include "trawl.chart" . }}
app.kubernetes.io/name: {{ include "trawl.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: trawl
{{- end }}

{{/* Selector labels of the operator pod. */}}
{{- define "trawl.operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trawl.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Selector labels of the bundled Redis pod. */}}
{{- define "trawl.redis.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trawl.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: redis
{{- end }}

{{/*
Labels the operator puts on every worker pod it creates (trawl.api.naming.pool_selector, plus
trawl.dev/pool: <pool>): the NetworkPolicy, PodMonitor and PodDisruptionBudget select them.
tests/unit/test_chart.py checks the two agree.
*/}}
{{- define "trawl.worker.selectorLabels" -}}
app.kubernetes.io/name: trawl
app.kubernetes.io/component: worker
{{- end }}

{{- define "trawl.operator.name" -}}
{{- printf "%s-operator" (include "trawl.fullname" .) }}
{{- end }}

{{- define "trawl.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "trawl.operator.name" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "trawl.redis.name" -}}
{{- printf "%s-redis" (include "trawl.fullname" .) }}
{{- end }}

{{- define "trawl.redis.secretName" -}}
{{- default (include "trawl.redis.name" .) .Values.redis.bundled.existingSecret }}
{{- end }}

{{/* repository:tag or repository@digest of the Trawl image. */}}
{{- define "trawl.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The restricted Pod Security Standard, for pods. */}}
{{- define "trawl.podSecurityContext" -}}
runAsNonRoot: true
{{- if .Values.securityContext.fixedIds }}
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
{{- end }}
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The restricted Pod Security Standard, for containers. */}}
{{- define "trawl.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Namespaces the worker NetworkPolicy goes into. */}}
{{- define "trawl.workerNamespaces" -}}
{{- $ns := .Values.networkPolicy.namespaces | default .Values.watchNamespaces | default (list .Release.Namespace) }}
{{- toJson (uniq $ns) }}
{{- end }}

{{/* The operator's rules, generated from operator/trawl/operator/rbac.py by hack/gen_rbac.py. */}}
{{- define "trawl.rules" -}}
{{- .Files.Get "files/rbac-rules.yaml" | fromYaml | toJson }}
{{- end }}

{{/* Fail early on value combinations that cannot work. */}}
{{- define "trawl.validate" -}}
{{- $ext := .Values.redis.external }}
{{- $sentinel := eq $ext.mode "Sentinel" }}
{{- if and $ext.url $ext.urlSecret.name }}
{{- fail "redis.external: set url or urlSecret.name, not both" }}
{{- end }}
{{- if and $sentinel (or $ext.url $ext.urlSecret.name) }}
{{- fail "redis.external.mode Sentinel takes sentinels and masterName, not url or urlSecret.name" }}
{{- end }}
{{- if and $sentinel (or (not $ext.sentinels) (not $ext.masterName)) }}
{{- fail "redis.external.mode Sentinel needs both redis.external.sentinels (host:port list) and redis.external.masterName" }}
{{- end }}
{{- if and (not $sentinel) (or $ext.sentinels $ext.masterName $ext.sentinelPasswordSecret.name) }}
{{- fail (printf "redis.external.sentinels, masterName and sentinelPasswordSecret apply to mode Sentinel only (mode is %s)" $ext.mode) }}
{{- end }}
{{- if and .Values.redis.bundled.enabled (or $ext.url $ext.urlSecret.name $sentinel (eq $ext.mode "Cluster")) }}
{{- fail "redis: disable redis.bundled.enabled to use redis.external" }}
{{- end }}
{{- if and .Values.defaultPool.enabled (not .Values.redis.bundled.enabled) (not (or $ext.url $ext.urlSecret.name $sentinel)) }}
{{- fail "defaultPool needs a Redis: enable redis.bundled, set redis.external.url or redis.external.urlSecret.name (or mode Sentinel with sentinels and masterName), or disable defaultPool" }}
{{- end }}
{{- if and .Values.redis.bundled.existingSecret .Values.redis.bundled.password }}
{{- fail "redis.bundled: set password or existingSecret, not both" }}
{{- end }}
{{- if and .Values.defaultPool.enabled .Values.watchNamespaces (not (has .Release.Namespace .Values.watchNamespaces)) }}
{{- fail (printf "defaultPool is created in the release namespace %s, which watchNamespaces does not list: add it or disable defaultPool" .Release.Namespace) }}
{{- end }}
{{- end }}

{{/* The worker image a ScrapePool gets when it names none: workerImage, else the operator's own image. */}}
{{- define "trawl.workerImage" -}}
{{- default (include "trawl.image" .) .Values.workerImage }}
{{- end }}
