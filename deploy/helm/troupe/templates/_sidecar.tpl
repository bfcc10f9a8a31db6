{{/*
troupe.sidecar: everything the daemon sidecar adds to a pod, as YAML of one object

  sidecar:                       a Container: the daemon, as a native sidecar (restartPolicy: Always)
  volumes:                       Volumes the pod needs (tokens, TLS, scratch)
  appEnv:                        EnvVars for every app container (TROUPE_ADDR, token files, TROUPE_TLS_CA)
  appVolumeMounts:               VolumeMounts for every app container (the tokens, the CA)
  terminationGracePeriodSeconds: the pod's grace, covering the daemon's drain
  podLabels:                     labels the pod gets (memberLabels: the NetworkPolicies select by them)

The injector's ConfigMap is this object as JSON (the injector applies it to annotated pods).
Without the injector, add it to a pod template yourself, from a chart that has this chart as
a dependency named "troupe":

  {{- $troupe := include "troupe.sidecar" .Subcharts.troupe | fromYaml }}
  spec:
    terminationGracePeriodSeconds: {{ $troupe.terminationGracePeriodSeconds }}
    initContainers:
      - {{- toYaml $troupe.sidecar | nindent 8 }}
    containers:
      - name: app
        env: {{- toYaml $troupe.appEnv | nindent 10 }}
        volumeMounts: {{- toYaml $troupe.appVolumeMounts | nindent 10 }}
    volumes: {{- toYaml $troupe.volumes | nindent 6 }}
*/}}
{{- define "troupe.sidecar" -}}
{{- include "troupe.checkMetricsPort" . -}}
{{- $v := .Values -}}
{{- $tls := $v.tls.enabled -}}
{{- $readKey := include "troupe.tokens.readKey" . -}}
sidecar:
  name: troupe
  image: {{ default (include "troupe.image" .) $v.sidecar.image | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  restartPolicy: Always
  args:
    - serve
    - --listen
    - {{ printf "0.0.0.0:%d" (int $v.sidecar.port) | quote }}
    - --advertise
    - {{ printf "$(POD_IP):%d" (int $v.sidecar.port) | quote }}
    - --placement
    - {{ include "troupe.placement.addresses" . | quote }}
    - --health-listen
    - {{ printf "0.0.0.0:%d" (int $v.sidecar.healthPort) | quote }}
    - --data-dir
    - /var/lib/troupe
    {{- range $v.sidecar.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  env:
    - name: POD_IP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    - name: TROUPE_STORE
      valueFrom:
        secretKeyRef:
          name: {{ include "troupe.store.secret" . | quote }}
          key: {{ include "troupe.store.key" . | quote }}
    - name: TROUPE_API_TOKEN_FILE
      value: /var/run/troupe/tokens/api-token
    - name: TROUPE_APP_TOKEN_FILE
      value: /var/run/troupe/tokens/app-token
    {{- if $readKey }}
    - name: TROUPE_READ_TOKEN_FILE
      value: /var/run/troupe/tokens/read-token
    {{- end }}
    - name: TROUPE_SHUTDOWN_GRACE
      value: {{ $v.sidecar.shutdownGrace | quote }}
    - name: TROUPE_SHUTDOWN_FLUSH_TIMEOUT
      value: {{ $v.sidecar.shutdownFlushTimeout | quote }}
    {{- include "troupe.logEnv" . | nindent 4 }}
    {{- if $tls }}
    {{- include "troupe.tlsEnv" . | nindent 4 }}
    {{- end }}
    {{- if $v.metrics.enabled }}
    - name: TROUPE_METRICS_LISTEN
      value: {{ printf "0.0.0.0:%d" (int $v.metrics.port) | quote }}
    {{- end }}
    {{- with $v.sidecar.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: troupe-api
      containerPort: {{ $v.sidecar.port }}
      protocol: TCP
    - name: troupe-health
      containerPort: {{ $v.sidecar.healthPort }}
      protocol: TCP
    {{- if $v.metrics.enabled }}
    - name: troupe-metrics
      containerPort: {{ $v.metrics.port }}
      protocol: TCP
    {{- end }}
  startupProbe:
    grpc:
      port: {{ $v.sidecar.healthPort }}
    periodSeconds: 1
    failureThreshold: 60
  # Ready while the daemon can serve actors (in a cluster: while it holds a
  # placement lease); startup and liveness ask only whether it answers.
  readinessProbe:
    grpc:
      port: {{ $v.sidecar.healthPort }}
      service: troupe.v1.ActorClient
    periodSeconds: 5
    failureThreshold: 3
  livenessProbe:
    grpc:
      port: {{ $v.sidecar.healthPort }}
    periodSeconds: 10
    failureThreshold: 6
  resources:
    {{- toYaml $v.sidecar.resources | nindent 4 }}
  securityContext:
    {{- toYaml $v.containerSecurityContext | nindent 4 }}
  volumeMounts:
    - name: troupe-tokens
      mountPath: /var/run/troupe/tokens
      readOnly: true
    {{- if $tls }}
    - name: troupe-tls
      mountPath: /var/run/troupe/tls
      readOnly: true
    {{- end }}
    - name: troupe-scratch
      mountPath: /var/lib/troupe
volumes:
  - name: troupe-tokens
    secret:
      secretName: {{ include "troupe.tokens.secret" . | quote }}
      items:
        - key: {{ $v.tokens.apiTokenKey | quote }}
          path: api-token
        - key: {{ $v.tokens.appTokenKey | quote }}
          path: app-token
        {{- if $readKey }}
        # Not optional: without the key the kubelet refuses the volume with an event naming
        # it ("references non-existent secret key"), clearer than the daemon's missing file.
        - key: {{ $readKey | quote }}
          path: read-token
        {{- end }}
  {{- if $tls }}
  - name: troupe-tls
    secret:
      secretName: {{ include "troupe.sidecar.tlsSecret" . | quote }}
  - name: troupe-ca
    secret:
      secretName: {{ include "troupe.sidecar.tlsSecret" . | quote }}
      items:
        - key: ca.crt
          path: ca.crt
  {{- end }}
  - name: troupe-scratch
    emptyDir:
      sizeLimit: {{ $v.sidecar.scratchSizeLimit | quote }}
appEnv:
  - name: TROUPE_ADDR
    value: {{ printf "127.0.0.1:%d" (int $v.sidecar.port) | quote }}
  # Token files, not values: the Secret stays out of the environment, and the SDKs
  # read a rotated file at their next connection.
  - name: TROUPE_APP_TOKEN_FILE
    value: /var/run/troupe/tokens/app-token
  - name: TROUPE_API_TOKEN_FILE
    value: /var/run/troupe/tokens/api-token
  {{- if $tls }}
  - name: TROUPE_TLS_CA
    value: /var/run/troupe/ca/ca.crt
  {{- end }}
appVolumeMounts:
  - name: troupe-tokens
    mountPath: /var/run/troupe/tokens
    readOnly: true
  {{- if $tls }}
  - name: troupe-ca
    mountPath: /var/run/troupe/ca
    readOnly: true
  {{- end }}
terminationGracePeriodSeconds: {{ $v.sidecar.terminationGracePeriodSeconds }}
podLabels:
  {{- toYaml $v.memberLabels | nindent 2 }}
{{- end }}
