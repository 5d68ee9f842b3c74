{{/*
kvgate's config.toml, rendered from .Values.config plus one endpoint per worker replica.
Only keys that kvgate's settings model knows are written (it forbids unknown keys); strings are
quoted with toJson, whose escapes are valid TOML basic-string escapes. Secrets never appear here:
client keys, the admin key, the Redis URL (it may carry credentials) and endpoint keys arrive as
environment variables (KVGATE__SECTION__KEY, merged over this file by kvgate).
*/}}
{{- define "kvgate.configToml" -}}
{{- $cfg := .Values.config -}}
{{- $fullname := include "kvgate.fullname" . -}}
# Rendered by the kvgate Helm chart {{ .Chart.Version }} for release {{ .Release.Name }}; do not edit.
# From the environment: KVGATE__AUTH__API_KEYS (Secret {{ include "kvgate.clientKeysSecret" . }})
{{- with .Values.auth.namedKeys.existingSecret }}, KVGATE__AUTH__KEYS (Secret {{ . }}){{ end }}
{{- with .Values.auth.admin.existingSecret }}, KVGATE__ADMIN__API_KEY (Secret {{ . }}){{ end }}
{{- if ne .Values.redis.mode "disabled" }}, KVGATE__STATE__REDIS_URL{{ end }}.

[server]
host = {{ $cfg.server.host | toJson }}
port = {{ int $cfg.server.port }}
max_body_bytes = {{ int64 $cfg.server.max_body_bytes }}
log_level = {{ $cfg.server.log_level | toJson }}
access_log = {{ $cfg.server.access_log }}

[admin]
allowed_networks = {{ $cfg.admin.allowed_networks | toJson }}
sync_interval_s = {{ include "kvgate.pyFloat" $cfg.admin.sync_interval_s }}

[upstream]
pool_size = {{ int $cfg.upstream.pool_size }}
keepalive_s = {{ include "kvgate.pyFloat" $cfg.upstream.keepalive_s }}
max_attempts = {{ int $cfg.upstream.max_attempts }}
max_retry_after_s = {{ include "kvgate.pyFloat" $cfg.upstream.max_retry_after_s }}

[upstream.timeouts]
{{ include "kvgate.timeoutsToml" $cfg.upstream.timeouts }}

[circuit]
consecutive_failures = {{ int $cfg.circuit.consecutive_failures }}
failure_ratio = {{ include "kvgate.pyFloat" $cfg.circuit.failure_ratio }}
min_requests = {{ int $cfg.circuit.min_requests }}
window_s = {{ include "kvgate.pyFloat" $cfg.circuit.window_s }}
cooldown_s = {{ include "kvgate.pyFloat" $cfg.circuit.cooldown_s }}
max_cooldown_s = {{ include "kvgate.pyFloat" $cfg.circuit.max_cooldown_s }}

[health]
interval_s = {{ include "kvgate.pyFloat" $cfg.health.interval_s }}
timeout_s = {{ include "kvgate.pyFloat" $cfg.health.timeout_s }}
unhealthy_threshold = {{ int $cfg.health.unhealthy_threshold }}
healthy_threshold = {{ int $cfg.health.healthy_threshold }}
probe = {{ $cfg.health.probe | toJson }}
stall_s = {{ include "kvgate.pyFloat" $cfg.health.stall_s }}

[routing]
policy = {{ $cfg.routing.policy | toJson }}
producer_deadline_ms = {{ include "kvgate.pyFloat" $cfg.routing.producer_deadline_ms }}
{{- if $cfg.routing.kv_events.enabled }}

# Precise mode: the gateway connects to each worker's KV-event publisher (the endpoints' kv_events).
[routing.kv_events]
enabled = true
bind = ""
{{- end }}

# Shared by the gateway replicas: redis.mode={{ .Values.redis.mode }}.
{{- if ne .Values.redis.mode "disabled" }}
# redis_url comes from the environment (KVGATE__STATE__REDIS_URL).
{{- end }}
[state]
backend = {{ ternary "memory" "redis" (eq .Values.redis.mode "disabled") | toJson }}
key_prefix = {{ $cfg.state.key_prefix | toJson }}
index_ttl_s = {{ include "kvgate.pyFloat" $cfg.state.index_ttl_s }}
in_flight_ttl_s = {{ include "kvgate.pyFloat" $cfg.state.in_flight_ttl_s }}
heartbeat_s = {{ include "kvgate.pyFloat" $cfg.state.heartbeat_s }}
deadline_ms = {{ include "kvgate.pyFloat" $cfg.state.deadline_ms }}
retry_after_s = {{ include "kvgate.pyFloat" $cfg.state.retry_after_s }}
max_pending_writes = {{ int $cfg.state.max_pending_writes }}
mode = {{ $cfg.state.mode | toJson }}
refresh_ms = {{ include "kvgate.pyFloat" $cfg.state.refresh_ms }}
mirror_misses = {{ $cfg.state.mirror_misses | toJson }}
change_retention_s = {{ include "kvgate.pyFloat" $cfg.state.change_retention_s }}
response_ttl_s = {{ include "kvgate.pyFloat" $cfg.state.response_ttl_s }}
response_max_entries = {{ int $cfg.state.response_max_entries }}
background_poll_s = {{ include "kvgate.pyFloat" $cfg.state.background_poll_s }}
background_max_s = {{ include "kvgate.pyFloat" $cfg.state.background_max_s }}

[quotas]
on_store_error = {{ $cfg.quotas.on_store_error | toJson }}
usage_retention_days = {{ int $cfg.quotas.usage_retention_days }}
store_timeout_s = {{ include "kvgate.pyFloat" $cfg.quotas.store_timeout_s }}
settle_interval_s = {{ include "kvgate.pyFloat" $cfg.quotas.settle_interval_s }}

{{- $rs := $cfg.route_selection }}

[route_selection]
{{- if hasKey $rs "classifier_threshold" }}
classifier_threshold = {{ include "kvgate.pyFloat" $rs.classifier_threshold }}
{{- end }}
light_max_output_tokens = {{ int $rs.light_max_output_tokens }}
tool_bias = {{ include "kvgate.pyFloat" $rs.tool_bias }}
strict_json_bias = {{ include "kvgate.pyFloat" $rs.strict_json_bias }}
saturated_load = {{ include "kvgate.pyFloat" $rs.saturated_load }}
idle_load = {{ include "kvgate.pyFloat" $rs.idle_load }}
wait_quantile = {{ include "kvgate.pyFloat" $rs.wait_quantile }}
max_error_rate = {{ include "kvgate.pyFloat" $rs.max_error_rate }}
budget_reserve_share = {{ include "kvgate.pyFloat" $rs.budget_reserve_share }}
chars_per_token = {{ include "kvgate.pyFloat" $rs.chars_per_token }}
context_margin = {{ include "kvgate.pyFloat" $rs.context_margin }}
{{- with $rs.defaults }}

[route_selection.defaults]
{{ include "kvgate.routeLimitsToml" . }}
{{- end }}
{{- range $key, $limits := $rs.keys }}

[route_selection.keys.{{ $key | toJson }}]
{{ include "kvgate.routeLimitsToml" $limits }}
{{- end }}

[tracing]
enabled = {{ $cfg.tracing.enabled }}
otlp_endpoint = {{ $cfg.tracing.otlp_endpoint | toJson }}
service_name = {{ $cfg.tracing.service_name | toJson }}
sample_ratio = {{ include "kvgate.pyFloat" $cfg.tracing.sample_ratio }}

[logging]
format = {{ $cfg.logging.format | toJson }}
log_payloads = {{ $cfg.logging.log_payloads }}

[metrics]
enabled = {{ $cfg.metrics.enabled }}
{{- range $name := (include "kvgate.enabledClusters" . | fromYamlArray) }}
{{- $c := index $.Values.workers.clusters $name }}
{{- $sts := include "kvgate.workerName" (dict "root" $ "cluster" $name) }}

# vLLM worker cluster {{ $name }}: StatefulSet {{ $sts }}, one endpoint per replica.
[clusters.{{ $name | toJson }}]
description = {{ $c.description | toJson }}
{{- with $c.tier }}
tier = {{ . | toJson }}
{{- end }}
{{- if $c.maxModelLen }}
max_context_tokens = {{ int $c.maxModelLen }}
{{- end }}
thinking_switch = {{ $c.thinkingSwitch | toJson }}
{{- with $c.price }}

[clusters.{{ $name | toJson }}.price]
input_per_mtok = {{ include "kvgate.pyFloat" .inputPerMtok }}
{{- if hasKey . "cachedInputPerMtok" }}
cached_input_per_mtok = {{ include "kvgate.pyFloat" .cachedInputPerMtok }}
{{- end }}
output_per_mtok = {{ include "kvgate.pyFloat" .outputPerMtok }}
{{- end }}
{{- with $c.selection }}

[clusters.{{ $name | toJson }}.selection]
{{- if hasKey . "slotsPerEndpoint" }}
slots_per_endpoint = {{ int .slotsPerEndpoint }}
{{- end }}
{{- if hasKey . "ttftPriorMs" }}
ttft_prior_ms = {{ include "kvgate.pyFloat" .ttftPriorMs }}
{{- end }}
{{- if hasKey . "servicePriorS" }}
service_prior_s = {{ include "kvgate.pyFloat" .servicePriorS }}
{{- end }}
{{- if hasKey . "expectedOutputTokens" }}
expected_output_tokens = {{ int .expectedOutputTokens }}
{{- end }}
{{- if hasKey . "charsPerToken" }}
chars_per_token = {{ include "kvgate.pyFloat" .charsPerToken }}
{{- end }}
{{- end }}
{{- range $i := until (int $c.replicas) }}

[[clusters.{{ $name | toJson }}.endpoints]]
name = {{ printf "%s-%d" $name $i | toJson }}
url = {{ printf "http://%s-%d.%s.%s.svc.%s:%d/v1" $sts $i $sts $.Release.Namespace $.Values.clusterDomain (int $c.port) | toJson }}
model = {{ $c.servedModelName | toJson }}
weight = {{ include "kvgate.pyFloat" $c.weight }}
{{- if $c.kvEvents.enabled }}
kv_events = {{ printf "tcp://%s-%d.%s.%s.svc.%s:%d" $sts $i $sts $.Release.Namespace $.Values.clusterDomain (int $c.kvEvents.port) | toJson }}
{{- end }}
{{- if $c.apiKey.existingSecret }}
api_key_env = {{ include "kvgate.workerKeyEnv" $name | toJson }}
{{- end }}
{{- end }}

[models.{{ $c.servedModelName | toJson }}]
cluster = {{ $name | toJson }}
failover = {{ $c.failover | default list | toJson }}
aliases = {{ $c.aliases | default list | toJson }}
{{- end }}
{{- range $name, $c := $cfg.clusters }}

[clusters.{{ $name | toJson }}]
description = {{ $c.description | default "" | toJson }}
{{- with $c.tier }}
tier = {{ . | toJson }}
{{- end }}
{{- with $c.max_context_tokens }}
max_context_tokens = {{ int . }}
{{- end }}
{{- with $c.thinking_switch }}
thinking_switch = {{ . | toJson }}
{{- end }}
{{- with $c.price }}

[clusters.{{ $name | toJson }}.price]
{{- if hasKey . "input_per_mtok" }}
input_per_mtok = {{ include "kvgate.pyFloat" .input_per_mtok }}
{{- end }}
{{- if hasKey . "cached_input_per_mtok" }}
cached_input_per_mtok = {{ include "kvgate.pyFloat" .cached_input_per_mtok }}
{{- end }}
{{- if hasKey . "output_per_mtok" }}
output_per_mtok = {{ include "kvgate.pyFloat" .output_per_mtok }}
{{- end }}
{{- end }}
{{- with $c.selection }}

[clusters.{{ $name | toJson }}.selection]
{{- if hasKey . "slots_per_endpoint" }}
slots_per_endpoint = {{ int .slots_per_endpoint }}
{{- end }}
{{- if hasKey . "ttft_prior_ms" }}
ttft_prior_ms = {{ include "kvgate.pyFloat" .ttft_prior_ms }}
{{- end }}
{{- if hasKey . "service_prior_s" }}
service_prior_s = {{ include "kvgate.pyFloat" .service_prior_s }}
{{- end }}
{{- if hasKey . "expected_output_tokens" }}
expected_output_tokens = {{ int .expected_output_tokens }}
{{- end }}
{{- if hasKey . "chars_per_token" }}
chars_per_token = {{ include "kvgate.pyFloat" .chars_per_token }}
{{- end }}
{{- end }}
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
{{- with $e.kv_events }}
kv_events = {{ . | toJson }}
{{- end }}
{{- if hasKey $e "weight" }}
weight = {{ include "kvgate.pyFloat" $e.weight }}
{{- end }}
{{- if $e.api_key_secret }}
api_key_env = {{ include "kvgate.staticKeyEnv" (dict "cluster" $name "index" $i) | toJson }}
{{- end }}
{{- end }}
{{- end }}
{{- range $name, $r := $cfg.routes }}

[routes.{{ $name | toJson }}]
clusters = {{ $r.clusters | toJson }}
{{- with $r.timeouts }}

[routes.{{ $name | toJson }}.timeouts]
{{ include "kvgate.timeoutsToml" . }}
{{- end }}
{{- end }}
{{- range $name, $m := $cfg.models }}

[models.{{ $name | toJson }}]
{{- if $m.route }}
route = {{ $m.route | toJson }}
{{- else }}
cluster = {{ $m.cluster | toJson }}
failover = {{ $m.failover | default list | toJson }}
{{- end }}
aliases = {{ $m.aliases | default list | toJson }}
{{- end }}
{{ end -}}

{{/* The four keys of a timeouts table ([upstream.timeouts], [routes.NAME.timeouts]). */}}
{{- define "kvgate.timeoutsToml" -}}
connect_s = {{ include "kvgate.pyFloat" .connect_s }}
first_byte_s = {{ include "kvgate.pyFloat" .first_byte_s }}
idle_s = {{ include "kvgate.pyFloat" .idle_s }}
total_s = {{ include "kvgate.pyFloat" .total_s }}
{{- end -}}

{{/* The optional keys of a [route_selection.defaults] / [route_selection.keys.NAME] table. */}}
{{- define "kvgate.routeLimitsToml" -}}
{{- $lines := list -}}
{{- if hasKey . "max_ttft_ms" -}}{{- $lines = append $lines (printf "max_ttft_ms = %s" (include "kvgate.pyFloat" .max_ttft_ms)) -}}{{- end -}}
{{- if hasKey . "max_cost_usd" -}}{{- $lines = append $lines (printf "max_cost_usd = %s" (include "kvgate.pyFloat" .max_cost_usd)) -}}{{- end -}}
{{- join "\n" $lines -}}
{{- end -}}
