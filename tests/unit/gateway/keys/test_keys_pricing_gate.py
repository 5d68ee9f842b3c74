"""Keys (secrets, digests, the key table), prices and cost, and the gate's admission rules."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from gateway.errors import AuthenticationError, PermissionDeniedError, RateLimitError, StateStoreError
from gateway.keys.gate import Admission, KeyGate
from gateway.keys.limits import Verdict
from gateway.keys.model import KeyLimits, KeyRecord, config_keys, digest, new_key, records_from
from gateway.keys.pricing import Price, Pricing, TokenUsage, cost_usd
from gateway.keys.quota_store import MemoryQuotaStore
from gateway.keys.table import ANONYMOUS, KeyTable
from gateway.config import AuthSettings, build_settings

NOW = 1_799_841_610.0


def test_a_new_key_keeps_only_its_digest_and_prefix() -> None:
    secret, record = new_key("team", KeyLimits(rpm=5), NOW, token=lambda n: "x" * 32)
    assert secret == "sk-kvg-" + "x" * 32
    assert record.prefix == secret[:12] and record.digest == digest(secret)
    assert secret not in str(record.to_dict()) and "digest" not in record.public()
    assert KeyRecord.from_dict(record.to_dict()) == record
    assert record.id.startswith("key-") and record.source == "admin"


def test_config_keys_named_and_plain() -> None:
    auth = AuthSettings(api_keys=["sk-plain-aaaaaaaa"], keys=[{"name": "a", "key": "sk-named-bbbbbbbb", "rpm": 2, "models": ["m"]}])
    named, plain = config_keys(auth)
    assert named.id == "cfg-a" and named.limits == KeyLimits(models=frozenset({"m"}), rpm=2)
    assert plain.digest == digest("sk-plain-aaaaaaaa") and not plain.limits.metered
    assert {named.source, plain.source} == {"config"}


def test_records_that_do_not_parse_are_skipped() -> None:
    _, record = new_key("ok", KeyLimits(), NOW)
    assert records_from([record.to_dict(), {"id": "broken"}, {}]) == [record]


AUTH = [
    # (id, header, raises)
    ("good", "Bearer sk-good-12345678", None),
    ("good lower-case scheme", "bearer sk-good-12345678", None),
    ("missing", None, AuthenticationError),
    ("not bearer", "Basic sk-good-12345678", AuthenticationError),
    ("empty", "Bearer ", AuthenticationError),
    ("unknown", "Bearer sk-other", AuthenticationError),
    ("revoked", "Bearer sk-revoked-1234", AuthenticationError),
]


@pytest.mark.parametrize(("header", "raises"), [a[1:] for a in AUTH], ids=[a[0] for a in AUTH])
def test_key_table_authentication(header: str | None, raises: type[Exception] | None) -> None:
    good = KeyRecord("k1", "good", "sk-good-1234", digest("sk-good-12345678"))
    revoked = KeyRecord("k2", "old", "sk-revoked-1", digest("sk-revoked-1234"), revoked=True)
    table = KeyTable([good])
    table.replace(stored=[revoked])
    if raises is None:
        assert table.authenticate(header) is good
    else:
        with pytest.raises(raises) as caught:
            table.authenticate(header)
        assert "sk-other" not in str(caught.value) and "sk-good-12345678" not in str(caught.value)


def test_a_key_accepted_before_fails_once_revoked_or_removed() -> None:
    """The table remembers accepted header values (no SHA-256 per request), never their verdict."""
    _, record = new_key("k", KeyLimits(), NOW)
    other_secret, other = new_key("other", KeyLimits(), NOW)
    table = KeyTable()
    table.upsert(record)
    table.upsert(other)
    header = f"Bearer {other_secret}"
    assert table.authenticate(header) is other
    assert table.authenticate(header) is other  # the remembered path
    table.upsert(dataclasses.replace(other, revoked=True))
    with pytest.raises(AuthenticationError):
        table.authenticate(header)
    table.replace(stored=[record])
    with pytest.raises(AuthenticationError):
        table.authenticate(header)


def test_no_key_means_anonymous_and_revoking_the_last_key_never_reopens() -> None:
    table = KeyTable()
    assert table.authenticate(None) is ANONYMOUS and not table.required
    _, record = new_key("only", KeyLimits(), NOW)
    table.upsert(record)
    assert table.required
    table.upsert(dataclasses.replace(record, revoked=True))
    assert table.required
    with pytest.raises(AuthenticationError):
        table.authenticate(None)


COSTS = [
    # (id, price, usage, USD)
    ("no cache", Price(1.0, 1.0, 2.0), {"prompt_tokens": 1000, "completion_tokens": 500}, 0.002),
    ("cached at its own price", Price(1.0, 0.5, 2.0), {"prompt_tokens": 7, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}}, 11e-6),
    ("cached above prompt is capped", Price(1.0, 0.0, 0.0), {"prompt_tokens": 2, "prompt_tokens_details": {"cached_tokens": 9}}, 0.0),
    ("free cluster", Price(), {"prompt_tokens": 10**6, "completion_tokens": 10**6}, 0.0),
    ("junk values ignored", Price(1.0, 1.0, 1.0), {"prompt_tokens": "many", "completion_tokens": True}, 0.0),
]


@pytest.mark.parametrize(("price", "usage", "usd"), [c[1:] for c in COSTS], ids=[c[0] for c in COSTS])
def test_cost(price: Price, usage: dict, usd: float) -> None:
    tokens = TokenUsage.from_openai(usage)
    assert tokens is not None
    assert cost_usd(price, tokens) == pytest.approx(usd)


def test_token_usage_of_no_usage_is_none() -> None:
    assert TokenUsage.from_openai(None) is None and TokenUsage.from_openai([1]) is None


def test_pricing_from_settings_defaults_cached_to_input_and_takes_overrides() -> None:
    settings = build_settings({"clusters": {"a": {"price": {"input_per_mtok": 2, "output_per_mtok": 3}}, "b": {}}})
    pricing = Pricing.from_settings(settings.clusters, {"b": Price(9, 9, 9), "ghost": Price(1, 1, 1)})
    assert pricing.get("a") == Price(2, 2, 3)
    assert pricing.get("b") == Price(9, 9, 9)
    assert pricing.get("ghost") == Price() and pricing.get("nope") == Price()


class _BrokenStore(MemoryQuotaStore):
    async def admit(self, *args: object) -> Verdict:
        raise StateStoreError("down")


async def test_gate_refuses_models_outside_the_list_and_counts_quotas() -> None:
    errors: list[str] = []
    gate = KeyGate(KeyTable(), MemoryQuotaStore(), wall_clock=lambda: NOW, store_errors=errors.append)
    key = KeyRecord("k", "team", "p", "d", KeyLimits(models=frozenset({"m"}), rpm=1))
    with pytest.raises(PermissionDeniedError):
        await gate.admit(key, "other", 100)
    assert await gate.admit(key, "m", 100) == Admission(key, 0)
    with pytest.raises(RateLimitError) as refused:
        await gate.admit(key, "m", 100)
    assert refused.value.status == 429 and refused.value.headers["Retry-After"] == "60"
    assert refused.value.code == "rate_limit_exceeded" and errors == []


@pytest.mark.parametrize("mode", ["allow", "deny"])
async def test_gate_with_a_broken_store_fails_open_or_closed(mode: str) -> None:
    errors: list[str] = []
    gate = KeyGate(KeyTable(), _BrokenStore(), on_store_error=mode, store_errors=errors.append)
    key = KeyRecord("k", "team", "p", "d", KeyLimits(rpm=1))
    if mode == "allow":
        assert await gate.admit(key, "m", 1) == Admission(key)
    else:
        with pytest.raises(StateStoreError) as caught:
            await gate.admit(key, "m", 1)
        assert caught.value.status == 503
    assert errors == ["quota_admit"]


async def test_settlement_is_queued_and_written_in_batches() -> None:
    store = MemoryQuotaStore()
    gate = KeyGate(KeyTable(), store, wall_clock=lambda: NOW)
    key = KeyRecord("k", "team", "p", "d", KeyLimits(budget_usd=1.0))
    for _ in range(3):
        gate.settle(Admission(key), "m", "c", True, TokenUsage(7, 4, 3), 11e-6)
    gate.settle(Admission(ANONYMOUS), "m", "c", True, TokenUsage(1, 0, 1), 1.0)  # never recorded
    await gate.flush()
    assert await store.spent("k", key.limits, NOW) == 33
    rows = await store.usage("k", ["2027-01-13"])
    assert rows[0]["requests"] == 3 and rows[0]["cached_tokens"] == 12 and rows[0]["cost_micro_usd"] == 33


class _SwallowingStore(MemoryQuotaStore):
    """A store whose settle swallows a cancellation, as redis-py 7.4's pipeline execute can."""

    def __init__(self) -> None:
        super().__init__()
        self.writing = asyncio.Event()

    async def settle(self, settlements: Any) -> None:
        self.writing.set()
        try:
            await asyncio.sleep(0.2)
        except asyncio.CancelledError:
            pass
        await super().settle(settlements)


async def test_run_stops_when_the_store_swallows_the_cancellation() -> None:
    store = _SwallowingStore()
    gate = KeyGate(KeyTable(), store, wall_clock=lambda: NOW)
    key = KeyRecord("k", "team", "p", "d", KeyLimits())
    task = asyncio.create_task(gate.run())
    gate.settle(Admission(key), "m", "c", True, TokenUsage(7, 4, 3), 0.0)
    await store.writing.wait()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5)
    assert done == {task} and task.cancelled()  # before the fix: waited forever on the next queue.get()


async def test_the_writer_wakes_for_each_settlement_and_a_full_queue_counts_the_loss() -> None:
    store = MemoryQuotaStore()
    errors: list[str] = []
    gate = KeyGate(KeyTable(), store, wall_clock=lambda: NOW, store_errors=errors.append, queue_size=2)
    key = KeyRecord("k", "team", "p", "d", KeyLimits(budget_usd=1.0))
    for _ in range(3):  # before the writer runs: the third does not fit
        gate.settle(Admission(key), "m", "c", True, TokenUsage(7, 4, 3), 11e-6)
    assert errors == ["usage_queue_full"] and gate.queued == 2
    task = asyncio.create_task(gate.run())
    try:
        assert await _eventually(lambda: gate.queued == 0)
        await asyncio.sleep(0.01)
        assert await store.spent("k", key.limits, NOW) == 22
        gate.settle(Admission(key), "m", "c", True, TokenUsage(7, 4, 3), 11e-6)  # the writer is waiting now
        assert await _eventually(lambda: gate.queued == 0)
        await asyncio.sleep(0.01)
        assert await store.spent("k", key.limits, NOW) == 33
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class _CountingStore(MemoryQuotaStore):
    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    async def settle(self, settlements: Any) -> None:
        self.batches.append(len(settlements))
        await super().settle(settlements)


async def test_with_a_settle_interval_the_writer_gathers_one_batch() -> None:
    store = _CountingStore()
    gathering = asyncio.Event()
    release = asyncio.Event()

    async def sleep(seconds: float) -> None:  # the interval, held until the test lets it pass
        assert seconds == 0.05
        gathering.set()
        await release.wait()

    gate = KeyGate(KeyTable(), store, wall_clock=lambda: NOW, settle_interval_s=0.05, sleep=sleep)
    key = KeyRecord("k", "team", "p", "d", KeyLimits(budget_usd=1.0))
    task = asyncio.create_task(gate.run())
    try:
        gate.settle(Admission(key), "m", "c", True, TokenUsage(7, 4, 3), 11e-6)
        await gathering.wait()
        for _ in range(4):  # while the writer gathers
            gate.settle(Admission(key), "m", "c", True, TokenUsage(7, 4, 3), 11e-6)
        release.set()
        assert await _eventually(lambda: store.batches == [5])
        assert await store.spent("k", key.limits, NOW) == 55
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _eventually(check: Any, timeout_s: float = 5.0) -> bool:
    loop = asyncio.get_running_loop()
    until = loop.time() + timeout_s
    while not check():
        if loop.time() > until:
            return False
        await asyncio.sleep(0.005)
    return True


def test_a_long_authorization_value_is_accepted_but_not_remembered() -> None:
    secret, record = new_key("k", KeyLimits(), NOW)
    table = KeyTable()
    table.upsert(record)
    padded = "Bearer " + " " * 300 + secret
    assert table.authenticate(padded) is record
    assert padded not in table._seen and f"Bearer {secret}" not in table._seen
    assert table.authenticate(f"Bearer {secret}") is record and f"Bearer {secret}" in table._seen


@pytest.mark.parametrize("charge_estimate", [False, True])
@pytest.mark.parametrize("cluster", ["c", ""])
def test_the_queued_settlement_has_every_field_by_name(charge_estimate: bool, cluster: str) -> None:
    """``settle`` builds its Settlement positionally (cheaper); every field must hold what its name says."""
    from gateway.keys.quota_store import Settlement

    gate = KeyGate(KeyTable(), MemoryQuotaStore(), wall_clock=lambda: NOW)
    key = KeyRecord("k", "team", "p", "d", KeyLimits(tpm=100, budget_usd=1.0))
    admission = Admission(key, reserved=40, reserved_micro_usd=70, admitted_at=NOW - 5)
    gate.settle(admission, "m", cluster, False, TokenUsage(7, 4, 3), 11e-6, charge_estimate=charge_estimate)
    (queued,) = gate._queue
    expected = Settlement(
        key_id="k", limits=key.limits, now=NOW, reserved=0 if charge_estimate else 40, model="m",
        cluster=cluster or "-", ok=False, input_tokens=7, cached_tokens=4, output_tokens=3, cost_micro_usd=11,
        reserved_micro_usd=0 if charge_estimate else 70, admitted_at=NOW - 5,
    )
    assert dataclasses.asdict(queued) == dataclasses.asdict(expected)
