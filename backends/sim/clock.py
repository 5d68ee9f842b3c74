"""Time for the simulator, injected so that tests never sleep on the wall clock.

:class:`Clock` is what the engine, the fault injector and the metrics use: a monotonic ``now``,
a wall-clock ``wall`` (for the ``created`` fields of responses) and an awaitable ``sleep``.
:class:`LoopClock` is the real one (the running event loop's monotonic time); :class:`ManualClock`
is a virtual clock for tests: ``sleep`` suspends until a test calls :meth:`ManualClock.advance`
past the deadline, so a test can run the whole engine loop deterministically.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    """Monotonic seconds, wall seconds and sleeping."""

    def now(self) -> float: ...

    def wall(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class LoopClock:
    """The real clock: the event loop's monotonic time and ``asyncio.sleep``."""

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0))


class ManualClock:
    """A virtual clock advanced explicitly by tests."""

    def __init__(self, start: float = 0.0, wall_offset: float = 1_700_000_000.0) -> None:
        self._now = start
        self._wall_offset = wall_offset
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._wall_offset + self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._order), future))
        await future

    @property
    def next_deadline(self) -> float | None:
        """The earliest pending sleep's deadline, if any."""
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)
        return self._sleepers[0][0] if self._sleepers else None

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, waking sleepers in deadline order."""
        target = self._now + seconds
        await settle()
        while (deadline := self.next_deadline) is not None and deadline <= target:
            _, _, future = heapq.heappop(self._sleepers)
            self._now = max(self._now, deadline)
            future.set_result(None)
            await settle()
        self._now = target
        await settle()


async def settle(rounds: int = 10) -> None:
    """Let every ready task run a few times (tests use it after a virtual-time change)."""
    for _ in range(rounds):
        await asyncio.sleep(0)
