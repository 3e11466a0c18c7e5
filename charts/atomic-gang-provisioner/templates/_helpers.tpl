{{/* Names and labels shared by every template. */}}

{{- define "agp.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's full name. A release named after (part of) the chart uses the longer of the
two, so `helm install atomic-gang .` gives atomic-gang-provisioner, not a doubled name.
*/}}
{{- define "agp.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "agp.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else if contains .Release.Name $name }}
{{- $name }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "agp.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agp.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "agp.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "agp.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: atomic-gang-provisioner
{{- end }}

{{- define "agp.serviceAccountName" -}}
{{- required "serviceAccount.name is required: the controller's ServiceAccount (and its Pod Identity association) are found by it" .Values.serviceAccount.name }}
{{- end }}

{{- define "agp.leaseName" -}}
{{- default (include "agp.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{- define "agp.webhookServiceName" -}}
{{- include "agp.fullname" . }}
{{- end }}

{{- define "agp.webhookSecretName" -}}
{{- if eq .Values.webhook.certMode "provided" }}
{{- .Values.webhook.tls.secretName }}
{{- else if eq .Values.webhook.certMode "selfSigned" }}
{{- /* Not the -webhook-tls name of earlier releases: that Secret's type cannot change. */}}
{{- printf "%s-webhook-certs" (include "agp.fullname" .) }}
{{- else }}
{{- printf "%s-webhook-tls" (include "agp.fullname" .) }}
{{- end }}
{{- end }}

{{- /* The self-managed ownership key's Secret (ownership.keySecret unset). */}}
{{- define "agp.ownershipSecretName" -}}
{{- printf "%s-ownership-key" (include "agp.fullname" .) }}
{{- end }}

{{- define "agp.usesPassphrase" -}}
{{- if eq .Values.pulumi.secretsProvider "passphrase" }}true{{ end }}
{{- end }}

{{/* Names the webhook's serving certificate must carry. */}}
{{- define "agp.webhookHosts" -}}
{{- $svc := include "agp.webhookServiceName" . }}
{{- list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) | toJson }}
{{- end }}

{{/* True when a quantity is zero ("0", "0Gi", "0.0", 0). */}}
{{- define "agp.isZero" -}}
{{- if regexMatch "^[+]?0*(\\.0*)?([a-zA-Z]+)?$" (toString .) }}true{{ end }}
{{- end }}
