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
