"""The admission queue: priority, start-time fair queueing, TTL, bounds, cancellation (no sleeps)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from gateway.admission.queue import AdmissionQueue, Outcome, QueueFull


class FakeTime:
    """A manual clock and a timer that only records what it was asked to call."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, Callable[[], None]]] = []

    def clock(self) -> float:
        return self.now

    def timer(self, delay_s: float, callback: Callable[[], None]) -> None:
        self.timers.append((self.now + delay_s, callback))

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = [t for t in self.timers if t[0] <= self.now]
        self.timers = [t for t in self.timers if t[0] > self.now]
        for _, callback in due:
            callback()


def make(**kwargs: object) -> tuple[AdmissionQueue, FakeTime]:
    fake = FakeTime()
    return AdmissionQueue(clock=fake.clock, timer=fake.timer, **kwargs), fake  # type: ignore[arg-type]


def order(queue: AdmissionQueue, cluster: str = "c") -> list[str]:
    return [t.key for t in queue.release(cluster, 1000)]


def test_fifo_for_one_key_and_priority_first() -> None:
    queue, _ = make()
    for name, priority in [("b1", 1), ("i1", 0), ("b2", 1), ("i2", 0)]:
        queue.enqueue("c", name, ttl_s=10, priority=priority)
    assert order(queue) == ["i1", "i2", "b1", "b2"]


def test_fair_share_between_a_loud_and_a_quiet_key() -> None:
    queue, _ = make()
    for _ in range(10):
        queue.enqueue("c", "loud", ttl_s=10)
    for _ in range(2):
        queue.enqueue("c", "quiet", ttl_s=10)
    assert order(queue)[:4] == ["loud", "quiet", "loud", "quiet"]


def test_weights_give_proportional_shares() -> None:
    queue, _ = make()
    for _ in range(9):
        queue.enqueue("c", "heavy", ttl_s=10, weight=2.0)
        queue.enqueue("c", "light", ttl_s=10, weight=1.0)
    first = order(queue)[:9]
    assert first.count("heavy") == 6 and first.count("light") == 3


def test_an_idle_key_banks_no_credit() -> None:
    queue, _ = make()
    for _ in range(4):
        queue.enqueue("c", "loud", ttl_s=10)
    queue.release("c", 3)  # virtual time moves on while 'quiet' sends nothing
    queue.enqueue("c", "quiet", ttl_s=10)
    queue.enqueue("c", "quiet", ttl_s=10)
    assert order(queue) == ["quiet", "loud", "quiet"]  # banked credit would give quiet, quiet, loud


def test_clusters_are_separate() -> None:
    queue, _ = make()
    queue.enqueue("a", "k", ttl_s=10)
    queue.enqueue("b", "k", ttl_s=10)
    assert (queue.depth("a"), queue.depth("b"), queue.key_depth("k")) == (1, 1, 2)
    assert [t.cluster for t in queue.release("b")] == ["b"]
    assert queue.release("b") == []
    assert queue.clusters() == ["a"]


def test_ttl_times_out_by_the_injected_clock() -> None:
    queue, fake = make()
    early = queue.enqueue("c", "k", ttl_s=2)
    late = queue.enqueue("c", "k", ttl_s=5)
    fake.advance(2)
    assert (early.outcome, late.outcome) == (Outcome.TIMED_OUT, Outcome.WAITING)
    assert early.waited_s == 2
    fake.advance(3)
    assert late.outcome is Outcome.TIMED_OUT
    assert queue.depth("c") == 0 and queue.expire() == []


def test_bounds_per_key_and_per_cluster() -> None:
    queue, _ = make(max_depth=2, max_per_key=1)
    queue.enqueue("c", "a", ttl_s=10)
    assert queue.room("c", "a") == "key_limit"
    with pytest.raises(QueueFull) as refused:
        queue.enqueue("c", "a", ttl_s=10)
    assert refused.value.reason == "key_limit"
    queue.enqueue("c", "b", ttl_s=10)
    with pytest.raises(QueueFull) as full:
        queue.enqueue("c", "d", ttl_s=10)
    assert full.value.reason == "capacity"


def test_a_full_queue_evicts_its_lowest_priority_for_a_higher_one() -> None:
    queue, _ = make(max_depth=2)
    old = queue.enqueue("c", "a", ttl_s=10, priority=1)
    new = queue.enqueue("c", "b", ttl_s=10, priority=1)
    assert queue.room("c", "x", priority=1) == "capacity"
    assert queue.room("c", "x", priority=0) is None
    urgent = queue.enqueue("c", "x", ttl_s=10, priority=0)
    assert (old.outcome, new.outcome, urgent.outcome) == (Outcome.WAITING, Outcome.EVICTED, Outcome.WAITING)
    assert order(queue) == ["x", "a"]


async def test_wait_returns_when_a_slot_is_released() -> None:
    queue, _ = make()
    ticket = queue.enqueue("c", "k", ttl_s=10)
    waiter = asyncio.ensure_future(queue.wait(ticket))
    await asyncio.sleep(0)
    assert not waiter.done()
    queue.release("c")
    assert await waiter is Outcome.ADMITTED


async def test_wait_after_the_outcome_returns_it_at_once() -> None:
    queue, fake = make()
    ticket = queue.enqueue("c", "k", ttl_s=1)
    fake.advance(1)
    assert await queue.wait(ticket) is Outcome.TIMED_OUT


async def test_a_cancelled_waiter_leaves_at_once() -> None:
    queue, _ = make()
    gone = queue.enqueue("c", "gone", ttl_s=10)
    stays = queue.enqueue("c", "stays", ttl_s=10)
    waiter = asyncio.ensure_future(queue.wait(gone))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert gone.outcome is Outcome.CANCELLED and queue.depth("c") == 1
    assert queue.release("c") == [stays]


async def test_a_slot_handed_to_a_waiter_that_was_cancelled_goes_to_the_next() -> None:
    queue, _ = make()
    first = queue.enqueue("c", "a", ttl_s=10)
    second = queue.enqueue("c", "b", ttl_s=10)
    waiter = asyncio.ensure_future(queue.wait(first))
    await asyncio.sleep(0)
    queue.release("c")  # the slot is handed over ...
    waiter.cancel()  # ... and the client leaves before its task runs
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert first.outcome is Outcome.CANCELLED
    assert second.outcome is Outcome.ADMITTED


def test_a_cancelled_last_request_gives_its_share_back() -> None:
    queue, _ = make()
    queue.enqueue("c", "a", ttl_s=10)
    queue.enqueue("c", "a", ttl_s=10)
    queue.cancel(queue.enqueue("c", "a", ttl_s=10))
    queue.enqueue("c", "b", ttl_s=10)
    queue.enqueue("c", "b", ttl_s=10)
    assert order(queue) == ["a", "b", "a", "b"]


async def test_the_default_timer_is_the_event_loops() -> None:
    queue = AdmissionQueue()
    ticket = queue.enqueue("c", "k", ttl_s=0.0)
    assert await asyncio.wait_for(queue.wait(ticket), 1.0) is Outcome.TIMED_OUT


def test_ahead_of_counts_the_place_a_key_would_get() -> None:
    queue, _ = make()
    for _ in range(6):
        queue.enqueue("c", "loud", ttl_s=10, priority=1)
    queue.enqueue("c", "urgent", ttl_s=10, priority=0)
    queue.enqueue("c", "later", ttl_s=10, priority=2)
    assert queue.ahead_of("c", 1) == 7  # its priority and above, whatever the key
    assert queue.ahead_of("c", 1, "loud") == 7  # behind its own backlog
    assert queue.ahead_of("c", 1, "quiet") == 2  # passes the loud backlog: urgent + the loud head (same tag)


def test_zero_bounds_refuse_everyone() -> None:
    assert make(max_per_key=0)[0].room("c", "k") == "key_limit"
    assert make(max_depth=0)[0].room("c", "k") == "capacity"
