{{/*
Names are fixed, not prefixed by the release: vacate-controller's own code
names its webhook, Service and certificate Secret, and its CRDs and cluster
roles are cluster-wide. One installation per cluster.
*/}}

{{/* Labels of every object. */}}
{{- define "vacate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/part-of: vacate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The controller's selector labels (the same as config/manager's). */}}
{{- define "vacate.controllerSelector" -}}
app.kubernetes.io/name: vacate-controller
{{- end }}

{{/* The agent's selector labels. */}}
{{- define "vacate.agentSelector" -}}
app.kubernetes.io/name: vacate-agent
{{- end }}

{{/* The namespace of the Lease. */}}
{{- define "vacate.leaseNamespace" -}}
{{- .Values.controller.leaderElection.namespace | default .Release.Namespace }}
{{- end }}

{{/* The user name of the controller's service account. */}}
{{- define "vacate.controllerUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ .Values.serviceAccount.name }}
{{- end }}

{{/* An image reference from {repository, tag, digest}; the tag defaults to appVersion. */}}
{{- define "vacate.image" -}}
{{- $img := index . 0 -}}
{{- $root := index . 1 -}}
{{- if $img.digest -}}
{{ $img.repository }}@{{ $img.digest }}
{{- else -}}
{{ $img.repository }}:{{ $img.tag | default $root.Chart.AppVersion }}
{{- end }}
{{- end }}

{{/*
A file of the chart (files/, copied by `make generate` from config/) with
the names of config/'s installation made this release's: the namespace
vacate-system, and the service accounts' user names.
*/}}
{{- define "vacate.file" -}}
{{- $root := index . 0 -}}
{{- $text := $root.Files.Get (index . 1) -}}
{{- $text = $text | replace "system:serviceaccount:vacate-system:vacate-controller" (include "vacate.controllerUser" $root) -}}
{{- $text = $text | replace "system:serviceaccount:vacate-system:vacate-agent" (printf "system:serviceaccount:%s:vacate-agent" $root.Release.Namespace) -}}
{{- $text | replace "vacate-system" $root.Release.Namespace -}}
{{- end }}
