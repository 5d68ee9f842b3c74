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

from backends.vllm_args import worker_argv
from gateway.settings import build_settings

from .argv import parse_vllm_serve
from .tools import REPO, output, run, tool

COMPOSE = REPO / "deploy" / "compose" / "compose.yaml"
KEYS = '["sk-compose-test"]'


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVGATE", "COMPOSE_"))}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def compose() -> dict:
    result = run([tool("docker-compose"), "-f", str(COMPOSE), "config", "--format", "json"],
                 env=_env(KVGATE_API_KEYS=KEYS))
    assert result.returncode == 0, output(result)
    return json.loads(result.stdout)


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
    assert gateway["environment"]["KVGATE_REDIS_URL"].startswith("redis://redis:6379")
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


def test_gateway_config_names_each_worker(compose, monkeypatch):
    for name in [n for n in os.environ if n.startswith("KVGATE__")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("KVGATE__AUTH__API_KEYS", KEYS)
    config = compose["services"]["gateway"]["configs"][0]
    assert config["target"] == "/etc/kvgate/config.toml"
    path = compose["configs"][config["source"]]["file"]
    settings = build_settings(tomllib.loads(Path(path).read_text(encoding="utf-8")))
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
