{{/*
kvgate's config.toml, rendered from .Values.config plus one endpoint per worker replica.
Only keys that kvgate's settings model knows are written (it forbids unknown keys); strings are
quoted with toJson, whose escapes are valid TOML basic-string escapes. Secrets never appear here:
client keys, the admin key, Redis and endpoint keys arrive as environment variables.
*/}}
{{- define "kvgate.configToml" -}}
{{- $cfg := .Values.config -}}
{{- $fullname := include "kvgate.fullname" . -}}
# Rendered by the kvgate Helm chart {{ .Chart.Version }} for release {{ .Release.Name }}; do not edit.
# Client keys: KVGATE__AUTH__API_KEYS (from Secret {{ include "kvgate.clientKeysSecret" . }}).

[server]
host = {{ $cfg.server.host | toJson }}
port = {{ int $cfg.server.port }}
max_body_bytes = {{ int64 $cfg.server.max_body_bytes }}
log_level = {{ $cfg.server.log_level | toJson }}
access_log = {{ $cfg.server.access_log }}

[upstream]
pool_size = {{ int $cfg.upstream.pool_size }}
keepalive_s = {{ include "kvgate.pyFloat" $cfg.upstream.keepalive_s }}
max_attempts = {{ int $cfg.upstream.max_attempts }}
max_retry_after_s = {{ include "kvgate.pyFloat" $cfg.upstream.max_retry_after_s }}

[upstream.timeouts]
connect_s = {{ include "kvgate.pyFloat" $cfg.upstream.timeouts.connect_s }}
first_byte_s = {{ include "kvgate.pyFloat" $cfg.upstream.timeouts.first_byte_s }}
idle_s = {{ include "kvgate.pyFloat" $cfg.upstream.timeouts.idle_s }}
total_s = {{ include "kvgate.pyFloat" $cfg.upstream.timeouts.total_s }}

[health]
interval_s = {{ include "kvgate.pyFloat" $cfg.health.interval_s }}
timeout_s = {{ include "kvgate.pyFloat" $cfg.health.timeout_s }}
unhealthy_threshold = {{ int $cfg.health.unhealthy_threshold }}
healthy_threshold = {{ int $cfg.health.healthy_threshold }}

[routing]
policy = {{ $cfg.routing.policy | toJson }}

[metrics]
enabled = {{ $cfg.metrics.enabled }}
{{- range $name := (include "kvgate.enabledClusters" . | fromYamlArray) }}
{{- $c := index $.Values.workers.clusters $name }}
{{- $sts := include "kvgate.workerName" (dict "root" $ "cluster" $name) }}

# vLLM worker cluster {{ $name }}: StatefulSet {{ $sts }}, one endpoint per replica.
[clusters.{{ $name | toJson }}]
description = {{ $c.description | toJson }}
{{- range $i := until (int $c.replicas) }}

[[clusters.{{ $name | toJson }}.endpoints]]
name = {{ printf "%s-%d" $name $i | toJson }}
url = {{ printf "http://%s-%d.%s.%s.svc.%s:%d/v1" $sts $i $sts $.Release.Namespace $.Values.clusterDomain (int $c.port) | toJson }}
model = {{ $c.servedModelName | toJson }}
weight = {{ include "kvgate.pyFloat" $c.weight }}
{{- if $c.apiKey.existingSecret }}
api_key_env = {{ include "kvgate.workerKeyEnv" $name | toJson }}
{{- end }}
{{- end }}

[models.{{ $c.servedModelName | toJson }}]
cluster = {{ $name | toJson }}
aliases = {{ $c.aliases | default list | toJson }}
{{- end }}
{{- range $name, $c := $cfg.clusters }}

[clusters.{{ $name | toJson }}]
description = {{ $c.description | default "" | toJson }}
{{- range $i, $e := $c.endpoints }}

[[clusters.{{ $name | toJson }}.endpoints]]
{{- with $e.name }}
name = {{ . | toJson }}
{{- end }}
url = {{ $e.url | toJson }}
model = {{ $e.model | toJson }}
{{- with $e.health_url }}
health_url = {{ . | toJson }}
{{- end }}
{{- if hasKey $e "weight" }}
weight = {{ include "kvgate.pyFloat" $e.weight }}
{{- end }}
{{- if $e.api_key_secret }}
api_key_env = {{ include "kvgate.staticKeyEnv" (dict "cluster" $name "index" $i) | toJson }}
{{- end }}
{{- end }}
{{- end }}
{{- range $name, $m := $cfg.models }}

[models.{{ $name | toJson }}]
cluster = {{ $m.cluster | toJson }}
aliases = {{ $m.aliases | default list | toJson }}
{{- end }}
{{ end -}}
