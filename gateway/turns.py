"""One CPU-heavy step per event-loop turn, so long prompts share the loop with everything else.

A request whose body is at least ``[server] heavy_step_bytes`` (default 64 KiB; 0 turns this off)
takes its CPU-heavy steps through the app's :class:`TurnGate`:

* the parse (``orjson`` building the prompt's strings, and the message checks),
* the scheduling of an endpoint (the prefix key: up to 1,024 chained block hashes; the match),
* the prefix index's insert when the endpoint accepts it (up to 1,024 entries, and as many
  evictions once the index is full).

At most one such step runs per turn of the event loop, first come first served. Without the gate,
32 long prompts whose bodies arrive together run their steps back to back within one turn (each
0.1-0.3 ms at 200 KB, ``bench/body_stall.py --stages``), and every other callback due on the loop
(a small request's parse, a stream's next chunk, a health check's answer) waits for all of them:
issue 23 measured the loop's lag at up to 56 ms with 200 KB prompts at 32 concurrent requests.
With it a turn holds one heavy step plus the light work ready in it, so the lag stays about one
step long whatever the number of long requests in flight. The long requests wait in the gate
instead of on the loop: their own latency is bound by the CPU they need either way, and the gate
adds about one loop turn (tens of microseconds) per step when nothing else is heavy.

The turn is handed on by a callback the gate schedules after each step (``loop.call_soon``), so
it runs on the next turn; a waiter cancelled while queued (its client left) is skipped. A step
handed to :meth:`TurnGate.defer` (the index insert, which runs in a synchronous close-out) runs at
once when the turn is free, else on a later turn; an exception it raises is logged, never raised
into the loop. Not thread-safe; one gate per event loop (each app builds its own).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger("kvgate.turns")

DEFAULT_HEAVY_STEP_BYTES = 64 * 1024


class TurnGate:
    """The gate (see the module docstring). ``min_bytes``: the body size from which a request's steps
    are heavy (bytes, >= 1; callers compare ``size >= gate.min_bytes`` inline, one comparison per
    request; ``[server] heavy_step_bytes = 0`` builds no gate). Raises ValueError below 1."""

    __slots__ = ("min_bytes", "_taken", "_queue", "_loop", "steps", "waited")

    def __init__(self, min_bytes: int = DEFAULT_HEAVY_STEP_BYTES) -> None:
        if min_bytes < 1:
            raise ValueError("min_bytes must be >= 1 (no gate at all turns heavy steps off)")
        self.min_bytes = min_bytes
        self._taken = False  # a heavy step ran (or was handed the turn) in the current turn
        self._queue: deque[asyncio.Future[None] | tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
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

    async def turn(self) -> None:
        """Return when this task may run one heavy step: at once if no other heavy step took the
        current turn and none is queued, else on a later turn (FIFO). Cancellable while queued."""
        self.steps += 1
        if not self._taken and not self._queue:
            self._take()
            return
        loop = self._loop or asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._queue.append(waiter)
        self.waited += 1
        await waiter

    def defer(self, step: Callable[..., Any], *args: Any) -> None:
        """Run ``step(*args)`` as a heavy step: now if the turn is free, else on a later turn."""
        self.steps += 1
        if not self._taken and not self._queue:
            self._take()
            self._run(step, args)
            return
        self._queue.append((step, args))
        self.waited += 1

    def _take(self) -> None:
        self._taken = True
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        loop.call_soon(self._release)

    def _release(self) -> None:
        """Next turn: hand it to the first waiter still waiting (or run the first deferred step)."""
        self._taken = False
        queue = self._queue
        while queue:
            item = queue.popleft()
            if isinstance(item, asyncio.Future):
                if item.done():  # cancelled while queued
                    continue
                item.set_result(None)  # schedules its task first: it runs its step next turn, then the release
                self._take()
                return
            self._take()
            self._run(*item)
            return

    @staticmethod
    def _run(step: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            step(*args)
        except Exception:  # a deferred step's fault is its own: the loop and the gate go on
            log.exception("a deferred heavy step failed")
