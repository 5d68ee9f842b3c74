"""Prefix-aware routing through a real kvgate: affinity, hot-spot spreading, explain, and replicas
sharing Redis (real server at 127.0.0.1:6379), including Redis being down."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from redis import Redis

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RefusingPort, RunningGateway
from tests.support.threads import wait_until

ADMIN = "admin-key-for-routing-tests"
HANDBOOK = "Tenant {n} handbook: answer politely, cite the policy section, never guess. " * 30


@pytest.fixture(scope="module")
def fakes() -> Iterator[list[FakeUpstream]]:
    made = [FakeUpstream(f"w{i}").start() for i in range(4)]
    yield made
    for fake in made:
        fake.stop()


def settings(fakes: list[FakeUpstream], **extra: Any) -> dict[str, Any]:
    return {
        "admin": {"api_key": ADMIN},
        "health": {"interval_s": 60.0},
        # share_floor: bounded-share stays out of the way of these short sequences (unit-tested apart)
        "routing": {"scrape": {"enabled": False}, "hot_spot": {"share_floor": 1000.0}},
        "clusters": {"pool": {"endpoints": [
            {"name": f"w{i}", "url": fake.base_url, "model": "served"} for i, fake in enumerate(fakes)
        ]}},
        "models": {"pooled": {"cluster": "pool"}},
        **extra,
    }


@pytest.fixture(scope="module")
def gateway(fakes: list[FakeUpstream]) -> Iterator[RunningGateway]:
    running = RunningGateway(settings(fakes)).start()
    yield running
    running.stop()


def ask(client: httpx.Client, base: str, tenant: int, question: str = "What now?", **fields: Any) -> str:
    body = {"model": "pooled", "max_tokens": 4, **fields,
            "messages": [{"role": "system", "content": HANDBOOK.format(n=tenant)}, {"role": "user", "content": question}]}
    reply = client.post(base + "/chat/completions", json=body)
    assert reply.status_code == 200, reply.text
    return reply.headers["x-kvgate-endpoint"]


def test_each_prefix_sticks_to_one_endpoint_and_prefixes_spread(gateway: RunningGateway) -> None:
    homes = {}
    with httpx.Client(timeout=10) as client:
        for tenant in range(8):
            seen = {ask(client, gateway.base_url, tenant, f"Question {q}?") for q in range(4)}
            assert len(seen) == 1, f"tenant {tenant} went to {seen}"
            homes[tenant] = seen.pop()
    assert len(set(homes.values())) >= 3


async def test_hot_spot_guard_spreads_one_hot_prefix(gateway: RunningGateway, fakes: list[FakeUpstream]) -> None:
    body = {"model": "pooled", "stream": True, "fake": "hang_stream",
            "messages": [{"role": "system", "content": HANDBOOK.format(n=99)}, {"role": "user", "content": "Hot?"}]}
    async with httpx.AsyncClient(timeout=10) as client:
        streams = []
        try:
            for _ in range(8):  # eight long requests of one tenant at once
                request = client.build_request("POST", gateway.base_url + "/chat/completions", json=body)
                response = await client.send(request, stream=True)
                assert response.status_code == 200
                streams.append(response)
            counts: dict[str, int] = {}
            for response in streams:
                counts[response.headers["x-kvgate-endpoint"]] = counts.get(response.headers["x-kvgate-endpoint"], 0) + 1
            assert max(counts.values()) <= 4 and len(counts) >= 2, counts  # ceil(2.0 * 8 / 4) = 4
        finally:
            for response in streams:
                await response.aclose()
    assert wait_until(lambda: all(gateway.endpoint(f"w{i}").in_flight == 0 for i in range(4)))
    await asyncio.sleep(0)


def test_explain_returns_the_decision_without_calling_an_endpoint(gateway: RunningGateway, fakes: list[FakeUpstream]) -> None:
    with httpx.Client(timeout=10) as client:
        home = ask(client, gateway.base_url, 42)
        before = sum(len(f.requests) for f in fakes)
        body = {"model": "pooled", "messages": [{"role": "system", "content": HANDBOOK.format(n=42)},
                                                {"role": "user", "content": "Other?"}]}
        reply = client.post(gateway.url + "/admin/routing/explain", json=body,
                            headers={"Authorization": f"Bearer {ADMIN}"})
        assert reply.status_code == 200, reply.text
        explained = reply.json()
        assert explained["ranked"][0] == home and explained["profile"] == "prefix-aware"
        top = explained["endpoints"][0]
        assert set(top["scores"]) == {"prefix", "session", "in-flight", "queue", "kv-usage", "assignments", "prefill"}
        assert top["scores"]["prefix"] > 0.9 and top["matched_blocks"] > 0
        assert sum(len(f.requests) for f in fakes) == before
        assert client.post(gateway.url + "/admin/routing/explain", json=body).status_code == 401


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    prefix = f"kvgate-it-{uuid.uuid4().hex[:8]}:"
    yield prefix
    client = Redis.from_url("redis://127.0.0.1:6379/0")
    keys = list(client.scan_iter(match=prefix + "*"))
    if keys:
        client.delete(*keys)
    client.close()


def test_two_replicas_sharing_redis_send_a_prefix_to_the_same_endpoint(fakes: list[FakeUpstream], redis_prefix: str) -> None:
    # a generous deadline: this checks sharing, not degradation (25 ms fails on a loaded 2-core box)
    state = {"backend": "redis", "redis_url": "redis://127.0.0.1:6379/0", "key_prefix": redis_prefix,
             "deadline_ms": 500.0}
    first = RunningGateway(settings(fakes, state=state)).start()
    second = RunningGateway(settings(fakes, state=state)).start()
    try:
        with httpx.Client(timeout=10) as client:
            homes = {tenant: ask(client, first.base_url, 100 + tenant) for tenant in range(6)}
            assert wait_until(lambda: first.app.state.routing.store.pending_writes == 0)
            for tenant, home in homes.items():
                assert ask(client, second.base_url, 100 + tenant, "Another question?") == home
        assert second.metric("kvgate_state_degraded") == 0
    finally:
        first.stop()
        second.stop()


def test_redis_down_keeps_requests_flowing_and_says_so(fakes: list[FakeUpstream], redis_prefix: str) -> None:
    refusing = RefusingPort()
    state = {"backend": "redis", "redis_url": f"redis://127.0.0.1:{refusing.port}/0", "key_prefix": redis_prefix,
             "deadline_ms": 50.0}
    gateway = RunningGateway(settings(fakes, state=state)).start()
    try:
        with httpx.Client(timeout=10) as client:
            homes = [ask(client, gateway.base_url, 7, f"Q{i}?") for i in range(3)]
        assert len(set(homes)) == 1  # the local view still routes the prefix consistently
        assert gateway.metric("kvgate_state_degraded") == 1
        assert gateway.metric("kvgate_state_fallbacks_total") >= 1
    finally:
        gateway.stop()
        refusing.close()
