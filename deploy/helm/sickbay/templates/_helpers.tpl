{{/* Names, labels and the one pod template every role shares. */}}

{{- define "sickbay.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sickbay.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* <fullname>-<role>, the name of every object of one role. Args: (list $ roleName) */}}
{{- define "sickbay.roleName" -}}
{{- $root := index . 0 -}}
{{- printf "%s-%s" (include "sickbay.fullname" $root) (index . 1) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sickbay.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "sickbay.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sickbay
{{- end -}}

{{/* Args: (list $ roleName) */}}
{{- define "sickbay.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "sickbay.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "sickbay.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The settings every process reads (streams/settings.py), inline so hooks need no ConfigMap. */}}
{{- define "sickbay.env" -}}
- name: SICKBAY_KAFKA_BOOTSTRAP
  value: {{ required "kafka.bootstrap is required" .Values.kafka.bootstrap | quote }}
- name: SICKBAY_TOPIC_PREFIX
  value: {{ .Values.topicPrefix | quote }}
- name: SICKBAY_APP_ID
  value: {{ .Values.appId | quote }}
- name: SICKBAY_PARTITIONS
  value: {{ .Values.partitions | quote }}
- name: SICKBAY_REPLICATION_FACTOR
  value: {{ .Values.replicationFactor | quote }}
- name: SICKBAY_CLUSTER
  value: {{ .Values.cluster | quote }}
- name: SICKBAY_MODE
  value: {{ .Values.mode | quote }}
- name: SICKBAY_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: SICKBAY_STATE_DIR
  value: /var/lib/sickbay
- name: SICKBAY_CLICKHOUSE_DATABASE
  value: {{ .Values.clickhouse.database | quote }}
{{- if .Values.clickhouse.urlSecret.name }}
- name: CLICKHOUSE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.clickhouse.urlSecret.name }}
      key: {{ .Values.clickhouse.urlSecret.key }}
{{- else if .Values.clickhouse.url }}
- name: CLICKHOUSE_URL
  value: {{ .Values.clickhouse.url | quote }}
{{- end }}
{{- range $name, $ref := .Values.secretEnv }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ $ref.name }}
      key: {{ $ref.key }}
{{- end }}
{{- range $name, $value := .Values.settings }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end -}}

{{/*
The pod template of one role. Args: (list $ roleName role)
StatefulSet roles mount their volumeClaimTemplate "state" at /var/lib/sickbay;
others get an emptyDir there (the root filesystem is read-only).
*/}}
{{- define "sickbay.podTemplate" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $role := index . 2 -}}
metadata:
  labels:
    {{- include "sickbay.selectorLabels" (list $root $name) | nindent 4 }}
    app.kubernetes.io/part-of: sickbay
  {{- with $role.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  serviceAccountName: {{ include "sickbay.roleName" (list $root $name) }}
  {{- $rules := list }}
  {{- if $role.rbac }}{{ $rules = default (list) $role.rbac.rules }}{{ end }}
  # Only a role that talks to the Kubernetes API gets a token.
  automountServiceAccountToken: {{ gt (len $rules) 0 }}
  # Kubernetes would inject <SERVICE>_PORT=tcp://... variables; a Service named
  # sickbay-api would set SICKBAY_API_PORT and break the settings (and Faust reads WEB_PORT).
  enableServiceLinks: false
  terminationGracePeriodSeconds: {{ default 30 $role.terminationGracePeriodSeconds }}
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $role.runtimeClassName }}
  runtimeClassName: {{ . }}
  {{- end }}
  securityContext:
    {{- toYaml $root.Values.podSecurityContext | nindent 4 }}
    {{- with $role.supplementalGroups }}
    supplementalGroups:
      {{- toYaml . | nindent 6 }}
    {{- end }}
  {{- with $role.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $role.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $role.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: {{ $name }}
      image: {{ include "sickbay.image" $root }}
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      args:
        {{- toYaml $role.args | nindent 8 }}
      env:
        {{- include "sickbay.env" $root | nindent 8 }}
        {{- if eq $role.kind "StatefulSet" }}
        # Kafka static membership: the pod name carries the ordinal (sickbay-worker-N), so a
        # restarted pod rejoins as the same member and gets its partitions (and RocksDB) back.
        - name: CONSUMER_GROUP_INSTANCE_ID
          value: $(POD_NAME)
        {{- end }}
        {{- range $k, $v := $role.env }}
        - name: {{ $k }}
          value: {{ $v | quote }}
        {{- end }}
      {{- with $role.ports }}
      ports:
        {{- range $portName, $port := . }}
        - name: {{ $portName }}
          containerPort: {{ $port }}
          protocol: TCP
        {{- end }}
      {{- end }}
      {{- range $probe := list "startupProbe" "livenessProbe" "readinessProbe" }}
      {{- with index $role $probe }}
      {{ $probe }}:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- end }}
      resources:
        {{- toYaml (default dict $role.resources) | nindent 8 }}
      securityContext:
        {{- toYaml $root.Values.securityContext | nindent 8 }}
      volumeMounts:
        - name: state
          mountPath: /var/lib/sickbay
        - name: tmp
          mountPath: /tmp
        {{- range $volName, $hp := $role.hostPaths }}
        - name: {{ $volName }}
          mountPath: {{ $hp.mountPath }}
          readOnly: true
        {{- end }}
  volumes:
    {{- if ne $role.kind "StatefulSet" }}
    - name: state
      emptyDir: {}
    {{- end }}
    - name: tmp
      emptyDir: {}
    {{- range $volName, $hp := $role.hostPaths }}
    - name: {{ $volName }}
      hostPath:
        path: {{ $hp.path }}
        type: Directory
    {{- end }}
{{- end -}}
