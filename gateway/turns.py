"""A bounded amount of CPU-heavy work per event-loop turn, so long prompts share the loop with everything else.

A request whose body is at least ``[server] heavy_step_bytes`` (default 16 KiB; 0 turns this off)
takes its CPU-heavy steps through the app's :class:`TurnGate`:

* the parse (``orjson`` building the prompt's strings, and the message checks),
* the scheduling of an endpoint (the prefix key: up to 1,024 chained block hashes; the match),
* the prefix index's insert when the endpoint accepts it (up to 1,024 entries, and as many
  evictions once the index is full).

Each turn of the event loop runs the heavy steps that fit in ``[server] heavy_turn_bytes``
(default 256 KiB, counted as the bytes each step covers: the body for the parse and the scheduling,
the hashed blocks for the insert), first come first served, and always at least one. Without the
gate, 32 long prompts whose bodies arrive together run their steps back to back within one turn
(each 0.1-0.3 ms at 200 KB, ``bench/body_stall.py --stages``), and every other callback due on the
loop (a small request's parse, a stream's next chunk, a health check's answer) waits for all of
them: issue 23 measured the loop's lag at up to 56 ms with 200 KB prompts at 32 concurrent
requests, and 20-35 ms with 32 KB ones below the first threshold (64 KiB). With it a turn holds
one 200 KB prompt's step, or eight 32 KB ones, plus the light work ready in it, so the lag stays
about that long whatever the number of long requests in flight. The long requests wait in the
gate instead of on the loop: their own latency is bound by the CPU they need either way, and the
gate adds about one loop turn (tens of microseconds) per step when nothing else is heavy.

The turn is handed on by a callback the gate schedules after each turn's batch
(``loop.call_soon``); a waiter cancelled while queued (its client left) is skipped. A step handed
to :meth:`TurnGate.defer` (the index insert, which runs in a synchronous close-out) runs at once
when the turn has room, else on a later turn; an exception it raises is logged, never raised into
the loop. Not thread-safe; one gate per event loop (each app builds its own).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger("kvgate.turns")

DEFAULT_HEAVY_STEP_BYTES = 16 * 1024
DEFAULT_TURN_BYTES = 256 * 1024


class TurnGate:
    """The gate (see the module docstring). ``min_bytes``: the body size from which a request's steps
    are heavy (bytes, >= 1; callers compare ``size >= gate.min_bytes`` inline, one comparison per
    request; ``[server] heavy_step_bytes = 0`` builds no gate). ``turn_bytes``: the heavy work one loop
    turn takes, as the bytes its steps cover (>= 1; the first step of a turn always runs, however
    large). Raises ValueError below 1."""

    __slots__ = ("min_bytes", "turn_bytes", "_spent", "_queue", "_loop", "steps", "waited")

    def __init__(self, min_bytes: int = DEFAULT_HEAVY_STEP_BYTES, turn_bytes: int = DEFAULT_TURN_BYTES) -> None:
        if min_bytes < 1:
            raise ValueError("min_bytes must be >= 1 (no gate at all turns heavy steps off)")
        if turn_bytes < 1:
            raise ValueError("turn_bytes must be >= 1")
        self.min_bytes = min_bytes
        self.turn_bytes = turn_bytes
        self._spent = 0  # bytes of the heavy steps run (or handed) the current turn; 0: the turn is free
        self._queue: deque[tuple[asyncio.Future[None] | tuple[Callable[..., Any], tuple[Any, ...]], int]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.steps = 0  # heavy steps run through the gate
        self.waited = 0  # of them, those that waited for a later turn

    def heavy(self, size: int) -> bool:
        """Whether a request of ``size`` body bytes takes its heavy steps through the gate."""
        return size >= self.min_bytes

    @property
    def queued(self) -> int:
        """Heavy steps waiting for a turn."""
        return len(self._queue)

    def _fits(self, size: int) -> bool:
        spent = self._spent
        return not self._queue and (not spent or spent + size <= self.turn_bytes)

    async def turn(self, size: int = 1) -> None:
        """Return when this task may run one heavy step covering ``size`` bytes: at once if nothing
        is queued and the current turn has room (or is free), else on a later turn (FIFO).
        Cancellable while queued."""
        self.steps += 1
        size = size if size > 0 else 1
        if self._fits(size):
            self._charge(size)
            return
        loop = self._loop or asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._queue.append((waiter, size))
        self.waited += 1
        await waiter

    def defer(self, size: int, step: Callable[..., Any], *args: Any) -> None:
        """Run ``step(*args)`` as a heavy step covering ``size`` bytes: now if the current turn has
        room, else on a later turn."""
        self.steps += 1
        size = size if size > 0 else 1
        if self._fits(size):
            self._charge(size)
            self._run(step, args)
            return
        self._queue.append(((step, args), size))
        self.waited += 1

    def _charge(self, size: int) -> None:
        if not self._spent:  # the turn's first heavy step: free the gate again on the next turn
            loop = self._loop
            if loop is None:
                loop = self._loop = asyncio.get_running_loop()
            loop.call_soon(self._release)
        self._spent += size

    def _release(self) -> None:
        """Next turn: hand it to the first waiters (and deferred steps) that fit in ``turn_bytes``,
        at least one. Their steps run on the turn after this callback's, and this callback again
        after them, so each turn holds one batch."""
        self._spent = 0
        queue = self._queue
        spent, budget = 0, self.turn_bytes
        loop = self._loop
        assert loop is not None
        while queue:
            item, size = queue[0]
            if isinstance(item, asyncio.Future) and item.done():  # cancelled while queued
                queue.popleft()
                continue
            if spent and spent + size > budget:
                break
            queue.popleft()
            spent += size
            if isinstance(item, asyncio.Future):
                item.set_result(None)  # schedules its task: it runs its step on the next turn
            else:
                loop.call_soon(self._run, *item)
        if spent:
            self._spent = spent
            loop.call_soon(self._release)  # after the batch's steps

    @staticmethod
    def _run(step: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            step(*args)
        except Exception:  # a deferred step's fault is its own: the loop and the gate go on
            log.exception("a deferred heavy step failed")
