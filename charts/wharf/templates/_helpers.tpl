{{/* Full name of the release's objects. */}}
{{- define "wharf.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "wharf.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "wharf.labels" -}}
{{ include "wharf.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "wharf.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "wharf.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "wharf.gatewayName" -}}
{{- default (include "wharf.fullname" .) .Values.gateway.name -}}
{{- end }}

{{/* Non-empty when an ACME issuer needs files mounted (a CA root, an EAB key). */}}
{{- define "wharf.acmeFiles" -}}
{{- range .Values.controller.acme.issuers }}{{ if or .caConfigMap .eab }}true{{ end }}{{ end -}}
{{- end }}
