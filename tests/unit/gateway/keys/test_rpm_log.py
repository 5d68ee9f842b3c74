"""RPM up to RPM_LOG_MAX is a sliding log: exactly ``rpm`` requests in any 60 s, Retry-After exact.

A fake clock drives the gate (``wall_clock``) and the in-memory store; a brute-force reference
(every admitted time kept, the window counted) says what each answer must be.
"""

from __future__ import annotations

import math
import random

import pytest

from gateway.errors import RateLimitError
from gateway.keys.gate import KeyGate
from gateway.keys.limits import Verdict
from gateway.keys.model import KeyLimits, KeyRecord
from gateway.keys.quota_store import MemoryQuotaStore
from gateway.keys.table import KeyTable

START = 1_799_841_610.25  # 2027-01-13 12:00:10.25 UTC: a quarter second past a whole second


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def in_window(admitted: list[float], now: float) -> list[float]:
    """The reference: admitted times in (now - 60, now], ascending."""
    return sorted(t for t in admitted if now - 60 < t <= now)


def expected_wait(admitted: list[float], now: float, rpm: int) -> int:
    window = in_window(admitted, now)
    return max(1, math.ceil(window[len(window) - rpm] + 60 - now))


async def _try(gate: KeyGate, key: KeyRecord) -> int:
    """0 if admitted, else the Retry-After of the 429."""
    try:
        await gate.admit(key, "m", 10)
    except RateLimitError as refused:
        return int(refused.headers["Retry-After"])
    return 0


@pytest.mark.parametrize("rpm", [1, 2, 5])
@pytest.mark.parametrize("gap", [0.0, 0.5, 13.0])
async def test_a_client_retrying_when_told_gets_exactly_rpm_in_any_minute(rpm: int, gap: float) -> None:
    """Send, and after an admission send again ``gap`` s later; after a 429 wait its Retry-After."""
    clock = Clock(START)
    gate = KeyGate(KeyTable(), MemoryQuotaStore(), wall_clock=clock)
    key = KeyRecord("k", "team", "p", "d", KeyLimits(rpm=rpm))
    admitted: list[float] = []
    while clock.now < START + 600:
        wait = await _try(gate, key)
        if wait == 0:
            assert len(in_window(admitted, clock.now)) < rpm  # never more than rpm in (now - 60, now]
            admitted.append(clock.now)
            clock.now += gap
            continue
        assert len(in_window(admitted, clock.now)) == rpm  # never refused below the limit
        assert wait == expected_wait(admitted, clock.now, rpm)
        if wait > 1:  # exact: a second earlier is still too early
            clock.now += wait - 1
            assert await _try(gate, key) == 1
            clock.now += 1
        else:
            clock.now += wait
    if gap == 0.0:  # bursts at START + 60 k: rpm per minute, none lost to rounding
        assert len(admitted) == 10 * rpm
    for t in admitted:
        assert len(in_window(admitted, t)) <= rpm


@pytest.mark.parametrize("rpm", [1, 2, 5])
async def test_evenly_spaced_requests_at_the_limit_are_all_admitted(rpm: int) -> None:
    store = MemoryQuotaStore()
    limits = KeyLimits(rpm=rpm)
    interval = 60 / rpm
    for i in range(5 * rpm):  # five minutes at exactly the limit
        assert await store.admit("k", limits, START + i * interval, 0) == Verdict(True)
    # half a second faster: the next request waits for the first of its minute to leave
    faster = interval - 0.5
    for i in range(rpm):
        assert await store.admit("k2", limits, START + i * faster, 0) == Verdict(True)
    assert await store.admit("k2", limits, START + rpm * faster, 0) == Verdict(False, "rpm", math.ceil(0.5 * rpm))


@pytest.mark.parametrize("rpm", [1, 2, 5])
async def test_random_arrivals_match_a_brute_force_sliding_log(rpm: int) -> None:
    store = MemoryQuotaStore()
    limits = KeyLimits(rpm=rpm)
    draw = random.Random(rpm)
    now, admitted, refusals = START, [], 0
    for _ in range(400):
        now += draw.expovariate(1.5 * rpm / 60)  # half again the limit's rate: many refusals
        verdict = await store.admit("k", limits, now, 0)
        if len(in_window(admitted, now)) < rpm:
            assert verdict == Verdict(True)
            admitted.append(now)
        else:
            assert verdict == Verdict(False, "rpm", expected_wait(admitted, now, rpm))
            refusals += 1
        assert len(store._logs["k"]) <= rpm  # memory bounded by the limit
    assert refusals > 50


async def test_an_idle_log_is_forgotten() -> None:
    store = MemoryQuotaStore()
    for i in range(3):
        assert (await store.admit(f"k{i}", KeyLimits(rpm=3), START, 0)).allowed
    assert (await store.admit("other", KeyLimits(rpm=3), START + 125, 0)).allowed
    assert sorted(store._logs) == ["other"]
