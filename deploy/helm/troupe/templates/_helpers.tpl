{{/* Names, labels and shared pieces. */}}

{{- define "troupe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "troupe.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "troupe.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "troupe.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: troupe
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component: (dict "ctx" $ "component" "placement"). */}}
{{- define "troupe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "troupe.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Labels of the chart's own pods: the webhook's default objectSelector skips them. */}}
{{- define "troupe.controlPlaneLabel" -}}
troupe.dev/control-plane: "true"
{{- end }}

{{- define "troupe.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "troupe.memberIdentity" -}}
{{- default (printf "member.%s.%s.troupe" (include "troupe.fullname" .) .Release.Namespace) .Values.tls.memberIdentity }}
{{- end }}

{{/* Placement names. */}}
{{- define "troupe.placement.name" -}}
{{- printf "%s-placement" (include "troupe.fullname" .) }}
{{- end }}
{{- define "troupe.placement.headless" -}}
{{- printf "%s-placement-peers" (include "troupe.fullname" .) }}
{{- end }}

{{/* The replicas' stable names, "1=NAME-0.HEADLESS.NS.svc.DOMAIN:PORT,...". */}}
{{- define "troupe.placement.peers" -}}
{{- $peers := list }}
{{- range $i := until (int .Values.placement.replicas) }}
{{- $peers = append $peers (printf "%d=%s-%d.%s.%s.svc.%s:%d" (add1 $i) (include "troupe.placement.name" $) $i (include "troupe.placement.headless" $) $.Release.Namespace $.Values.clusterDomain (int $.Values.placement.port)) }}
{{- end }}
{{- join "," $peers }}
{{- end }}

{{/* What daemons give as --placement: every replica by its stable name. */}}
{{- define "troupe.placement.addresses" -}}
{{- if .Values.placement.enabled }}
{{- $addrs := list }}
{{- range $i := until (int .Values.placement.replicas) }}
{{- $addrs = append $addrs (printf "%s-%d.%s.%s.svc.%s:%d" (include "troupe.placement.name" $) $i (include "troupe.placement.headless" $) $.Release.Namespace $.Values.clusterDomain (int $.Values.placement.port)) }}
{{- end }}
{{- join "," $addrs }}
{{- else }}
{{- required "placement.externalAddresses: give the placement addresses when placement.enabled is false" (join "," .Values.placement.externalAddresses) }}
{{- end }}
{{- end }}

{{/* Secret names. */}}
{{- define "troupe.tokens.secret" -}}
{{- default (printf "%s-tokens" (include "troupe.fullname" .)) .Values.tokens.existingSecret }}
{{- end }}
{{/* The read-only token's key, "" for none. Never another token's key: Prometheus would
scrape with that token, and with the app token's key it could register as an app. */}}
{{- define "troupe.tokens.readKey" -}}
{{- $t := .Values.tokens }}
{{- if and $t.readTokenKey (has $t.readTokenKey (list $t.apiTokenKey $t.appTokenKey)) }}
{{- fail (printf "tokens.readTokenKey %q is also another token's key: give the read-only token a key of its own, or \"\" for none" $t.readTokenKey) }}
{{- end }}
{{- $t.readTokenKey }}
{{- end }}
{{/* The key of the token Prometheus scrapes with: the read-only one, else the API token.
One key for both ServiceMonitors, and the only token the placement replicas are given: they
check scrapes against it and have no other use for a token. */}}
{{- define "troupe.tokens.scrapeKey" -}}
{{- include "troupe.tokens.readKey" . | default .Values.tokens.apiTokenKey }}
{{- end }}
{{- define "troupe.store.secret" -}}
{{- if .Values.stateStore.url }}
{{- printf "%s-state-store" (include "troupe.fullname" .) }}
{{- else }}
{{- required "stateStore: set url or existingSecret (e.g. CloudNativePG's <cluster>-app)" .Values.stateStore.existingSecret }}
{{- end }}
{{- end }}
{{- define "troupe.store.key" -}}
{{- if .Values.stateStore.url }}url{{ else }}{{ .Values.stateStore.existingSecretKey }}{{ end }}
{{- end }}
{{- define "troupe.ca.secret" -}}
{{- printf "%s-ca" (include "troupe.fullname" .) }}
{{- end }}
{{- define "troupe.placement.tlsSecret" -}}
{{- default (printf "%s-placement-tls" (include "troupe.fullname" .)) .Values.tls.existingSecrets.placement }}
{{- end }}
{{- define "troupe.sidecar.tlsSecret" -}}
{{- default (printf "%s-sidecar-tls" (include "troupe.fullname" .)) .Values.tls.existingSecrets.sidecar }}
{{- end }}
{{- define "troupe.injector.name" -}}
{{- printf "%s-injector" (include "troupe.fullname" .) }}
{{- end }}
{{- define "troupe.injector.tlsSecret" -}}
{{- printf "%s-injector-tls" (include "troupe.fullname" .) }}
{{- end }}

{{/* Whether the chart makes certificates itself (TLS on, cert-manager off, no existing Secrets). */}}
{{- define "troupe.tls.generate" -}}
{{- if and .Values.tls.enabled (not .Values.certManager.enabled) }}true{{ end }}
{{- end }}

{{/* The cert-manager issuer reference of the member certificates. */}}
{{- define "troupe.certManager.issuerRef" -}}
{{- if .Values.certManager.issuerRef }}
{{- toYaml .Values.certManager.issuerRef }}
{{- else }}
name: {{ include "troupe.fullname" . }}-ca
kind: Issuer
group: cert-manager.io
{{- end }}
{{- end }}

{{/* RUST_LOG and TROUPE_LOG_FORMAT. */}}
{{- define "troupe.logEnv" -}}
- name: RUST_LOG
  value: {{ .Values.logging.level | quote }}
- name: TROUPE_LOG_FORMAT
  value: {{ .Values.logging.format | quote }}
{{- end }}

{{/* TLS environment of a member (placement or sidecar), files under /var/run/troupe/tls. */}}
{{- define "troupe.tlsEnv" -}}
- name: TROUPE_TLS_CERT
  value: /var/run/troupe/tls/tls.crt
- name: TROUPE_TLS_KEY
  value: /var/run/troupe/tls/tls.key
- name: TROUPE_TLS_CA
  value: /var/run/troupe/tls/ca.crt
- name: TROUPE_TLS_PEER_IDENTITY
  value: {{ include "troupe.memberIdentity" . | quote }}
{{- end }}

{{/* metrics.port is served by sidecars and placement replicas alike: one equal to a port
either already listens on would crash-loop the pods ("cannot serve metrics on ... is the
port taken?"); say so at render time instead. */}}
{{- define "troupe.checkMetricsPort" -}}
{{- if .Values.metrics.enabled }}
{{- $metrics := int .Values.metrics.port }}
{{- $taken := dict "sidecar.port" .Values.sidecar.port "sidecar.healthPort" .Values.sidecar.healthPort "placement.port" .Values.placement.port "placement.healthPort" .Values.placement.healthPort }}
{{- range $name, $port := $taken }}
{{- if eq (int $port) $metrics }}
{{- fail (printf "metrics.port %d is also %s, and a pod cannot listen on one port twice: give metrics.port a port of its own" $metrics $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
