"""What the rendered chart wires together: probes, hardening, secrets by reference only, the
gateway config (loaded by kvgate's own settings loader), one endpoint per worker replica with a
DNS name that the worker StatefulSet and headless Service really provide, and Redis."""

from __future__ import annotations

import os
import re
import tomllib
from typing import Any
from urllib.parse import urlsplit

import pytest

from gateway.settings import Settings, build_settings

from .conftest import POSITIVE_VALUES
from .tools import NAMESPACE, Rendered, container, enabled_clusters, env_map, fullname

SECRET_NAME = re.compile(r"KEY|PASSWORD|TOKEN|SECRET", re.IGNORECASE)


def _ids(paths):
    return [p.stem for p in paths]


def gateway_settings(r: Rendered, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Load the ConfigMap's config.toml through kvgate's loader, with the environment the
    Deployment gives the container (Secret-sourced values replaced by placeholders)."""
    for name in [n for n in os.environ if n.startswith("KVGATE__")]:
        monkeypatch.delenv(name)
    gw = container(r.one("Deployment", fullname()), "gateway")
    for name, var in env_map(gw).items():
        if name.startswith("KVGATE__"):
            assert name == "KVGATE__AUTH__API_KEYS", f"unexpected config override {name}"
            monkeypatch.setenv(name, '["sk-placeholder"]')
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
                if SECRET_NAME.search(name) and name != "KVGATE_REDIS_CA_FILE":
                    assert "value" not in var, f"{name} is inline in {workload['metadata']['name']}"
                    assert set(var["valueFrom"]) == {"secretKeyRef"}, name
    toml = config_toml(r)
    assert "api_keys" not in toml and "password" not in toml.lower()


def test_client_keys_come_from_the_named_secret(default_install, external_redis_install):
    env = env_map(container(default_install.one("Deployment", fullname()), "gateway"))
    ref = env["KVGATE__AUTH__API_KEYS"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": f"{fullname()}-client-keys", "key": "api-keys"}
    env = env_map(container(external_redis_install.one("Deployment", fullname()), "gateway"))
    assert env["KVGATE__AUTH__API_KEYS"]["valueFrom"]["secretKeyRef"]["name"] == "kvgate-client-keys"
    assert env["KVGATE_ADMIN_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "kvgate-admin", "key": "admin-key"}
    assert "KVGATE_ADMIN_KEY" not in env_map(container(default_install.one("Deployment", fullname()), "gateway"))


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
    assert settings.health.interval_s == cfg["health"]["interval_s"]
    assert settings.routing.policy == cfg["routing"]["policy"]
    assert settings.metrics.enabled == cfg["metrics"]["enabled"]
    expected = set(enabled_clusters(r.values)) | set(cfg["clusters"])
    assert set(settings.clusters) == expected


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


# --- Redis -------------------------------------------------------------------------------------

def _redis_env(r: Rendered) -> dict[str, Any]:
    return env_map(container(r.one("Deployment", fullname()), "gateway"))


def test_internal_redis_is_shared_by_the_replicas(default_install, gpu_install):
    for r in (default_install, gpu_install):
        sts = r.one("StatefulSet", f"{fullname()}-redis")
        svc = r.one("Service", f"{fullname()}-redis")
        assert sts["spec"]["replicas"] == 1 and sts["spec"]["serviceName"] == svc["metadata"]["name"]
        url = urlsplit(_redis_env(r)["KVGATE_REDIS_URL"]["value"])
        assert url.scheme == "redis"
        assert url.hostname == f"{svc['metadata']['name']}.{NAMESPACE}.svc.cluster.local"
        assert url.port == svc["spec"]["ports"][0]["port"] == 6379
        redis = container(sts, "redis")
        assert redis["securityContext"]["readOnlyRootFilesystem"] is True
        assert sts["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert "KVGATE_REDIS_PASSWORD" not in _redis_env(default_install)
    env = _redis_env(gpu_install)
    assert env["KVGATE_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "kvgate-redis"
    redis = container(gpu_install.one("StatefulSet", f"{fullname()}-redis"), "redis")
    assert "--requirepass" in redis["args"] and "$(REDIS_PASSWORD)" in redis["args"]
    assert env_map(redis)["REDIS_PASSWORD"]["valueFrom"] == env["KVGATE_REDIS_PASSWORD"]["valueFrom"]


def test_external_redis_with_tls_and_password_secret(external_redis_install):
    r = external_redis_install
    assert not r.all("StatefulSet"), "no in-chart Redis with an external one"
    env = _redis_env(r)
    assert env["KVGATE_REDIS_URL"]["value"] == "rediss://redis.prod.internal:6380/0"
    assert env["KVGATE_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "kvgate-redis", "key": "password"}
    ca_file = env["KVGATE_REDIS_CA_FILE"]["value"]
    dep = r.one("Deployment", fullname())
    mounts = {m["name"]: m["mountPath"] for m in container(dep, "gateway")["volumeMounts"]}
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert ca_file == f"{mounts['redis-ca']}/ca.crt"
    assert volumes["redis-ca"]["secret"]["secretName"] == "kvgate-redis-ca"
