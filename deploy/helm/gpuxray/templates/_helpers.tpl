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
