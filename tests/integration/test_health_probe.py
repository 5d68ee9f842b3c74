"""Active checks: the generation probe catches an endpoint whose /health lies."""

from __future__ import annotations

import asyncio

import pytest

from gateway.endpoints.health import HealthChecker
from gateway.endpoints.model import Health
from gateway.endpoints.registry import EndpointRegistry
from gateway.observability.metrics import GatewayMetrics
from gateway.config import build_settings
from gateway.upstream.client import AiohttpUpstream
from tests.support.scripted import ScriptedUpstream


@pytest.mark.parametrize(
    "script, probe, healthy",
    [
        ([("counter", None)], "generation", True),
        ([("json", 500, {"error": {"message": "engine dead"}})], "generation", False),
        ([("sleep", 2)], "generation", False),
        ([("json", 500, {"error": {"message": "engine dead"}})], "health", True),  # /health alone is fooled
    ],
)
async def test_generation_probe(script: list[tuple[object, ...]], probe: str, healthy: bool) -> None:
    server = ScriptedUpstream("probe").start()
    server.script(script)
    settings = build_settings(
        {
            "health": {"probe": probe, "timeout_s": 0.5, "unhealthy_threshold": 1},
            "clusters": {"c": {"endpoints": [{"name": "e", "url": server.base_url, "model": "m"}]}},
        }
    )
    registry = EndpointRegistry.from_settings(settings.clusters, settings.health, settings.circuit)
    upstream = AiohttpUpstream(settings.upstream)
    try:
        await HealthChecker(registry, upstream, settings.health, GatewayMetrics(), sleep=asyncio.sleep).check_all()
    finally:
        await upstream.aclose()
        server.stop()
    endpoint = registry.cluster("c")[0]
    assert (endpoint.health is Health.HEALTHY) is healthy
    if probe == "generation":
        assert server.requests and server.requests[-1][1]["max_tokens"] == 1
