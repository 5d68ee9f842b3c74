"""gateway/deadlines.py: asyncio.timeout's semantics on one shared timer per event loop."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.deadlines import MIN_SLOT_S, deadline, wheel_of


async def test_a_block_that_overruns_raises_timeout_error_not_early_and_not_much_late() -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        with deadline(0.05):
            await asyncio.sleep(5)
    waited = loop.time() - started
    assert 0.05 <= waited < 0.05 + 0.05  # never early; late by the slot width plus scheduling noise


async def test_a_block_that_finishes_in_time_is_untouched_and_leaves_nothing_pending() -> None:
    with deadline(5) as d:
        await asyncio.sleep(0.01)
    assert not d.expired()
    assert wheel_of(asyncio.get_running_loop()).pending == 0
    await asyncio.sleep(0.02)  # and nothing fires later in the task
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_none_means_no_deadline() -> None:
    with deadline(None) as d:
        await asyncio.sleep(0.01)
    assert not d.expired()


async def test_a_cancellation_from_outside_stays_a_cancelled_error() -> None:
    async def guarded() -> None:
        with deadline(10):
            await asyncio.sleep(10)

    task = asyncio.create_task(guarded())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert wheel_of(asyncio.get_running_loop()).pending == 0


async def test_the_inner_of_two_nested_deadlines_is_the_one_that_fires() -> None:
    with deadline(10) as outer:
        with pytest.raises(TimeoutError):
            with deadline(0.02):
                await asyncio.sleep(10)
        await asyncio.sleep(0.01)  # the task is usable again: no cancellation left over
    assert not outer.expired()


async def test_the_outer_deadline_fires_through_an_inner_one_that_is_longer() -> None:
    with pytest.raises(TimeoutError):
        with deadline(0.02):
            with deadline(10) as inner:
                await asyncio.sleep(10)
    assert not inner.expired()


async def test_an_error_raised_inside_passes_through_unchanged() -> None:
    with pytest.raises(KeyError):
        with deadline(10):
            await asyncio.sleep(0)
            raise KeyError("x")
    assert wheel_of(asyncio.get_running_loop()).pending == 0


async def test_many_concurrent_deadlines_fire_each_for_its_own_task_only() -> None:
    async def one(delay: float, work: float) -> str:
        try:
            with deadline(delay):
                await asyncio.sleep(work)
        except TimeoutError:
            return "timeout"
        return "done"

    cases = [(0.03, 0.001), (0.03, 1.0), (0.06, 0.001), (0.06, 1.0)] * 25
    results = await asyncio.gather(*(one(d, w) for d, w in cases))
    assert results == ["done", "timeout", "done", "timeout"] * 25
    assert wheel_of(asyncio.get_running_loop()).pending == 0


async def test_a_long_delay_fires_at_most_a_thousandth_of_it_late() -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        with deadline(2.0):
            await asyncio.sleep(10)
    assert 2.0 <= loop.time() - started < 2.0 + 0.002 + 0.05


async def test_entering_twice_or_outside_a_task_is_refused() -> None:
    d = deadline(1)
    with d:
        pass
    with pytest.raises(RuntimeError):
        with d:
            pass


def test_outside_a_running_loop_is_refused() -> None:
    with pytest.raises(RuntimeError):
        with deadline(1):
            pass


async def test_the_slot_count_stays_bounded_under_a_steady_flow() -> None:
    """Slots emptied by blocks that finished are dropped (all but the newest)."""
    wheel = wheel_of(asyncio.get_running_loop())
    until = time.monotonic() + 0.1
    while time.monotonic() < until:
        with deadline(30):
            await asyncio.sleep(0)
    assert wheel.pending == 0
    assert len(wheel._slots) <= 1  # the newest slot, kept empty for reuse
    assert MIN_SLOT_S == 0.001


async def test_an_infinite_delay_is_no_deadline() -> None:
    wheel = wheel_of(asyncio.get_running_loop())
    before = len(wheel._heap)
    with deadline(float("inf")) as d:
        await asyncio.sleep(0.01)
    assert not d.expired() and len(wheel._heap) == before


async def test_interleaved_delays_push_each_slot_once() -> None:
    """Empty slots are dropped and made again when delays interleave; the heap holds each once."""
    wheel = wheel_of(asyncio.get_running_loop())
    before = len(wheel._heap)
    for _ in range(200):
        for delay in (30, 60, 30):
            with deadline(delay):
                pass
    assert len(wheel._heap) == len(set(wheel._heap))
    assert len(wheel._heap) - before <= 4  # a slot of each delay, made again in the next few ms at most
