"""What the rendered chart wires together: probes, hardening, secrets by reference only, the
gateway config (loaded by kvgate's own settings loader with the Deployment's environment applied,
as the kubelet builds it), one endpoint per worker replica with a DNS name that the worker
StatefulSet and headless Service really provide, and Redis as kvgate's redis-py client sees it."""

from __future__ import annotations

import os
import re
import tomllib
from typing import Any
from urllib.parse import urlsplit

import pytest

from gateway.operations import redis_client
from gateway.config import Settings, build_settings

from .conftest import POSITIVE_VALUES
from .tools import (
    NAMESPACE,
    Rendered,
    container,
    enabled_clusters,
    env_map,
    fullname,
    render,
    resolved_env,
    settings_key,
)

SECRET_NAME = re.compile(r"KEY|PASSWORD|TOKEN|SECRET", re.IGNORECASE)

# What each Secret-sourced variable holds in these tests (the chart never sees the real values).
PLACEHOLDERS = {
    "KVGATE__AUTH__API_KEYS": '["sk-placeholder"]',
    "KVGATE__AUTH__KEYS": '[{"name": "team-placeholder", "key": "sk-named-placeholder", "rpm": 60}]',
    "KVGATE__ADMIN__API_KEY": "admin-placeholder",
    "REDIS_PASSWORD": "redis-placeholder",
}
# The KVGATE__ variables the chart may set, each a key kvgate's settings model has.
CHART_OVERRIDES = {"KVGATE__AUTH__API_KEYS", "KVGATE__AUTH__KEYS", "KVGATE__ADMIN__API_KEY", "KVGATE__STATE__REDIS_URL"}


def _ids(paths):
    return [p.stem for p in paths]


def gateway_env(r: Rendered) -> dict[str, str]:
    """The gateway container's environment with placeholders for Secret values and Kubernetes'
    $(VAR) substitution applied."""
    gw = container(r.one("Deployment", fullname()), "gateway")
    secrets = {name: PLACEHOLDERS.get(name, f"placeholder-{name.lower()}") for name in env_map(gw)}
    return resolved_env(gw, secrets)


def gateway_settings(r: Rendered, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Load the ConfigMap's config.toml through kvgate's loader, with the environment the
    Deployment gives the container (Secret-sourced values replaced by placeholders)."""
    for name in [n for n in os.environ if n.startswith("KVGATE")]:
        monkeypatch.delenv(name)
    for name, value in gateway_env(r).items():
        if name.startswith("KVGATE__"):
            assert name in CHART_OVERRIDES, f"unexpected config override {name}"
            assert settings_key(name), f"{name} is no key of kvgate's settings"
        monkeypatch.setenv(name, value)
    return build_settings(tomllib.loads(config_toml(r)))


def config_toml(r: Rendered) -> str:
    return r.one("ConfigMap", f"{fullname()}-config")["data"]["config.toml"]


# --- gateway Deployment ------------------------------------------------------------------------

@pytest.mark.parametrize("values", POSITIVE_VALUES, ids=_ids(POSITIVE_VALUES))
def test_gateway_probes_and_command(values, rendered):
    r = rendered(values)
    dep = r.one("Deployment", fullname())
    gw = container(dep, "gateway")
    port = r.values["config"]["server"]["port"]
    assert gw["command"] + gw["args"] == ["kvgate", "serve", "--config", "/etc/kvgate/config.toml"]
    assert gw["ports"] == [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    assert gw["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert gw["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    mounts = {m["mountPath"]: m for m in gw["volumeMounts"]}
    assert mounts["/etc/kvgate"]["readOnly"] is True
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes[mounts["/etc/kvgate"]["name"]]["configMap"]["name"] == f"{fullname()}-config"
    assert dep["spec"]["strategy"]["type"] == "RollingUpdate"
    assert "checksum/config" in dep["spec"]["template"]["metadata"]["annotations"]
    svc = r.one("Service", fullname())
    assert svc["spec"]["ports"][0]["targetPort"] == "http"
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()


@pytest.mark.parametrize("values", POSITIVE_VALUES, ids=_ids(POSITIVE_VALUES))
def test_gateway_runs_hardened(values, rendered):
    dep = rendered(values).one("Deployment", fullname())
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    sc = container(dep, "gateway")["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert container(dep, "gateway")["resources"]["requests"]


@pytest.mark.parametrize("values", POSITIVE_VALUES, ids=_ids(POSITIVE_VALUES))
def test_secrets_only_by_reference(values, rendered):
    r = rendered(values)
    assert not r.all("Secret"), "the chart must never create Secrets"
    for workload in r.all("Deployment") + r.all("StatefulSet"):
        for ctr in workload["spec"]["template"]["spec"]["containers"]:
            for name, var in env_map(ctr).items():
                if SECRET_NAME.search(name):
                    assert "value" not in var, f"{name} is inline in {workload['metadata']['name']}"
                    assert set(var["valueFrom"]) == {"secretKeyRef"}, name
                elif "://" in str(var.get("value", "")):
                    # a URL may name credentials only as $(VAR), filled in from a Secret
                    url = urlsplit(var["value"])
                    assert url.password in (None, "$(REDIS_PASSWORD)"), f"{name} holds a credential"
    toml = config_toml(r)
    assert "api_keys" not in toml and "password" not in toml.lower()
    assert "redis_url" not in tomllib.loads(toml)["state"], "the Redis URL may carry credentials: env only"


@pytest.mark.parametrize("values", POSITIVE_VALUES, ids=_ids(POSITIVE_VALUES))
def test_only_variables_kvgate_reads(values, rendered):
    """Every KVGATE__ variable the chart sets is a key of kvgate's settings; the placeholder
    names of the first chart (KVGATE_ADMIN_KEY, KVGATE_REDIS_*) are gone for good."""
    r = rendered(values)
    env = env_map(container(r.one("Deployment", fullname()), "gateway"))
    for name in env:
        if name.startswith("KVGATE__"):
            assert name in CHART_OVERRIDES and settings_key(name), name
        else:
            assert not name.startswith(("KVGATE_ADMIN", "KVGATE_REDIS")), f"kvgate does not read {name}"
    assert not re.search(r"KVGATE_(ADMIN_KEY|REDIS_(URL|PASSWORD|CA_FILE))", r.text)


def test_client_keys_come_from_the_named_secret(default_install, external_redis_install):
    env = env_map(container(default_install.one("Deployment", fullname()), "gateway"))
    ref = env["KVGATE__AUTH__API_KEYS"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": f"{fullname()}-client-keys", "key": "api-keys"}
    env = env_map(container(external_redis_install.one("Deployment", fullname()), "gateway"))
    assert env["KVGATE__AUTH__API_KEYS"]["valueFrom"]["secretKeyRef"]["name"] == "kvgate-client-keys"


def test_admin_key_is_kvgates_admin_api_key(default_install, gpu_install, external_redis_install, monkeypatch):
    env = env_map(container(external_redis_install.one("Deployment", fullname()), "gateway"))
    ref = env["KVGATE__ADMIN__API_KEY"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "kvgate-admin", "key": "admin-key"}
    for r in (gpu_install, external_redis_install):
        settings = gateway_settings(r, monkeypatch)
        assert settings.admin.api_key is not None
        assert settings.admin.api_key.get_secret_value() == PLACEHOLDERS["KVGATE__ADMIN__API_KEY"]
    assert "KVGATE__ADMIN__API_KEY" not in env_map(container(default_install.one("Deployment", fullname()), "gateway"))
    assert gateway_settings(default_install, monkeypatch).admin.api_key is None, "no Secret: admin API off"
    networks = external_redis_install.values["config"]["admin"]["allowed_networks"]
    assert gateway_settings(external_redis_install, monkeypatch).admin.allowed_networks == networks


def test_named_keys_come_from_a_secret(tmp_path, monkeypatch):
    values = tmp_path / "named-keys.yaml"
    values.write_text("auth:\n  namedKeys:\n    existingSecret: kvgate-named-keys\n")
    r = render([values])
    env = env_map(container(r.one("Deployment", fullname()), "gateway"))
    assert env["KVGATE__AUTH__KEYS"]["valueFrom"]["secretKeyRef"] == {"name": "kvgate-named-keys", "key": "keys"}
    settings = gateway_settings(r, monkeypatch)
    assert [(k.name, k.rpm) for k in settings.auth.keys] == [("team-placeholder", 60)]


def test_pdb_hpa_servicemonitor_networkpolicy(default_install, external_redis_install):
    assert default_install.one("Deployment", fullname())["spec"]["replicas"] == 2
    assert default_install.one("PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    assert not default_install.all("HorizontalPodAutoscaler")
    assert not default_install.all("ServiceMonitor") and not default_install.all("NetworkPolicy")

    r = external_redis_install
    assert "replicas" not in r.one("Deployment", fullname())["spec"], "the HPA owns the count"
    hpa = r.one("HorizontalPodAutoscaler", fullname())
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": fullname()}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (4, 12)
    assert {m["resource"]["name"] for m in hpa["spec"]["metrics"]} == {"cpu", "memory"}
    assert r.one("PodDisruptionBudget")["spec"] == {
        "minAvailable": "50%",
        "selector": r.one("PodDisruptionBudget")["spec"]["selector"],
    }
    sm = r.one("ServiceMonitor", fullname())
    assert sm["spec"]["endpoints"][0]["port"] == "http"
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"
    assert sm["metadata"]["labels"]["release"] == "prometheus"
    policy = r.one("NetworkPolicy", f"{fullname()}-gateway")
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    ports = [p["port"] for rule in policy["spec"]["egress"] for p in rule.get("ports", [])]
    assert 53 in ports and 6380 in ports and 443 in ports


# --- gateway config ----------------------------------------------------------------------------

@pytest.mark.parametrize("values", POSITIVE_VALUES, ids=_ids(POSITIVE_VALUES))
def test_config_loads_with_kvgate_settings(values, rendered, monkeypatch):
    r = rendered(values)
    settings = gateway_settings(r, monkeypatch)
    cfg = r.values["config"]
    assert settings.server.host == cfg["server"]["host"]
    assert settings.server.port == cfg["server"]["port"]
    assert settings.server.max_body_bytes == cfg["server"]["max_body_bytes"]
    assert settings.upstream.max_attempts == cfg["upstream"]["max_attempts"]
    assert settings.upstream.timeouts.idle_s == cfg["upstream"]["timeouts"]["idle_s"]
    assert settings.upstream.max_retry_after_s == cfg["upstream"]["max_retry_after_s"]
    assert settings.upstream.timeouts.model_dump() == cfg["upstream"]["timeouts"]
    assert settings.circuit.model_dump() == cfg["circuit"]
    assert settings.health.model_dump() == cfg["health"]
    assert settings.routing.policy == cfg["routing"]["policy"]
    assert settings.routing.producer_deadline_ms == cfg["routing"]["producer_deadline_ms"]
    assert settings.admin.sync_interval_s == cfg["admin"]["sync_interval_s"]
    state = settings.state.model_dump(exclude={"backend", "redis_url"})
    assert state == cfg["state"]
    assert settings.quotas.model_dump() == cfg["quotas"]
    assert settings.tracing.model_dump() == cfg["tracing"]
    assert settings.logging.model_dump() == cfg["logging"]
    selection = settings.route_selection.model_dump(exclude={"defaults", "keys", "classifier_threshold"})
    assert selection == {k: v for k, v in cfg["route_selection"].items() if k not in ("defaults", "keys")}
    defaults = {k: v for k, v in settings.route_selection.defaults.model_dump().items() if v is not None}
    assert defaults == cfg["route_selection"]["defaults"]
    assert settings.metrics.enabled == cfg["metrics"]["enabled"]
    expected = set(enabled_clusters(r.values)) | set(cfg["clusters"])
    assert set(settings.clusters) == expected
    assert set(settings.routes) == set(cfg["routes"])


def test_defaults_are_kvgates_defaults(default_install, monkeypatch):
    """values.yaml's config mirrors kvgate's own defaults (only host differs, by necessity)."""
    settings = gateway_settings(default_install, monkeypatch)
    defaults = Settings.model_construct()
    for section in ("upstream", "circuit", "health", "routing", "quotas", "tracing", "logging", "route_selection"):
        assert getattr(settings, section) == type(getattr(defaults, section))(), section
    assert settings.admin.model_dump(exclude={"api_key"}) == type(defaults.admin)().model_dump(exclude={"api_key"})
    assert settings.routing.policy == "prefix-aware"


def test_worker_clusters_tier_price_and_failover(gpu_install, monkeypatch):
    settings = gateway_settings(gpu_install, monkeypatch)
    for name, c in enabled_clusters(gpu_install.values).items():
        cluster = settings.clusters[name]
        assert cluster.tier == c["tier"]
        assert cluster.thinking_switch == c["thinkingSwitch"]
        assert cluster.max_context_tokens == c["maxModelLen"]
        price = c["price"]
        assert cluster.price.input_per_mtok == price["inputPerMtok"]
        assert cluster.price.cached_input_per_mtok == price["cachedInputPerMtok"]
        assert cluster.price.output_per_mtok == price["outputPerMtok"]
        assert settings.models[c["servedModelName"]].failover == c["failover"]
    assert settings.clusters["reasoning"].selection.slots_per_endpoint == 64
    assert settings.models["deepseek-r1"].chain(settings.routes) == ["reasoning", "fast"]
    assert {c.tier for c in settings.clusters.values()} == {"reasoning", "fast"}


def test_static_clusters_routes_and_models(external_redis_install, monkeypatch):
    settings = gateway_settings(external_redis_install, monkeypatch)
    cfg = external_redis_install.values["config"]
    onprem = settings.clusters["onprem"]
    assert onprem.max_context_tokens == cfg["clusters"]["onprem"]["max_context_tokens"]
    assert onprem.price.input_per_mtok == 0.2 and onprem.price.cached_input_per_mtok is None
    assert onprem.selection.slots_per_endpoint == 32
    assert [e.kv_events for e in onprem.endpoints] == ["tcp://10.20.1.10:5557", None]  # a static worker's publisher
    assert settings.clusters["openai"].price.cached_input_per_mtok == 0.075
    route = settings.routes["llama-with-fallback"]
    assert route.clusters == ["onprem", "openai"]
    assert route.timeouts is not None and route.timeouts.first_byte_s == 600.0
    assert settings.models["llama-3.1-70b"].chain(settings.routes) == ["onprem", "openai"]


def test_one_endpoint_per_worker_replica(gpu_install, monkeypatch):
    r = gpu_install
    settings = gateway_settings(r, monkeypatch)
    clusters = enabled_clusters(r.values)
    assert set(clusters) == {"reasoning", "fast"}
    for name, c in clusters.items():
        endpoints = settings.clusters[name].endpoints
        assert len(endpoints) == c["replicas"]
        sts = r.one("StatefulSet", f"{fullname()}-worker-{name}")
        svc = r.one("Service", sts["spec"]["serviceName"])
        assert svc["spec"]["clusterIP"] == "None", "per-pod DNS needs a headless Service"
        assert sts["spec"]["replicas"] == c["replicas"]
        assert svc["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
        port = {p["name"]: p["containerPort"] for p in container(sts, "vllm")["ports"]}["http"]
        for i, endpoint in enumerate(endpoints):
            url = urlsplit(endpoint.url)
            pod_dns = f"{sts['metadata']['name']}-{i}.{svc['metadata']['name']}.{NAMESPACE}.svc.cluster.local"
            assert (url.scheme, url.hostname, url.port, url.path) == ("http", pod_dns, port, "/v1")
            assert endpoint.name == f"{name}-{i}"
            assert endpoint.model == c["servedModelName"]
            assert endpoint.health_url is None  # default: origin + /health, vLLM's health route
        model = settings.models[c["servedModelName"]]
        assert model.cluster == name and model.aliases == c["aliases"]


def test_endpoint_keys_are_wired_from_secrets(gpu_install, external_redis_install, monkeypatch):
    for r in (gpu_install, external_redis_install):
        settings = gateway_settings(r, monkeypatch)
        env = env_map(container(r.one("Deployment", fullname()), "gateway"))
        key_envs = {e.api_key_env for c in settings.clusters.values() for e in c.endpoints if e.api_key_env}
        assert key_envs, "these installs use endpoint keys"
        for name in key_envs:
            assert "secretKeyRef" in env[name]["valueFrom"], name
    env = env_map(container(gpu_install.one("Deployment", fullname()), "gateway"))
    assert env["KVGATE_ENDPOINT_KEY_FAST"]["valueFrom"]["secretKeyRef"]["name"] == "kvgate-worker-key"
    worker_env = env_map(container(gpu_install.one("StatefulSet", f"{fullname()}-worker-fast"), "vllm"))
    assert worker_env["VLLM_API_KEY"]["valueFrom"] == env["KVGATE_ENDPOINT_KEY_FAST"]["valueFrom"]
    env = env_map(container(external_redis_install.one("Deployment", fullname()), "gateway"))
    assert env["KVGATE_ENDPOINT_KEY_OPENAI_0"]["valueFrom"]["secretKeyRef"] == {"name": "openai-api-key", "key": "api-key"}


# --- workers -----------------------------------------------------------------------------------

def test_workers_request_gpus_shm_cache_and_health(gpu_install):
    r = gpu_install
    for name, c in enabled_clusters(r.values).items():
        sts = r.one("StatefulSet", f"{fullname()}-worker-{name}")
        vllm = container(sts, "vllm")
        assert vllm["image"] == "vllm/vllm-openai:v0.32.0"
        assert vllm["resources"]["limits"]["nvidia.com/gpu"] == c["gpus"]
        assert vllm["resources"]["requests"]["nvidia.com/gpu"] == c["gpus"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert vllm[probe]["httpGet"] == {"path": "/health", "port": "http"}, probe
        mounts = {m["mountPath"]: m["name"] for m in vllm["volumeMounts"]}
        volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
        shm = volumes[mounts["/dev/shm"]]["emptyDir"]
        assert shm == {"medium": "Memory", "sizeLimit": c["shmSize"]}
        assert env_map(vllm)["HF_HOME"]["value"] == "/models" and "/models" in mounts
        args = vllm["args"]
        for flag in ("--enable-prefix-caching", "--enable-chunked-prefill", "--enable-prompt-tokens-details"):
            assert flag in args
        assert args[args.index("--kv-cache-dtype") + 1] == "fp8"
        assert args[args.index("--served-model-name") + 1] == c["servedModelName"]
        assert vllm["securityContext"]["allowPrivilegeEscalation"] is False
    reasoning = container(r.one("StatefulSet", f"{fullname()}-worker-reasoning"), "vllm")["args"]
    assert reasoning[reasoning.index("--reasoning-parser") + 1] == "deepseek_r1"
    assert reasoning[reasoning.index("--tensor-parallel-size") + 1] == "2"
    # model cache: a claim per replica for reasoning, a shared existing claim for fast
    claims = r.one("StatefulSet", f"{fullname()}-worker-reasoning")["spec"]["volumeClaimTemplates"]
    assert claims[0]["metadata"]["name"] == "model-cache"
    assert claims[0]["spec"]["resources"]["requests"]["storage"] == "200Gi"
    fast = r.one("StatefulSet", f"{fullname()}-worker-fast")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "model-cache"}} in fast


def test_kv_events_port_is_exposed(gpu_install):
    for name, c in enabled_clusters(gpu_install.values).items():
        sts = gpu_install.one("StatefulSet", f"{fullname()}-worker-{name}")
        vllm = container(sts, "vllm")
        ports = {p["name"]: p["containerPort"] for p in vllm["ports"]}
        assert ports["kv-events"] == c["kvEvents"]["port"]
        config = vllm["args"][vllm["args"].index("--kv-events-config") + 1]
        assert f'"endpoint":"tcp://*:{c["kvEvents"]["port"]}"' in config
        svc = gpu_install.one("Service", sts["spec"]["serviceName"])
        assert "kv-events" in {p["name"] for p in svc["spec"]["ports"]}


def test_precise_mode_connects_to_each_worker_publisher(gpu_install, tmp_path, monkeypatch):
    """config.routing.kv_events.enabled: no bind (one address cannot serve several pods); every
    endpoint of a cluster with kvEvents carries its pod's publisher address, the DNS name and port
    the StatefulSet, headless Service and vLLM's --kv-events-config really provide."""
    assert gateway_settings(gpu_install, monkeypatch).routing.kv_events.enabled is False  # off unless asked
    values = tmp_path / "precise.yaml"
    values.write_text("config:\n  routing:\n    policy: prefix-precise\n    kv_events:\n      enabled: true\n")
    gpu_values = next(p for p in POSITIVE_VALUES if p.stem == "gpu-values")
    r = render([gpu_values, values])
    settings = gateway_settings(r, monkeypatch)
    assert settings.routing.policy == "prefix-precise"
    assert settings.routing.kv_events.enabled and settings.routing.kv_events.bind == ""
    for name, c in enabled_clusters(r.values).items():
        sts = r.one("StatefulSet", f"{fullname()}-worker-{name}")
        svc = r.one("Service", sts["spec"]["serviceName"])
        vllm = container(sts, "vllm")
        port = {p["name"]: p["containerPort"] for p in vllm["ports"]}["kv-events"]
        assert f'"endpoint":"tcp://*:{port}"' in vllm["args"][vllm["args"].index("--kv-events-config") + 1]
        for i, endpoint in enumerate(settings.clusters[name].endpoints):
            pod_dns = f"{sts['metadata']['name']}-{i}.{svc['metadata']['name']}.{NAMESPACE}.svc.cluster.local"
            assert endpoint.kv_events == f"tcp://{pod_dns}:{port}"


def test_default_install_runs_no_workers(default_install, monkeypatch):
    assert [s["metadata"]["name"] for s in default_install.all("StatefulSet")] == [f"{fullname()}-redis"]
    assert gateway_settings(default_install, monkeypatch).clusters == {}


def test_worker_network_policy_admits_the_gateway(gpu_install):
    dep = gpu_install.one("Deployment", fullname())
    gateway_labels = dep["spec"]["template"]["metadata"]["labels"]
    for name in enabled_clusters(gpu_install.values):
        policy = gpu_install.one("NetworkPolicy", f"{fullname()}-worker-{name}")
        rule = policy["spec"]["ingress"][0]
        selector = rule["from"][0]["podSelector"]["matchLabels"]
        assert selector.items() <= gateway_labels.items()
        assert {p["port"] for p in rule["ports"]} == {"http", "kv-events"}


# --- Redis ---------------------------------------------------------------------------------------

def _redis_env(r: Rendered) -> dict[str, Any]:
    return env_map(container(r.one("Deployment", fullname()), "gateway"))


def _redis_connection(settings: Settings) -> tuple[type, dict[str, Any]]:
    """What kvgate's own Redis client (gateway/operations.py) makes of state.redis_url."""
    pool = redis_client(settings).connection_pool
    return pool.connection_class, pool.connection_kwargs


@pytest.mark.parametrize("values", POSITIVE_VALUES, ids=_ids(POSITIVE_VALUES))
def test_multi_replica_installs_share_state_through_redis(values, rendered, monkeypatch):
    r = rendered(values)
    gw = r.values["gateway"]
    assert gw["autoscaling"]["enabled"] or gw["replicaCount"] > 1, "every CI install runs several replicas"
    settings = gateway_settings(r, monkeypatch)
    assert settings.state.backend == "redis"
    assert settings.state.redis_url == gateway_env(r)["KVGATE__STATE__REDIS_URL"]
    assert 'backend = "redis"' in config_toml(r)


def test_single_replica_without_redis_keeps_state_in_memory(tmp_path, monkeypatch):
    values = tmp_path / "no-redis.yaml"
    values.write_text("gateway:\n  replicaCount: 1\nredis:\n  mode: disabled\n")
    r = render([values])
    assert not r.all("StatefulSet")
    assert "KVGATE__STATE__REDIS_URL" not in _redis_env(r) and "REDIS_PASSWORD" not in _redis_env(r)
    settings = gateway_settings(r, monkeypatch)
    assert settings.state.backend == "memory" and settings.state.redis_url is None


def test_internal_redis_is_shared_by_the_replicas(default_install, gpu_install, monkeypatch):
    for r in (default_install, gpu_install):
        sts = r.one("StatefulSet", f"{fullname()}-redis")
        svc = r.one("Service", f"{fullname()}-redis")
        assert sts["spec"]["replicas"] == 1 and sts["spec"]["serviceName"] == svc["metadata"]["name"]
        settings = gateway_settings(r, monkeypatch)
        assert settings.state.backend == "redis"
        kind, kwargs = _redis_connection(settings)
        assert kind.__name__ == "Connection", "in-chart Redis speaks plain TCP"
        assert kwargs["host"] == f"{svc['metadata']['name']}.{NAMESPACE}.svc.cluster.local"
        assert kwargs["port"] == svc["spec"]["ports"][0]["port"] == 6379
        assert kwargs["db"] == 0
        redis = container(sts, "redis")
        assert redis["securityContext"]["readOnlyRootFilesystem"] is True
        assert sts["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert "REDIS_PASSWORD" not in _redis_env(default_install)
    assert "password" not in _redis_connection(gateway_settings(default_install, monkeypatch))[1]
    env = _redis_env(gpu_install)
    assert env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "kvgate-redis"
    assert "$(REDIS_PASSWORD)@" in env["KVGATE__STATE__REDIS_URL"]["value"]
    redis = container(gpu_install.one("StatefulSet", f"{fullname()}-redis"), "redis")
    assert "--requirepass" in redis["args"] and "$(REDIS_PASSWORD)" in redis["args"]
    assert env_map(redis)["REDIS_PASSWORD"]["valueFrom"] == env["REDIS_PASSWORD"]["valueFrom"]
    # the gateway authenticates with the very Secret value Redis requires
    _, kwargs = _redis_connection(gateway_settings(gpu_install, monkeypatch))
    assert kwargs["password"] == PLACEHOLDERS["REDIS_PASSWORD"]


def test_external_redis_with_tls_and_password_secret(external_redis_install, monkeypatch):
    r = external_redis_install
    assert not r.all("StatefulSet"), "no in-chart Redis with an external one"
    env = _redis_env(r)
    assert env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "kvgate-redis", "key": "password"}
    names = list(env)
    assert names.index("REDIS_PASSWORD") < names.index("KVGATE__STATE__REDIS_URL"), "$(VAR) needs it first"
    settings = gateway_settings(r, monkeypatch)
    assert settings.state.backend == "redis"
    assert settings.state.key_prefix == "kvgate-prod:"
    kind, kwargs = _redis_connection(settings)
    assert kind.__name__ == "SSLConnection", "rediss:// is TLS"
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("redis.prod.internal", 6380, 0)
    assert kwargs["username"] == "kvgate"
    assert kwargs["password"] == PLACEHOLDERS["REDIS_PASSWORD"]
    dep = r.one("Deployment", fullname())
    mounts = {m["name"]: m["mountPath"] for m in container(dep, "gateway")["volumeMounts"]}
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert kwargs["ssl_ca_certs"] == f"{mounts['redis-ca']}/ca.crt"
    assert volumes["redis-ca"]["secret"]["secretName"] == "kvgate-redis-ca"
