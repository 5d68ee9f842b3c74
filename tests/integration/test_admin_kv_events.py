"""``GET /admin/endpoints`` in precise mode over real HTTP: each endpoint's configured ``kv_events``
address with what its socket is doing and the last error, also after libzmq refused the address
(it showed ``address: null`` then) and while a worker's publisher is not reached."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway
from tests.support.loopback import free_port
from tests.support.ops import ADMIN_KEY, CLIENT_KEY, admin

pytest.importorskip("zmq")

REFUSED = "ipc:///tmp/" + "x" * 200  # a valid address, longer than a socket path can be: libzmq refuses it
UNREACHED = f"tcp://127.0.0.1:{free_port()}"  # nothing binds it


@pytest.fixture(scope="module")
def precise_gateway(fake_a: FakeUpstream) -> Iterator[RunningGateway]:
    config: dict[str, Any] = {
        "admin": {"api_key": ADMIN_KEY},
        "auth": {"api_keys": [CLIENT_KEY]},
        "health": {"interval_s": 60},
        "routing": {"policy": "prefix-precise", "kv_events": {"enabled": True, "bind": ""}},
        "clusters": {"fast": {"endpoints": [
            {"name": "kv-refused", "url": fake_a.base_url, "model": "qwen-fast", "kv_events": REFUSED},
            {"name": "kv-unreached", "url": fake_a.base_url, "model": "qwen-fast", "kv_events": UNREACHED},
        ]}},
        "models": {"qwen-fast": {"cluster": "fast"}},
    }
    gateway = RunningGateway(config, health_checks=False).start()
    yield gateway
    gateway.stop()


def _views(gateway: RunningGateway, http: httpx.Client) -> dict[str, dict[str, Any]]:
    response = http.get(gateway.url + "/admin/endpoints", headers=admin())
    assert response.status_code == 200, response.text
    return {item["name"]: item["kv_events"] for item in response.json()["data"]}


def test_a_refused_address_is_shown_with_its_error(precise_gateway: RunningGateway, http: httpx.Client) -> None:
    view = _views(precise_gateway, http)["kv-refused"]
    assert view["address"] == REFUSED and view["state"] == "refused"
    assert view["error"].startswith("libzmq refused the address: "), view
    single = http.get(precise_gateway.url + "/admin/endpoints/kv-refused", headers=admin()).json()
    assert single["kv_events"]["address"] == REFUSED and single["kv_events"]["state"] == "refused"
    assert (single["kv_events"]["publishing"], single["kv_events"]["blocks"]) == (False, 0)


def test_an_unreached_publisher_is_shown_retrying(precise_gateway: RunningGateway, http: httpx.Client) -> None:
    deadline = time.monotonic() + 10
    while (view := _views(precise_gateway, http)["kv-unreached"])["state"] != "retrying" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert view["address"] == UNREACHED and view["state"] == "retrying", view
    assert "connection failed" in view["error"]
