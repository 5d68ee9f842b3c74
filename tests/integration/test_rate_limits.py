"""An endpoint's 429: its rate-limit headers relayed, its Retry-After a cooldown (issue 16, items 4 and 5).

Scripted upstreams on raw TCP (``tests/support/scripted.py``) answer 429 with ``Retry-After`` and
OpenAI's ``x-ratelimit-*`` headers. What the client must see:

* the 429 it gets carries the endpoint's ``Retry-After`` and every ``x-ratelimit-*`` header;
* it gets it at once when no endpoint is left to try (the ``Retry-After`` is waited only before
  an attempt that is made);
* the endpoint that said "not before T" gets no request before T, and no breaker failure is
  counted against it;
* when every endpoint of the route is cooling, a 503 ``no_healthy_endpoint`` with ``Retry-After``
  = the soonest T, and no endpoint is called.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from gateway.endpoints.circuit import CircuitState
from tests.support.gateway import RunningGateway
from tests.support.scripted import ScriptedUpstream

CHAT = {"model": "m", "messages": [{"role": "user", "content": "count"}]}
LIMITS = {
    "x-ratelimit-limit-requests": "60",
    "x-ratelimit-remaining-requests": "0",
    "x-ratelimit-reset-requests": "30s",
    "x-ratelimit-limit-tokens": "150000",
    "x-ratelimit-remaining-tokens": "149000",
    "x-ratelimit-reset-tokens": "400ms",
}
TOO_MANY = {"error": {"message": "Rate limit reached for requests", "type": "requests", "param": None, "code": "rate_limit_exceeded"}}


def too_many(retry_after: str, **extra: str) -> list[tuple[Any, ...]]:
    return [("json", 429, TOO_MANY, {"Retry-After": retry_after, **extra})]


@pytest.fixture(scope="module")
def upstreams() -> Iterator[dict[str, ScriptedUpstream]]:
    servers = {name: ScriptedUpstream(name).start() for name in ("A", "B")}
    yield servers
    for server in servers.values():
        server.stop()


def serve(upstreams: dict[str, ScriptedUpstream], names: tuple[str, ...], **upstream: Any) -> RunningGateway:
    """A fresh gateway: model ``m`` on one cluster of ``names``, round-robin, a breaker that opens on one failure."""
    return RunningGateway(
        {
            "routing": {"policy": "round-robin"},
            "upstream": {"max_retry_after_s": 0.2, **upstream},
            "circuit": {"consecutive_failures": 1, "cooldown_s": 60},
            "clusters": {"main": {"endpoints": [{"name": n, "url": upstreams[n].base_url, "model": "m"} for n in names]}},
            "models": {"m": {"cluster": "main"}},
        },
        health_checks=False,
    ).start()


@pytest.fixture
def fresh(upstreams: dict[str, ScriptedUpstream]) -> Iterator[list[RunningGateway]]:
    for server in upstreams.values():
        server.script([("counter", None)])
    started: list[RunningGateway] = []
    yield started
    for gateway in started:
        gateway.stop()


def test_relayed_429_keeps_retry_after_and_rate_limit_headers(upstreams: dict[str, ScriptedUpstream], fresh: list[RunningGateway]) -> None:
    gateway = serve(upstreams, ("A",))
    fresh.append(gateway)
    upstreams["A"].script(too_many("1", **LIMITS))
    with openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0) as client:
        with pytest.raises(openai.RateLimitError) as caught:
            client.chat.completions.create(model="m", messages=CHAT["messages"])
    headers = caught.value.response.headers
    assert headers["retry-after"] == "1"
    for name, value in LIMITS.items():
        assert headers.get(name) == value, name
    assert caught.value.code == "rate_limit_exceeded"


def test_429_with_no_endpoint_left_is_answered_without_waiting(upstreams: dict[str, ScriptedUpstream], fresh: list[RunningGateway]) -> None:
    """Retry-After 60 s, waited up to 60 s: the client's 10 s timeout fires if kvgate waits it out."""
    gateway = serve(upstreams, ("A",), max_retry_after_s=60)
    fresh.append(gateway)
    upstreams["A"].script(too_many("60"))
    response = httpx.post(f"{gateway.url}/v1/chat/completions", json=CHAT, timeout=10)
    assert response.status_code == 429
    assert response.headers["retry-after"] == "60"
    assert len(upstreams["A"].requests) == 1


def test_429_cools_the_endpoint_without_a_breaker_failure(upstreams: dict[str, ScriptedUpstream], fresh: list[RunningGateway]) -> None:
    gateway = serve(upstreams, ("A", "B"))
    fresh.append(gateway)
    upstreams["A"].script(too_many("30", **LIMITS))
    answers = [httpx.post(f"{gateway.url}/v1/chat/completions", json=CHAT, timeout=10) for _ in range(5)]
    assert [a.status_code for a in answers] == [200] * 5
    assert {a.headers["x-kvgate-endpoint"] for a in answers} == {"B"}
    assert len(upstreams["A"].requests) == 1  # "not before T": nothing more went to A
    a = gateway.endpoint("A")
    assert a.circuit is CircuitState.CLOSED  # one failure would have opened it: none was counted
    assert a.cooling_until > 0 and not a.routable


def test_every_endpoint_cooling_is_503_with_the_soonest_retry_after(upstreams: dict[str, ScriptedUpstream], fresh: list[RunningGateway]) -> None:
    gateway = serve(upstreams, ("A", "B"))
    fresh.append(gateway)
    upstreams["A"].script(too_many("40"))
    upstreams["B"].script(too_many("20"))
    first = httpx.post(f"{gateway.url}/v1/chat/completions", json=CHAT, timeout=10)
    assert first.status_code == 429  # both tried: the last 429 relayed
    second = httpx.post(f"{gateway.url}/v1/chat/completions", json=CHAT, timeout=10)
    assert second.status_code == 503
    assert second.json()["error"]["code"] == "no_healthy_endpoint"
    assert 10 <= int(second.headers["retry-after"]) <= 20  # B's T, the sooner one
    assert (len(upstreams["A"].requests), len(upstreams["B"].requests)) == (1, 1)  # nobody called again
    for name in ("A", "B"):
        assert gateway.endpoint(name).circuit is CircuitState.CLOSED


def test_cooldown_is_capped_and_can_be_switched_off(upstreams: dict[str, ScriptedUpstream], fresh: list[RunningGateway]) -> None:
    gateway = serve(upstreams, ("A", "B"), max_rate_limit_cooldown_s=0)
    fresh.append(gateway)
    upstreams["A"].script(too_many("30"))
    for _ in range(2):
        assert httpx.post(f"{gateway.url}/v1/chat/completions", json=CHAT, timeout=10).status_code == 200
    assert gateway.endpoint("A").cooling_until == 0.0
