"""SSRF through the admin API (issue 17, item 2), over real sockets.

An endpoint added through ``POST /admin/endpoints`` must never make kvgate talk to an address
outside ``admin.allowed_networks``: not by answering with a redirect (no kvgate HTTP client, the
native and aiohttp upstream clients, the health checker and the metrics scraper, follows one), not
by a DNS record that changes after registration (the allow-list is applied to the address
actually connected to), and an endpoint that is the gateway itself is refused. ``127.0.0.2``
stands for an internal host: it is loopback on Linux but outside ``127.0.0.1/32``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import pytest

from tests.support.gateway import RunningGateway
from tests.support.ops import ADMIN_KEY, admin
from tests.support.security_edge import Recorder, redirector
from tests.support.threads import free_port, wait_until

CHAT = {"model": "m", "messages": [{"role": "user", "content": "the secret prompt"}]}


def _config(client: str, allowed: list[str], **upstream: Any) -> dict[str, Any]:
    return {
        "admin": {"api_key": ADMIN_KEY, "sync_interval_s": 0.05, "allowed_networks": allowed},
        "upstream": {"client": client, "max_attempts": 2, **upstream},
        "health": {"interval_s": 0.1, "timeout_s": 1.0},
        "routing": {"scrape": {"interval_s": 0.1, "timeout_s": 1.0}},
        "clusters": {"pool": {"endpoints": []}},
        "models": {"m": {"cluster": "pool"}},
    }


@pytest.fixture(scope="module")
def internal() -> Iterator[Recorder]:
    """The host an attacker wants to reach: outside the allowed networks."""
    server = Recorder("internal", host="127.0.0.2").start()
    yield server
    server.stop()


def _add(gateway: RunningGateway, name: str, url: str) -> httpx.Response:
    body = {"name": name, "cluster": "pool", "url": url, "model": "m"}
    return httpx.post(gateway.url + "/admin/endpoints", json=body, headers=admin(), timeout=10)


@pytest.mark.parametrize("client", ["native", "aiohttp"])
def test_no_client_follows_a_redirect_out_of_the_allowed_networks(internal: Recorder, client: str) -> None:
    bounce = redirector(f"http://127.0.0.2:{internal.port}")
    bounce.start()
    gateway = RunningGateway(_config(client, ["127.0.0.1/32"])).start()
    try:
        before = len(internal.requests)
        added = _add(gateway, "bouncer", f"http://127.0.0.1:{bounce.port}/v1")
        assert added.status_code == 201, added.text
        answer = httpx.post(gateway.base_url + "/chat/completions", json=CHAT, timeout=10)
        # health checks and scrapes every 0.1 s: a dozen rounds of both had their chance to follow
        assert wait_until(lambda: gateway.endpoint("bouncer").last_error is not None, timeout_s=5)
        time.sleep(1.2)
        assert internal.requests[before:] == []  # nothing reached the internal host: no GET, no POST
        assert answer.status_code in (502, 503), answer.text
        assert "from internal" not in answer.text
        assert "redirect" in answer.text
        assert "redirect" in (gateway.endpoint("bouncer").last_error or "") or gateway.endpoint("bouncer").health.value == "unhealthy"
    finally:
        gateway.stop()
        bounce.stop()


class Rebinding:
    """A DNS resolver whose answer for a name the test changes (DNS rebinding)."""

    def __init__(self, address: str) -> None:
        self.address = address

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        if host != "localhost":
            raise OSError("unknown host")
        return [self.address]


@pytest.mark.parametrize("client", ["native", "aiohttp"])
def test_the_allow_list_holds_on_the_address_connected_to(internal: Recorder, client: str) -> None:
    """DNS said 127.0.0.3 at registration; the system resolver says 127.0.0.1 for ``localhost``.

    kvgate connects only to an address it checked: the allowed one while DNS keeps saying so, and
    to nothing once it points outside (keep-alive off: each request is a new connection).
    """
    port = free_port()
    allowed = Recorder("allowed", host="127.0.0.3", port=port).start()
    also_internal = Recorder("loopback-internal", host="127.0.0.1", port=port).start()
    dns = Rebinding("127.0.0.3")
    gateway = RunningGateway(_config(client, ["127.0.0.3/32"], keepalive_s=0), resolver=dns).start()
    try:
        added = _add(gateway, "rebound", f"http://localhost:{port}/v1")
        assert added.status_code == 201, added.text
        first = httpx.post(gateway.base_url + "/chat/completions", json=CHAT, timeout=10)
        assert first.status_code == 200, first.text
        assert first.json()["choices"][0]["message"]["content"] == "from allowed"
        dns.address = "127.0.0.1"  # the record now points outside the allowed networks
        served = len(allowed.requests)
        second = httpx.post(gateway.base_url + "/chat/completions", json=CHAT, timeout=10)
        assert second.status_code in (502, 503), second.text
        time.sleep(0.5)  # health checks and scrapes keep trying too
        assert also_internal.requests == []
        assert "from loopback-internal" not in second.text
        assert len(allowed.requests) >= served  # the allowed host may still be probed; nothing else
    finally:
        gateway.stop()
        allowed.stop()
        also_internal.stop()


def test_registering_the_gateway_itself_is_refused() -> None:
    gateway = RunningGateway(_config("native", ["127.0.0.0/8"])).start()
    try:
        for url in (f"http://127.0.0.1:{gateway.port}/v1", f"http://localhost:{gateway.port}"):
            answer = _add(gateway, "myself", url)
            assert answer.status_code == 400, (url, answer.text)
            assert answer.json()["error"]["code"] == "endpoint_is_gateway"
            assert answer.json()["error"]["param"] == "url"
        health = {"name": "myself", "cluster": "pool", "url": "http://127.0.0.9:1/v1", "model": "m",
                  "health_url": f"http://127.0.0.1:{gateway.port}/health"}
        answer = httpx.post(gateway.url + "/admin/endpoints", json=health, headers=admin(), timeout=10)
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "health_url", answer.text
        assert gateway.app.state.container.registry.find("myself") is None
    finally:
        gateway.stop()
