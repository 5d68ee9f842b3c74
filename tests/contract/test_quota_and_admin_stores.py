"""Contract suite of the QuotaStore and AdminStore seams: in memory and in the real Redis at
127.0.0.1:6379 (a unique key prefix per test, every key removed afterwards). Both implementations
must give the same answers to the same table of calls; Redis must also hold them atomically under
concurrent admissions. RPM limits run on both paths: the sliding log (``rpm <= RPM_LOG_MAX``, the
default) and the sliding-window counter (stores made with ``rpm_log_max=0``)."""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from redis.asyncio import Redis

from gateway.errors import StateStoreError
from gateway.keys.limits import Verdict
from gateway.keys.model import KeyLimits
from gateway.keys.quota_store import MemoryQuotaStore, RedisQuotaStore, Settlement
from gateway.state.admin_sync import AdminSync, MemoryAdminStore, RedisAdminStore

REDIS_URL = "redis://127.0.0.1:6379/0"
NOW = 1_799_841_610.0  # 2027-01-13 12:00:10 UTC


@pytest_asyncio.fixture
async def redis() -> AsyncIterator[tuple[Redis, str]]:
    prefix = f"kvgate-test-{uuid.uuid4().hex[:8]}:"
    client = Redis.from_url(REDIS_URL)
    yield client, prefix
    keys = [k async for k in client.scan_iter(match=prefix + "*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()


@pytest.fixture(params=["memory", "redis"])
def quotas(request: pytest.FixtureRequest, redis: tuple[Redis, str]) -> Any:
    client, prefix = redis
    return MemoryQuotaStore() if request.param == "memory" else RedisQuotaStore(client, prefix, retention_days=2)


@pytest.fixture(params=["memory", "redis"])
def counter_quotas(request: pytest.FixtureRequest, redis: tuple[Redis, str]) -> Any:
    """Stores whose every RPM limit is above the log threshold: the sliding-window counter."""
    client, prefix = redis
    if request.param == "memory":
        return MemoryQuotaStore(rpm_log_max=0)
    return RedisQuotaStore(client, prefix, retention_days=2, rpm_log_max=0)


@pytest.fixture(params=["memory", "redis"])
def admin_store(request: pytest.FixtureRequest, redis: tuple[Redis, str]) -> Any:
    client, prefix = redis
    return MemoryAdminStore() if request.param == "memory" else RedisAdminStore(client, prefix)


SEQUENCES = [
    # (id, limits, [(seconds after NOW, reserve, expected verdict)])
    ("rpm 1", KeyLimits(rpm=1), [(0.25, 0, Verdict(True)), (0.5, 0, Verdict(False, "rpm", 60)), (59.75, 0, Verdict(False, "rpm", 1)),
                                 (60.25, 0, Verdict(True)), (61, 0, Verdict(False, "rpm", 60))]),
    ("rpm 2", KeyLimits(rpm=2), [(0, 0, Verdict(True)), (1, 0, Verdict(True)), (2, 0, Verdict(False, "rpm", 58)),
                                 (59.5, 0, Verdict(False, "rpm", 1)), (60, 0, Verdict(True)), (61, 0, Verdict(True)),
                                 (61.25, 0, Verdict(False, "rpm", 59)), (130, 0, Verdict(True))]),
    ("rpm 5", KeyLimits(rpm=5), [*((t, 0, Verdict(True)) for t in (0.1, 10.2, 20.3, 30.4, 40.5)), (50, 0, Verdict(False, "rpm", 11)),
                                 (60.1, 0, Verdict(True)), (60.2, 0, Verdict(False, "rpm", 10)), (70.2, 0, Verdict(True))]),
    ("tpm", KeyLimits(tpm=100), [(0, 80, Verdict(True)), (0, 30, Verdict(False, "tpm", 58)), (0, 20, Verdict(True))]),
    ("budget unused", KeyLimits(budget_usd=1.0), [(0, 0, Verdict(True)), (0, 0, Verdict(True))]),
]


@pytest.mark.parametrize(("limits", "calls"), [s[1:] for s in SEQUENCES], ids=[s[0] for s in SEQUENCES])
async def test_admission_sequences(quotas: Any, limits: KeyLimits, calls: list[tuple[float, int, Verdict]]) -> None:
    key = f"k-{uuid.uuid4().hex[:6]}"
    for offset, reserve, verdict in calls:
        assert await quotas.admit(key, limits, NOW + offset, reserve) == verdict


async def test_rpm_counter_sequence_above_the_log_threshold(counter_quotas: Any) -> None:
    limits = KeyLimits(rpm=2)
    for offset, verdict in [(0, Verdict(True)), (1, Verdict(True)), (2, Verdict(False, "rpm", 78)), (130, Verdict(True))]:
        assert await counter_quotas.admit("k", limits, NOW + offset, 0) == verdict


@pytest.mark.parametrize("rpm", [1, 2, 5])
async def test_a_client_retrying_when_told_gets_exactly_rpm_a_minute(quotas: Any, rpm: int) -> None:
    limits, now, admitted = KeyLimits(rpm=rpm), NOW + 0.375, []
    while now < NOW + 300:
        verdict = await quotas.admit("k", limits, now, 0)
        window = sorted(t for t in admitted if now - 60 < t <= now)
        if len(window) < rpm:
            assert verdict == Verdict(True)
            admitted.append(now)
            now += 0.5
        else:
            assert verdict == Verdict(False, "rpm", max(1, math.ceil(window[-rpm] + 60 - now)))
            now += verdict.retry_after_s
    assert len(admitted) == 5 * rpm


async def test_a_request_refused_by_another_limit_is_not_logged(quotas: Any) -> None:
    limits = KeyLimits(rpm=2, tpm=100)
    assert await quotas.admit("k", limits, NOW, 80) == Verdict(True)
    assert (await quotas.admit("k", limits, NOW + 1, 30)).limit == "tpm"  # all or nothing: not counted for RPM
    assert await quotas.admit("k", limits, NOW + 2, 10) == Verdict(True)
    assert await quotas.admit("k", limits, NOW + 3, 1) == Verdict(False, "rpm", 57)


async def test_a_lowered_limit_waits_for_the_right_logged_request(quotas: Any) -> None:
    for offset in (0, 10, 20, 30, 40):
        assert (await quotas.admit("k", KeyLimits(rpm=5), NOW + offset, 0)).allowed
    # 5 logged, the limit now 2: two may remain, so the 4th oldest (at +30) must leave first
    assert await quotas.admit("k", KeyLimits(rpm=2), NOW + 45, 0) == Verdict(False, "rpm", 45)
    assert await quotas.admit("k", KeyLimits(rpm=2), NOW + 90.5, 0) == Verdict(True)


async def test_a_clock_stepping_back_is_logged_in_order(quotas: Any) -> None:
    limits = KeyLimits(rpm=2)
    assert (await quotas.admit("k", limits, NOW + 10, 0)).allowed
    assert (await quotas.admit("k", limits, NOW + 5, 0)).allowed  # another replica's clock, behind
    assert await quotas.admit("k", limits, NOW + 12, 0) == Verdict(False, "rpm", 53)
    assert await quotas.admit("k", limits, NOW + 65.5, 0) == Verdict(True)


async def test_the_redis_log_is_bounded_by_the_limit_and_expires(redis: tuple[Redis, str]) -> None:
    client, prefix = redis
    store = RedisQuotaStore(client, prefix, retention_days=2)
    verdicts = [await store.admit("k", KeyLimits(rpm=3), NOW + i, 0) for i in range(10)]
    assert sum(v.allowed for v in verdicts) == 3
    keys = [k async for k in client.scan_iter(match=prefix + "*")]
    assert keys == [f"{prefix}q:{{k}}:rpm:log".encode()]  # no minute counters on the log path
    assert await client.zcard(keys[0]) == 3
    assert 60_000 < await client.pttl(keys[0]) <= 65_000


async def test_settlement_spends_corrects_tpm_and_records_usage(quotas: Any) -> None:
    limits = KeyLimits(tpm=100, budget_usd=0.00002, budget_period="day")
    assert await quotas.admit("k", limits, NOW, 80) == Verdict(True)
    item = Settlement("k", limits, NOW, 80, "m", "c", True, input_tokens=7, cached_tokens=4, output_tokens=3, cost_micro_usd=11)
    await quotas.settle([item, Settlement("k", limits, NOW, 0, "m", "c", False)])
    assert await quotas.spent("k", limits, NOW) == 11
    assert await quotas.admit("k", limits, NOW, 85) == Verdict(True)  # 10 used after the correction
    await quotas.settle([Settlement("k", limits, NOW, 85, "m", "c", True, cost_micro_usd=11)])
    assert (await quotas.admit("k", limits, NOW, 95)).limit == "tpm"  # 10 used + 95 > 100
    assert (await quotas.admit("k", limits, NOW, 1)).limit == "budget"  # 22 micro-USD spent of 20
    rows = await quotas.usage("k", ["2027-01-13", "2027-01-12"])
    assert rows == [
        {
            "day": "2027-01-13", "model": "m", "cluster": "c", "requests": 3, "errors": 1, "input_tokens": 7,
            "cached_tokens": 4, "output_tokens": 3, "cost_micro_usd": 22, "cost_usd": 22e-6,
        }
    ]
    budget_only = KeyLimits(budget_usd=0.00002, budget_period="day")
    refused = await quotas.admit("k", budget_only, NOW, 0)
    assert refused == Verdict(False, "budget", 12 * 3600 - 10)


async def test_a_batch_of_many_requests_sums_per_key_model_and_counter(quotas: Any) -> None:
    limits = KeyLimits(tpm=1000, budget_usd=1.0, budget_period="day")
    batch = [Settlement(key, limits, NOW, 10, model, "c", True, input_tokens=4, output_tokens=2, cost_micro_usd=5)
             for key in ("k1", "k2") for model in ("m1", "m2") for _ in range(3)]
    for item in batch:
        assert await quotas.admit(item.key_id, limits, NOW, 10) == Verdict(True)
    await quotas.settle(batch)
    for key in ("k1", "k2"):
        assert await quotas.spent(key, limits, NOW) == 30  # 6 requests x 5 micro-USD
        rows = await quotas.usage(key, ["2027-01-13"])
        assert sorted((r["model"], r["requests"], r["input_tokens"], r["output_tokens"]) for r in rows) == [
            ("m1", 3, 12, 6), ("m2", 3, 12, 6)]
        assert await quotas.admit(key, limits, NOW, 964) == Verdict(True)  # 60 reserved, 6 x (6 - 10) returned: 36 used of 1000
        assert (await quotas.admit(key, limits, NOW, 1)).limit == "tpm"


async def test_settled_redis_counters_keep_their_ttls(redis: tuple[Redis, str]) -> None:
    client, prefix = redis
    store = RedisQuotaStore(client, prefix, retention_days=2)
    limits = KeyLimits(tpm=100, budget_usd=1.0, budget_period="day")
    await store.settle([Settlement("k", limits, NOW, 10, "m", "c", True, input_tokens=1, cost_micro_usd=3)] * 4)
    keys = [k async for k in client.scan_iter(match=prefix + "*")]
    assert len(keys) == 3  # the TPM window, the budget period, the usage day
    assert [await client.ttl(k) > 0 for k in keys] == [True] * 3


async def test_concurrent_admissions_never_exceed_the_limit(redis: tuple[Redis, str]) -> None:
    client, prefix = redis
    replicas = [RedisQuotaStore(client, prefix, 1), RedisQuotaStore(Redis.from_url(REDIS_URL), prefix, 1)]
    limits = KeyLimits(rpm=25)
    verdicts = await asyncio.gather(*(replicas[i % 2].admit("k", limits, NOW, 0) for i in range(60)))
    assert sum(v.allowed for v in verdicts) == 25
    await replicas[1]._redis.aclose()


async def test_concurrent_admissions_never_exceed_the_counted_limit(redis: tuple[Redis, str]) -> None:
    client, prefix = redis
    other = Redis.from_url(REDIS_URL)
    replicas = [RedisQuotaStore(client, prefix, 1, rpm_log_max=0), RedisQuotaStore(other, prefix, 1, rpm_log_max=0)]
    verdicts = await asyncio.gather(*(replicas[i % 2].admit("k", KeyLimits(rpm=25), NOW, 0) for i in range(60)))
    assert sum(v.allowed for v in verdicts) == 25
    await other.aclose()


async def test_redis_errors_become_state_store_errors() -> None:
    dead = RedisQuotaStore(Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2), "x:", 1)
    with pytest.raises(StateStoreError):
        await dead.admit("k", KeyLimits(rpm=1), NOW, 0)
    with pytest.raises(StateStoreError):
        await RedisAdminStore(dead._redis, "x:").snapshot()
    await dead._redis.aclose()


async def test_admin_documents_and_versions(admin_store: Any) -> None:
    assert await admin_store.version() == 0
    v1 = await admin_store.put("endpoints", "e1", {"weight": 2.0})
    v2 = await admin_store.put("keys", "k1", {"id": "k1", "nested": {"a": [1, 2]}})
    assert v2 > v1 > 0
    version, snapshot = await admin_store.snapshot()
    assert version == v2
    assert snapshot["endpoints"] == {"e1": {"weight": 2.0}}
    assert snapshot["keys"] == {"k1": {"id": "k1", "nested": {"a": [1, 2]}}}
    assert snapshot["clusters"] == {} and snapshot["control"] == {}
    await admin_store.delete("endpoints", "e1")
    assert (await admin_store.snapshot())[1]["endpoints"] == {}


async def test_sync_applies_only_new_versions(admin_store: Any) -> None:
    applied: list[dict[str, Any]] = []

    async def apply(snapshot: dict[str, Any]) -> None:
        applied.append(snapshot)

    sync = AdminSync(admin_store, apply, 0.01)
    assert await sync.poll() is True  # the first poll always applies (version 0 included)
    assert await sync.poll() is False
    await admin_store.put("clusters", "c", {"price": {"input_per_mtok": 1}})
    assert await sync.poll() is True
    assert applied[-1]["clusters"] == {"c": {"price": {"input_per_mtok": 1}}}


async def test_sync_survives_a_dead_store() -> None:
    errors: list[str] = []
    dead = RedisAdminStore(Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2), "x:")

    async def apply(snapshot: dict[str, Any]) -> None:
        raise AssertionError("nothing to apply")

    assert await AdminSync(dead, apply, 0.01, errors=errors.append).poll() is False
    assert errors == ["admin_sync"]


async def test_budget_reservations_hold_concurrent_admissions_and_settle_to_the_actual_cost(quotas: Any) -> None:
    key = f"k-{uuid.uuid4().hex[:6]}"
    limits = KeyLimits(budget_usd=0.0001, budget_period="day")  # 100 micro-USD
    verdicts = await asyncio.gather(*(quotas.admit(key, limits, NOW, 0, 30) for _ in range(10)))
    assert sum(v.allowed for v in verdicts) == 3  # 30 + 30 + 30 <= 100 < 120, in whatever order they arrive
    assert {v.limit for v in verdicts if not v.allowed} == {"budget"}
    assert await quotas.spent(key, limits, NOW) == 90  # the reservations
    settled = [Settlement(key, limits, NOW + 5, 0, "m", "c", True, cost_micro_usd=12, reserved_micro_usd=30, admitted_at=NOW)]
    await quotas.settle(settled * 3)
    assert await quotas.spent(key, limits, NOW) == 36  # reservations replaced by the actual cost
    assert (await quotas.admit(key, limits, NOW, 0, 64)).allowed  # 36 + 64 <= 100
    assert not (await quotas.admit(key, limits, NOW, 0, 1)).allowed


async def test_a_first_request_larger_than_the_budget_still_runs_once(quotas: Any) -> None:
    key = f"k-{uuid.uuid4().hex[:6]}"
    limits = KeyLimits(budget_usd=0.00001, tpm=50, budget_period="day")
    assert (await quotas.admit(key, limits, NOW, 80, 500)).allowed  # nothing used yet
    refused = await quotas.admit(key, limits, NOW, 1, 1)
    assert refused.limit == "tpm"


async def test_token_reservations_return_to_the_admissions_minute(quotas: Any) -> None:
    key = f"k-{uuid.uuid4().hex[:6]}"
    limits = KeyLimits(tpm=100)
    start = NOW + 45  # 55 s into the minute
    assert (await quotas.admit(key, limits, start, 90)).allowed
    assert not (await quotas.admit(key, limits, start, 20)).allowed
    # settled 20 s later, in the next minute: 90 reserved there go back, 10 actual land here
    await quotas.settle([Settlement(key, limits, start + 20, 90, "m", "c", True, input_tokens=4, output_tokens=6, admitted_at=start)])
    assert (await quotas.admit(key, limits, start + 20, 85)).allowed


async def test_the_admin_epoch_is_stable_and_changes_when_the_store_loses_its_data(redis: tuple[Redis, str]) -> None:
    client, prefix = redis
    store = RedisAdminStore(client, prefix)
    epoch, version = await store.stamp()
    assert epoch and version == 0
    await store.put("keys", "k1", {"id": "k1"})
    assert await store.stamp() == (epoch, 1)
    await client.delete(*[k async for k in client.scan_iter(match=prefix + "*")])  # the data is lost
    await client.set(f"{prefix}admin:version", 1)  # ... and the counter is back where it was
    lost_epoch, lost_version = await store.stamp()
    assert lost_version == 1 and lost_epoch != epoch
    assert await store.stamp() == (lost_epoch, 1)  # the new epoch stays


async def test_sync_rereads_a_reset_store_at_an_equal_version(redis: tuple[Redis, str]) -> None:
    client, prefix = redis
    store = RedisAdminStore(client, prefix)
    applied: list[dict[str, Any]] = []

    async def apply(snapshot: dict[str, Any]) -> None:
        applied.append(snapshot)

    sync = AdminSync(store, apply, 0.01)
    await store.put("keys", "old", {"id": "old"})
    assert await sync.poll() is True and await sync.poll() is False
    pipe = client.pipeline(transaction=True)
    pipe.delete(*[k async for k in client.scan_iter(match=prefix + "*")])
    pipe.hset(f"{prefix}admin:keys", "new", b'{"id": "new"}').set(f"{prefix}admin:version", 1)
    await pipe.execute()
    assert await sync.poll() is True
    assert applied[-1]["keys"] == {"new": {"id": "new"}}
