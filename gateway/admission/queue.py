"""The gateway's admission queue: bounded, by priority, fair across keys, with a TTL, cancel-safe.

Requests wait here, per cluster, while the cluster's endpoints are busy (not in the engines'
queues), so the gateway decides who goes next:

* **priority** is strict: a waiter of priority 0 (``interactive``) always leaves before one of
  priority 1 (``batch``) of the same cluster;
* **fair across keys** within a priority: start-time fair queueing (SFQ; P. Goyal, H. M. Vin,
  H. Cheng, "Start-time Fair Queueing: A Scheduling Algorithm for Integrated Services Packet
  Switching Networks", SIGCOMM 1996; the weighted fair queueing family of A. Demers, S. Keshav,
  S. Shenker, SIGCOMM 1989). Each (cluster, priority) band keeps a virtual time ``v`` and each
  key ``k`` the finish tag ``F_k`` of its last request. A request of cost ``c`` (1 by default)
  arriving from ``k`` with weight ``w_k`` gets the start tag ``S = max(v, F_k)`` and
  ``F_k = S + c / w_k``; waiters leave in increasing start tag (ties: arrival order), and ``v``
  becomes the start tag of the one leaving. A key sending 5x the other's rate so gets its
  weight's share of the slots that free up, not 5/6 of them; an idle key cannot bank credit
  (``S >= v``). When a band empties, ``v`` jumps to its largest finish tag and the tags are
  forgotten (memory is bounded by the waiters);
* a waiter leaves in one of four ways, each exactly once (:class:`Outcome`): ``admitted`` (a
  slot was handed to it by :meth:`AdmissionQueue.release`), ``timed_out`` (its TTL, the route's
  wait limit, passed), ``evicted`` (the queue was full and a waiter of higher priority came:
  lowest priority is shed first), or ``cancelled`` (its client left: removed at once; a slot
  handed to it in the same instant goes to the next waiter). A waiter given a ``spill_after_s``
  (its latest spill time) also leaves with ``spill_due`` when that passes first, so its caller
  can spill it while a spill still makes the deadline; one that cannot spill then goes back in
  its place with :meth:`AdmissionQueue.requeue` (same tags, same deadline) and later leaves in
  one of the four ways;
* **bounded**: at most ``max_depth`` waiters per cluster and ``max_per_key`` per key;
  :meth:`AdmissionQueue.enqueue` raises :class:`QueueFull` beyond them.

Time comes from an injected ``clock`` (seconds) and expiry from an injected ``timer(delay_s,
callback)`` (the event loop's ``call_later`` by default), so tests advance a fake clock and
call :meth:`AdmissionQueue.expire` without sleeping. Used from the event loop only.
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field


class Outcome(enum.Enum):
    """How a waiter left the queue (``waiting`` while it has not)."""

    WAITING = "waiting"
    ADMITTED = "admitted"
    TIMED_OUT = "timed_out"
    EVICTED = "evicted"
    CANCELLED = "cancelled"
    SPILL_DUE = "spill_due"


class QueueFull(Exception):
    """No room for a waiter. ``reason``: ``key_limit`` (its key's bound: a 429) or ``capacity`` (a 503)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(eq=False, slots=True)
class Ticket:
    """One waiter. ``start``/``finish`` are its SFQ tags; times are the queue clock's seconds
    (``spill_at``: its latest spill time, None when it has none or it passed)."""

    cluster: str
    key: str
    priority: int
    weight: float
    enqueued_at: float
    deadline: float
    start: float
    finish: float
    seq: int
    outcome: Outcome = Outcome.WAITING
    left_at: float | None = None
    spill_at: float | None = None
    future: asyncio.Future[Outcome] | None = field(default=None, repr=False)

    @property
    def waited_s(self) -> float | None:
        """Seconds between entering and leaving the queue (None while waiting)."""
        return None if self.left_at is None else self.left_at - self.enqueued_at


@dataclass(slots=True)
class _Band:
    """The waiters of one (cluster, priority): an SFQ heap, its virtual time and finish tags."""

    heap: list[tuple[float, int, Ticket]] = field(default_factory=list)
    vtime: float = 0.0
    finish: dict[str, float] = field(default_factory=dict)
    live: int = 0

    def reset_if_idle(self) -> None:
        if self.live == 0:
            self.vtime = max(self.vtime, *self.finish.values()) if self.finish else self.vtime
            self.finish.clear()
            self.heap.clear()


def _loop_timer(delay_s: float, callback: Callable[[], None]) -> object:
    return asyncio.get_running_loop().call_later(delay_s, callback)


class AdmissionQueue:
    """Waiters of every cluster (see the module docstring). Event-loop only."""

    def __init__(
        self,
        *,
        max_depth: int = 1024,
        max_per_key: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        timer: Callable[[float, Callable[[], None]], object] = _loop_timer,
    ) -> None:
        self.max_depth = max_depth
        self.max_per_key = max_per_key
        self._clock = clock
        self._timer = timer
        self._bands: dict[tuple[str, int], _Band] = {}
        self._depth: dict[str, int] = {}
        self._per_key: dict[str, int] = {}
        self._keyed: dict[tuple[str, str], int] = {}  # (cluster, key) -> waiters
        self._deadlines: list[tuple[float, int, Ticket]] = []
        self._armed_at: float | None = None
        self._seq = itertools.count()

    # -- reading --------------------------------------------------------------------------------

    def depth(self, cluster: str, priority: int | None = None) -> int:
        """Waiters on ``cluster`` (of ``priority`` only, when given)."""
        if priority is None:
            return self._depth.get(cluster, 0)
        band = self._bands.get((cluster, priority))
        return band.live if band is not None else 0

    def ahead_of(self, cluster: str, priority: int, key: str | None = None) -> int:
        """Waiters on ``cluster`` a new request of ``priority`` would queue behind.

        Every waiter of a higher priority; of its own priority, every one without ``key``, and with
        ``key`` only those whose start tag is below the one it would get (its place in SFQ order:
        a quiet key's request passes a loud key's backlog).
        """
        if not self._depth.get(cluster):
            return 0
        ahead = 0
        for (name, p), band in self._bands.items():
            if name != cluster or p > priority or not band.live:
                continue
            if p < priority or key is None:
                ahead += band.live
                continue
            start = max(band.vtime, band.finish.get(key, band.vtime))
            ahead += sum(1 for s, _, t in band.heap if s <= start and t.outcome is Outcome.WAITING)
        return ahead

    def key_depth(self, key: str) -> int:
        """Waiters of ``key`` on every cluster."""
        return self._per_key.get(key, 0)

    def waiting_by_key(self, cluster: str) -> dict[str, int]:
        """Waiters on ``cluster`` per key name (keys with none are absent)."""
        return {key: count for (name, key), count in self._keyed.items() if name == cluster and count}

    def room(self, cluster: str, key: str, priority: int = 0) -> str | None:
        """None if :meth:`enqueue` would take a waiter, else why not (``key_limit`` or ``capacity``)."""
        if self.max_per_key is not None and self._per_key.get(key, 0) >= self.max_per_key:
            return "key_limit"
        if self._depth.get(cluster, 0) >= self.max_depth and not any(
            band.live for (name, p), band in self._bands.items() if name == cluster and p > priority
        ):
            return "capacity"
        return None

    def clusters(self) -> list[str]:
        """Clusters with waiters."""
        return [name for name, count in self._depth.items() if count]

    # -- entering -------------------------------------------------------------------------------

    def enqueue(
        self, cluster: str, key: str, *, ttl_s: float, priority: int = 0, weight: float = 1.0, cost: float = 1.0,
        spill_after_s: float | None = None,
    ) -> Ticket:
        """Put a waiter on ``cluster``'s queue for at most ``ttl_s`` seconds; then ``await wait(ticket)``.
        ``spill_after_s`` (< ``ttl_s``): it leaves with ``spill_due`` then, unless it left before.

        Raises:
            QueueFull: ``key_limit`` when ``key`` has ``max_per_key`` waiters; ``capacity`` when
                the cluster has ``max_depth`` and none of lower priority to evict.
        """
        refused = self.room(cluster, key, priority)
        if refused is not None:
            raise QueueFull(refused)
        if self._depth.get(cluster, 0) >= self.max_depth:
            self._evict_below(cluster, priority)
        band = self._bands.get((cluster, priority))
        if band is None:
            band = self._bands[(cluster, priority)] = _Band()
        now = self._clock()
        start = max(band.vtime, band.finish.get(key, band.vtime))
        finish = start + cost / weight
        band.finish[key] = finish
        ticket = Ticket(cluster, key, priority, weight, now, now + ttl_s, start, finish, next(self._seq))
        if spill_after_s is not None and spill_after_s < ttl_s:
            ticket.spill_at = now + max(0.0, spill_after_s)
            heapq.heappush(self._deadlines, (ticket.spill_at, ticket.seq, ticket))
        self._join(ticket, band)
        return ticket

    def requeue(self, ticket: Ticket) -> None:
        """Put a ticket that left with ``spill_due`` back in its place (its SFQ tags), until its deadline;
        then ``await wait(ticket)`` again. The depth bounds are not checked (it held the place already)."""
        if ticket.outcome is not Outcome.SPILL_DUE:
            raise ValueError(f"only a spill_due ticket goes back: {ticket.outcome.value}")
        band = self._bands.get((ticket.cluster, ticket.priority))
        if band is None:
            band = self._bands[(ticket.cluster, ticket.priority)] = _Band()
        band.finish[ticket.key] = max(band.finish.get(ticket.key, ticket.finish), ticket.finish)
        ticket.outcome, ticket.left_at, ticket.future = Outcome.WAITING, None, None
        self._join(ticket, band)

    def _join(self, ticket: Ticket, band: _Band) -> None:
        heapq.heappush(band.heap, (ticket.start, ticket.seq, ticket))
        band.live += 1
        cluster, key = ticket.cluster, ticket.key
        self._depth[cluster] = self._depth.get(cluster, 0) + 1
        self._per_key[key] = self._per_key.get(key, 0) + 1
        self._keyed[(cluster, key)] = self._keyed.get((cluster, key), 0) + 1
        heapq.heappush(self._deadlines, (ticket.deadline, ticket.seq, ticket))
        self._arm()

    def _evict_below(self, cluster: str, priority: int) -> None:
        """Evict the newest waiter of the lowest priority below ``priority`` on ``cluster`` (one exists)."""
        lower = [(p, band) for (name, p), band in self._bands.items() if name == cluster and p > priority and band.live]
        _, band = max(lower, key=lambda item: item[0])
        victim = max((entry[2] for entry in band.heap if entry[2].outcome is Outcome.WAITING), key=lambda t: t.seq)
        self._leave(victim, Outcome.EVICTED)

    # -- waiting and leaving --------------------------------------------------------------------

    async def wait(self, ticket: Ticket) -> Outcome:
        """Wait until the ticket leaves the queue; its :class:`Outcome` (never ``waiting``).

        Cancellation safe: a cancelled waiter is removed at once, and a slot handed to it in the
        same instant is handed on to the next waiter.
        """
        if ticket.outcome is not Outcome.WAITING:
            return ticket.outcome
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        ticket.future = future
        try:
            return await future
        except asyncio.CancelledError:
            self.cancel(ticket)
            raise

    def cancel(self, ticket: Ticket) -> None:
        """The waiter's client left: remove it (a slot already handed to it goes to the next one)."""
        if ticket.outcome is Outcome.WAITING:
            self._leave(ticket, Outcome.CANCELLED)
        elif ticket.outcome is Outcome.ADMITTED and ticket.future is not None and not ticket.future.cancelled():
            ticket.outcome = Outcome.CANCELLED
            self.release(ticket.cluster)

    def release(self, cluster: str, count: int = 1) -> list[Ticket]:
        """Hand up to ``count`` freed slots of ``cluster`` to its next waiters; the tickets admitted."""
        admitted: list[Ticket] = []
        while len(admitted) < count:
            ticket = self._pop_next(cluster)
            if ticket is None:
                break
            self._leave(ticket, Outcome.ADMITTED)
            admitted.append(ticket)
        return admitted

    def _pop_next(self, cluster: str) -> Ticket | None:
        for priority in sorted(p for (name, p), band in self._bands.items() if name == cluster and band.live):
            band = self._bands[(cluster, priority)]
            while band.heap:
                start, _, ticket = heapq.heappop(band.heap)
                if ticket.outcome is Outcome.WAITING:
                    band.vtime = max(band.vtime, start)
                    return ticket
        return None

    def expire(self) -> list[Ticket]:
        """Time out every waiter whose TTL has passed by the clock, and let go (``spill_due``) every one
        whose latest spill time has; the tickets that left."""
        now = self._clock() + 1e-9
        expired = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, ticket = heapq.heappop(self._deadlines)
            if ticket.outcome is not Outcome.WAITING:
                continue
            if ticket.deadline <= now:
                self._leave(ticket, Outcome.TIMED_OUT)
            elif ticket.spill_at is not None and ticket.spill_at <= now:
                ticket.spill_at = None
                self._leave(ticket, Outcome.SPILL_DUE)
            else:
                continue
            expired.append(ticket)
        return expired

    def _leave(self, ticket: Ticket, outcome: Outcome) -> None:
        ticket.outcome = outcome
        ticket.left_at = self._clock()
        band = self._bands[(ticket.cluster, ticket.priority)]
        band.live -= 1
        if outcome is not Outcome.ADMITTED and band.finish.get(ticket.key) == ticket.finish:
            band.finish[ticket.key] = ticket.start  # an unserved last request gives its share back
        band.reset_if_idle()
        self._depth[ticket.cluster] -= 1
        self._per_key[ticket.key] -= 1
        if not self._per_key[ticket.key]:
            del self._per_key[ticket.key]
        pair = (ticket.cluster, ticket.key)
        self._keyed[pair] -= 1
        if not self._keyed[pair]:
            del self._keyed[pair]
        future = ticket.future
        if future is not None and not future.done():
            future.set_result(outcome)

    def _arm(self) -> None:
        """Keep one timer pending for the earliest deadline."""
        while self._deadlines and self._deadlines[0][2].outcome is not Outcome.WAITING:
            heapq.heappop(self._deadlines)
        if not self._deadlines:
            return
        first = self._deadlines[0][0]
        if self._armed_at is not None and self._armed_at <= first:
            return
        self._armed_at = first
        self._timer(max(0.0, first - self._clock()), self._on_timer)

    def _on_timer(self) -> None:
        self._armed_at = None
        self.expire()
        self._arm()
