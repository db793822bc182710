{{/* The chart's name, or nameOverride. */}}
{{- define "gpuxray.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The objects' name: the release's, with the chart's name unless it holds it. */}}
{{- define "gpuxray.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpuxray.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuxray.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gpuxray.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gpuxray.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "gpuxray.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpuxray.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The name of the Secret holding web-config.yml, empty without one. */}}
{{- define "gpuxray.webConfigSecret" -}}
{{- if .Values.web.existingConfigSecret }}
{{- .Values.web.existingConfigSecret }}
{{- else if .Values.web.config }}
{{- printf "%s-web-config" (include "gpuxray.fullname" .) }}
{{- end }}
{{- end }}

{{/* A ServiceMonitor endpoint's or PodMonitor's scrape settings. */}}
{{- define "gpuxray.scrapeEndpoint" -}}
port: metrics
path: {{ .root.Values.web.telemetryPath }}
{{- with .monitor.interval }}
interval: {{ . }}
{{- end }}
{{- with .monitor.scrapeTimeout }}
scrapeTimeout: {{ . }}
{{- end }}
{{- with .monitor.scheme }}
scheme: {{ . }}
{{- end }}
{{- with .monitor.tlsConfig }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .monitor.basicAuth }}
basicAuth:
  {{- toYaml . | nindent 2 }}
{{- end }}
relabelings:
  - sourceLabels: [__meta_kubernetes_pod_node_name]
    targetLabel: node
  {{- with .monitor.relabelings }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .monitor.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The scrape endpoint of a VMServiceScrape or a VMPodScrape: the VictoriaMetrics
operator's spelling of gpuxray.scrapeEndpoint (relabelConfigs for relabelings).
*/}}
{{- define "gpuxray.vmScrapeEndpoint" -}}
port: metrics
path: {{ .root.Values.web.telemetryPath }}
{{- with .monitor.interval }}
interval: {{ . }}
{{- end }}
{{- with .monitor.scrapeTimeout }}
scrapeTimeout: {{ . }}
{{- end }}
{{- with .monitor.scheme }}
scheme: {{ . }}
{{- end }}
{{- with .monitor.tlsConfig }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .monitor.basicAuth }}
basicAuth:
  {{- toYaml . | nindent 2 }}
{{- end }}
relabelConfigs:
  - sourceLabels: [__meta_kubernetes_pod_node_name]
    targetLabel: node
  {{- with .monitor.relabelConfigs }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .monitor.metricRelabelConfigs }}
metricRelabelConfigs:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The rule groups of a packaged rule object (files/…), with the per-alert
overrides of prometheusRule.alerts: the PrometheusRule and the VMRule share
them. Call with (dict "root" . "file" "files/….yaml").
*/}}
{{- define "gpuxray.ruleGroups" -}}
{{- $source := .root.Files.Get .file }}
{{- if not $source }}
{{- fail (printf "this chart holds no %s" .file) }}
{{- end }}
{{- $rule := fromYaml $source }}
{{- $alerts := .root.Values.prometheusRule.alerts }}
groups:
  {{- range $group := $rule.spec.groups }}
  {{- $rules := list }}
  {{- range $r := $group.rules }}
  {{- $o := dict }}
  {{- if $r.alert }}{{ $o = get $alerts $r.alert | default dict }}{{ end }}
  {{- if not (and (hasKey $o "enabled") (not $o.enabled)) }}
  {{- $r = deepCopy $r }}
  {{- with $o.expr }}{{ $_ := set $r "expr" . }}{{ end }}
  {{- with $o.for }}{{ $_ := set $r "for" . }}{{ end }}
  {{- with $o.severity }}{{ $_ := set $r "labels" (merge (dict "severity" .) ($r.labels | default dict)) }}{{ end }}
  {{- with $o.labels }}{{ $_ := set $r "labels" (merge (deepCopy .) ($r.labels | default dict)) }}{{ end }}
  {{- with $o.annotations }}{{ $_ := set $r "annotations" (merge (deepCopy .) ($r.annotations | default dict)) }}{{ end }}
  {{- $rules = append $rules $r }}
  {{- end }}
  {{- end }}
  - {{- toYaml (set (omit $group "rules") "rules" $rules) | nindent 4 }}
  {{- end }}
{{- end }}

{{/* The agents' PriorityClass: priorityClassName, else the release's own, else none. */}}
{{- define "gpuxray.priorityClassName" -}}
{{- if .Values.priorityClassName }}
{{- .Values.priorityClassName }}
{{- else if .Values.priorityClass.create }}
{{- include "gpuxray.fullname" . }}
{{- end }}
{{- end }}

{{/*
The bytes of a Kubernetes memory quantity: a plain number, or one with a
suffix k, M, G, T, Ki, Mi, Gi or Ti; "" when it is not one of those.
*/}}
{{- define "gpuxray.quantityBytes" -}}
{{- if kindIs "float64" . }}
{{- . | int64 }}
{{- else if kindIs "int" . }}
{{- . }}
{{- else }}
{{- $q := toString . }}
{{- if regexMatch "^[0-9]+(\\.[0-9]+)?(k|M|G|T|Ki|Mi|Gi|Ti)?$" $q }}
{{- $n := regexReplaceAll "[A-Za-z]+$" $q "" | float64 }}
{{- $unit := regexReplaceAll "^[0-9.]+" $q "" }}
{{- $mult := get (dict "" 1.0 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0) $unit }}
{{- mulf $n $mult | int64 }}
{{- end }}
{{- end }}
{{- end }}

{{/* The bytes of a GOMEMLIMIT value (runtime/debug: N with B, KiB, MiB, GiB or TiB). */}}
{{- define "gpuxray.goSizeBytes" -}}
{{- $n := regexReplaceAll "[A-Za-z]+$" . "" | float64 }}
{{- $unit := regexReplaceAll "^[0-9]+" . "" }}
{{- mulf $n (get (dict "" 1.0 "B" 1.0 "KiB" 1024.0 "MiB" 1048576.0 "GiB" 1073741824.0 "TiB" 1099511627776.0) $unit) | int64 }}
{{- end }}

{{/*
GOMEMLIMIT: goMemLimit, checked below the memory limit, or 75% of the limit
in MiB. The limit must leave 32 MiB beside it for the binary's own pages.
*/}}
{{- define "gpuxray.goMemLimit" -}}
{{- $limit := "" }}
{{- with .Values.resources }}{{ with .limits }}{{ with .memory }}{{ $limit = include "gpuxray.quantityBytes" . }}{{ end }}{{ end }}{{ end }}
{{- if not $limit }}
{{- fail "resources.limits.memory: no memory limit, or not a quantity the chart reads (128Mi, 1Gi): GOMEMLIMIT is set from it" }}
{{- end }}
{{- $limit = $limit | int64 }}
{{- if lt $limit 134217728 }}
{{- fail (printf "resources.limits.memory %v is too small: the agent peaks near 55 MiB and maps up to 32 MiB of its binary; give it 128Mi or more (docs/install.md)" .Values.resources.limits.memory) }}
{{- end }}
{{- if .Values.goMemLimit }}
{{- if ge (include "gpuxray.goSizeBytes" .Values.goMemLimit | int64) (sub $limit 33554432 | int64) }}
{{- fail (printf "goMemLimit %s is not below resources.limits.memory %v by 32 MiB: the hard limit would kill the agent before the GC reacts" .Values.goMemLimit .Values.resources.limits.memory) }}
{{- end }}
{{- .Values.goMemLimit }}
{{- else }}
{{- printf "%dMiB" (div (div (mul $limit 3) 4) 1048576 | int64) }}
{{- end }}
{{- end }}
