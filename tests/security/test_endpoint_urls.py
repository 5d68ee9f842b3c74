"""Endpoint URLs with bytes HTTP cannot carry (issue 17, item 9), over real sockets.

A non-ASCII character in an endpoint's URL path or ``health_url`` once stopped the health checks
of every endpoint (one ``UnicodeEncodeError`` ended the shared loop) and made that endpoint answer
500 with no failover. Such URLs are refused where they enter (config file, admin API), and an
endpoint whose URL slipped through anyway (a stored admin document from an older version) fails
its own checks and requests only: the others keep being checked and requests fail over.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.endpoints.model import Health
from gateway.config import ConfigError, build_settings
from tests.support.gateway import RunningGateway
from tests.support.ops import ADMIN_KEY, admin
from tests.support.security_edge import Recorder
from tests.support.threads import wait_until

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def good() -> Iterator[Recorder]:
    server = Recorder("good").start()
    yield server
    server.stop()


def _config(good: Recorder) -> dict[str, Any]:
    return {
        "admin": {"api_key": ADMIN_KEY, "sync_interval_s": 0.05},
        "health": {"interval_s": 0.1, "timeout_s": 1.0},
        "routing": {"policy": "round-robin"},
        "upstream": {"max_attempts": 2},
        "clusters": {"pool": {"endpoints": [{"name": "good", "url": good.base_url, "model": "m"}]}},
        "models": {"m": {"cluster": "pool"}},
    }


@pytest.mark.parametrize("field", ["url", "health_url"])
@pytest.mark.parametrize("bad", ["http://127.0.0.1:8000/v1/caf\u00e9", "http://127.0.0.1:8000/v1 x", "http://127.0.0.1:8000/\x07"])
def test_the_config_file_refuses_a_url_http_cannot_carry(field: str, bad: str) -> None:
    endpoint = {"url": "http://127.0.0.1:8000/v1", "model": "m", field: bad}
    with pytest.raises(ConfigError) as raised:
        build_settings({"clusters": {"pool": {"endpoints": [endpoint]}}})
    assert f"clusters.pool.endpoints.0.{field}: must be printable ASCII" in str(raised.value)


@pytest.mark.parametrize("field", ["url", "health_url"])
def test_the_admin_api_refuses_a_non_ascii_url(good: Recorder, field: str) -> None:
    gateway = RunningGateway(_config(good), health_checks=False).start()
    try:
        body = {"name": "accent", "cluster": "pool", "url": good.base_url, "model": "m", field: good.base_url + "/caf\u00e9"}
        answer = httpx.post(gateway.url + "/admin/endpoints", json=body, headers=admin(), timeout=10)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["param"] == field
        assert "ASCII" in answer.json()["error"]["message"]
        assert gateway.app.state.container.registry.find("accent") is None
    finally:
        gateway.stop()


@pytest.mark.parametrize("client", ["native", "aiohttp"])
def test_one_bad_url_stops_neither_the_other_health_checks_nor_failover(good: Recorder, client: str) -> None:
    data = _config(good)
    data["upstream"]["client"] = client
    gateway = RunningGateway(data)
    spec = {"name": "accent", "cluster": "pool", "url": good.base_url + "/caf\u00e9", "model": "m",
            "health_url": good.base_url.removesuffix("/v1") + "/h\u00e9alth", "weight": 1.0}
    store = gateway.app.state.container.ops.runtime.store  # as if an older version had stored it
    asyncio.run(store.put("endpoints", "accent", {"spec": spec}))
    gateway.start()
    try:
        before = good.paths("/health")
        assert wait_until(lambda: good.paths("/health") >= before + 5, timeout_s=10), "health checks of 'good' stopped"
        if client == "native":  # aiohttp percent-encodes the path itself; the native client refuses it
            assert wait_until(lambda: gateway.endpoint("accent").health is Health.UNHEALTHY, timeout_s=5)
        for _ in range(4):  # round-robin: some start on the bad endpoint and fail over
            answer = httpx.post(gateway.base_url + "/chat/completions", json=CHAT, timeout=10)
            assert answer.status_code == 200, answer.text
            assert answer.json()["choices"][0]["message"]["content"] == "from good"
    finally:
        gateway.stop()
