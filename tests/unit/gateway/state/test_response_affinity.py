"""Response affinity: memory (TTL, bound) and Redis (real Redis at 127.0.0.1:6379), and resolve()."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from redis.asyncio import Redis

from gateway.errors import StateStoreError
from gateway.state.response_affinity import (
    MemoryResponseAffinity,
    RedisResponseAffinity,
    StoredResponseNotFoundError,
    StoredResponseUnavailableError,
    resolve,
)

REDIS_URL = "redis://127.0.0.1:6379/0"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


async def test_memory_records_expire_after_the_ttl() -> None:
    clock = Clock()
    store = MemoryResponseAffinity(clock, ttl_s=60)
    await store.record("resp_1", "w1")
    assert await store.lookup("resp_1") == "w1"
    clock.now += 59.9
    assert await store.lookup("resp_1") == "w1"
    clock.now += 0.2
    assert await store.lookup("resp_1") is None and len(store) == 0


async def test_memory_is_bounded_oldest_first() -> None:
    store = MemoryResponseAffinity(Clock(), max_entries=2)
    for ident, endpoint in (("a", "w1"), ("b", "w2"), ("c", "w1")):
        await store.record(ident, endpoint)
    assert [await store.lookup(i) for i in "abc"] == [None, "w2", "w1"]
    await store.record("b", "w3")  # a re-record refreshes the entry
    await store.record("d", "w1")
    assert [await store.lookup(i) for i in "bcd"] == ["w3", None, "w1"]


def test_memory_rejects_bad_bounds() -> None:
    with pytest.raises(ValueError):
        MemoryResponseAffinity(Clock(), ttl_s=0)


async def test_resolve_names_the_cause() -> None:
    store = MemoryResponseAffinity(Clock())
    await store.record("resp_1", "w1")
    assert await resolve(store, "resp_1", "previous_response_id", lambda name: None) == "w1"
    with pytest.raises(StoredResponseNotFoundError) as missing:
        await resolve(store, "resp_2", "previous_response_id", lambda name: None)
    assert missing.value.status == 404 and missing.value.param == "previous_response_id"
    assert "resp_2" in missing.value.message
    with pytest.raises(StoredResponseUnavailableError) as down:
        await resolve(store, "resp_1", "response_id", lambda name: "circuit open")
    assert down.value.status == 503 and "w1" in down.value.message and "circuit open" in down.value.message
    assert b'"code":"stored_response_unavailable"' in down.value.body()


@pytest_asyncio.fixture
async def redis_client() -> AsyncIterator[tuple[Redis, str]]:
    client = Redis.from_url(REDIS_URL)
    prefix = f"kvgate-test-{uuid.uuid4().hex[:8]}:"
    try:
        yield client, prefix
    finally:
        keys = [key async for key in client.scan_iter(match=prefix + "*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


async def test_redis_shares_records_between_replicas(redis_client: tuple[Redis, str]) -> None:
    client, prefix = redis_client
    one = RedisResponseAffinity(client, prefix, Clock(), ttl_s=120)
    two = RedisResponseAffinity(client, prefix, Clock(), ttl_s=120)
    await one.record("resp_1", "w1")
    assert await two.lookup("resp_1") == "w1"
    assert await two.lookup("resp_x") is None
    assert await client.get(prefix + "resp:resp_1") == b"w1"
    assert 0 < await client.ttl(prefix + "resp:resp_1") <= 120


async def test_redis_down_keeps_local_records_and_names_the_store() -> None:
    client = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    store = RedisResponseAffinity(client, "p:", Clock(), deadline_s=1.0)
    try:
        await store.record("resp_1", "w1")
        assert store.write_errors == 1
        assert await store.lookup("resp_1") == "w1"
        with pytest.raises(StateStoreError) as caught:
            await store.lookup("resp_2")
        assert "resp_2" in caught.value.message
    finally:
        await client.aclose()
