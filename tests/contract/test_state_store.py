"""Contract suite of the StateStore seam: the in-memory store and the Redis store in both modes,
``mirror`` (``state/redis_mirror.py``) and ``direct`` (real Redis at 127.0.0.1:6379, a unique key
prefix per run, every key removed afterwards). What only the mirror adds (propagation within
its bound, reloads) is in ``test_state_mirror.py``."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from gateway.prefix.hashing import PrefixKey
from gateway.config import StateSettings
from gateway.observability.metrics import RoutingMetrics
from gateway.state.base import StateStore
from gateway.state.memory import MemoryStore
from gateway.state.redis import RedisStore
from gateway.state.redis_mirror import MirrorStore

REDIS_URL = "redis://127.0.0.1:6379/0"


def key(tag: int, n: int, shared: int = 0, affinity: int | None = None) -> PrefixKey:
    blocks = tuple(i + 1 if i < shared else tag * 1_000_003 + i + 1 for i in range(n))
    return PrefixKey(blocks, affinity, n * 256, 256)


class WallClock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest_asyncio.fixture
async def redis_prefix() -> AsyncIterator[str]:
    prefix = f"kvgate-test-{uuid.uuid4().hex[:8]}:"
    yield prefix
    client = Redis.from_url(REDIS_URL)
    keys = [k async for k in client.scan_iter(match=prefix + "*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()


def make_redis(prefix: str, in_flight: dict[str, int] | None = None, wall: WallClock | None = None,
               clock: Callable[[], float] | None = None, url: str = REDIS_URL, mode: str = "direct",
               **settings: object) -> RedisStore:
    state = StateSettings(backend="redis", redis_url=url, key_prefix=prefix, mode=mode, **settings)  # type: ignore[arg-type]
    counts = in_flight if in_flight is not None else {}
    kind = MirrorStore if mode == "mirror" else RedisStore
    return kind.from_settings(
        state, local_in_flight=lambda: counts, metrics=RoutingMetrics(CollectorRegistry()),
        wall=wall or WallClock(), clock=clock or (lambda: 0.0), replica_id=uuid.uuid4().hex[:6],
    )


MODES = ["direct", "mirror"]


@pytest_asyncio.fixture(params=["memory", "redis-direct", "redis-mirror"])
async def store(request: pytest.FixtureRequest, redis_prefix: str) -> AsyncIterator[StateStore]:
    made: StateStore = (
        MemoryStore() if request.param == "memory" else make_redis(redis_prefix, mode=request.param.split("-")[1])
    )
    await made.start()
    yield made
    await made.aclose()


async def test_record_then_lookup_matches_blocks_and_affinity(store: StateStore) -> None:
    store.record("a", key(1, 10, affinity=77))
    await store.flush()
    view = await store.lookup(["a", "b"], key(1, 12, affinity=77))
    assert view.matched == {"a": 10, "b": 0}
    assert view.affinity == frozenset({"a"}) and not view.degraded
    assert (await store.lookup(["a"], key(2, 10, affinity=78))).matched == {"a": 0}


async def test_shared_head_matches_partially(store: StateStore) -> None:
    store.record("a", key(1, 10, shared=6))
    await store.flush()
    assert (await store.lookup(["a"], key(2, 10, shared=6))).matched == {"a": 6}


async def test_capacity_bounds_the_index_and_evicts_tails_first(store: StateStore) -> None:
    store.set_capacity("a", 12)
    store.record("a", key(1, 10))
    store.record("a", key(2, 6))
    await store.flush()
    view = await store.lookup(["a"], key(1, 10))
    assert view.matched == {"a": 6}
    assert (await store.lookup(["a"], key(2, 6))).matched == {"a": 6}
    assert store.size("a") == 12


async def test_clear_forgets_an_endpoint(store: StateStore) -> None:
    store.record("a", key(1, 5))
    store.record("b", key(1, 5))
    store.clear("a")
    await store.flush()
    assert (await store.lookup(["a", "b"], key(1, 5))).matched == {"a": 0, "b": 5}


async def test_empty_prompt_and_no_endpoints(store: StateStore) -> None:
    assert (await store.lookup([], key(1, 3))).matched == {}
    assert (await store.lookup(["a"], PrefixKey((), None, 0, 256))).matched == {"a": 0}


async def test_peek_answers_like_lookup_or_not_at_all(store: StateStore) -> None:
    store.record("a", key(1, 10, affinity=77))
    await store.flush()
    peeked = store.peek(["a", "b"], key(1, 12, affinity=77))
    if peeked is not None:  # only when no I/O is needed (memory; Redis while bypassed)
        assert peeked == await store.lookup(["a", "b"], key(1, 12, affinity=77))


# -- Redis only: what sharing adds --------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_two_replicas_share_the_index_and_see_each_others_in_flight(redis_prefix: str, mode: str) -> None:
    counts_a = {"w0": 3, "w1": 0}
    a, b = make_redis(redis_prefix, counts_a, mode=mode), make_redis(redis_prefix, {"w0": 0, "w1": 1}, mode=mode)
    try:
        a.record("w1", key(5, 8))
        await a.flush()
        await a.heartbeat()  # publishes a's in-flight counts
        view = await b.lookup(["w0", "w1"], key(5, 8))  # mirror: matched nowhere here, so asked Redis
        assert view.matched == {"w0": 0, "w1": 8}
        assert view.remote_in_flight == {"w0": 3}
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.parametrize("mode", MODES)
async def test_keys_carry_ttls_and_a_dead_replica_drops_out(redis_prefix: str, mode: str) -> None:
    wall_a, wall_b = WallClock(), WallClock()
    a = make_redis(redis_prefix, {"w0": 4}, wall=wall_a, in_flight_ttl_s=10.0, mode=mode)
    b = make_redis(redis_prefix, {"w0": 0}, wall=wall_b, in_flight_ttl_s=10.0, mode=mode)
    client = Redis.from_url(REDIS_URL)
    try:
        a.record("w0", key(1, 4))
        await a.flush()
        await a.heartbeat()
        names = [b"idx:w0", b"live", f"inflight:{a.replica_id}".encode(), b"changes", b"seq"]
        for name in names:
            assert await client.pttl(redis_prefix.encode() + name) > 0, name
        await b.heartbeat()  # mirror: b's refresh pulls a's counts
        assert (await b.lookup(["w0"], key(1, 1))).remote_in_flight == {"w0": 4}
        wall_b.now += 11  # a stopped heartbeating 11 s ago (crashed): its counts no longer count
        await b.heartbeat()
        assert (await b.lookup(["w0"], key(1, 1))).remote_in_flight == {}
    finally:
        await client.aclose()
        await a.aclose()
        await b.aclose()


@pytest.mark.parametrize("mode", MODES)
async def test_redis_down_falls_back_to_the_local_view_and_recovers(redis_prefix: str, mode: str) -> None:
    now = [0.0]
    down = make_redis(redis_prefix, url="redis://127.0.0.1:1/0", clock=lambda: now[0], deadline_ms=50.0, mode=mode)
    try:
        down.record("a", key(1, 6))
        await down.flush()
        view = await down.lookup(["a"], key(1, 6))
        assert view.degraded and view.matched == {"a": 6}  # this replica's own writes still route
        assert down.degraded and down._metrics.degraded._value.get() == 1
        assert down._metrics.fallbacks.labels("error")._value.get() + down._metrics.fallbacks.labels("timeout")._value.get() >= 1
        # skipped while retry_after_s runs: no further Redis attempts, still degraded
        failures = down._metrics.fallbacks.labels("error")._value.get()
        assert (await down.lookup(["a"], key(1, 6))).degraded
        peeked = down.peek(["a"], key(1, 6))  # the local view needs no I/O: answered at once
        assert peeked is not None and peeked.degraded and peeked.matched == {"a": 6}
        assert down._metrics.fallbacks.labels("error")._value.get() == failures
    finally:
        await down.aclose()
    healthy = make_redis(redis_prefix, clock=lambda: now[0], mode=mode)
    healthy._failed(TimeoutError())  # as if it had failed once
    now[0] += 5.0
    try:
        assert healthy.peek(["a"], key(1, 6)) is None  # Redis is back: a lookup needs I/O
        assert not (await healthy.lookup(["a"], key(1, 6))).degraded
        assert healthy._metrics.degraded._value.get() == 0
    finally:
        await healthy.aclose()
