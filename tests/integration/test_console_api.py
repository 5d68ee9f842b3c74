"""The per-request record and the console's routes over real HTTP, with the ``openai`` SDK as client.

``GET /admin/requests`` lists what the close-out recorded (key, model, route and reason, cluster,
endpoint, attempts, tokens, cost, TTFT, E2E, status, outcome) and names the replica;
``GET /admin/requests/{id}`` adds the recorded scheduling decision with its per-scorer breakdown.
The console's page and assets carry the security headers; its data routes need the admin key; a
gateway without an admin key answers 404 for all of it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway, chat_body, error_shape_ok
from tests.support.ops import ADMIN_KEY, CLIENT_KEY, admin

PRICE = {"input_per_mtok": 1.0, "cached_input_per_mtok": 0.5, "output_per_mtok": 2.0}


def _config(a: FakeUpstream, b: FakeUpstream, broken: FakeUpstream | None = None, **admin_extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "admin": {"api_key": ADMIN_KEY, **admin_extra},
        "auth": {"keys": [{"name": "team-console", "key": CLIENT_KEY}]},
        "health": {"interval_s": 60},
        "clusters": {
            "fast": {
                "endpoints": [
                    {"name": "con-a", "url": a.base_url, "model": "qwen-fast"},
                    {"name": "con-b", "url": b.base_url, "model": "qwen-fast"},
                ],
                "price": PRICE,
            },
        },
        "models": {"qwen-fast": {"cluster": "fast"}},
    }
    if broken is not None:  # answers 500 to everything
        config["clusters"]["broken"] = {"endpoints": [{"name": "con-broken", "url": broken.base_url, "model": "m"}]}
        config["models"]["broken-model"] = {"cluster": "broken"}
    return config


@pytest.fixture(scope="module")
def console_gateway(fake_a: FakeUpstream, fake_b: FakeUpstream, fake_broken: FakeUpstream) -> Iterator[RunningGateway]:
    gateway = RunningGateway(_config(fake_a, fake_b, fake_broken, request_log_size=3), health_checks=False).start()
    yield gateway
    while _clients:  # their pooled connections, closed here rather than by the garbage collector in a later test
        _clients.pop().close()
    gateway.stop()


_clients: list[openai.OpenAI] = []


def _sdk(gateway: RunningGateway) -> openai.OpenAI:
    client = openai.OpenAI(base_url=gateway.base_url, api_key=CLIENT_KEY, max_retries=0)
    _clients.append(client)
    return client


def _recent(gateway: RunningGateway, limit: int = 100) -> dict[str, Any]:
    reply = httpx.get(f"{gateway.url}/admin/requests", params={"limit": limit}, headers=admin(), timeout=10)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_a_request_is_recorded_with_its_route_tokens_cost_and_timings(console_gateway: RunningGateway) -> None:
    raw = _sdk(console_gateway).chat.completions.with_raw_response.create(
        model="qwen-fast", messages=[{"role": "user", "content": "record me"}], extra_headers={"x-request-id": "rec-1"}
    )
    endpoint = raw.headers["x-kvgate-endpoint"]
    answer = _recent(console_gateway)
    assert answer["replica"] == {"id": f"{os.uname().nodename}:{os.getpid()}", "host": os.uname().nodename,
                                 "pid": os.getpid()}
    record = answer["data"][0]
    assert record["id"] == "rec-1"
    assert (record["key"], record["model"], record["route"], record["reason"]) == ("team-console", "qwen-fast", "qwen-fast", "model")
    assert (record["cluster"], record["endpoint"], record["attempts"]) == ("fast", endpoint, 1)
    # the fake's usage: 7 prompt tokens (4 cached), 3 completion tokens
    assert (record["prompt_tokens"], record["cached_tokens"], record["completion_tokens"]) == (7, 4, 3)
    assert record["cost_usd"] == pytest.approx((3 * 1.0 + 4 * 0.5 + 3 * 2.0) / 1e6)
    assert (record["status"], record["outcome"], record["error"]) == (200, "success", None)
    assert record["ttft_s"] is None and record["e2e_s"] > 0  # not streamed: no TTFT


def test_a_stream_has_its_ttft_and_a_failure_its_status(console_gateway: RunningGateway) -> None:
    client = _sdk(console_gateway)
    stream = client.chat.completions.create(model="qwen-fast", messages=[{"role": "user", "content": "s"}], stream=True,
                                            stream_options={"include_usage": True}, extra_headers={"x-request-id": "rec-2"})
    for _ in stream:
        pass
    with pytest.raises(openai.APIStatusError) as failure:
        client.chat.completions.create(model="broken-model", messages=[{"role": "user", "content": "x"}],
                                       extra_headers={"x-request-id": "rec-3"})
    records = {r["id"]: r for r in _recent(console_gateway)["data"]}
    assert records["rec-2"]["ttft_s"] is not None and 0 < records["rec-2"]["ttft_s"] <= records["rec-2"]["e2e_s"]
    failed = records["rec-3"]
    assert (failed["status"], failed["outcome"]) == (failure.value.status_code, "upstream_error")
    assert failed["status"] >= 500 and failed["error"] and failed["cluster"] == "broken"


def test_the_ring_keeps_only_the_newest_records(console_gateway: RunningGateway) -> None:
    client = _sdk(console_gateway)
    for i in range(5):
        client.chat.completions.create(model="qwen-fast", messages=[{"role": "user", "content": f"n{i}"}],
                                       extra_headers={"x-request-id": f"ring-{i}"})
    answer = _recent(console_gateway)
    assert (answer["size"], answer["held"]) == (3, 3)
    assert [r["id"] for r in answer["data"]] == ["ring-4", "ring-3", "ring-2"]
    assert [r["id"] for r in _recent(console_gateway, limit=1)["data"]] == ["ring-4"]


def test_one_request_shows_its_scheduling_explanation(console_gateway: RunningGateway) -> None:
    _sdk(console_gateway).chat.completions.create(model="qwen-fast", messages=[{"role": "user", "content": "why"}],
                                                  extra_headers={"x-request-id": "why-1"})
    reply = httpx.get(f"{console_gateway.url}/admin/requests/why-1", headers=admin(), timeout=10)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    explanation = body["explanation"]
    assert explanation["cluster"] == "fast" and explanation["scored"] is True
    assert explanation["ranked"][0] == body["endpoint"]
    assert {e["name"] for e in explanation["endpoints"]} == {"con-a", "con-b"}
    # the same shape and scorers as a dry run of the same body (POST /admin/routing/explain)
    dry = httpx.post(f"{console_gateway.url}/admin/routing/explain", headers=admin(), timeout=10,
                     json=chat_body("why")).json()
    assert dry["profile"] == explanation["profile"]
    assert set(dry["endpoints"][0]) <= set(explanation["endpoints"][0])
    scorers = set(dry["endpoints"][0]["scores"])
    assert scorers
    for endpoint in explanation["endpoints"]:
        assert set(endpoint["scores"]) == scorers
        assert all(0.0 <= score <= 1.0 for score in endpoint["scores"].values())
        assert endpoint["total"] is not None
    totals = [e["total"] for e in explanation["endpoints"]]
    assert totals[0] >= totals[1]  # ranked best first
    assert body["route_selection"]["clusters"] == ["fast"] and body["route_selection"]["reason"] == "model"


def test_request_routes_need_the_admin_key_and_check_their_input(console_gateway: RunningGateway) -> None:
    url = console_gateway.url
    for path in ("/admin/requests", "/admin/requests/why-1"):
        reply = httpx.get(url + path, timeout=10)
        assert reply.status_code == 401 and error_shape_ok(reply.json())
        assert httpx.get(url + path, headers=admin("wrong"), timeout=10).status_code == 401
    for limit in (0, 1001, "many"):
        reply = httpx.get(url + "/admin/requests", params={"limit": limit}, headers=admin(), timeout=10)
        assert reply.status_code == 400 and error_shape_ok(reply.json())
    reply = httpx.get(url + "/admin/requests/no-such-request", headers=admin(), timeout=10)
    assert reply.status_code == 404 and "another replica" in reply.json()["error"]["message"]


def test_the_console_page_and_assets_carry_the_security_headers(console_gateway: RunningGateway) -> None:
    for path, kind in (("", "text/html"), ("/console.js", "text/javascript"), ("/charts.js", "text/javascript"),
                       ("/console.css", "text/css")):
        reply = httpx.get(f"{console_gateway.url}/admin/console{path}", timeout=10)
        assert reply.status_code == 200 and reply.headers["content-type"].startswith(kind)
        csp = reply.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "style-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp
        assert reply.headers["x-frame-options"] == "DENY"
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert reply.headers["cache-control"] == "no-store"
    page = httpx.get(f"{console_gateway.url}/admin/console", timeout=10).text
    assert "<script>" not in page and "style=" not in page  # no inline script or style
    assert 'src="/admin/console/console.js"' in page and ADMIN_KEY not in page


def test_without_an_admin_key_configured_the_console_is_off(fake_a: FakeUpstream, fake_b: FakeUpstream) -> None:
    config = _config(fake_a, fake_b)
    del config["admin"]
    gateway = RunningGateway(config, health_checks=False).start()
    try:
        for path in ("/admin/console", "/admin/console/console.js", "/admin/requests"):
            reply = httpx.get(gateway.url + path, headers=admin(), timeout=10)
            assert reply.status_code == 404 and error_shape_ok(reply.json())
    finally:
        gateway.stop()


def test_a_zero_size_record_keeps_nothing(fake_a: FakeUpstream, fake_b: FakeUpstream) -> None:
    gateway = RunningGateway(_config(fake_a, fake_b, request_log_size=0), health_checks=False).start()
    try:
        reply = httpx.post(gateway.base_url + "/chat/completions", json=chat_body(),
                           headers={"Authorization": f"Bearer {CLIENT_KEY}"}, timeout=10)
        assert reply.status_code == 200
        answer = _recent(gateway)
        assert (answer["size"], answer["held"], answer["data"]) == (0, 0, [])
    finally:
        gateway.stop()
