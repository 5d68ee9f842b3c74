"""Deadlines for many concurrent awaits, on one shared timer per event loop.

``with deadline(seconds):`` behaves as ``async with asyncio.timeout(seconds):`` (Python 3.11
semantics: the task is cancelled when the deadline passes, and the ``CancelledError`` that
results leaves the block as :class:`TimeoutError`; a cancellation from elsewhere stays a
``CancelledError``), but costs a dictionary insert and delete instead of a timer handle of the
event loop per block. ``bench/overhead`` under py-spy showed ``asyncio.timeout`` at 4-6 % of the
gateway's CPU per proxied request (uvloop allocates, starts and stops a libuv timer for each),
and the stream relay entered one per chunk.

How: deadlines are grouped into slots (a dict per slot, the slots' times in a heap); one
``loop.call_at`` handle is armed for the earliest slot, and when it fires every deadline of the
slots that have passed is expired. A slot is 0.1 % of the delay wide (at least :data:`MIN_SLOT_S`,
1 ms), so a deadline fires at most that much late, plus 1 ms (uvloop's clock and timers have
millisecond resolution; a timer that fires just before its slot is re-armed a millisecond later,
never spun on), and never early. The slots made while a deadline runs stay bounded (1,000 per
distinct delay; a slot is in the heap once). Requests with the same timeout that start within one
slot's width share its dict; the slot made last is kept while empty, so a steady flow reuses it.
An infinite delay is no deadline, as with ``None``.

A plain (synchronous) context manager: entering and leaving it never suspends the task.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import weakref
from types import TracebackType

MIN_SLOT_S = 0.001
"""The narrowest slot, seconds (uvloop's timers have millisecond resolution)."""

_CREATED, _ENTERED, _EXPIRING, _EXPIRED, _EXITED = range(5)


class _Wheel:
    """The deadlines of one event loop, by slot (the loop time a slot fires at)."""

    __slots__ = ("_loop", "_slots", "_heap", "_queued", "_handle", "_armed", "_newest")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)  # the wheels' dict is keyed weakly by the loop: no strong reference back
        self._slots: dict[float, dict[Deadline, None]] = {}
        self._heap: list[float] = []  # slot times with a dict in _slots (or emptied since)
        self._queued: set[float] = set()  # the slot times in _heap: each is pushed once
        self._handle: asyncio.TimerHandle | None = None
        self._armed = 0.0  # the slot the handle fires for
        self._newest = 0.0  # the slot made last: kept while empty

    def add(self, deadline: Deadline, when: float, delay: float) -> float:
        grain = delay * 0.001 if delay > 1.0 else MIN_SLOT_S
        slot = -(-when // grain) * grain
        members = self._slots.get(slot)
        if members is None:
            if not self._slots.get(self._newest, True):  # the previous newest, emptied: not needed now
                del self._slots[self._newest]
            members = self._slots[slot] = {}
            self._newest = slot
            if slot not in self._queued:
                self._queued.add(slot)
                heapq.heappush(self._heap, slot)
            if self._handle is None or slot < self._armed:
                self._arm(slot)
        members[deadline] = None
        return slot

    def remove(self, deadline: Deadline, slot: float) -> None:
        members = self._slots.get(slot)
        if members is not None:
            del members[deadline]
            if not members and slot != self._newest:
                del self._slots[slot]

    def _arm(self, slot: float, not_before: float = 0.0) -> None:
        loop = self._loop()
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if loop is None or loop.is_closed():
            return
        self._armed = slot
        self._handle = loop.call_at(max(slot, not_before), self._fire)

    def _fire(self) -> None:
        self._handle = None
        loop = self._loop()
        if loop is None:
            return
        now = loop.time()
        heap, slots, queued = self._heap, self._slots, self._queued
        while heap and heap[0] <= now:
            slot = heapq.heappop(heap)
            queued.discard(slot)
            members = slots.pop(slot, None)
            if members:
                for deadline in list(members):
                    deadline._expire()
        while heap and heap[0] not in slots:  # emptied slots: nothing to wake up for
            queued.discard(heapq.heappop(heap))
        if heap:  # a timer that fired just early (millisecond rounding) is re-armed a tick later
            self._arm(heap[0], now + MIN_SLOT_S)

    @property
    def pending(self) -> int:
        """Deadlines entered and neither left nor expired."""
        return sum(len(members) for members in self._slots.values())


_wheels: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Wheel] = weakref.WeakKeyDictionary()
_last: tuple[asyncio.AbstractEventLoop | None, _Wheel | None] = (None, None)


def wheel_of(loop: asyncio.AbstractEventLoop) -> _Wheel:
    """The event loop's deadline wheel (made on first use)."""
    global _last
    last_loop, wheel = _last
    if last_loop is loop and wheel is not None:
        return wheel
    wheel = _wheels.get(loop)
    if wheel is None:
        wheel = _wheels[loop] = _Wheel(loop)
    _last = (loop, wheel)
    return wheel


class Deadline:
    """One deadline (see the module docstring); made by :func:`deadline`. Use once."""

    __slots__ = ("_delay", "_task", "_cancelling", "_state", "_slot", "_wheel")

    def __init__(self, delay_s: float | None) -> None:
        self._delay = delay_s if delay_s is None or math.isfinite(delay_s) else None
        self._state = _CREATED
        self._task: asyncio.Task[object] | None = None
        self._wheel: _Wheel | None = None
        self._cancelling = 0
        self._slot = 0.0

    def expired(self) -> bool:
        """Whether the deadline passed while the block ran."""
        return self._state in (_EXPIRING, _EXPIRED)

    def __enter__(self) -> Deadline:
        if self._state != _CREATED:
            raise RuntimeError("a Deadline can be entered once")
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("a Deadline must be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._state = _ENTERED
        if self._delay is not None:
            wheel = self._wheel = wheel_of(loop)
            self._slot = wheel.add(self, loop.time() + self._delay, self._delay)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        state = self._state
        if state == _ENTERED:
            self._state = _EXITED
            if self._wheel is not None:
                self._wheel.remove(self, self._slot)
            return
        if state == _EXPIRING:
            self._state = _EXPIRED
            assert self._task is not None
            if self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
                raise TimeoutError from exc

    def _expire(self) -> None:
        if self._state == _ENTERED:
            assert self._task is not None
            self._task.cancel()
            self._state = _EXPIRING


def deadline(delay_s: float | None) -> Deadline:
    """``with deadline(s):`` raises :class:`TimeoutError` if the block runs longer than ``s`` seconds.

    ``None``: no deadline. Fires up to 0.1 % of ``s`` (at least 1 ms) late, never early (module docstring).

    Raises:
        RuntimeError: (on entering) outside a running task, or entered twice.
    """
    return Deadline(delay_s)
