"""What the Redis store's mirror mode adds (``state/redis_mirror.py``), on the real Redis at
127.0.0.1:6379: another replica's writes, evictions, clears, TTL expiry and in-flight counts reach
a mirror (polled up to a generous deadline, never a fixed sleep); a replica that missed changes
reloads; a prompt matched nowhere asks Redis once and is remembered; direct writers are seen too."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest_asyncio
from redis.asyncio import Redis

from gateway.state.redis import RedisStore
from gateway.state.redis_mirror import MirrorStore
from tests.contract.test_state_store import REDIS_URL, WallClock, key, make_redis, redis_prefix  # noqa: F401

DEADLINE_S = 10.0  # a ceiling for a slow shared machine; the bound itself is 2 x refresh_ms + deadline_ms


async def eventually(check: Callable[[], bool], what: str) -> None:
    """Poll ``check`` until it holds; fail after :data:`DEADLINE_S`."""
    loop = asyncio.get_running_loop()
    end = loop.time() + DEADLINE_S
    while not check():
        if loop.time() > end:
            raise AssertionError(f"not seen within {DEADLINE_S} s: {what}")
        await asyncio.sleep(0.01)


@pytest_asyncio.fixture
async def pair(redis_prefix: str) -> AsyncIterator[tuple[MirrorStore, MirrorStore, dict[str, int], WallClock]]:  # noqa: F811
    """Two started mirrors on one prefix (b never asks Redis on a miss: what it answers is its mirror)."""
    counts_a: dict[str, int] = {"w0": 3}
    wall_b = WallClock()
    a = make_redis(redis_prefix, counts_a, mode="mirror", refresh_ms=20.0)
    b = make_redis(redis_prefix, {"w0": 0}, wall=wall_b, mode="mirror", refresh_ms=20.0, mirror_misses="local")
    assert isinstance(a, MirrorStore) and isinstance(b, MirrorStore)
    await a.start()
    await b.start()
    try:
        yield a, b, counts_a, wall_b
    finally:
        await a.aclose()
        await b.aclose()


async def test_writes_and_in_flight_of_one_replica_reach_the_other_mirror(pair) -> None:
    a, b, _, _ = pair
    a.record("w1", key(5, 8, affinity=41))
    await eventually(lambda: b.peek(["w0", "w1"], key(5, 8, affinity=41)).matched == {"w0": 0, "w1": 8}, "a's record")
    view = b.peek(["w0", "w1"], key(5, 8, affinity=41))
    assert view.affinity == frozenset({"w1"}) and not view.degraded
    await eventually(lambda: b.peek(["w0", "w1"], key(5, 8)).remote_in_flight == {"w0": 3}, "a's in-flight")
    assert a.peek(["w0", "w1"], key(5, 8)).remote_in_flight == {}  # b publishes zeros


async def test_a_touch_is_batched_and_reaches_redis(pair, redis_prefix: str) -> None:  # noqa: F811
    a, b, _, wall_b = pair
    b.record("w0", key(6, 4))
    await eventually(lambda: a.size("w0") == 4, "b's record in a's mirror")
    client = Redis.from_url(REDIS_URL)
    try:
        head = key(6, 4).blocks[0].to_bytes(8, "big")
        before = await client.zscore(f"{redis_prefix}idx:w0", head)
        wall_b.now += 30  # b touches the prompt it already holds, later: one batched op
        b.record("w0", key(6, 4))
        assert b.pending_writes >= 1
        await b.flush()
        assert (await client.zscore(f"{redis_prefix}idx:w0", head)) > before
    finally:
        await client.aclose()


async def test_evictions_and_clears_propagate(pair) -> None:
    a, b, _, _ = pair
    a.set_capacity("e", 12)
    a.record("e", key(1, 10))
    a.record("e", key(2, 6))
    await eventually(lambda: b.size("e") == 12 and b.peek(["e"], key(2, 6)).matched == {"e": 6}, "a's writes")
    assert b.peek(["e"], key(1, 10)).matched == {"e": 6}  # the capacity evicted key 1's tail there too
    a.clear("e")
    await eventually(lambda: b.size("e") == 0, "a's clear")
    assert b.peek(["e"], key(2, 6)).matched == {"e": 0}


async def test_ttl_expiry_and_a_crashed_replica_propagate(pair) -> None:
    a, b, _, wall_b = pair
    a.record("w0", key(3, 5))
    await eventually(lambda: b.size("w0") == 5 and b.peek(["w0"], key(3, 1)).remote_in_flight == {"w0": 3}, "a's state")
    wall_b.now += 11  # past in_flight_ttl_s (10): a looks crashed to b
    await eventually(lambda: b.peek(["w0"], key(3, 1)).remote_in_flight == {}, "a's counts expiring")
    wall_b.now += 3600  # past index_ttl_s: Redis drops these entries, so does the mirror
    await eventually(lambda: b.size("w0") == 0, "the index expiring")


async def test_a_replica_that_missed_changes_reloads(redis_prefix: str) -> None:  # noqa: F811
    a = make_redis(redis_prefix, mode="mirror")
    b = make_redis(redis_prefix, mode="mirror", mirror_misses="local")
    client = Redis.from_url(REDIS_URL)
    try:
        a.record("w0", key(1, 4))
        await a.flush()
        await client.delete(f"{redis_prefix}changes")  # the stream is gone: only a snapshot can tell b
        await b.refresh()
        assert b.size("w0") == 4 and b.reloads == 1
        for tag in (2, 3, 4):
            a.record("w0", key(tag, 2))
            await a.flush()
        await client.xtrim(f"{redis_prefix}changes", maxlen=1, approximate=False)  # b would miss two entries
        await b.refresh()
        assert b.reloads == 2
        assert all(b.peek(["w0"], key(tag, 2)).matched == {"w0": 2} for tag in (2, 3, 4))
        a.record("w0", key(5, 2))
        await a.flush()
        await b.refresh()  # continues from the reload's head: no further reload
        assert b.reloads == 2 and b.peek(["w0"], key(5, 2)).matched == {"w0": 2}
    finally:
        await client.aclose()
        await a.aclose()
        await b.aclose()


async def test_a_miss_asks_redis_once_and_direct_writers_are_mirrored(redis_prefix: str) -> None:  # noqa: F811
    writer = make_redis(redis_prefix, mode="direct")
    mirror = make_redis(redis_prefix, mode="mirror")
    assert isinstance(writer, RedisStore) and not isinstance(writer, MirrorStore)
    try:
        writer.record("w1", key(7, 6))
        await writer.flush()
        assert mirror.peek(["w0", "w1"], key(7, 6)) is None  # matched nowhere here: needs Redis
        assert (await mirror.lookup(["w0", "w1"], key(7, 6))).matched == {"w0": 0, "w1": 6}
        assert mirror.peek(["w0", "w1"], key(7, 6)).matched == {"w0": 0, "w1": 6}  # remembered
        writer.record("w0", key(8, 3))
        await writer.flush()
        await mirror.refresh()
        assert mirror.peek(["w0"], key(8, 3)).matched == {"w0": 3}  # from the change stream
    finally:
        await writer.aclose()
        await mirror.aclose()


async def test_a_refresh_that_raises_does_not_freeze_the_mirror(pair) -> None:
    """A malformed change (any exception, not only a Redis error) reloads on the next round; the loop lives on."""
    a, b, _, _ = pair
    real, failures = b.refresh, []

    async def refresh_once_broken() -> None:
        if not failures:
            failures.append(1)
            raise ValueError("a malformed stream entry")
        await real()

    b.refresh = refresh_once_broken  # type: ignore[method-assign]
    await eventually(lambda: bool(failures), "the broken refresh")
    a.record("w1", key(7, 4))
    await eventually(lambda: b.peek(["w0", "w1"], key(7, 4)).matched.get("w1") == 4, "a's record after the failure")
