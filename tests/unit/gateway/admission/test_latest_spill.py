"""The latest spill time: a queued request that can spill does so while a spill still makes its deadline.

Table tests of the pure decision, the queue's ``spill_due`` timer on its injected clock, and the
gate's path (spill at the latest spill time; back in its place when nothing can take it then).
"""

from __future__ import annotations

import asyncio

import pytest

from gateway.admission.decision import Action, SpillTarget, decide, retry_after_ms
from gateway.admission.gate import AdmissionGate, Ask
from gateway.admission.queue import Outcome
from gateway.admission.saturation import EndpointLoad
from gateway.config.admission import AdmissionSettings
from tests.unit.gateway.admission.test_decision import sat
from tests.unit.gateway.admission.test_queue import FakeTime, make


def target(first_token_s: float, wait: float = 0.0) -> SpillTarget:
    return SpillTarget(sat(wait, cluster="managed", measured=False), price_usd=0.02, first_token_s=first_token_s)


@pytest.mark.parametrize(
    ("wait", "first_token", "spill", "kwargs", "action", "spill_after"),
    [
        # limit 5 s; the target answers its first token 1.5 s after dispatch: latest spill time 3.5 s
        (2.0, 0.0, [target(1.5)], {}, Action.QUEUE, 3.5),
        (3.0, 1.0, [target(1.5)], {}, Action.QUEUE, 3.5),   # 3 + 1 = 4 <= 5: queue, spill by 3.5 s
        (4.5, 1.0, [target(1.5)], {}, Action.SPILL, None),  # 4.5 + 1 > 5: spill now, not at 3.5 s
        (2.0, 0.0, [target(5.5)], {}, Action.QUEUE, None),  # a spill cannot make it: queue to the TTL
        (4.5, 1.0, [target(5.5)], {}, Action.QUEUE, None),  # nor now: the local queue is the better bet
        (2.0, 0.0, [], {}, Action.QUEUE, None),             # nowhere to spill: the TTL only
        (2.0, 0.0, [target(1.5)], {"allow_spill": False}, Action.QUEUE, None),
        (4.5, 1.0, [target(1.5)], {"allow_spill": False}, Action.QUEUE, None),
        (2.0, 0.0, [target(1.5)], {"budget_left_usd": 0.01}, Action.QUEUE, None),  # cannot afford it there
        # fair share: a request within its key's share waits (spilling at its latest spill time) even when
        # late or saturated; one over it is treated like anyone else
        (4.5, 1.0, [target(1.5)], {"share": "under"}, Action.QUEUE, 3.5),
        (4.5, 1.0, [target(1.5)], {"share": "over"}, Action.SPILL, None),
        (2.0, 0.0, [target(1.5)], {"share": "over"}, Action.QUEUE, 3.5),  # not late: it queues too
        (9.0, 0.0, [target(1.5)], {"share": "under"}, Action.QUEUE, 3.5),  # saturated, under its share
        (9.0, 0.0, [target(1.5)], {"share": "over"}, Action.SPILL, None),
        (9.0, 0.0, [target(1.5)], {}, Action.SPILL, None),
        (9.0, 0.0, [target(5.5)], {"share": "under"}, Action.SPILL, None),  # no spill time left: spill now
        (9.0, 0.0, [], {"share": "under"}, Action.SHED, None),  # nothing to fall back on: shed as before
        (9.0, 0.0, [target(1.5)], {"share": "under", "queue_room": "capacity"}, Action.SPILL, None),
        (0.0, 0.0, [target(1.5)], {"share": "over"}, Action.ADMIT, None),  # a free slot admits anyone
    ],
)
def test_latest_spill_time(wait: float, first_token: float, spill: list, kwargs: dict, action: Action,
                           spill_after: float | None) -> None:
    decision = decide(sat(wait), limit_s=5.0, spill=spill, first_token_s=first_token, **kwargs)
    assert decision.action is action
    assert decision.spill_after_s == (pytest.approx(spill_after) if spill_after is not None else None)
    if action is Action.SPILL:
        assert (decision.cluster, decision.reason) == ("managed", "spill_saturated")


@pytest.mark.parametrize(("drain", "ms"), [(0.0, 1), (0.2, 200), (0.2004, 201), (1.0, 1000), (3.2, 3200),
                                           (float("inf"), 1000)])
def test_retry_after_ms_is_the_precise_drain(drain: float, ms: int) -> None:
    assert retry_after_ms(drain) == ms


def test_a_shed_sends_both_retry_headers() -> None:
    decision = decide(sat(9.0, drain=0.35), limit_s=5.0)
    assert (decision.retry_after_s, decision.retry_after_ms) == (1, 350)
    headers = decision.error().headers
    assert (headers["Retry-After"], headers["retry-after-ms"]) == ("1", "350")


def test_the_queue_lets_a_waiter_go_at_its_latest_spill_time_and_takes_it_back_in_place() -> None:
    queue, fake = make()
    first = queue.enqueue("c", "a", ttl_s=5.0, spill_after_s=2.0)
    second = queue.enqueue("c", "b", ttl_s=5.0)
    fake.advance(1.9)
    assert first.outcome is Outcome.WAITING
    fake.advance(0.1)
    assert first.outcome is Outcome.SPILL_DUE and queue.depth("c") == 1 and first.waited_s == 2.0
    queue.requeue(first)  # nowhere to spill: back in its place, same deadline
    assert first.outcome is Outcome.WAITING and queue.depth("c") == 2 and queue.waiting_by_key("c") == {"a": 1, "b": 1}
    assert queue.release("c") == [first], "it kept its place ahead of the later waiter"
    fake.advance(3.0)
    assert second.outcome is Outcome.TIMED_OUT


def test_a_requeued_waiter_times_out_at_its_first_deadline() -> None:
    queue, fake = make()
    ticket = queue.enqueue("c", "a", ttl_s=5.0, spill_after_s=4.0)
    fake.advance(4.0)
    queue.requeue(ticket)
    fake.advance(0.5)
    assert ticket.outcome is Outcome.WAITING
    fake.advance(0.5)
    assert ticket.outcome is Outcome.TIMED_OUT and queue.depth("c") == 0


def test_spill_after_at_or_past_the_ttl_is_the_ttl() -> None:
    queue, fake = make()
    ticket = queue.enqueue("c", "a", ttl_s=2.0, spill_after_s=2.0)
    fake.advance(2.0)
    assert ticket.outcome is Outcome.TIMED_OUT
    with pytest.raises(ValueError):
        queue.requeue(ticket)


class World:
    """One busy local cluster ``fast`` (4 slots, full) and ``managed`` (TTFT 1.5 s) over a fake clock."""

    def __init__(self) -> None:
        self.occupied = {"fast": 4.0, "managed": 0.0}
        self.time = FakeTime()
        self.settings = AdmissionSettings(enabled=True, max_queue_wait_s=5.0)
        from gateway.admission.queue import AdmissionQueue

        self.queue = AdmissionQueue(clock=self.time.clock, timer=self.time.timer)
        self.gate = AdmissionGate(
            lambda: self.settings, self.queue, loads=lambda c: [EndpointLoad(self.occupied[c], 4.0, "full")],
            service_s=lambda c: 2.0, first_token_s=lambda c: 1.5 if c == "managed" else 0.1,
        )


async def test_a_queued_waiter_spills_at_its_latest_spill_time_not_at_the_ttl() -> None:
    world = World()
    waiter = asyncio.ensure_future(world.gate.admit(Ask("fast", "k", spill_to=["managed"])))
    await asyncio.sleep(0)
    assert world.queue.depth("fast") == 1
    world.time.advance(3.4)
    await asyncio.sleep(0)
    assert not waiter.done()
    world.time.advance(0.1)  # 5.0 - 1.5
    decision = await waiter
    assert (decision.action, decision.cluster, decision.queued_s) == (Action.SPILL, "managed", pytest.approx(3.5))


async def test_nowhere_to_spill_at_the_latest_spill_time_waits_on_in_place() -> None:
    world = World()
    waiter = asyncio.ensure_future(world.gate.admit(Ask("fast", "k", spill_to=["managed"])))
    await asyncio.sleep(0)
    world.occupied["managed"] = 1e6  # the target is saturated by then
    world.time.advance(3.5)
    for _ in range(3):
        await asyncio.sleep(0)
    assert not waiter.done() and world.queue.depth("fast") == 1
    world.gate.finished("fast")
    decision = await waiter
    assert (decision.action, decision.reason, decision.queued_s) == (Action.ADMIT, "queued", pytest.approx(3.5))


async def test_a_slot_free_at_the_latest_spill_time_admits_at_once() -> None:
    world = World()
    waiter = asyncio.ensure_future(world.gate.admit(Ask("fast", "k", spill_to=["managed"])))
    await asyncio.sleep(0)
    world.occupied["fast"] = 0.0  # capacity freed meanwhile (not by a release this gate saw)
    world.time.advance(3.5)
    for _ in range(3):
        await asyncio.sleep(0)
    assert waiter.done(), "a waiter with a free slot waited on"
    decision = waiter.result()
    assert (decision.action, decision.cluster, decision.queued_s) == (Action.ADMIT, "fast", pytest.approx(3.5))
    assert world.queue.depth("fast") == 0
