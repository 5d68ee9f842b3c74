"""The turn gate (``gateway/turns.py``): heavy steps bounded per event-loop turn (bytes covered), FIFO, cancellable."""

from __future__ import annotations

import asyncio

import pytest

from gateway.turns import TurnGate


class Turns:
    """Counts the loop's turns: a callback that re-schedules itself runs once per turn."""

    def __init__(self) -> None:
        self.now = 0
        self._stop = False
        asyncio.get_running_loop().call_soon(self._tick)

    def _tick(self) -> None:
        self.now += 1
        if not self._stop:
            asyncio.get_running_loop().call_soon(self._tick)

    def stop(self) -> None:
        self._stop = True


def test_heavy_is_from_min_bytes_which_is_at_least_one() -> None:
    gate = TurnGate(1000)
    assert not gate.heavy(999) and gate.heavy(1000) and gate.heavy(10**9)
    with pytest.raises(ValueError, match="min_bytes must be >= 1"):
        TurnGate(0)
    with pytest.raises(ValueError, match="turn_bytes must be >= 1"):
        TurnGate(1, 0)


async def test_one_heavy_step_per_turn_in_arrival_order() -> None:
    gate = TurnGate(1, 1)
    turns = Turns()
    ran: list[tuple[int, int]] = []  # (task, turn its step ran in)

    async def request(index: int) -> None:
        await gate.turn()
        ran.append((index, turns.now))

    await asyncio.gather(*(request(i) for i in range(8)))
    turns.stop()
    assert [index for index, _ in ran] == list(range(8))  # first come, first served
    steps_per_turn = [sum(1 for _, turn in ran if turn == t) for t in {turn for _, turn in ran}]
    assert max(steps_per_turn) == 1 and len(steps_per_turn) == 8
    assert gate.steps == 8 and gate.waited == 7 and gate.queued == 0


async def test_a_free_turn_is_taken_at_once() -> None:
    gate = TurnGate(1, 1)
    turns = Turns()
    before = turns.now
    await gate.turn()
    assert turns.now == before and gate.waited == 0  # no wait: nothing else was heavy
    await asyncio.sleep(0)  # the release ran: the next step is free again
    await asyncio.sleep(0)
    await gate.turn()
    assert gate.waited == 0
    turns.stop()


async def test_a_cancelled_waiter_is_skipped_and_the_next_one_goes() -> None:
    gate = TurnGate(1, 1)
    order: list[str] = []

    async def request(name: str) -> None:
        await gate.turn()
        order.append(name)

    first = asyncio.create_task(request("first"))
    gone = asyncio.create_task(request("gone"))
    last = asyncio.create_task(request("last"))
    await asyncio.sleep(0)  # all three reached the gate: "first" took the turn, two queued
    assert gate.queued == 2
    gone.cancel()
    await asyncio.gather(first, last)
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert order == ["first", "last"] and gate.queued == 0


async def test_deferred_steps_run_now_when_free_else_one_per_later_turn() -> None:
    gate = TurnGate(1, 1)
    turns = Turns()
    ran: list[tuple[str, int]] = []
    gate.defer(1, lambda: ran.append(("now", turns.now)))
    assert ran == [("now", turns.now)]  # the turn was free: ran inline
    for name in ("a", "b"):
        gate.defer(1, lambda name=name: ran.append((name, turns.now)))
    assert [name for name, _ in ran] == ["now"]
    for _ in range(10):
        await asyncio.sleep(0)
    turns.stop()
    assert [name for name, _ in ran] == ["now", "a", "b"]
    assert len({turn for _, turn in ran}) == 3  # each in a turn of its own


async def test_a_failing_deferred_step_is_logged_and_the_gate_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    gate = TurnGate(1, 1)
    await gate.turn()  # the turn is taken: the next steps queue

    def boom() -> None:
        raise RuntimeError("boom")

    done: list[bool] = []
    gate.defer(1, boom)
    gate.defer(1, lambda: done.append(True))
    for _ in range(5):
        await asyncio.sleep(0)
    assert done == [True] and "a deferred heavy step failed" in caplog.text


async def test_a_turn_takes_the_steps_that_fit_its_bytes_and_always_one() -> None:
    gate = TurnGate(1, 100)
    turns = Turns()
    ran: list[tuple[str, int]] = []

    async def request(name: str, size: int) -> None:
        await gate.turn(size)
        ran.append((name, turns.now))

    sizes = {"a": 30, "b": 30, "c": 30, "d": 30, "big": 500, "e": 60, "f": 50}
    await asyncio.gather(*(request(name, size) for name, size in sizes.items()))
    turns.stop()
    assert [name for name, _ in ran] == list(sizes)  # first come, first served
    turn_of = dict(ran)
    assert turn_of["a"] == turn_of["b"] == turn_of["c"] < turn_of["d"]  # 90 of 100 bytes, the 4th waits
    assert turn_of["d"] < turn_of["big"] < turn_of["e"]  # 30 + 500 does not fit; 500 alone runs (the first of its turn)
    assert turn_of["e"] < turn_of["f"]  # 60 + 50 > 100
    assert gate.queued == 0 and gate.steps == 7


async def test_deferred_steps_and_waiters_share_a_turn_within_its_bytes() -> None:
    gate = TurnGate(1, 100)
    turns = Turns()
    ran: list[tuple[str, int]] = []
    await gate.turn(100)  # this turn is full: what follows queues
    first = turns.now

    async def request(name: str) -> None:
        await gate.turn(40)
        ran.append((name, turns.now))

    task = asyncio.create_task(request("waiter"))
    await asyncio.sleep(0)
    gate.defer(40, lambda: ran.append(("deferred", turns.now)))
    gate.defer(40, lambda: ran.append(("later", turns.now)))
    await task
    for _ in range(6):
        await asyncio.sleep(0)
    turns.stop()
    when = dict(ran)
    assert when["waiter"] == when["deferred"] > first  # 80 bytes: one batch, one turn
    assert when["later"] > when["deferred"]  # 120 > 100: the next turn
    assert gate.queued == 0
