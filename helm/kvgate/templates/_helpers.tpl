{{/*
Names, labels and the derived values every template shares. Worker and Redis addresses are
computed here once, so the gateway config and the manifests that serve them cannot disagree.
*/}}

{{- define "kvgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kvgate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kvgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Common labels. Call with (dict "root" $ "component" "gateway"). */}}
{{- define "kvgate.labels" -}}
helm.sh/chart: {{ include "kvgate.chart" .root }}
{{ include "kvgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: kvgate
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels. Call with (dict "root" $ "component" "gateway") and optionally "cluster". */}}
{{- define "kvgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kvgate.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- with .cluster }}
kvgate.io/cluster: {{ . }}
{{- end }}
{{- end -}}

{{- define "kvgate.serviceAccountName" -}}
{{- if .Values.gateway.serviceAccount.create -}}
{{- default (include "kvgate.fullname" .) .Values.gateway.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.gateway.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kvgate.gatewayImage" -}}
{{- $img := .Values.gateway.image -}}
{{- printf "%s:%s" $img.repository (default .Chart.AppVersion $img.tag) -}}
{{- end -}}

{{- define "kvgate.clientKeysSecret" -}}
{{- default (printf "%s-client-keys" (include "kvgate.fullname" .)) .Values.auth.clientKeys.existingSecret -}}
{{- end -}}

{{/* Worker StatefulSet (and headless Service) name. Call with (dict "root" $ "cluster" NAME). */}}
{{- define "kvgate.workerName" -}}
{{- $name := printf "%s-worker-%s" (include "kvgate.fullname" .root) .cluster -}}
{{- if gt (len $name) 52 -}}
{{- fail (printf "worker name %q is longer than 52 characters (StatefulSet pod labels); shorten the release name, fullnameOverride or the cluster name" $name) -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{/* Environment variable carrying the API key of a worker cluster's endpoints. */}}
{{- define "kvgate.workerKeyEnv" -}}
{{- printf "KVGATE_ENDPOINT_KEY_%s" (. | upper | replace "-" "_") -}}
{{- end -}}

{{/* Environment variable carrying the API key of static endpoint (dict "cluster" C "index" I). */}}
{{- define "kvgate.staticKeyEnv" -}}
{{- printf "KVGATE_ENDPOINT_KEY_%s_%d" (.cluster | upper | replace "-" "_") (int .index) -}}
{{- end -}}

{{/* Enabled worker clusters, sorted by name, as a YAML list of names. */}}
{{- define "kvgate.enabledClusters" -}}
{{- $names := list -}}
{{- range $name, $c := .Values.workers.clusters -}}
{{- if $c.enabled -}}{{- $names = append $names $name -}}{{- end -}}
{{- end -}}
{{- toYaml (sortAlpha $names) -}}
{{- end -}}

{{/* Tensor parallel size of a worker cluster: tensorParallelSize, or its GPU count when 0. */}}
{{- define "kvgate.tensorParallel" -}}
{{- $tp := int (default 0 .tensorParallelSize) -}}
{{- if eq $tp 0 -}}{{- $tp = int .gpus -}}{{- end -}}
{{- $tp -}}
{{- end -}}

{{/* A float as Python's str() prints it (1 -> "1.0", 0.92 -> "0.92"), for argv parity. */}}
{{- define "kvgate.pyFloat" -}}
{{- $v := float64 . -}}
{{- if eq $v (floor $v) -}}{{- printf "%.1f" $v -}}{{- else -}}{{- $v -}}{{- end -}}
{{- end -}}

{{/*
The worker's command line after `vllm serve`: the same flags, in the same order, as
backends.workers.vllm_args.worker_argv emits for a WorkerSpec with launcher="vllm-serve" (a test compares
the two), then --kv-events-config, then extraArgs. Call with (dict "name" NAME "c" CLUSTER).
*/}}
{{- define "kvgate.workerArgs" -}}
{{- $c := .c -}}
{{- $args := list $c.model "--served-model-name" $c.servedModelName "--host" "0.0.0.0" "--port" (toString (int $c.port)) "--kv-cache-dtype" $c.kvCacheDtype -}}
{{- if $c.maxModelLen -}}{{- $args = concat $args (list "--max-model-len" (toString (int $c.maxModelLen))) -}}{{- end -}}
{{- $args = append $args (ternary "--enable-prefix-caching" "--no-enable-prefix-caching" $c.enablePrefixCaching) -}}
{{- if $c.blockSize -}}{{- $args = concat $args (list "--block-size" (toString (int $c.blockSize))) -}}{{- end -}}
{{- if $c.prefixCachingHashAlgo -}}{{- $args = concat $args (list "--prefix-caching-hash-algo" $c.prefixCachingHashAlgo) -}}{{- end -}}
{{- $args = append $args (ternary "--enable-chunked-prefill" "--no-enable-chunked-prefill" $c.enableChunkedPrefill) -}}
{{- if $c.maxNumBatchedTokens -}}{{- $args = concat $args (list "--max-num-batched-tokens" (toString (int $c.maxNumBatchedTokens))) -}}{{- end -}}
{{- if $c.maxNumSeqs -}}{{- $args = concat $args (list "--max-num-seqs" (toString (int $c.maxNumSeqs))) -}}{{- end -}}
{{- if $c.gpuMemoryUtilization -}}{{- $args = concat $args (list "--gpu-memory-utilization" (include "kvgate.pyFloat" $c.gpuMemoryUtilization)) -}}{{- end -}}
{{- $tp := int (include "kvgate.tensorParallel" $c) -}}
{{- if ne $tp 1 -}}{{- $args = concat $args (list "--tensor-parallel-size" (toString $tp)) -}}{{- end -}}
{{- if $c.enablePromptTokensDetails -}}{{- $args = append $args "--enable-prompt-tokens-details" -}}{{- end -}}
{{- if $c.reasoningParser -}}{{- $args = concat $args (list "--reasoning-parser" $c.reasoningParser) -}}{{- end -}}
{{- if $c.kvEvents.enabled -}}
{{- $events := dict "enable_kv_cache_events" true "publisher" "zmq" "endpoint" (printf "tcp://*:%d" (int $c.kvEvents.port)) "topic" $c.kvEvents.topic -}}
{{- $args = concat $args (list "--kv-events-config" (toJson $events)) -}}
{{- end -}}
{{- $args = concat $args $c.extraArgs -}}
{{- toYaml $args -}}
{{- end -}}

{{/*
The value of KVGATE__STATE__REDIS_URL (empty when redis.mode is disabled). kvgate hands it to
redis-py's from_url, which takes credentials only inside the URL and TLS options as query
parameters. The password is never written here: the URL refers to $(REDIS_PASSWORD), an
environment variable from the Secret defined just before it, which Kubernetes substitutes when
it starts the container. The CA bundle (rediss:// only) is ?ssl_ca_certs=<mounted file>.
*/}}
{{- define "kvgate.redisUrl" -}}
{{- $secret := include "kvgate.redisPasswordSecret" . -}}
{{- if eq .Values.redis.mode "internal" -}}
{{- $auth := ternary ":$(REDIS_PASSWORD)@" "" (ne $secret "") -}}
{{- printf "redis://%s%s-redis.%s.svc.%s:6379/0" $auth (include "kvgate.fullname" .) .Release.Namespace .Values.clusterDomain -}}
{{- else if eq .Values.redis.mode "external" -}}
{{- $ext := .Values.redis.external -}}
{{- $scheme := ternary "rediss" "redis" (hasPrefix "rediss://" $ext.url) -}}
{{- $rest := trimPrefix (printf "%s://" $scheme) $ext.url -}}
{{- $auth := ternary (printf "%s:$(REDIS_PASSWORD)@" $ext.username) "" (ne $secret "") -}}
{{- $query := "" -}}
{{- if $ext.tls.caSecret -}}{{- $query = printf "?ssl_ca_certs=%s/%s" (include "kvgate.redisCaDir" .) $ext.tls.caKey -}}{{- end -}}
{{- printf "%s://%s%s%s" $scheme $auth $rest $query -}}
{{- end -}}
{{- end -}}

{{/* Where the external Redis CA bundle Secret is mounted in the gateway container. */}}
{{- define "kvgate.redisCaDir" -}}/var/run/kvgate/redis-ca{{- end -}}

{{/* Secret holding the Redis password, or empty. */}}
{{- define "kvgate.redisPasswordSecret" -}}
{{- if eq .Values.redis.mode "internal" -}}
{{- .Values.redis.internal.existingSecret -}}
{{- else if eq .Values.redis.mode "external" -}}
{{- .Values.redis.external.existingSecret -}}
{{- end -}}
{{- end -}}

{{- define "kvgate.redisPasswordKey" -}}
{{- if eq .Values.redis.mode "internal" -}}
{{- .Values.redis.internal.passwordKey -}}
{{- else -}}
{{- .Values.redis.external.passwordKey -}}
{{- end -}}
{{- end -}}

{{/*
Checks across values that values.schema.json cannot express, as a list of messages.
templates/validate.yaml turns them into a failed render (and a failed lint).
*/}}
{{- define "kvgate.validationErrors" -}}
{{- $errors := list -}}
{{- $served := dict -}}
{{- range $name, $c := .Values.workers.clusters -}}
{{- if $c.enabled -}}
{{- if hasKey $served $c.servedModelName -}}
{{- $errors = append $errors (printf "workers.clusters.%s.servedModelName %q is also served by workers.clusters.%s" $name $c.servedModelName (get $served $c.servedModelName)) -}}
{{- end -}}
{{- $_ := set $served $c.servedModelName $name -}}
{{- $tp := int (include "kvgate.tensorParallel" $c) -}}
{{- if gt $tp (int $c.gpus) -}}
{{- $errors = append $errors (printf "workers.clusters.%s: tensorParallelSize %d exceeds gpus %d (one replica spans tensorParallelSize GPUs)" $name $tp (int $c.gpus)) -}}
{{- end -}}
{{- if and $c.kvEvents.enabled (eq (int $c.kvEvents.port) (int $c.port)) -}}
{{- $errors = append $errors (printf "workers.clusters.%s.kvEvents.port: %d is already the HTTP port" $name (int $c.port)) -}}
{{- end -}}
{{- if and (eq $c.modelCache.type "existingClaim") (not $c.modelCache.existingClaim) -}}
{{- $errors = append $errors (printf "workers.clusters.%s.modelCache.existingClaim: required when modelCache.type is existingClaim" $name) -}}
{{- end -}}
{{- if hasKey $.Values.config.clusters $name -}}
{{- $errors = append $errors (printf "config.clusters.%s: the name is taken by the chart-managed worker cluster workers.clusters.%s" $name $name) -}}
{{- end -}}
{{- if hasKey $.Values.config.models $c.servedModelName -}}
{{- $errors = append $errors (printf "config.models.%s: the name is taken by workers.clusters.%s.servedModelName" $c.servedModelName $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $as := .Values.gateway.autoscaling -}}
{{- if and $as.enabled (gt (int $as.minReplicas) (int $as.maxReplicas)) -}}
{{- $errors = append $errors (printf "gateway.autoscaling: minReplicas %d is greater than maxReplicas %d" (int $as.minReplicas) (int $as.maxReplicas)) -}}
{{- end -}}
{{- if and .Values.gateway.serviceMonitor.enabled (not .Values.config.metrics.enabled) -}}
{{- $errors = append $errors "gateway.serviceMonitor.enabled: needs config.metrics.enabled (GET /metrics)" -}}
{{- end -}}
{{- if and .Values.redis.external.tls.caSecret (not (hasPrefix "rediss://" .Values.redis.external.url)) -}}
{{- $errors = append $errors "redis.external.tls.caSecret: set only with a rediss:// (TLS) URL" -}}
{{- end -}}
{{- if and (eq .Values.redis.mode "external") .Values.redis.external.username (not .Values.redis.external.existingSecret) -}}
{{- $errors = append $errors "redis.external.username: needs redis.external.existingSecret (the user's password)" -}}
{{- end -}}
{{- $gw := .Values.gateway -}}
{{- if and (eq .Values.redis.mode "disabled") (or $gw.autoscaling.enabled (gt (int $gw.replicaCount) 1)) -}}
{{- $errors = append $errors (printf "redis.mode disabled needs one gateway replica (replicaCount %d, autoscaling %t): replicas share the prefix index, admin changes, keys and quotas through Redis; use redis.mode internal or external" (int $gw.replicaCount) $gw.autoscaling.enabled) -}}
{{- end -}}
{{- /* Cluster references: failover chains, routes and models name clusters that exist. */ -}}
{{- $known := dict -}}
{{- range $name := (include "kvgate.enabledClusters" . | fromYamlArray) -}}{{- $_ := set $known $name true -}}{{- end -}}
{{- range $name, $c := .Values.config.clusters -}}{{- $_ := set $known $name true -}}{{- end -}}
{{- $tiered := false -}}
{{- $public := list -}}
{{- range $name, $c := .Values.workers.clusters -}}
{{- if $c.enabled -}}
{{- if $c.tier -}}{{- $tiered = true -}}{{- end -}}
{{- $public = concat $public (list $c.servedModelName) ($c.aliases | default list) -}}
{{- range $target := $c.failover -}}
{{- if or (not (hasKey $known $target)) (eq $target $name) -}}
{{- $errors = append $errors (printf "workers.clusters.%s.failover: %q is not another enabled worker cluster or a config.clusters entry" $name $target) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $name, $c := .Values.config.clusters -}}
{{- if $c.tier -}}{{- $tiered = true -}}{{- end -}}
{{- end -}}
{{- range $name, $r := .Values.config.routes -}}
{{- range $target := $r.clusters -}}
{{- if not (hasKey $known $target) -}}
{{- $errors = append $errors (printf "config.routes.%s.clusters: unknown cluster %q (neither an enabled worker cluster nor a config.clusters entry)" $name $target) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $name, $m := .Values.config.models -}}
{{- $public = concat $public (list $name) ($m.aliases | default list) -}}
{{- if and $m.route (not (hasKey $.Values.config.routes $m.route)) -}}
{{- $errors = append $errors (printf "config.models.%s.route: unknown route %q (see config.routes)" $name $m.route) -}}
{{- end -}}
{{- range $target := concat (compact (list ($m.cluster | default ""))) ($m.failover | default list) -}}
{{- if not (hasKey $known $target) -}}
{{- $errors = append $errors (printf "config.models.%s: unknown cluster %q (neither an enabled worker cluster nor a config.clusters entry)" $name $target) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $tiered -}}
{{- range $alias := list "auto" "reasoning" "fast" -}}
{{- if has $alias $public -}}
{{- $errors = append $errors (printf "model name %q is a route selection alias once a cluster has a tier; choose another servedModelName, model name or alias" $alias) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml $errors -}}
{{- end -}}
