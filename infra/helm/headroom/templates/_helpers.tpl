{{/* Names, labels, the image, and the environment and volumes every component shares. */}}

{{- define "headroom.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of a component: (dict "root" $ "component" "router") */}}
{{- define "headroom.labels" -}}
{{ include "headroom.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "headroom.selectorLabels" -}}
app.kubernetes.io/name: headroom
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "headroom.image" -}}
{{- $image := .Values.image -}}
{{- if $image.digest -}}
{{ $image.repository }}@{{ $image.digest }}
{{- else -}}
{{ $image.repository }}:{{ $image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "headroom.poolName" -}}
{{- .Values.inferencePool.name | default (include "headroom.fullname" .) -}}
{{- end -}}

{{/* Kafka: bootstrap, topics and client security of a component: (dict "root" $ "user" "headroom-router") */}}
{{- define "headroom.kafkaEnv" -}}
{{- $kafka := .root.Values.kafka -}}
{{- $protocol := $kafka.security.protocol -}}
- name: HEADROOM_KAFKA_BOOTSTRAP
{{- if $kafka.bootstrapSecret.name }}
  valueFrom:
    secretKeyRef: {name: {{ $kafka.bootstrapSecret.name }}, key: {{ $kafka.bootstrapSecret.key }}}
{{- else }}
  value: {{ $kafka.bootstrapServers | quote }}
{{- end }}
- {name: HEADROOM_TOPIC_TELEMETRY, value: {{ $kafka.topics.telemetry | quote }}}
- {name: HEADROOM_TOPIC_DLQ, value: {{ $kafka.topics.deadLetter | quote }}}
- {name: HEADROOM_TOPIC_MODELS, value: {{ $kafka.topics.models | quote }}}
- {name: HEADROOM_TELEMETRY_PARTITIONS, value: {{ $kafka.topics.telemetryPartitions | quote }}}
- {name: HEADROOM_KAFKA_SECURITY_PROTOCOL, value: {{ $protocol }}}
{{- if and (has $protocol (list "SSL" "SASL_SSL")) $kafka.security.caSecret.name }}
- {name: HEADROOM_KAFKA_SSL_CA_FILE, value: /etc/headroom/kafka/ca/{{ $kafka.security.caSecret.key }}}
{{- end }}
{{- if and (eq $protocol "SSL") .user }}
- {name: HEADROOM_KAFKA_SSL_CERT_FILE, value: /etc/headroom/kafka/user/user.crt}
- {name: HEADROOM_KAFKA_SSL_KEY_FILE, value: /etc/headroom/kafka/user/user.key}
{{- end }}
{{- if hasPrefix "SASL_" $protocol }}
- {name: HEADROOM_KAFKA_SASL_MECHANISM, value: {{ $kafka.security.saslMechanism }}}
{{- if eq $kafka.security.saslMechanism "OAUTHBEARER" }}
- {name: HEADROOM_KAFKA_SASL_OAUTH_TOKEN_PROVIDER, value: {{ $kafka.security.oauthTokenProvider | quote }}}
{{- else }}
- {name: HEADROOM_KAFKA_SASL_USERNAME, value: {{ .user | quote }}}
- {name: HEADROOM_KAFKA_SASL_PASSWORD_FILE, value: /etc/headroom/kafka/user/password}
{{- end }}
{{- end }}
{{- end -}}

{{- define "headroom.kafkaVolumes" -}}
{{- $kafka := .root.Values.kafka -}}
{{- $protocol := $kafka.security.protocol -}}
{{- if and (has $protocol (list "SSL" "SASL_SSL")) $kafka.security.caSecret.name }}
- name: kafka-ca
  secret: {secretName: {{ $kafka.security.caSecret.name }}}
{{- end }}
{{- if and .user (or (eq $protocol "SSL") (and (hasPrefix "SASL_" $protocol) (ne $kafka.security.saslMechanism "OAUTHBEARER"))) }}
- name: kafka-user
  secret: {secretName: {{ .user }}}
{{- end }}
{{- end -}}

{{- define "headroom.kafkaMounts" -}}
{{- $kafka := .root.Values.kafka -}}
{{- $protocol := $kafka.security.protocol -}}
{{- if and (has $protocol (list "SSL" "SASL_SSL")) $kafka.security.caSecret.name }}
- {name: kafka-ca, mountPath: /etc/headroom/kafka/ca, readOnly: true}
{{- end }}
{{- if and .user (or (eq $protocol "SSL") (and (hasPrefix "SASL_" $protocol) (ne $kafka.security.saslMechanism "OAUTHBEARER"))) }}
- {name: kafka-user, mountPath: /etc/headroom/kafka/user, readOnly: true}
{{- end }}
{{- end -}}

{{/* Verifying model updates (routers and prediction servers). */}}
{{- define "headroom.trustEnv" -}}
{{- if .Values.modelSigning.trustedKeysSecret }}
- {name: HEADROOM_MODEL_TRUSTED_KEYS, value: /etc/headroom/trusted-keys}
{{- end }}
- {name: HEADROOM_MODEL_ALLOW_UNSIGNED, value: {{ .Values.modelSigning.allowUnsigned | quote }}}
{{- end -}}

{{- define "headroom.trustVolume" -}}
{{- if .Values.modelSigning.trustedKeysSecret }}
- name: trusted-keys
  secret: {secretName: {{ .Values.modelSigning.trustedKeysSecret }}}
{{- end }}
{{- end -}}

{{- define "headroom.trustMount" -}}
{{- if .Values.modelSigning.trustedKeysSecret }}
- {name: trusted-keys, mountPath: /etc/headroom/trusted-keys, readOnly: true}
{{- end }}
{{- end -}}

{{/* Listener TLS of routers and prediction servers, and the router's client side towards predictors. */}}
{{- define "headroom.tlsEnv" -}}
{{- if .Values.tls.secret }}
- {name: HEADROOM_TLS_CERT_FILE, value: /etc/headroom/tls/tls.crt}
- {name: HEADROOM_TLS_KEY_FILE, value: /etc/headroom/tls/tls.key}
{{- if .Values.tls.requireClientCert }}
- {name: HEADROOM_TLS_CLIENT_CA_FILE, value: /etc/headroom/tls/ca.crt}
{{- end }}
{{- end }}
{{- end -}}

{{/* Volumes every pod has: the writable state folder and /tmp (the root filesystem is read-only). */}}
{{- define "headroom.baseVolumes" -}}
- {name: state, emptyDir: {}}
- {name: tmp, emptyDir: {}}
{{- end -}}

{{- define "headroom.baseMounts" -}}
- {name: state, mountPath: /var/lib/headroom}
- {name: tmp, mountPath: /tmp}
{{- end -}}

{{/* The pod-level settings every component shares. */}}
{{- define "headroom.podSpec" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets: {{ toYaml . | nindent 2 }}
{{- end }}
securityContext: {{ toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.nodeSelector }}
nodeSelector: {{ toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations: {{ toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Checks of the values that would make a broken deployment; each names the value to change. */}}
{{- define "headroom.validate" -}}
{{- $protocols := list "PLAINTEXT" "SSL" "SASL_PLAINTEXT" "SASL_SSL" -}}
{{- if not (has .Values.kafka.security.protocol $protocols) -}}
{{- fail (printf "kafka.security.protocol must be one of %s, got %q" (join ", " $protocols) .Values.kafka.security.protocol) -}}
{{- end -}}
{{- $mechanisms := list "PLAIN" "SCRAM-SHA-256" "SCRAM-SHA-512" "OAUTHBEARER" -}}
{{- if and (hasPrefix "SASL_" .Values.kafka.security.protocol) (not (has .Values.kafka.security.saslMechanism $mechanisms)) -}}
{{- fail (printf "kafka.security.saslMechanism must be one of %s, got %q" (join ", " $mechanisms) .Values.kafka.security.saslMechanism) -}}
{{- end -}}
{{- if and (eq .Values.kafka.security.saslMechanism "OAUTHBEARER") (hasPrefix "SASL_" .Values.kafka.security.protocol) (not .Values.kafka.security.oauthTokenProvider) -}}
{{- fail "kafka.security.oauthTokenProvider (module:callable returning a token and its expiry) is required with OAUTHBEARER" -}}
{{- end -}}
{{- $workers := int .Values.worker.replicas -}}
{{- $partitions := int .Values.kafka.topics.telemetryPartitions -}}
{{- if gt $workers $partitions -}}
{{- fail (printf "worker.replicas (%d) exceeds the telemetry topic's partitions (kafka.topics.telemetryPartitions = %d): a worker holds at least one partition, so the extra workers would idle; add partitions to the topic first, then raise both values" $workers $partitions) -}}
{{- end -}}
{{- if lt $workers 1 -}}
{{- fail "worker.replicas must be at least 1: without a worker no model is ever trained" -}}
{{- end -}}
{{- if not (has .Values.router.predictor (list "embedded" "remote")) -}}
{{- fail (printf "router.predictor must be embedded or remote, got %q" .Values.router.predictor) -}}
{{- end -}}
{{- if and (eq .Values.router.predictor "remote") (not .Values.predictor.enabled) -}}
{{- fail "router.predictor is remote but predictor.enabled is false: enable the prediction servers or use embedded" -}}
{{- end -}}
{{- if and .Values.tls.requireClientCert (not .Values.tls.secret) -}}
{{- fail "tls.requireClientCert needs tls.secret (its ca.crt checks the clients' certificates)" -}}
{{- end -}}
{{- $router := .Values.router -}}
{{- $trusts := list "token" "mtls" "network" -}}
{{- if not (has $router.gateway.trust $trusts) -}}
{{- fail (printf "router.gateway.trust must be one of %s, got %q" (join ", " $trusts) $router.gateway.trust) -}}
{{- end -}}
{{- if .Values.security.insecureLocal -}}
{{- if .Values.gateway.enabled -}}
{{- fail "security.insecureLocal turns off the router's tokens, its gateway check and every NetworkPolicy: it is for a cluster on one machine, never behind the load balancer of gateway.enabled" -}}
{{- end -}}
{{- else -}}
{{- if and (not $router.authTokensSecret) (not .Values.tls.requireClientCert) -}}
{{- fail "router.authTokensSecret is empty and tls.requireClientCert is off: anyone who reaches the router could use its proxy and Pick API; name a Secret of client tokens (key `tokens`), or require client certificates (security.insecureLocal=true is the opt-out for a one-machine cluster)" -}}
{{- end -}}
{{- if and (eq $router.gateway.trust "token") (not $router.gateway.tokensSecret) -}}
{{- fail "router.gateway.trust is token but router.gateway.tokensSecret is empty: name the Secret (key `tokens`) whose token the gateway sends to ext_proc" -}}
{{- end -}}
{{- if and (eq $router.gateway.trust "mtls") (or (not .Values.tls.requireClientCert) (not $router.gateway.identities)) -}}
{{- fail "router.gateway.trust is mtls: it needs tls.requireClientCert and router.gateway.identities, the names on the gateway's client certificate" -}}
{{- end -}}
{{- if and (eq $router.gateway.trust "network") (or (not .Values.networkPolicy.enabled) (not .Values.networkPolicy.gatewaySources)) -}}
{{- fail "router.gateway.trust is network: it needs networkPolicy.enabled and networkPolicy.gatewaySources, the only peers that may reach ext_proc (on GKE, the proxy-only subnet: [{ipBlock: {cidr: ...}}])" -}}
{{- end -}}
{{- end -}}
{{- with .Values.inferencePool.appProtocol -}}
{{- if not (has . (list "http" "kubernetes.io/h2c")) -}}
{{- fail (printf "inferencePool.appProtocol must be http or kubernetes.io/h2c (or empty), got %q" .) -}}
{{- end -}}
{{- end -}}
{{- if and (not .Values.modelSigning.allowUnsigned) (not .Values.modelSigning.trustedKeysSecret) -}}
{{- fail "modelSigning.trustedKeysSecret is empty: prediction servers and routers could verify no model update (set it, or modelSigning.allowUnsigned for a demo)" -}}
{{- end -}}
{{- if and (not .Values.modelSigning.allowUnsigned) (not .Values.modelSigning.signingKeySecret.name) -}}
{{- fail "modelSigning.signingKeySecret.name is empty: the worker could sign no model update (set it, or modelSigning.allowUnsigned for a demo)" -}}
{{- end -}}
{{- if and .Values.gateway.enabled (not .Values.inferencePool.enabled) -}}
{{- fail "gateway.enabled routes to the InferencePool: set inferencePool.enabled too" -}}
{{- end -}}
{{- end -}}
