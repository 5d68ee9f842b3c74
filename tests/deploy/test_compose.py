"""deploy/compose: `docker compose config -q` accepts the file (real binary; its Python console
script always exits 0), the gateway's config loads with kvgate's settings loader and names each
worker container, and each worker's command line is the one kvgate's worker spec emits."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from backends.workers.vllm_args import worker_argv
from gateway.config import build_settings

from .argv import parse_vllm_serve
from .tools import REPO, output, run, settings_key, tool

COMPOSE = REPO / "deploy" / "compose" / "compose.yaml"
KEYS = '["sk-compose-test"]'
ADMIN_KEY = "admin-compose-test"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVGATE", "COMPOSE_"))}
    env.update(extra)
    return env


def _compose_config(**env: str) -> dict:
    result = run([tool("docker-compose"), "-f", str(COMPOSE), "config", "--format", "json"], env=_env(**env))
    assert result.returncode == 0, output(result)
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def compose() -> dict:
    return _compose_config(KVGATE_API_KEYS=KEYS, KVGATE_ADMIN_KEY=ADMIN_KEY)


def _gateway_settings(compose: dict, monkeypatch: pytest.MonkeyPatch):
    """kvgate.toml through kvgate's loader with the gateway service's environment applied."""
    for name in [n for n in os.environ if n.startswith("KVGATE")]:
        monkeypatch.delenv(name)
    gateway = compose["services"]["gateway"]
    for name, value in gateway["environment"].items():
        if name.startswith("KVGATE__"):
            assert settings_key(name), f"{name} is no key of kvgate's settings"
        monkeypatch.setenv(name, value)
    config = gateway["configs"][0]
    assert config["target"] == "/etc/kvgate/config.toml"
    path = compose["configs"][config["source"]]["file"]
    return build_settings(tomllib.loads(Path(path).read_text(encoding="utf-8")))


def test_compose_config_is_valid():
    result = run([tool("docker-compose"), "-f", str(COMPOSE), "config", "-q"], env=_env(KVGATE_API_KEYS=KEYS))
    assert result.returncode == 0, output(result)


def test_client_keys_are_required():
    result = run([tool("docker-compose"), "-f", str(COMPOSE), "config", "-q"], env=_env())
    assert result.returncode != 0
    assert "KVGATE_API_KEYS" in result.stderr


def test_services(compose):
    services = compose["services"]
    assert set(services) == {"gateway", "redis", "worker-reasoning", "worker-fast"}
    gateway = services["gateway"]
    assert gateway["build"]["dockerfile"] == "deploy/docker/Dockerfile"
    assert gateway["user"] == "10001:10001" and gateway["read_only"] is True
    assert gateway["environment"]["KVGATE__AUTH__API_KEYS"] == KEYS
    assert gateway["environment"]["KVGATE__ADMIN__API_KEY"] == ADMIN_KEY
    assert gateway["environment"]["KVGATE__STATE__REDIS_URL"].startswith("redis://redis:6379")
    assert not [n for n in gateway["environment"] if n.startswith(("KVGATE_ADMIN", "KVGATE_REDIS"))]
    assert [p["target"] for p in gateway["ports"]] == [8080]
    for name in ("redis", "worker-reasoning", "worker-fast"):
        assert not services[name].get("ports"), f"{name} must not be published"
    gpus = []
    for name in ("worker-reasoning", "worker-fast"):
        devices = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["driver"] == "nvidia" and devices[0]["capabilities"] == ["gpu"]
        gpus += devices[0]["device_ids"]
        assert int(services[name]["shm_size"]) >= 1 << 30
        assert any(v["target"] == "/models" for v in services[name]["volumes"])
    assert sorted(gpus) == ["0", "1"], "one GPU per worker"


def test_gateway_settings_admin_key_and_redis_state(compose, monkeypatch):
    settings = _gateway_settings(compose, monkeypatch)
    assert settings.admin.api_key is not None and settings.admin.api_key.get_secret_value() == ADMIN_KEY
    assert settings.state.backend == "redis"
    url = urlsplit(settings.state.redis_url or "")
    assert (url.scheme, url.port) == ("redis", 6379)
    redis = compose["services"][url.hostname]
    assert redis["image"].startswith("redis:") and "redis" in compose["services"]["gateway"]["depends_on"]
    assert [c.tier for c in settings.clusters.values()] == ["reasoning", "fast"]
    assert settings.models["deepseek-r1"].failover == ["fast"]
    assert settings.health.probe == "health" and settings.routing.policy == "prefix-aware"


def test_admin_api_is_off_without_an_admin_key(monkeypatch):
    settings = _gateway_settings(_compose_config(KVGATE_API_KEYS=KEYS), monkeypatch)
    assert settings.admin.api_key is not None and settings.admin.api_key.get_secret_value() == ""
    assert settings.state.backend == "redis"


def test_context_limits_match_the_workers(compose, monkeypatch):
    settings = _gateway_settings(compose, monkeypatch)
    for cluster in settings.clusters.values():
        for endpoint in cluster.endpoints:
            worker = compose["services"][urlsplit(endpoint.url).hostname]
            argv = worker["entrypoint"] + worker["command"]
            assert cluster.max_context_tokens == int(argv[argv.index("--max-model-len") + 1])


def test_gateway_config_names_each_worker(compose, monkeypatch):
    settings = _gateway_settings(compose, monkeypatch)
    assert settings.server.host == "0.0.0.0"
    for cluster in settings.clusters.values():
        for endpoint in cluster.endpoints:
            url = urlsplit(endpoint.url)
            worker = compose["services"][url.hostname]
            argv = worker["entrypoint"] + worker["command"]
            assert argv[argv.index("--port") + 1] == str(url.port)
            assert argv[argv.index("--served-model-name") + 1] == endpoint.model


@pytest.mark.parametrize("service", ["worker-reasoning", "worker-fast"])
def test_worker_argv_is_the_worker_specs(compose, service):
    worker = compose["services"][service]
    argv = worker["entrypoint"] + worker["command"]
    spec = parse_vllm_serve(argv)
    assert (spec.kv_cache_dtype, spec.enable_prefix_caching, spec.enable_chunked_prefill) == ("fp8", True, True)
    assert spec.enable_prompt_tokens_details
    assert spec.extra_args[0] == "--kv-events-config"
    assert worker_argv(spec, python="python") == argv
